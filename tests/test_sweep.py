"""qrsub sweep on the CPU: grid, emitted variants, gates, the worker pool, ranking, --dry-run."""
import os
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from qrsub import fallbacks, pool, stats
from qrsub import sweep as sw
from qrsub.cli.sweep import sweep as sweep_cli
from qrsub.variant import load_variant

CHAMPION = Path("variants/champion.yaml")
ROUTES = ["tiny", "small", "mid-bigbatch", "mid", "large"]


def test_parse_set_values_and_types():
    axis = sw.parse_set("mid.strip.bn=16,32")
    assert (axis.route, axis.path, axis.values) == ("mid", ("strip", "bn"), (16, 32))
    assert sw.parse_set("mid.graph.mode=off,capture").values == ("off", "capture")   # not False
    assert sw.parse_set("mid.panel.num_warps=2,[[128,2],[null,4]]").values == (2, [[128, 2], [None, 4]])
    assert sw.parse_set("mid.precision.apply=fp16").is_precision


def test_parse_set_route_names_with_dashes_and_dots():
    assert sw.parse_set("mid-bigbatch.strip.bn=32", ROUTES).route == "mid-bigbatch"
    assert sw.parse_set("a.b.strip.bn=32", ["a", "a.b"]).route == "a.b"   # the longest name wins


@pytest.mark.parametrize("text, message", [
    ("mid.strip.bn", "expected ROUTE.KNOB=v1,v2"),
    ("mid.strip.bn=", "empty value"),
    ("mid.strip.bn=16,16", "repeated"),
    ("mdi.strip.bn=16", "did you mean 'mid'"),
    ("mid=16", "expected ROUTE.KNOB"),
])
def test_parse_set_errors(text, message):
    with pytest.raises(sw.SweepError, match=message):
        sw.parse_set(text, ROUTES if text.startswith("mdi") else None)


def test_unknown_knob_is_named_with_a_suggestion():
    with pytest.raises(sw.SweepError, match="did you mean mid.strip.bm"):
        sw.check_knob(sw.parse_set("mid.strip.bm2=32"))


def test_grid_expansion_first_axis_slowest():
    a, b = sw.parse_set("mid.strip.bn=16,32"), sw.parse_set("mid.panel.num_warps=2,4,8")
    grid = sw.expand_grid([a, b])
    assert len(grid) == 6
    assert [(p[0][1], p[1][1]) for p in grid] == [(16, 2), (16, 4), (16, 8), (32, 2), (32, 4), (32, 8)]
    with pytest.raises(sw.SweepError, match="given twice"):
        sw.expand_grid([a, a])


def test_emitted_variant_extends_base_and_patches_routes_by_name(tmp_path):
    point = sw.expand_grid([sw.parse_set("mid.strip.bn=16"), sw.parse_set("mid.panel.num_warps=2"),
                            sw.parse_set("small.precision.apply=tf32x3")])[0]
    out = tmp_path / "grid" / "p.yaml"
    text = sw.variant_text(CHAMPION, point, out)
    doc = yaml.safe_load(text)
    assert (out.parent / doc["extends"]).resolve() == CHAMPION.resolve()
    assert doc["routes"] == [{"name": "mid", "strip": {"bn": 16}, "panel": {"num_warps": 2}},
                             {"name": "small", "precision": {"apply": "tf32x3"}}]
    assert sw.point_slug(point) == "mid.strip.bn-16_mid.panel.num_warps-2_small.precision.apply-tf32x3"
    sw.write_atomic(out, text)
    v, base = load_variant(out), load_variant(CHAMPION)
    mid = v.route_for(n=512, batch=16)
    assert (mid.strip.bn, mid.panel.num_warps) == (16, 2)
    assert mid.strip.bm == base.route_for(n=512, batch=16).strip.bm   # the rest comes from BASE
    assert v.route_for(n=176, batch=40).precision.apply == "tf32x3"
    assert [p.name for p in out.parent.iterdir()] == ["p.yaml"]           # no temporary left behind


