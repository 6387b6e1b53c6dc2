"""tools/build_at.py: a variant built from a commit's own variants, kernels and template."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import build_at  # noqa: E402
from qrsub.build import build_submission  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def committed_copy(tmp_path: Path) -> Path:
    """A repository holding the checkout's build inputs, committed once."""
    repo = tmp_path / "repo"
    for name in build_at.BUILD_INPUTS:
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "inputs")
    return repo


def test_the_commit_is_built_not_the_work_tree(tmp_path, monkeypatch):
    repo = committed_copy(tmp_path)
    monkeypatch.chdir(repo)
    as_committed = build_submission(repo / "variants" / "champion.yaml", kernels_dir=repo / "kernels",
                                    template=repo / "templates" / "submission.py.j2").text
    # The work tree moves on after the commit: a kernel changes, and so does the variant.
    with open(repo / "kernels" / "panel.py", "a") as f:
        f.write("\n# changed after the commit\n")
    (repo / "variants" / "champion.yaml").write_text("extends: b200.yaml\n")
    assert build_at.main(["HEAD", "-o", str(tmp_path / "before.py")]) == 0
    assert (tmp_path / "before.py").read_text() == as_committed


def test_a_missing_variant_or_revision_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(committed_copy(tmp_path))
    with pytest.raises(SystemExit, match="HEAD has no variants/nope.yaml"):
        build_at.main(["HEAD", "variants/nope.yaml", "-o", str(tmp_path / "x.py")])
    with pytest.raises(SystemExit, match="git archive no-such-revision"):
        build_at.main(["no-such-revision", "-o", str(tmp_path / "x.py")])
    assert not (tmp_path / "x.py").exists()
