"""Build a variant as an earlier commit had it: that commit's qrsub, kernels, template and variant.

A bench's "before" column is the previous champion as it was, not its knobs on today's kernels
(`qrsub build` of an old variant file reads the checkout's kernels/), nor its kernels with
today's knob schema (a knob added since would be passed to kernels that do not know it). This
takes the commit's qrsub/ and the folders installed under it out of git into a temporary
folder, laid out as the installed package, and runs that commit's own `qrsub build` there:

    python tools/build_at.py 0ef2056 -o .gpu/champion-prev.py          # variants/champion.yaml
    python tools/build_at.py HEAD~3 variants/champion-concurrent.yaml -o /tmp/before.py

Run from inside the repository.
"""
import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The folders installed as qrsub.<name> (pyproject.toml's package-dir), besides qrsub/ itself.
MAPPED = ("kernels", "submit", "task", "variants", "templates")


def git(*args: str) -> bytes:
    done = subprocess.run(["git", *args], capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"build_at: git {' '.join(args)}: {done.stderr.decode().strip()}")
    return done.stdout


def export(commit: str, package: Path) -> None:
    """COMMIT's qrsub/ as PACKAGE, and each MAPPED folder it has as PACKAGE/<name>."""
    present = set(git("ls-tree", "--name-only", commit).decode().split())
    for name in ("qrsub", *MAPPED):
        if name not in present:
            continue
        with tarfile.open(fileobj=io.BytesIO(git("archive", "--format=tar", commit, name))) as tar:
            for member in tar.getmembers():
                # qrsub/x -> PACKAGE/x; kernels/x -> PACKAGE/kernels/x
                member.name = member.name.removeprefix("qrsub/") if name == "qrsub" else member.name
                if member.name and member.name != "qrsub":
                    tar.extract(member, package, filter="data")


def build_at(commit: str, variant: str, out: Path) -> int:
    """The exit status of COMMIT's `qrsub build` of VARIANT (a repository path) into OUT."""
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "qrsub"
        export(commit, package)
        source = package / variant
        if not source.is_file():
            raise SystemExit(f"build_at: {commit} has no {variant}")
        # From TMP, `python -m qrsub` imports the exported package before any installed one.
        done = subprocess.run([sys.executable, "-m", "qrsub", "build", str(source), "-o", str(out.resolve())],
                              cwd=tmp)
    if done.returncode == 0:
        print(f"build_at: {out} is {variant} as of {commit}")
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commit", help="any git revision: a hash, HEAD~2, a tag")
    parser.add_argument("variant", nargs="?", default="variants/champion.yaml",
                        help="the variant's path in the repository (default: variants/champion.yaml)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the submission file to write")
    args = parser.parse_args(argv)
    return build_at(args.commit, args.variant, args.out)


if __name__ == "__main__":
    sys.exit(main())
