"""One call of a variant on one benchmark case's first input, for Nsight Compute's counters.

The variant is built and called twice untimed (compiling its kernels, capturing any graph),
then once between cudaProfilerStart and cudaProfilerStop, so that `ncu --profile-from-start off`
sees exactly one call's kernels (gpu_plan.sh's ncu stage passes the sections and filters):

    ncu --clock-control none --profile-from-start off -k regex:strip --launch-count 2 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis python tools/ncu_case.py \\
        variants/champion.yaml --case 3

A GPU tool: it refuses to run without CUDA.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import torch
from call_phases import build

from qrsub.bench.timer import load_submission
from qrsub.harness import cases_for, harness_on_path, load_task
from qrsub.task.eval import _inputs as harness_inputs  # the harness's own inputs for the case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant", help="a variants/*.yaml file or a built submission .py")
    parser.add_argument("--case", type=int, required=True, help="benchmark case index (qrsub test --cases)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tools/ncu_case.py profiles GPU kernels and needs a CUDA GPU")
    with tempfile.TemporaryDirectory() as tmp:  # the built file stays while its kernels run
        module = load_submission(build(args.variant, Path(tmp) / "submission.py"), "_ncu_case")
        harness_on_path()
        spec = cases_for(load_task(), "benchmark")[args.case]
        x = harness_inputs(spec)[0]
        for _ in range(2):
            module.custom_kernel(x)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        module.custom_kernel(x)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"{args.variant}: one call of case {args.case} ({spec['batch']}x{spec['n']}) profiled")


if __name__ == "__main__":
    main()