def test_gate_plans():
    base = load_variant(CHAMPION)
    tests = [{"batch": 20, "n": 32, "cond": 1, "seed": 1}, {"batch": 16, "n": 512, "cond": 2, "seed": 2},
             {"batch": 4, "n": 1024, "cond": 2, "seed": 3}]
    knob = sw.expand_grid([sw.parse_set("mid.strip.bn=32")])[0]
    plan = sw.gate_plan(knob, tests, base)
    assert plan.cases == [1] and plan.seeds == [None]
    prec = sw.expand_grid([sw.parse_set("mid.precision.apply=fp16")])[0]
    plan = sw.gate_plan(prec, tests, base)
    assert plan.cases == [0, 1, 2] and plan.seeds == [None, 1, 2, 3]
    nowhere = sw.expand_grid([sw.parse_set("mid-bigbatch.strip.bn=32")])[0]
    assert sw.gate_plan(nowhere, tests, base).cases == [0, 1, 2]          # no test lands there: all of them


def test_the_gate_refuses_a_route_that_fell_back():
    """geqrf's answers pass the harness; the gate still refuses, naming the route and the reason
    (how localrun finds fallbacks in the harness's output: tests/test_cli_test.py)."""
    from qrsub.localrun import LocalRun, StageResult
    from qrsub.report import CaseResult

    stage = StageResult(mode="test", cases=[CaseResult(index=0, status="pass")], exit_code=0,
                        fallbacks=[fallbacks.Fallback("mid", "CompilationError: at 12:4")])
    run = LocalRun(mode="test", stages=[stage])
    assert run.passed
    assert sw.local_verdict(run) == (False, "route 'mid' fell back to torch.geqrf: CompilationError: at 12:4")


def test_device_assignment():
    assert pool.assign_devices(2, ["0", "1"]) == ["0", "1"]
    assert pool.assign_devices(2, ["0"]) == ["0", "0"]          # --workers 2 on one GPU: they share it
    assert pool.assign_devices(3, ["2", "5"]) == ["2", "5", "2"]
    with pytest.raises(ValueError, match="at least 1"):
        pool.assign_devices(0, ["0"])
    with pytest.raises(ValueError, match="no GPU"):
        pool.assign_devices(1, [])
    assert pool.worker_env("3", {"PATH": "/bin"})["CUDA_VISIBLE_DEVICES"] == "3"


def test_visible_devices_respects_the_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert pool.visible_devices() == ["1", "3"]


FAKE_RUNNER = textwrap.dedent("""
    import os, time

    def run(job, log):
        log("running " + job["name"])
        print("stray output from a kernel")        # must land in the log, not break the protocol
        if job["name"] == "die":
            os._exit(3)
        time.sleep(0.05)
        return {"name": job["name"], "seen_device": os.environ["CUDA_VISIBLE_DEVICES"]}
""")


