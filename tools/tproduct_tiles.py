"""The far update's T product (T^T W) by tile and precision: every launch one call of a shape
makes, timed as a CUDA graph, for each combination of the knobs twolevel.far_tcontract,
tproduct_bn, tproduct_bk and tproduct_warps, beside cuBLAS (fp32 and tf32).

A two-level call makes one T product per outer block with a far update: T is O x O and W is
O x (n - J - O) for the block at column J. This tool captures those launches for one shape
into a graph and replays it, so the host's launch cost drops out, as in a captured call.
Each configuration is timed twice, the whole list forward and then reversed (drift shows as
two different figures). The error column is the largest difference from float64 over the
largest entry, on random upper-triangular T and random W (not the factorization's own
values: the harness's checks decide accuracy, this column only flags a broken tile).

    python tools/tproduct_tiles.py --shape 60x1024:128 --prec tf32x3,fp16x3 --bn 64,128 --warps 4,8

A GPU tool: it refuses to run without CUDA.
"""
import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

from gpu_timing import graph_us_both_orders, print_table
from qrsub.harness import cases_for, load_task
from qrsub.kernels.blocked import matmul_tf32
from qrsub.kernels.naive import t_product_ref
from qrsub.kernels.plan import TRITON_TCONTRACTS, TwoLevelKnobs
from qrsub.kernels.tproduct import t_product
from qrsub.variant import load_variant

CHAMPION = Path(__file__).resolve().parent.parent / "variants" / "champion.yaml"


def shape_arg(text: str) -> tuple:
    """'60x1024:128' -> (60, 1024, 128): batch x n, outer block O."""
    try:
        dims, outer = text.split(":")
        batch, n = dims.split("x")
        return int(batch), int(n), int(outer)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected BATCHxN:OUTER, e.g. 60x1024:128") from None


def champion_shapes() -> list:
    """[(batch, n, outer)] of the benchmark cases the champion factors with a Triton T product."""
    champion, shapes = load_variant(CHAMPION), []
    for case in cases_for(load_task(), "benchmark"):
        route = champion.route_for(case["n"], case["batch"])
        shape = (case["batch"], case["n"], route.twolevel.outer)
        if route.twolevel.far_tcontract in TRITON_TCONTRACTS and shape not in shapes:
            shapes.append(shape)
    return shapes


def int_list(text: str) -> list:
    return [int(v) for v in text.split(",")]


def operands(batch: int, n: int, outer: int, device="cuda") -> list:
    """[(T, W)] of a call's far updates: T upper triangular with unit-ish diagonal, W random."""
    g = torch.Generator(device=device).manual_seed(0)
    out = []
    for J in range(0, n - outer, outer):
        T = torch.triu(torch.randn(batch, outer, outer, device=device, generator=g)) / outer ** 0.5
        T.diagonal(dim1=1, dim2=2).add_(1.5)
        out.append((T, torch.randn(batch, outer, n - J - outer, device=device, generator=g)))
    return out


def cublas(T, W, tf32: bool):
    with matmul_tf32(tf32):
        return torch.bmm(T.transpose(1, 2), W)


def worst_error(pairs, product) -> float:
    worst = 0.0
    for T, W in pairs:
        ref = t_product_ref(T.cpu(), W.cpu())
        out = product(T, W).double().cpu()
        worst = max(worst, float((out - ref).abs().max() / ref.abs().max()))
    return worst


def configurations(precs: list, bns: list, bks: list, warps: list, outer: int) -> dict:
    """{label: product(T, W)} for cuBLAS and every grid point whose step fits OUTER."""
    configs = {"cublas fp32": lambda T, W: cublas(T, W, False), "cublas tf32": lambda T, W: cublas(T, W, True)}
    for prec, bn, bk, nw in itertools.product(precs, bns, bks, warps):
        if bk <= outer:
            configs[f"{prec} bn {bn} bk {bk} warps {nw}"] = (
                lambda T, W, p=prec, n=bn, k=bk, w=nw: t_product(T, W, p, n, k, w))
    return configs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=shape_arg, action="append",
                        help="BATCHxN:OUTER, repeatable (default: each benchmark shape whose route in "
                             "variants/champion.yaml has a Triton T product, at its outer block)")
    parser.add_argument("--prec", default=",".join(TRITON_TCONTRACTS), help="far_tcontract values of the Triton kernel")
    knobs = TwoLevelKnobs()
    parser.add_argument("--bn", type=int_list, default=[knobs.tproduct_bn], help="tproduct_bn values")
    parser.add_argument("--bk", type=int_list, default=[knobs.tproduct_bk], help="tproduct_bk values")
    parser.add_argument("--warps", type=int_list, default=[knobs.tproduct_warps], help="tproduct_warps values")
    parser.add_argument("--reps", type=int, default=15, help="timed loops of 20 replays a configuration and order")
    parser.add_argument("--json", metavar="PATH", help="also write {shape: {configuration: [us fwd, us rev]}}")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tproduct_tiles.py times GPU launches: run it on a machine with CUDA")
    results = {}
    for batch, n, outer in args.shape or champion_shapes():
        pairs = operands(batch, n, outer)
        usable = configurations(args.prec.split(","), args.bn, args.bk, args.warps, outer)
        runs = {label: (lambda p=product: [p(T, W) for T, W in pairs]) for label, product in usable.items()}
        times = graph_us_both_orders(runs, args.reps, f"{batch}x{n}, outer {outer}")
        print_table(f"{batch}x{n}, outer {outer}: {len(pairs)} T products a call", times, "cublas fp32",
                    lambda label: worst_error(pairs, usable[label]))
        results[f"{batch}x{n}:{outer}"] = times
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
