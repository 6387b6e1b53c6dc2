"""Types of the qr_v2 problem, as the service's task.py declares them.

Submissions do `from task import input_t, output_t`.
"""
from typing import TypedDict, TypeVar

import torch

# A contiguous batch x n x n float32 tensor on the GPU (the CPU without one).
input_t = TypeVar("input_t", bound=torch.Tensor)
# (H, tau) in torch.geqrf's compact Householder form.
output_t = TypeVar("output_t", bound=tuple[torch.Tensor, torch.Tensor])


class TestSpec(TypedDict, total=False):
    batch: int
    n: int
    cond: int
    seed: int
    case: str  # optional; "dense" when absent
