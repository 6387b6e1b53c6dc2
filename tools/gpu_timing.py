"""The GPU tools' timing loop: CUDA events around a loop of launches, the median over loops.

Shared by tools/panel_t_cost.py (single launches) and tools/tproduct_tiles.py (graph replays).
"""
import statistics

import torch


def median_us(launch, reps: int, inner: int = 10) -> float:
    """Median over REPS loops of INNER calls of LAUNCH, in us a call, after one untimed call
    (which compiles what needs compiling)."""
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / inner)
    return statistics.median(times)
