"""Scratch buffers allocated once per shape and reused by every later call.

A buffer is keyed by (scope, name, shape, dtype, device). The scope is "" unless a
caller opens `scratch_scope`: graphs.py's concurrent groups capture each group inside
its own scope, because groups of one size would otherwise get the same T and V while
their kernels run at the same time. Everything outside a scope keeps the "" keys.
"""
import contextlib

import torch

_SCRATCH = {}
# The scope scratch() keys buffers under now; scratch_scope sets it for a block.
_SCRATCH_SCOPE = ""


def scratch(name: str, shape: tuple, dtype, device, init=None) -> torch.Tensor:
    """A buffer allocated once per (scope, name, shape, dtype, device); its contents are the
    caller's. init(buffer), if given, runs once, when the buffer is allocated (inside a graph
    capture it is captured, and then runs at every replay)."""
    key = (_SCRATCH_SCOPE, name, tuple(shape), dtype, str(device))
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(shape, dtype=dtype, device=device)
        if init is not None:
            init(buf)
        _SCRATCH[key] = buf
    return buf


@contextlib.contextmanager
def scratch_scope(label: str):
    """Within the block, scratch() hands out buffers of LABEL's own, shared with no call outside
    it (a scope opened inside another is the pair of labels). The caller's scope returns after."""
    global _SCRATCH_SCOPE
    outer = _SCRATCH_SCOPE
    _SCRATCH_SCOPE = f"{outer}/{label}" if outer else label
    try:
        yield
    finally:
        _SCRATCH_SCOPE = outer
