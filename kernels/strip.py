"""The fused trailing strip: C <- C - V (T^T (V^T C)) for one panel's reflectors.

One program per (strip of BN trailing columns, matrix): a first row loop
accumulates W = V^T C (BB x BN) in registers, W becomes T^T W, a second row loop
writes C - V W. Nothing goes through global memory but C itself.
"""
import triton
import triton.language as tl

from .precision import dot_prec


@triton.jit
def trailing_strip_kernel(
    src_ptr, dst_ptr, v_ptr, t_ptr,
    n, L, ncols, c_off, v_row_off, v_col_off, v_ld, t_bs, t_ld,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, STAGES: tl.constexpr,
    PREC_PROJECT: tl.constexpr, PREC_T: tl.constexpr, PREC_APPLY: tl.constexpr,
):
    """Grid: (cdiv(ncols, BN), batch). Program (s, i) owns columns [s*BN, (s+1)*BN)
    of matrix i's trailing block: rows [0, L) x columns [0, ncols) starting at
    element c_off (= j*n + j + bw), read from src_ptr and written to dst_ptr.

    V: rows v_row_off.. and columns v_col_off.. (BB of them, zero beyond the
    panel's width) of the batch x n x v_ld buffer; T: BB x BB at
    t_ptr + i*t_bs with row stride t_ld (zero beyond the panel's width).
    Invariants: BB, BM, BN are powers of two >= 16.
    """
    s = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    cn = s * BN + tl.arange(0, BN)
    cb = tl.arange(0, BB)
    src = src_ptr + pid * n * n + c_off
    dst = dst_ptr + pid * n * n + c_off
    vb = v_ptr + pid * n * v_ld + v_row_off * v_ld + v_col_off
    W = tl.zeros((BB, BN), dtype=tl.float32)
    for r0 in tl.range(0, L, BM, num_stages=STAGES):
        rm = r0 + tl.arange(0, BM)
        v = tl.load(vb + rm[:, None] * v_ld + cb[None, :], mask=rm[:, None] < L, other=0.0).to(tl.float32)
        c = tl.load(src + rm[:, None] * n + cn[None, :], mask=(rm[:, None] < L) & (cn[None, :] < ncols), other=0.0)
        W = dot_prec(tl.trans(v), c, W, PREC_PROJECT)
    t = tl.load(t_ptr + pid * t_bs + cb[:, None] * t_ld + cb[None, :])
    W = dot_prec(tl.trans(t), W, tl.zeros((BB, BN), dtype=tl.float32), PREC_T)
    for r0 in tl.range(0, L, BM, num_stages=STAGES):
        rm = r0 + tl.arange(0, BM)
        mask = (rm[:, None] < L) & (cn[None, :] < ncols)
        v = tl.load(vb + rm[:, None] * v_ld + cb[None, :], mask=rm[:, None] < L, other=0.0).to(tl.float32)
        c = tl.load(src + rm[:, None] * n + cn[None, :], mask=mask, other=0.0)
        c = c - dot_prec(v, W, tl.zeros((BM, BN), dtype=tl.float32), PREC_APPLY)
        tl.store(dst + rm[:, None] * n + cn[None, :], c, mask=mask)


def trailing_strip(src, dst, V, T, row0, col0, ncols, *, bm, bn, stages, warps,
                   prec_project, prec_t, prec_apply, v_row_off=None, v_col_off=0):
    """Apply one panel's block reflector to rows [row0, n) x columns [col0, col0+ncols).

    V: batch x n x ld buffer whose rows row0.. (or v_row_off..) and BB columns
    from v_col_off hold the panel's V; T: batch x BB x BB (any strides, e.g. a
    diagonal block of a larger T). src and dst may be the same tensor.
    """
    batch, n, _ = dst.shape
    L = n - row0
    BB = T.shape[-1]
    grid = (triton.cdiv(ncols, bn), batch)
    trailing_strip_kernel[grid](
        src, dst, V, T, n, L, ncols, row0 * n + col0,
        row0 if v_row_off is None else v_row_off, v_col_off, V.shape[2], T.stride(0), T.stride(1),
        BB=BB, BM=bm, BN=bn, STAGES=stages,
        PREC_PROJECT=prec_project, PREC_T=prec_t, PREC_APPLY=prec_apply, num_warps=warps,
    )