@pytest.fixture
def fake_runner(tmp_path, monkeypatch):
    (tmp_path / "fake_runner.py").write_text(FAKE_RUNNER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return "fake_runner:run"


@pytest.mark.parametrize("devices", [["0", "1"], ["0", "0"]])
def test_pool_pins_each_worker_to_its_device(tmp_path, fake_runner, devices):
    jobs = [{"name": f"c{i}"} for i in range(6)]
    results = pool.run_pool(jobs, devices, tmp_path / "logs", runner=fake_runner)
    assert [r["name"] for r in results] == [j["name"] for j in jobs]       # merged in job order
    for r in results:
        assert r["seen_device"] == r["cuda_visible_devices"] == devices[r["worker"]]
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == [f"worker-{i}-gpu{d}.log" for i, d in enumerate(devices)]
    for i, d in enumerate(devices):
        text = (tmp_path / "logs" / f"worker-{i}-gpu{d}.log").read_text()
        mine = [r["name"] for r in results if r["worker"] == i]
        assert all(f"job {name}: start" in text for name in mine)
        assert f"CUDA_VISIBLE_DEVICES={d}" in text and "stray output" in text
    assert len({r["pid"] for r in results}) == 2                           # two processes, reused across jobs


def test_pool_survives_a_dying_worker(tmp_path, fake_runner):
    jobs = [{"name": "a"}, {"name": "die"}, {"name": "b"}, {"name": "c"}]
    results = pool.run_pool(jobs, ["0"], tmp_path / "logs", runner=fake_runner)
    by_name = {r["name"]: r for r in results}
    assert "died (exit 3)" in by_name["die"]["error"]
    assert all(by_name[n]["seen_device"] == "0" for n in "abc")


def _result(name, value, lo, hi, complete=True, fail=False):
    ratio = {"value": value, "lo": lo, "hi": hi, "level": 0.95}
    g = {"candidate": name, "complete": complete, "ratio": ratio,
         "verdict": stats.verdict(stats.Estimate(value, lo, hi)), "cases": 1}
    res = {"candidate": name, "status": "fail", "error": "bad"} if fail else \
        {"candidate": name, "status": "ok", "ratio": ratio, "verdict": g["verdict"]}
    summary = {"candidates": ["BASE", name], "geomean": [{"candidate": "BASE"}, g],
               "cases": [{"label": "640x512 dense c2",
                          "results": [{"candidate": "BASE", "status": "ok", "median_us": 812.5}, res]}]}
    return {"name": name, "summary": summary, "worker": 0, "cuda_visible_devices": "0", "where": "0 (0)"}


def test_rank_and_best():
    results = [_result("slow", 1.05, 1.03, 1.07), _result("fast", 0.95, 0.94, 0.96),
               _result("noise", 0.99, 0.97, 1.01), _result("broken", 0.5, 0.4, 0.6, fail=True),
               {"name": "gated", "stage": "gate", "error": "test 3: factor residual too large"}]
    ranked = sw.rank(results)
    assert [r["name"] for r in ranked] == ["fast", "noise", "slow", "broken", "gated"]
    assert sw.best_of(ranked)["name"] == "fast"
    assert sw.best_of(sw.rank(results[2:3])) is None        # within noise: nothing is written
    from rich.console import Console
    console = Console(record=True, width=200)
    sw.render_ranking(ranked, {"fast": "mid.strip.bn=64"}, console)
    text = console.export_text()
    assert "mid.strip.bn=64" in text and "not timed" in text and "factor residual" in text
    assert "0 (0)" in text


def test_score_ratio_over_untimed_cases():
    g = {"ratio": {"value": 0.9, "lo": 0.8, "hi": 1.0}}
    assert sw.score_ratio(g, 3, 12)["value"] == pytest.approx(0.9 ** 0.25)


def test_cli_dry_run_prints_the_grid(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    result = CliRunner().invoke(sweep_cli, [str(CHAMPION), "--set", "mid.strip.bn=32,64", "--set",
                                            "mid.panel.num_warps=2,4", "--dry-run", "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "= 4 candidate(s)" in result.output and "mid.strip.bn=64 mid.panel.num_warps=2" in result.output
    assert "worker 0 -> CUDA_VISIBLE_DEVICES=0, worker 1 -> CUDA_VISIBLE_DEVICES=1" in result.output
    assert "tests routed to mid" in result.output
    assert not (tmp_path / "r").exists()                      # a dry run writes nothing


def test_cli_dry_run_rejects_invalid_points(tmp_path):
    result = CliRunner().invoke(sweep_cli, [str(CHAMPION), "--set", "mid.strip.bn=32,48", "--dry-run",
                                            "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 1 and "got 48" in result.output


def test_cli_refuses_without_a_gpu(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    result = CliRunner().invoke(sweep_cli, [str(CHAMPION), "--set", "mid.strip.bn=32", "--run-dir", str(tmp_path)])
    assert result.exit_code == 1 and "needs a CUDA GPU" in result.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_sweep_two_workers_on_one_gpu(tmp_path):
    """The real pool, two workers sharing GPU 0, on one small case."""
    result = CliRunner().invoke(sweep_cli, [str(CHAMPION), "--set", "small.strip.num_warps=2,4", "--workers", "2",
                                            "--cases", "1", "--budget", "10", "--run-dir", str(tmp_path / "r"),
                                            "-o", str(tmp_path / "best.yaml")])
    assert result.exit_code == 0, result.output
    logs = sorted((tmp_path / "r" / "logs").iterdir())
    assert len(logs) == 2


CPU_RUNNER = textwrap.dedent("""
    # run_job as on a GPU worker, with the GPU-only parts swapped for CPU stand-ins
    import functools
    from pathlib import Path
    from qrsub import sweep as sw
    from qrsub.bench import timer

    STARTER = Path({starter!r})
    _timer = timer.HarnessTimer

    def run(job, log):
        sw.run_gate = lambda submission, plan, log: (True, "gate skipped on the CPU")
        sw._build = lambda variant, build_dir: STARTER
        timer.HarnessTimer = functools.partial(_timer, allow_cpu=True)
        return sw.run_job(job, log)
""")


def test_cli_sweep_end_to_end_on_the_cpu(tmp_path, monkeypatch):
    """The whole command with 2 workers; the kernels are the starter timed by wall clock."""
    (tmp_path / "cpu_runner.py").write_text(CPU_RUNNER.format(starter=str(Path("task/submission.py").resolve())))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")   # two torch processes on a small CI box: no oversubscription
    real_pool = pool.run_pool
    monkeypatch.setattr(pool, "run_pool", lambda jobs, devices, log_dir, runner, on_result=None:
                        real_pool(jobs, devices, log_dir, runner="cpu_runner:run", on_result=on_result))
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(sweep_cli, [str(CHAMPION), "--set", "tiny.panel.num_warps=2,4", "--workers", "2",
                                            "--cases", "0", "--budget", "0.5", "--run-dir", str(run_dir),
                                            "-o", str(tmp_path / "best.yaml")])
    assert result.exit_code == 0, result.output
    assert "qrsub sweep: geomean time / BASE" in result.output and "wall time" in result.output
    data = __import__("json").loads((run_dir / "results.json").read_text())
    assert sorted(r["name"] for r in data["results"]) == ["champion.tiny.panel.num_warps-2",
                                                          "champion.tiny.panel.num_warps-4"]
    assert all(r["stage"] == "bench" and r["summary"]["cases"][0]["label"] == "20x32 dense c1"
               for r in data["results"])
    assert len(list((run_dir / "logs").iterdir())) == 2
    assert len(list((run_dir / "variants").glob("*.yaml"))) == 2


def test_per_case_table_and_plot_are_shared_by_both_sweeps(tmp_path):
    results = [_result("slow", 1.05, 1.03, 1.07), _result("fast", 0.95, 0.94, 0.96),
               {"name": "gated", "stage": "gate", "error": "test 3 failed"}]
    ranked = sw.rank(results)
    merged = sw.merged_summary(ranked)
    assert merged["candidates"] == ["BASE", "fast", "slow"]
    assert [r["candidate"] for r in merged["cases"][0]["results"]] == ["BASE", "fast", "slow"]
    assert [g["candidate"] for g in merged["geomean"]] == ["BASE", "fast", "slow"]
    from rich.console import Console
    console = Console(record=True, width=200)
    sw.show_results(ranked, {"fast": "mid.strip.bn=64"}, console, plot=tmp_path / "p.png")
    text = console.export_text()
    assert "per case: time / BASE" in text and "812.5" in text and "0.950*" in text and "mid.strip.bn=64" in text
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(sw.SweepError, match="nothing to plot"):
        sw.merged_summary(ranked[2:])
