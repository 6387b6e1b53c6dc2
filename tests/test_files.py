"""Files qrsub writes (builds, JSON, variants) get the mode any new file gets, not mkstemp's 0600."""
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from qrsub.cli import main
from qrsub.files import write_atomic

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def umask():
    """Set the umask for one test, and put the old one back."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask,expected", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_write_atomic_gives_the_usual_mode(tmp_path, umask, mask, expected):
    umask(mask)
    out = write_atomic(tmp_path / "out.json", "{}\n")
    assert mode(out) == expected
    assert os.umask(mask) == mask  # reading the umask left it as it was


def test_a_built_submission_is_readable_by_others(tmp_path, umask):
    umask(0o022)
    out = tmp_path / "submission.py"
    result = CliRunner().invoke(main, ["build", str(ROOT / "variants" / "geqrf.yaml"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert mode(out) == 0o644
