"""The GPU tools' timing loop: CUDA events around a loop of launches, the median over loops.

Shared by tools/panel_t_cost.py (single launches), tools/tproduct_tiles.py and
tools/far_update_cost.py (graph replays).
"""
import statistics

import torch
import triton


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


def graph_us(run, reps: int, inner: int = 20) -> float:
    """median_us of INNER replays of RUN captured as one graph, in us a replay: a call's launches
    without the host's launch cost, as in a captured call. RUN runs once first, outside the
    capture (it compiles, and allocates what it keeps)."""
    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return median_us(graph.replay, reps, inner)


def graph_us_both_orders(runs: dict, reps: int, where: str) -> dict:
    """{label: [us forward, us reversed]}: graph_us of each of RUNS ({label: run}), the whole list
    timed forward and then reversed, so that drift shows as two different figures. A run whose
    tiles need more shared memory than the GPU has (Triton's OutOfResources) is reported (WHERE
    names the shape) and left out: a grid point to report, not a failure."""
    times = {label: [] for label in runs}
    for order in (list(runs), list(runs)[::-1]):
        for label in order:
            if label not in times:
                continue
            try:
                times[label].append(graph_us(runs[label], reps))
            except triton.runtime.errors.OutOfResources:
                print(f"{where}: {label} needs more shared memory than the GPU has")
                del times[label]
    return times


def print_table(title: str, times: dict, base: str, error, width: int = 36):
    """graph_us_both_orders' TIMES as a table, fastest first: each label's two figures, their mean
    over BASE's, and error(label) (the tool's largest relative error for that configuration)."""
    base_us = statistics.mean(times[base])
    print(f"\n{title}")
    print(f"{'configuration':{width}} {'us a call (fwd / rev)':>22} {'/ ' + base:>14} {'max rel error':>14}")
    for label in sorted(times, key=lambda k: statistics.mean(times[k])):
        t = times[label]
        print(f"{label:{width}} {t[0]:>10.1f} / {t[1]:<10.1f} {statistics.mean(t) / base_us:>14.3f} "
              f"{error(label):>14.2e}", flush=True)
