"""tools/build_at.py: a variant built by a commit's own qrsub, kernels, template and variant."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import build_at  # noqa: E402
from qrsub.bench.timer import load_submission  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = "# marker: as committed"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def committed_copy(tmp_path: Path) -> Path:
    """A repository holding the checkout's package folders, committed once, with two changes:
    a marker comment in a kernel module (inlined into every build), and the schema's default
    panel.sigma `own`, which only the commit's own variant loading puts into routes that do
    not set it (the installed qrsub's would write `broadcast`)."""
    repo = tmp_path / "repo"
    for name in ("qrsub", *build_at.MAPPED):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    plan = repo / "kernels" / "plan.py"
    text = plan.read_text()
    assert text.count('knob("broadcast", OneOf(SIGMAS)') == 1
    plan.write_text(text.replace('knob("broadcast", OneOf(SIGMAS)', 'knob("own", OneOf(SIGMAS)') + f"\n{COMMITTED}\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "inputs")
    return repo


def test_the_commit_is_built_and_runs(tmp_path, monkeypatch):
    repo = committed_copy(tmp_path)
    monkeypatch.chdir(repo)
    # The work tree moves on after the commit; none of it may reach the build.
    with open(repo / "kernels" / "plan.py", "a") as f:
        f.write("\n# marker: changed after the commit\n")
    (repo / "variants" / "champion.yaml").write_text("extends: b200.yaml\n")
    out = tmp_path / "before.py"
    assert build_at.main(["HEAD", "-o", str(out)]) == 0
    text = out.read_text()
    assert COMMITTED in text and "changed after the commit" not in text
    assert "# variant: champion (" in text
    assert "sigma='own'" in text and "sigma='broadcast'" not in text
    # Its knobs are the ones its own kernels take (an old build once passed a knob added since).
    h, tau = load_submission(out, "_built_at_head").custom_kernel(torch.randn(2, 8, 8))
    assert h.shape == (2, 8, 8) and tau.shape == (2, 8)


def test_a_missing_variant_or_revision_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(committed_copy(tmp_path))
    with pytest.raises(SystemExit, match="HEAD has no variants/nope.yaml"):
        build_at.main(["HEAD", "variants/nope.yaml", "-o", str(tmp_path / "x.py")])
    with pytest.raises(SystemExit, match="no-such-revision"):
        build_at.main(["no-such-revision", "-o", str(tmp_path / "x.py")])
    assert not (tmp_path / "x.py").exists()
