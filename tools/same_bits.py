"""Do two builds factor the same inputs to the same bits?

A knob that only reschedules work (a pipeline's depth, a launch's warps) should leave every
sum in its order, and so H and tau unchanged to the last bit. Where that holds, the accuracy
figures measured for one build (the six-seed runs) carry over to the other, and only its speed
needs measuring. This builds both, calls each twice on one input (the second call's outputs are
compared, after any graph is captured) and compares H and tau with torch.equal:

    python tools/same_bits.py variants/champion.yaml variants/champion-stages5.yaml
    python tools/same_bits.py A.py B.yaml 2:64:dense:1 1:40:rankdef:0   # batch:n:case:cond

With no inputs named, the first input of each 640x512 benchmark case. The exit status is 1 where
any input differs. On the CPU the kernels run through Triton's interpreter (TRITON_INTERPRET=1),
whose sums need not be ordered as the GPU's: only the GPU's verdict counts for a GPU knob.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import torch

from call_phases import build
from qrsub.bench.timer import load_submission
from qrsub.harness import cases_for, harness_on_path, load_task, select_cases
from qrsub.task.eval import _inputs as harness_inputs  # the harness's own inputs and seeds

# The benchmark cases inputs default to, as a `qrsub bench --cases` selector: 640x512 (dense,
# mixed, rankdef, clustered), the mid route's.
DEFAULT_CASES = "n=512"
SEED = 1234  # for named inputs


def parse_input(text: str) -> tuple[int, int, str, int]:
    """batch:n:case:cond, e.g. 2:64:dense:1."""
    parts = text.split(":")
    if len(parts) != 4 or not (parts[0].isdigit() and parts[1].isdigit() and parts[3].isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected batch:n:case:cond, e.g. 2:64:dense:1")
    return int(parts[0]), int(parts[1]), parts[2], int(parts[3])


def inputs(named: list[tuple[int, int, str, int]]):
    """(label, input tensor) for each named input, or for the default benchmark cases."""
    harness_on_path()
    if not named:
        cases = cases_for(load_task(), "benchmark")
        for index in select_cases(cases, DEFAULT_CASES):
            yield f"benchmark case {index}", harness_inputs(cases[index])[0]
        return
    from qrsub.task.reference import generate_input
    for batch, n, case, cond in named:
        yield f"{batch}x{n} {case} cond {cond}", generate_input(batch, n, cond, SEED, case)


def factors(module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """H and tau of the second call on a copy of X (the first compiles and captures)."""
    module.custom_kernel(x.clone())
    h, tau = module.custom_kernel(x.clone())
    return h.clone(), tau.clone()


def compare(a, b, x: torch.Tensor) -> tuple[bool, float]:
    """(bit for bit equal, largest absolute difference of H and tau) of builds A and B on X."""
    ha, ta = factors(a, x)
    hb, tb = factors(b, x)
    same = torch.equal(ha, hb) and torch.equal(ta, tb)
    gap = max((ha - hb).abs().max().item(), (ta - tb).abs().max().item())
    return same, gap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="a variants/*.yaml file or a built submission .py")
    parser.add_argument("b", help="the other build")
    parser.add_argument("inputs", nargs="*", type=parse_input,
                        help="batch:n:case:cond (default: the 640x512 benchmark cases' first inputs)")
    args = parser.parse_args(argv)
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:  # the built files stay while their kernels run
        a = load_submission(build(args.a, Path(tmp) / "a.py"), "_same_bits_a")
        b = load_submission(build(args.b, Path(tmp) / "b.py"), "_same_bits_b")
        for label, x in inputs(args.inputs):
            same, gap = compare(a, b, x)
            print(f"{label}: {'same' if same else 'DIFFERENT'} bits (largest |A - B| {gap:.3g})")
            differ += not same
    verdict = "the same bits on every input" if not differ else f"different bits on {differ} input(s)"
    print(f"{args.a} and {args.b}: {verdict}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
