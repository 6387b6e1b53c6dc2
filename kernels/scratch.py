"""Scratch buffers allocated once per shape and reused by every later call."""
import torch

_SCRATCH = {}


def scratch(name: str, shape: tuple, dtype, device) -> torch.Tensor:
    """A buffer allocated once per (name, shape, dtype, device); its contents are the caller's."""
    key = (name, tuple(shape), dtype, str(device))
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(shape, dtype=dtype, device=device)
        _SCRATCH[key] = buf
    return buf
