"""Writing files whole or not at all."""
import os
import tempfile
from pathlib import Path


def write_atomic(out: Path, text: str) -> Path:
    """Write TEXT to OUT through a temporary file and a rename: a failure leaves no
    half-written OUT and no temporary file behind. OUT gets the mode any new file gets
    (0666 less the umask: 0644 usually), not the temporary file's private 0600."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
