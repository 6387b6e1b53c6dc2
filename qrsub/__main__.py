"""`python -m qrsub`: the command line, for machines where the console script is not installed."""
import importlib.util
import sys
from pathlib import Path


def installed() -> bool:
    """Whether the install's mapped packages (kernels/, task/, ... as qrsub.kernels, qrsub.task)
    are importable: run from a checkout that was never installed, `qrsub` is only its qrsub/
    folder, and every command would fail deep inside."""
    return importlib.util.find_spec("qrsub.task") is not None


if not installed():
    root = Path(__file__).resolve().parent.parent
    sys.exit(f"qrsub is not installed: `python -m qrsub` found {Path(__file__).parent}, but not the "
             f"packages an install maps under it (kernels/, task/, variants/, templates/ as qrsub.kernels, "
             f"...). Install the checkout once: pip install -e {root}")

from qrsub.cli import main  # noqa: E402  (after the check: the CLI imports the mapped packages)

main(prog_name="qrsub")
