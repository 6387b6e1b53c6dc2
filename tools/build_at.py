"""Build a variant as an earlier commit had it: that commit's variant file, kernels and template.

A bench's "before" column is the previous champion as it was, not its knobs on today's kernels
(`qrsub build` of an old variant file reads the checkout's kernels/). This takes the commit's
variants/, kernels/ and templates/ out of git into a temporary folder and builds from there:

    python tools/build_at.py 0ef2056 -o .gpu/champion-prev.py          # variants/champion.yaml
    python tools/build_at.py HEAD~3 variants/champion-concurrent.yaml -o /tmp/before.py

The variant is checked by today's schema (qrsub.variant), so a knob since removed is an error
that names it. Run from inside the repository.
"""
import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from qrsub.build import BuildError, build_submission, default_template

# What a build reads besides qrsub itself.
BUILD_INPUTS = ("variants", "kernels", "templates")


def export(commit: str, into: Path) -> None:
    """BUILD_INPUTS as COMMIT has them, unpacked under INTO."""
    done = subprocess.run(["git", "archive", "--format=tar", commit, *BUILD_INPUTS], capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"build_at: git archive {commit}: {done.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(into, filter="data")


def build_at(commit: str, variant: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        export(commit, root)
        source = root / variant
        if not source.is_file():
            raise SystemExit(f"build_at: {commit} has no {variant}")
        template = root / "templates" / default_template().name
        build_submission(source, out, kernels_dir=root / "kernels", template=template)
    print(f"wrote {out} ({variant} as of {commit})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="any git revision: a hash, HEAD~2, a tag")
    parser.add_argument("variant", nargs="?", default="variants/champion.yaml",
                        help="the variant's path in the repository (default: variants/champion.yaml)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the submission file to write")
    args = parser.parse_args(argv)
    try:
        build_at(args.commit, args.variant, args.out)
    except BuildError as exc:
        print(f"build_at: {args.variant} as of {args.commit}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
