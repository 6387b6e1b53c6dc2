"""The two-level far update by way, precision and tile: every far update one call of a shape
makes, timed as a CUDA graph, for the route as the champion has it (cuBLAS's GEMMs around the
Triton T product) and for the strip far update (twolevel.far_update strip: one launch a block)
on each combination of far_precision, far_bm, far_bn, far_warps, far_stages and far_split_rows.

A call of a two-level route makes one far update per outer block with columns right of it: the
block at column J applies Y (rows J.., ob columns) and T to C = H[:, J:, J+ob:], the first block
reading A and writing H. The operands are block reflectors of random panels (so the replays keep
H's norm), captured for one shape into a graph and replayed: the host's launch cost drops out,
as in a captured call. Each configuration is timed twice, the whole list forward and then
reversed. The error column is the largest difference from float64 over the largest entry after
one call (it flags a broken configuration; the harness's checks decide accuracy).

    python tools/far_update_cost.py --shape 60x1024 --prec tf32,fp16x3 --bn 64,128 --warps 4,8

A GPU tool: it refuses to run without CUDA.
"""
import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

import torch

from gpu_timing import graph_us_both_orders, print_table
from qrsub.kernels.blocked import far_update
from qrsub.kernels.plan import FAR_PRECISIONS, FIRST_FAR_TILE
from qrsub.variant import load_variant
from tproduct_tiles import CHAMPION, champion_shapes, int_list

ROUTE_AS_IS = "route"


def shape_arg(text: str) -> tuple:
    """'60x1024' -> (60, 1024)."""
    try:
        batch, n = text.split("x")
        return int(batch), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected BATCHxN, e.g. 60x1024") from None


def block_reflector(batch: int, rows: int, width: int, generator, device) -> tuple:
    """(Y, T) with I - Y T Y^T orthogonal: Y unit lower trapezoidal (rows x width) from the
    Householder QR of a random panel, T upper triangular from T^-1 = striu(Y^T Y) + diag(1/tau)."""
    panel = torch.randn(batch, rows, width, device=device, generator=generator, dtype=torch.float64)
    packed, tau = torch.geqrf(panel)
    Y = packed.tril(-1)
    Y.diagonal(dim1=1, dim2=2).fill_(1.0)
    T_inv = (Y.transpose(1, 2) @ Y).triu(1) + torch.diag_embed(1.0 / tau)
    return Y.float(), torch.linalg.inv(T_inv).triu().float()


def operands(batch: int, n: int, outer: int, device="cuda") -> tuple:
    """(A, [(J, ob, Vb, Tb)]): the input and one call's far updates, each block's Y in rows J.. of
    its own batch x n x outer buffer (zeros above), as the two-level driver keeps it."""
    g = torch.Generator(device=device).manual_seed(0)
    A = torch.randn(batch, n, n, device=device, generator=g)
    blocks = []
    for J in range(0, n, outer):
        ob = min(outer, n - J)
        if J + ob >= n:
            break
        Vb = torch.zeros(batch, n, outer, device=device)
        Tb = torch.zeros(batch, outer, outer, device=device)
        Vb[:, J:, :ob], Tb[:, :ob, :ob] = block_reflector(batch, n - J, ob, g, device)
        blocks.append((J, ob, Vb, Tb[:, :ob, :ob]))
    return A, blocks


def one_call(A, H, blocks, route):
    """The far updates of one call, in order: the first from A into H, the rest in place."""
    for J, ob, Vb, Tb in blocks:
        far_update(A if J == 0 else H, H, Vb, Tb, J, ob, route)


def reference(A, blocks) -> torch.Tensor:
    """one_call's H in float64 (only the far columns of each block are written)."""
    H = A.double().clone()
    for J, ob, Vb, Tb in blocks:
        Y, C = Vb[:, J:, :ob].double(), H[:, J:, J + ob:]
        C -= Y @ (Tb.double().transpose(1, 2) @ (Y.transpose(1, 2) @ C))
    return H


def configurations(route, precs, tcontract, bms, bns, warps, stages, splits) -> dict:
    """{label: route}: the route as it is, then the strip far update on every grid point (its
    tiles as TwoLevelKnobs far_*, the first block read from A in the same launch)."""
    configs = {ROUTE_AS_IS: route}
    for prec, bm, bn, nw, ns, split in itertools.product(precs, bms, bns, warps, stages, splits):
        twolevel = dataclasses.replace(route.twolevel, far_update="strip", far_precision=prec,
                                       far_tcontract="tf32" if prec == "fp32" else tcontract,
                                       first_far="copy", **dict.fromkeys(FIRST_FAR_TILE, 0), far_bm=bm, far_bn=bn,
                                       far_warps=nw, far_stages=ns, far_split_rows=split)
        label = f"strip {prec} bm {bm} bn {bn} warps {nw} stages {ns}" + (f" split {split}" if split else "")
        configs[label] = dataclasses.replace(route, twolevel=twolevel)
    return configs


def worst_error(A, blocks, route, ref) -> float:
    """The largest difference of one_call's H by ROUTE from REF (reference's) over REF's largest entry."""
    H = A.clone()
    one_call(A, H, blocks, route)
    return float((H.double() - ref).abs().max() / ref.abs().max())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default=str(CHAMPION), help="the variant whose routes give each shape's "
                                                                 "baseline and other knobs (default: the champion)")
    parser.add_argument("--shape", type=shape_arg, action="append",
                        help="BATCHxN, repeatable (default: each benchmark shape the champion factors with a "
                             "two-level route's Triton T product)")
    parser.add_argument("--prec", default="tf32,fp16x3", help=f"far_precision values, of {', '.join(FAR_PRECISIONS)}")
    parser.add_argument("--tcontract", default="fp16x3", help="far_tcontract of the strip (fp32 far updates: fp32)")
    parser.add_argument("--bm", type=int_list, default=[32], help="far_bm values")
    parser.add_argument("--bn", type=int_list, default=[64, 128], help="far_bn values")
    parser.add_argument("--warps", type=int_list, default=[4, 8], help="far_warps values")
    parser.add_argument("--stages", type=int_list, default=[2, 3], help="far_stages values")
    parser.add_argument("--split", type=int_list, default=[0], help="far_split_rows values (0: the route's "
                                                                   "strip.split_rows)")
    parser.add_argument("--reps", type=int, default=15, help="timed loops of 20 replays a configuration and order")
    parser.add_argument("--json", metavar="PATH", help="also write {shape: {configuration: [us fwd, us rev]}}")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("far_update_cost.py times GPU launches: run it on a machine with CUDA")
    variant = load_variant(args.variant)
    results = {}
    shapes = args.shape or [(batch, n) for batch, n, _ in champion_shapes()]
    for batch, n in shapes:
        route = variant.route_for(n, batch)
        A, blocks = operands(batch, n, route.twolevel.outer)
        H = A.clone()
        configs = configurations(route, args.prec.split(","), args.tcontract, args.bm, args.bn, args.warps,
                                 args.stages, args.split)
        runs = {label: (lambda r=r: one_call(A, H, blocks, r)) for label, r in configs.items()}
        where = f"{batch}x{n} ({route.name}, outer {route.twolevel.outer})"
        times = graph_us_both_orders(runs, args.reps, where)
        ref = reference(A, blocks)
        print_table(f"{where}: {len(blocks)} far updates a call", times, ROUTE_AS_IS,
                    lambda label: worst_error(A, blocks, configs[label], ref), width=48)
        results[f"{batch}x{n}"] = times
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
