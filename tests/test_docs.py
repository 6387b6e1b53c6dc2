"""The repository's documents: links resolve, nothing points outside the repository,
and the checker's messages are the ones docs/harness.md quotes."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("techniques.md", "harness.md", "service.md", "measurements.md")
MARKDOWN = [ROOT / "README.md", *(ROOT / "docs" / name for name in DOCS)]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Pointers to files that only exist beside a checkout, never in it.
OUTSIDE = re.compile(r"\.\./shared|shared[/]docs|qr-techniques\.md|popcorn-api\.md")
# Where the repository must already stand alone. (submit/, qrsub/ and tests/fake_service.py
# are being cleaned separately; add them here once they are.)
STANDALONE = ("README.md", "docs", "variants", "task", "kernels", "templates")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        assert linked.is_file(), f"{doc.name} links {target}, which does not exist"
        assert ROOT in linked.parents, f"{doc.name} links {target}, outside the repository"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{doc.name} links {target}: no such heading"


def test_readme_links_every_document():
    readme = ROOT / "README.md"
    linked = {Path(t).name for t in LINK.findall(readme.read_text())}
    assert set(DOCS) <= linked


def test_readme_says_how_to_get_set_up_to_submit_and_what_the_interpreter_costs():
    text = " ".join((ROOT / "README.md").read_text().split())
    submitting = text.split("## Submitting")[1]
    for needed in ("popcorn register", "POPCORN_API_URL", "(docs/service.md#getting-set-up)", "--dry-run"):
        assert needed in submitting, needed
    assert "40x176 did not finish in 500 s on a 2-core machine" in text


def test_measurements_shows_its_plot():
    text = (ROOT / "docs" / "measurements.md").read_text()
    assert re.search(r"!\[[^\]]+\]\(bench-knobs-h200\.png\)", text)


def _tracked(paths) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.stdout.splitlines()]


def test_nothing_points_outside_the_repository():
    found = []
    for path in _tracked(STANDALONE):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # the plot, or a file deleted in the work tree
        for lineno, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "\n".join(found)


def test_shapes_are_batch_by_n_in_the_champion():
    # The champion's routes name the benchmark shapes they serve; batch x n, never n x batch.
    text = (ROOT / "variants" / "champion.yaml").read_text()
    shapes = set(re.findall(r"\b(\d+)x(\d+)\b", text))
    assert shapes and {("40", "176"), ("640", "512"), ("60", "1024"), ("2", "4096")} <= shapes
    assert not {("176", "40"), ("512", "640"), ("1024", "60"), ("4096", "2")} & shapes


def test_harness_doc_quotes_the_checker():
    """Every fixed message of check_implementation appears word for word in docs/harness.md."""
    source = (ROOT / "task" / "reference.py").read_text()
    doc = (ROOT / "docs" / "harness.md").read_text()
    # The literal text of each `return False, "..."` and the fixed start of each f-string.
    fixed = re.findall(r'return False, "([^"]+)"', source)
    prefixes = re.findall(r'f"([^"{\n]+)\{', source.split("def check_implementation")[1])
    assert len(fixed) >= 7 and any(p.startswith("R - Q.T @ A is too large") for p in prefixes)
    missing = [text for text in fixed + prefixes if text not in doc]
    assert not missing, missing
