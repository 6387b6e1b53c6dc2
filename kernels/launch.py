"""What every launch shares: where the kernels run, and programmatic dependent launch.

settings.pdl launches each Triton kernel with programmatic dependent launch (Hopper and later):
the next kernel in the queue may have its programs placed on the GPU before this one ends, so
its launch overlaps the tail of the one before instead of following it. Every kernel begins
with `wait_for_previous`, which blocks until the launch before it has finished and its writes
are visible, then allows the next launch to be placed: kernels still run their work in launch
order, one queue, and only the placing of programs moves earlier. A kernel that is not
launched this way (a torch or cuBLAS one) is waited for in full, as without the setting.
"""
import os

import triton
import triton.language as tl


def interpreted() -> bool:
    """Triton's interpreter runs the kernels (CPU tensors): no inline assembly, one program at a time."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def wait_for_previous(PDL: tl.constexpr):
    """With PDL: wait for the launch before this one to finish (and its writes to be visible),
    then let the next launch's programs be placed. Called first, before any memory access; or
    last, by a kernel that reads nothing the launch before it writes (strip.halves' strips):
    it then runs beside that launch, and still finishes after it."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


_DEPENDENT = False  # whether launches now use programmatic dependent launch


class dependent_launches:  # noqa: N801 - used as a function: `with dependent_launches(on):`
    """Within the block, launches use programmatic dependent launch where ENABLED (settings.pdl)
    and the kernels run on a GPU; the caller's choice returns after. A class, not a generator
    context: it is entered on every call of the submission, and at 20x32 a call's host time is
    what the GPU waits for (contextlib's generator costs about a microsecond more)."""

    __slots__ = ("enabled", "outer")

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        global _DEPENDENT
        self.outer = _DEPENDENT
        _DEPENDENT = self.enabled and not interpreted()

    def __exit__(self, *exc):
        global _DEPENDENT
        _DEPENDENT = self.outer
        return False


def pdl_launch() -> dict:
    """A launch's keyword arguments for programmatic dependent launch: the kernels' PDL
    constant and, when it is on, Triton's launch option."""
    return {"PDL": True, "launch_pdl": True} if _DEPENDENT else {"PDL": False}


def register_cap(max_registers: int) -> dict:
    """The launch option that caps a kernel's registers per thread (PanelKnobs.max_registers,
    StripKnobs.max_registers), or none where the knob leaves it to the compiler."""
    return {"maxnreg": max_registers} if max_registers else {}
