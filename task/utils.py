"""Small helpers shared by the harness files (seeding, device, timing).

Every CUDA-only call is guarded so that the harness also runs on the CPU,
where timings are wall-clock timings.
"""
import contextlib
import random
import time

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024


def has_cuda() -> bool:
    return torch.cuda.is_available()


def set_seed(seed: int = 42) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if has_cuda():
        torch.cuda.manual_seed_all(seed)


def synchronize() -> None:
    if has_cuda():
        torch.cuda.synchronize()


def clear_l2_cache() -> None:
    """Write a 256 MiB buffer so no input stays in L2 between repetitions (GPU only)."""
    if not has_cuda():
        return
    buffer = torch.empty(L2_FLUSH_BYTES // 8, dtype=torch.int64, device="cuda")
    buffer.fill_(42)
    del buffer


class Stopwatch:
    """Times one region: CUDA events on the GPU, perf_counter_ns on the CPU."""

    def __init__(self) -> None:
        self.cuda = has_cuda()
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        if self.cuda:
            self._start.record()
        else:
            self._t0 = time.perf_counter_ns()

    def stop(self) -> float:
        """Elapsed nanoseconds since start() (synchronizes the device)."""
        if self.cuda:
            self._end.record()
            torch.cuda.synchronize()
            return self._start.elapsed_time(self._end) * 1e6
        return float(time.perf_counter_ns() - self._t0)


@contextlib.contextmanager
def nvtx_range(name: str):
    """An NVTX range for profilers on the GPU; nothing on the CPU."""
    if has_cuda():
        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()
    else:
        yield
