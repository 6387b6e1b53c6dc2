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
import tempfile
from pathlib import Path

import torch
from call_phases import add_case_arguments, first_input_of_case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_case_arguments(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:  # the built file stays while its kernels run
        module, spec, x = first_input_of_case(args, Path(tmp), "_ncu_case", warm_calls=2)
        torch.cuda.cudart().cudaProfilerStart()
        module.custom_kernel(x)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"{args.variant}: one call of case {args.case} ({spec['batch']}x{spec['n']}) profiled")


if __name__ == "__main__":
    main()
