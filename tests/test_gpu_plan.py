"""tools/gpu_plan.sh's card guard: GPU_PLAN_CARD stops a stage on any other card before it
installs or compiles anything (a device call that gets the wrong machine costs only its start)."""
import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "tools" / "gpu_plan.sh"


def fake_nvidia_smi(tmp_path: Path, script: str) -> Path:
    """A folder for PATH whose nvidia-smi runs SCRIPT (sh): the card gpu_plan.sh will read."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def run_plan(tmp_path: Path, card_wanted: str, bin_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPU_PLAN_CARD=card_wanted, OUT=str(tmp_path / "out"),
               PATH=f"{bin_dir}:{os.environ['PATH']}")
    return subprocess.run(["bash", str(PLAN), "table"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)


def test_another_card_stops_the_stage_before_anything_runs(tmp_path):
    # What `--query-gpu=name --format=csv,noheader` prints on an H100.
    bin_dir = fake_nvidia_smi(tmp_path, "echo 'NVIDIA H100 80GB HBM3'")
    done = run_plan(tmp_path, "H200", bin_dir)
    assert done.returncode == 0, done.stderr
    assert "'NVIDIA H100 80GB HBM3', not H200" in done.stdout
    # Nothing benched, installed or packed: the output folder holds no file.
    assert list((tmp_path / "out").iterdir()) == []


def test_a_failing_nvidia_smi_reads_as_no_card(tmp_path):
    bin_dir = fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    done = run_plan(tmp_path, "H200", bin_dir)
    assert done.returncode == 0, done.stderr
    assert "'none', not H200" in done.stdout


def test_the_far_stage_runs_the_tool_from_its_folder_with_its_arguments(tmp_path):
    """`gpu_plan.sh far ARGS` hands ARGS to tools/far_update_cost.py, run where it imports its
    neighbours, and keeps its log under $OUT. Without CUDA the tool refuses, which is what the
    log shows here (with CUDA this would run the timing grid: not a unit test)."""
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("with CUDA the stage runs the tool's whole grid")
    env = dict(os.environ, OUT=str(tmp_path / "out"), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(["bash", str(PLAN), "far", "--shape", "2x64"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "out" / "far.txt").read_text()
    assert "far_update_cost.py times GPU launches: run it on a machine with CUDA" in log
