"""Writing files whole or not at all."""
import os
import tempfile
from pathlib import Path


def write_atomic(out: Path, text: str) -> Path:
    """Write TEXT to OUT through a temporary file and a rename: a failure leaves no
    half-written OUT and no temporary file behind."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
