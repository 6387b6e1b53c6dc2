"""Wall time of each phase of the harness's benchmark loop, per benchmark case, for one variant.

The harness (benchmark and leaderboard modes) calls a submission on clones of a case's inputs
first, then repetition after repetition on the inputs themselves. A variant whose first calls
cost more than its later ones (graph.mode inplace: a tensor's first call runs eagerly, its
second captures a graph) pays that inside the timed loop, where `qrsub bench`'s medians hide
it and the harness's means keep it. This prints, per case, the wall time of the check phase
and of the first repetitions, each a whole pass over the case's inputs, synchronized, and
what a harness run's mean would be once the one-off cost is spread over its repetitions,
and the wall time of the harness's recheck of a repetition's outputs (what a case that runs
all 1,000 ranked repetitions spends besides its calls, against the ranked run's 900 s):

    python tools/call_phases.py variants/champion-inplace.yaml [--cases 0-6] [--repeats 4]

A GPU tool: on the CPU the kernels run through Triton's interpreter and the times say nothing.
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from qrsub.bench.timer import load_submission
from qrsub.harness import cases_for, harness_on_path, load_task, select_cases
from qrsub.task.eval import MAX_WALL_NS
from qrsub.task.eval import _check_all as harness_check_all  # the recheck after every repetition
from qrsub.task.eval import _inputs as harness_inputs  # the harness's own list: its count and seeds


def build(variant: str, out: Path) -> Path:
    """A .py is used as it is; a variant is built with `qrsub build` first."""
    if variant.endswith(".py"):
        return Path(variant)
    subprocess.run([sys.executable, "-m", "qrsub", "build", variant, "-o", str(out)], check=True)
    return out


def add_case_arguments(parser) -> None:
    """The VARIANT and --case arguments of the tools that run one benchmark case's first input."""
    parser.add_argument("variant", help="a variants/*.yaml file or a built submission .py")
    parser.add_argument("--case", type=int, required=True, help="benchmark case index (qrsub test --cases)")


def first_input_of_case(args, tmp: Path, name: str, warm_calls: int) -> tuple:
    """(args.variant built into TMP and loaded as module NAME, benchmark case args.case's spec,
    the first of the harness's inputs for it), after WARM_CALLS untimed calls on that input
    (compiling, capturing any graph). TMP must outlive the calls: Triton reads the built file.
    Exits where there is no GPU: the tools that use it time or profile GPU kernels."""
    if not torch.cuda.is_available():
        sys.exit(f"{Path(sys.argv[0]).name} measures GPU kernels and needs a CUDA GPU")
    module = load_submission(build(args.variant, tmp / "submission.py"), name)
    harness_on_path()
    spec = cases_for(load_task(), "benchmark")[args.case]
    x = harness_inputs(spec)[0]
    for _ in range(warm_calls):
        module.custom_kernel(x)
    torch.cuda.synchronize()
    return module, spec, x


def timed_ms(calls) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    calls()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1000


def phases(kernel, inputs: list, repeats: int) -> list:
    """[check phase ms, repetition 1 ms, ...]: the check calls on clones, as the harness does."""
    out = [timed_ms(lambda: [kernel(x.clone()) for x in inputs])]
    for _ in range(repeats):
        out.append(timed_ms(lambda: [kernel(x) for x in inputs]))
    return out


def projected_means_us(times: list, count: int, repetitions=(200, 1000)) -> tuple:
    """(steady us a call, {R: mean us a call over R repetitions}) from phases()'s times: the
    last repetition is taken as steady, and what the earlier ones cost beyond it is a one-off
    that a harness run of R repetitions spreads over its R * count calls (benchmark mode stops
    at 200 repetitions, the ranked leaderboard mode at 1000)."""
    steady = times[-1]
    one_off = sum(t - steady for t in times[1:-1])
    return steady * 1000 / count, {r: (steady + one_off / r) * 1000 / count for r in repetitions}


def ranked_wall_s(steady_ms: float, recheck_ms: float, repetitions: int = 1000) -> float:
    """Seconds a ranked (leaderboard-mode) case takes when its standard error never drops under
    0.1% (a variant whose one-off calls sit in its timed loop): every repetition, each followed
    by the recheck, up to the harness's per-case wall limit."""
    return min(repetitions * (steady_ms + recheck_ms) / 1000, MAX_WALL_NS / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant", help="a variants/*.yaml file or a built submission .py")
    parser.add_argument("--cases", default=None, help="benchmark cases, as qrsub test --cases (default: all)")
    parser.add_argument("--repeats", type=int, default=4, help="repetitions after the check phase")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tools/call_phases.py times GPU calls and needs a CUDA GPU: on the CPU the kernels run "
                 "through Triton's interpreter, and their times say nothing")
    with tempfile.TemporaryDirectory() as tmp:  # the built file stays while its kernels run
        module = load_submission(build(args.variant, Path(tmp) / "submission.py"), "_call_phases")
        harness_on_path()
        specs = cases_for(load_task(), "benchmark")
        print(f"{args.variant}: wall ms of a whole pass over each case's inputs: the check on clones, "
              f"then {args.repeats} repetitions")
        for i in select_cases(specs, args.cases):
            spec = specs[i]
            inputs = harness_inputs(spec)
            times = phases(module.custom_kernel, inputs, args.repeats)
            outputs = [module.custom_kernel(x) for x in inputs]
            recheck = timed_ms(lambda: harness_check_all(inputs, outputs))
            cells = "  ".join(f"{t:10.1f}" for t in times)
            steady, means = projected_means_us(times, len(inputs))
            projected = ", ".join(f"{r} reps {m:,.1f}" for r, m in means.items())
            print(f"{i:2d} {spec['batch']}x{spec['n']} ({len(inputs)} inputs): {cells}  |  us a call: "
                  f"steady {steady:,.1f}; mean over {projected}  |  recheck {recheck:,.1f} ms; 1000 reps "
                  f"with rechecks {ranked_wall_s(times[-1], recheck):,.0f} s", flush=True)


if __name__ == "__main__":
    main()
