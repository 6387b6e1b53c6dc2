"""What T's recurrence costs a panel launch: householder_panel as built, against a copy of
kernels/ whose grouped reflector step skips T (panel.grouped_step with WITH_T false).

The panel builds its block reflector's T inside the reflector loop (T[:k, k] = -tau_k T[:k, :k] w,
a product whose sum crosses lanes). The copy leaves T at zero, so its output is no valid T:
the difference is a ceiling on what building T elsewhere could save, not a variant. Each launch
is timed as the median of CUDA-event loops, the two builds interleaved twice (forward, then
reversed, so that drift shows):

    python tools/panel_t_cost.py [--reps 30]

Only launches whose GPU time exceeds the host's (a householder_panel call's arguments take
tens of microseconds to build) mean anything: 640x512 and 60x1024, not 40x176 or 40x352. The copy
is made by replacing one line of kernels/panel.py (GROUPED_STEP_CALL): if that line changes, the
tool stops and says so. A GPU tool: it refuses to run without CUDA.
"""
import argparse
import importlib
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from gpu_timing import median_us
from qrsub.kernels import panel as built_panel
from qrsub.kernels import plan as built_plan

GROUPED_STEP_CALL = "return grouped_reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, C0, False, True, APPROX)"
# (label, batch, n, first column, width, num_warps): the champion's mid and large panels.
MID_WARPS = [[128, 1], [None, 4]]
LARGE_WARPS = [[256, 2], [512, 4], [1024, 8], [None, 16]]
LAUNCHES = [
    ("640x512 at column 0", 640, 512, 0, 32, MID_WARPS),
    ("640x512 at column 128", 640, 512, 128, 32, MID_WARPS),
    ("640x512 at column 256", 640, 512, 256, 32, MID_WARPS),
    ("640x512 at column 416", 640, 512, 416, 32, MID_WARPS),
    ("60x1024 at column 0", 60, 1024, 0, 16, LARGE_WARPS),
    ("60x1024 at column 512", 60, 1024, 512, 16, LARGE_WARPS),
]


def without_t():
    """(panel, plan) modules of a copy of kernels/ whose grouped step does not build T."""
    copy = Path(tempfile.mkdtemp()) / "kernels_without_t"
    shutil.copytree(Path(built_panel.__file__).parent, copy)
    source = (copy / "panel.py").read_text()
    if GROUPED_STEP_CALL not in source:
        sys.exit(f"kernels/panel.py no longer holds the line this tool edits:\n  {GROUPED_STEP_CALL}\n"
                 "update GROUPED_STEP_CALL in tools/panel_t_cost.py to grouped_step's call of grouped_reflect")
    (copy / "panel.py").write_text(source.replace(GROUPED_STEP_CALL, GROUPED_STEP_CALL.replace("True, APPROX",
                                                                                              "False, APPROX")))
    sys.path.insert(0, str(copy.parent))
    return importlib.import_module("kernels_without_t.panel"), importlib.import_module("kernels_without_t.plan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="timed loops of 10 launches a build and order")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("panel_t_cost.py times GPU launches: run it on a machine with CUDA")
    builds = {"with T": (built_panel, built_plan), "without T": without_t()}
    for label, batch, n, j, width, warps in LAUNCHES:
        A = torch.randn(batch, n, n, device="cuda")
        H, tau = torch.empty_like(A), torch.empty(batch, n, device="cuda")
        T, V = torch.empty(batch, width, width, device="cuda"), torch.empty(batch, n, width, device="cuda")
        times = {name: [] for name in builds}
        for order in (list(builds), list(builds)[::-1]):
            for name in order:
                panel, plan = builds[name]
                knobs = plan.PanelKnobs(width=width, num_warps=warps, unroll=4, broadcast="shuffle",
                                        reciprocal="approx")
                times[name].append(median_us(lambda: panel.householder_panel(A, H, tau, T, V, j, width, knobs=knobs),
                                             args.reps))
        ratio = statistics.mean(times["without T"]) / statistics.mean(times["with T"])
        print(f"{label}: with T {' / '.join(f'{t:.1f}' for t in times['with T'])} us, without "
              f"{' / '.join(f'{t:.1f}' for t in times['without T'])} us: ratio {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()
