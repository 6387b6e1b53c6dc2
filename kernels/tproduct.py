"""The far update's small product T^T W on tensor cores, in a split precision.

A two-level block's far update is C - Y (T^T (Y^T C)). Its two large products run in
tf32 through cuBLAS (TwoLevelKnobs.far_precision); the small one in the middle, T^T W
with T the block's O x O factor, sets most of the accuracy margin at n = 1024
(docs/perf-log.md). cuBLAS runs it in fp32 on the CUDA cores (`far_tcontract: fp32`);
this kernel runs it on tensor cores in tf32x3 or fp16x3 (`far_tcontract`). On the H200
it was 0.4-0.6% faster than cuBLAS's fp32 at 60x1024 (the champion's large route takes
it) and 0.2-0.3% slower at 8x2048 and 2x4096; worst margin 8.4/20 against fp32's 8.2
(docs/perf-log.md). Its tiles are knobs (TwoLevelKnobs.tproduct_bn, _bk, _warps): at 60x1024
its seven launches took 202 us on the H200 (twenty-third session), about four times what
reading W and writing T^T W take at DRAM's rate, so how the work is cut may matter more
than the products themselves.
"""
import torch
import triton
import triton.language as tl

from .launch import pdl_launch, wait_for_previous
from .precision import dot_prec
from .scratch import scratch


@triton.jit
def t_product_kernel(t_ptr, w_ptr, out_ptr, ncols, t_bs, t_ld, w_bs, w_ld, o_bs, o_ld,
                     OB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
                     PDL: tl.constexpr):
    """Grid: (cdiv(ncols, BN), batch). Program (s, i) writes columns [s*BN, (s+1)*BN) of
    T_i^T W_i to out (out_ptr + i*o_bs, row stride o_ld), with T_i the OB x OB block T at
    t_ptr + i*t_bs (row stride t_ld, upper triangular) and W_i the OB x ncols matrix at
    w_ptr + i*w_bs (row stride w_ld). Products in PREC (precision.dot_prec).

    T^T is lower triangular: row block [k0, k0+BK) of T touches only out's rows >= k0, but
    every step still multiplies all OB rows (the zeros cost less than the masking would).
    Invariants: OB, BN, BK powers of two >= 16, BK divides OB. PDL: launch.wait_for_previous first.
    """
    wait_for_previous(PDL)
    s = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    rows = tl.arange(0, OB)
    cn = s * BN + tl.arange(0, BN)
    acc = tl.zeros((OB, BN), dtype=tl.float32)
    for k0 in range(0, OB, BK):
        kk = k0 + tl.arange(0, BK)
        t_cols = tl.load(t_ptr + pid * t_bs + kk[None, :] * t_ld + rows[:, None])  # (T^T)[rows, kk]
        w = tl.load(w_ptr + pid * w_bs + kk[:, None] * w_ld + cn[None, :], mask=cn[None, :] < ncols, other=0.0)
        acc = dot_prec(t_cols, w, acc, PREC)
    tl.store(out_ptr + pid * o_bs + rows[:, None] * o_ld + cn[None, :], acc, mask=cn[None, :] < ncols)


def t_product(T: torch.Tensor, W: torch.Tensor, precision: str, bn: int, bk: int, num_warps: int) -> torch.Tensor:
    """T^T W for T: batch x ob x ob (any batch and row strides, unit column stride) and
    W: batch x ob x ncols (unit column stride), in `precision` (plan.PRECISIONS), into a
    scratch buffer of W's shape. bn, bk, num_warps: TwoLevelKnobs.tproduct_bn, _bk, _warps
    (bk at most ob)."""
    batch, ob, ncols = W.shape
    out = scratch("t_product", (batch, ob, ncols), W.dtype, W.device)
    t_product_kernel[(triton.cdiv(ncols, bn), batch)](
        T, W, out, ncols, T.stride(0), T.stride(1), W.stride(0), W.stride(1), out.stride(0), out.stride(1),
        OB=ob, BN=bn, BK=bk, PREC=precision, num_warps=num_warps, **pdl_launch(),
    )
    return out
