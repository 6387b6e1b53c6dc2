"""The block T of a two-level block: one block reflector's T from the T_i of the panels inside it.

For Q = (I - Y1 T1 Y1^T)(I - Y2 T2 Y2^T) = I - Y T Y^T with Y = [Y1 Y2]:
T = [[T1, -T1 (Y1^T Y2) T2], [0, T2]]. All cross Gram blocks come from one
Y^T Y product; the merge then walks the inner blocks left to right.

TwoLevelKnobs.block_t picks how: `merge` runs the walk as torch products (about four
small launches per inner block), `kernel` runs it in one Triton launch per block
(block_t_kernel) after the same Gram product. With `kernel`, TwoLevelKnobs.gram picks
the Gram product: cuBLAS in fp32 (CUDA cores), or gram_kernel on tensor cores in a
split precision, its programs spread over Y's rows (TwoLevelKnobs.gram_split_rows) and
cut to the blocks block_t reads (TwoLevelKnobs.gram_columns) where those knobs say.
"""
import torch
import triton
import triton.language as tl

from .launch import pdl_launch, wait_for_previous
from .plan import GRAM_BM
from .precision import dot_prec
from .scratch import scratch


def wy_merge(Y: torch.Tensor, inner_T: torch.Tensor, widths: list, out: torch.Tensor) -> torch.Tensor:
    """Write the block T into out (batch x ob x ob) and return it.

    Y: batch x L x ob, the block's reflectors (unit diagonal, zeros above);
    inner_T: batch x k x BB x BB, the inner panels' T (zero beyond each width);
    widths: the inner panels' widths, summing to ob.
    """
    G = gram_product(Y, widths[0], "cublas")
    out.zero_()
    done = 0
    for i, w in enumerate(widths):
        Ti = inner_T[:, i, :w, :w]
        out[:, done:done + w, done:done + w] = Ti
        if done:
            cross = torch.bmm(out[:, :done, :done], G[:, :done, done:done + w])
            out[:, :done, done:done + w] = -torch.bmm(cross, Ti)
        done += w
    return out


@triton.jit
def summed_block(g, g_ss, splits, rows, cols, g_ld, SPLITS: tl.constexpr):
    """Block rows x cols of G = the sum of its first `splits` parts (part c at g + c*g_ss, row
    stride g_ld), added in part order; SPLITS >= splits, a constant, so that every part's load
    is issued before the first sum waits on one."""
    at = rows[:, None] * g_ld + cols[None, :]
    G = tl.load(g + at)
    for c in tl.static_range(1, SPLITS):
        G += tl.load(g + c * g_ss + at, mask=(rows[:, None] >= 0) & (c < splits), other=0.0)
    return G


@triton.jit
def block_t_kernel(g_ptr, tin_ptr, t_ptr, g_bs, g_ss, splits, g_ld, tin_bs, tin_ps, tin_ld, t_bs, t_ld,
                   OB: tl.constexpr, B: tl.constexpr, SPLITS: tl.constexpr, PDL: tl.constexpr):
    """Grid: (OB // B, batch). Program (r, i) writes rows [r*B, (r+1)*B) of matrix i's block T
    (OB x OB, zero below the diagonal; t_ptr + i*t_bs, row stride t_ld) from its Gram matrix
    G = Y^T Y (g_ptr + i*g_bs, row stride g_ld) and its OB/B inner T_k (B x B, at
    tin_ptr + i*tin_bs + k*tin_ps, row stride tin_ld). G is the sum of `splits` parts, g_ss
    apart (gram_kernel's row splits, TwoLevelKnobs.gram_sum block_t; one part: G itself), with
    SPLITS >= splits (summed_block).

    Block (r, k) of T is -sum_q T[r, q] G[q, k] T_k for r < k (q from r to k-1), T_k for
    r == k, zero for r > k. A row of blocks needs only its own earlier blocks, so the rows
    are independent programs, each walking its columns left to right. Products in IEEE fp32
    (FMA; the blocks are tiny). Invariants: OB and B powers of two, B >= 16, B divides OB.
    PDL: launch.wait_for_previous first.
    """
    wait_for_previous(PDL)
    r = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    g = g_ptr + pid * g_bs
    t = t_ptr + pid * t_bs + (r * B) * t_ld  # this program's rows
    cb = tl.arange(0, B)
    for q in range(0, r):  # below the diagonal
        tl.store(t + cb[:, None] * t_ld + (q * B + cb)[None, :], tl.zeros((B, B), dtype=tl.float32))
    tl.store(t + cb[:, None] * t_ld + (r * B + cb)[None, :],
             tl.load(tin_ptr + pid * tin_bs + r * tin_ps + cb[:, None] * tin_ld + cb[None, :]))
    tl.debug_barrier()
    for k in range(r + 1, OB // B):
        acc = tl.zeros((B, B), dtype=tl.float32)
        for q in range(r, k):
            T_rq = tl.load(t + cb[:, None] * t_ld + (q * B + cb)[None, :])
            G_qk = summed_block(g, g_ss, splits, q * B + cb, k * B + cb, g_ld, SPLITS)
            acc = tl.dot(T_rq, G_qk, acc, input_precision="ieee")
        T_k = tl.load(tin_ptr + pid * tin_bs + k * tin_ps + cb[:, None] * tin_ld + cb[None, :])
        tl.store(t + cb[:, None] * t_ld + (k * B + cb)[None, :], -tl.dot(acc, T_k, input_precision="ieee"))
        tl.debug_barrier()  # the next block of this row reads this one


@triton.jit
def zero_above_diagonal(y, q, c, rows_per, y_ld, B: tl.constexpr, BM: tl.constexpr):
    """Zeros into Y's block column q above row q*B, on split c's rows: the rows above inner panel
    q's diagonal, which the far update's products read as Y's zeros."""
    cb = tl.arange(0, B)
    top = tl.minimum((c + 1) * rows_per, q * B)
    for r0 in range(c * rows_per, top, BM):
        rm = r0 + tl.arange(0, BM)
        tl.store(y + rm[:, None] * y_ld + (q * B + cb)[None, :], tl.zeros((BM, B), dtype=tl.float32),
                 mask=(rm < top)[:, None])


@triton.jit
def gram_kernel(y_ptr, g_ptr, L, rows_per, y_bs, y_ld, g_bs, g_ss, g_ld,
                OB: tl.constexpr, B: tl.constexpr, CW: tl.constexpr, UPPER: tl.constexpr, BM: tl.constexpr,
                PREC: tl.constexpr, ZERO: tl.constexpr, PDL: tl.constexpr):
    """Grid: ((OB // B) * (OB // CW), splits, batch). Program (q * (OB // CW) + h, c, i) writes
    rows [q*B, (q+1)*B) x columns [h*CW, (h+1)*CW) of the part of matrix i's Gram matrix
    G = Y^T Y that Y's rows [c*rows_per, (c+1)*rows_per) give (g_ptr + i*g_bs + c*g_ss, row
    stride g_ld), Y being L x OB at y_ptr + i*y_bs (row stride y_ld), unit lower trapezoidal:
    its block column q is zero above row q*B, so the row loop starts there (a split wholly
    above it writes zeros). One split (rows_per >= L) writes G itself. UPPER: a program whose
    columns all lie left of column (q+1)*B writes nothing (block_t_kernel reads only the blocks
    above G's block diagonal). Products in PREC (precision.dot_prec). Y's entries above each
    block column's first row are never used (the loads mask them), so they may hold anything;
    ZERO (TwoLevelKnobs.zero_fill gram): programs (q, 0, c) write zeros there on their split's
    rows (zero_above_diagonal), for the far update's products after this launch.
    Invariants: OB, B, CW, BM powers of two >= 16, B and CW divide OB, BM divides rows_per.
    PDL: launch.wait_for_previous first.
    """
    wait_for_previous(PDL)
    q = tl.program_id(0) // (OB // CW)
    h = tl.program_id(0) % (OB // CW)
    c = tl.program_id(1)
    pid = tl.program_id(2).to(tl.int64)
    y = y_ptr + pid * y_bs
    if ZERO and h == 0:
        zero_above_diagonal(y, q, c, rows_per, y_ld, B, BM)
    if not UPPER or (h + 1) * CW > (q + 1) * B:
        cb = tl.arange(0, B)
        co = h * CW + tl.arange(0, CW)
        end = tl.minimum(L, (c + 1) * rows_per)
        acc = tl.zeros((B, CW), dtype=tl.float32)
        for r0 in range(tl.maximum(c * rows_per, ((q * B) // BM) * BM), end, BM):
            rm = r0 + tl.arange(0, BM)
            in_q = (rm < end)[:, None] & (rm >= q * B)[:, None]
            in_h = (rm < end)[:, None] & (rm[:, None] >= ((co // B) * B)[None, :])
            Y_q = tl.load(y + rm[:, None] * y_ld + (q * B + cb)[None, :], mask=in_q, other=0.0)
            Y_h = tl.load(y + rm[:, None] * y_ld + co[None, :], mask=in_h, other=0.0)
            acc = dot_prec(tl.trans(Y_q), Y_h, acc, PREC)
        tl.store(g_ptr + pid * g_bs + c * g_ss + (q * B + cb)[:, None] * g_ld + co[None, :], acc)


def gram_product(Y: torch.Tensor, width: int, gram: str, split_rows: int = 0, columns: int = 0,
                 zero: bool = False) -> torch.Tensor:
    """Y^T Y (batch x ob x ob) for a block of inner panels `width` wide: cuBLAS in fp32 when
    `gram` (TwoLevelKnobs.gram) is "cublas", else gram_parts' parts, summed in a fixed order by
    torch where there are several."""
    if gram == "cublas":
        return torch.bmm(Y.transpose(1, 2), Y)
    parts = gram_parts(Y, width, gram, split_rows, columns, zero)
    if parts.shape[1] == 1:
        return parts[:, 0]
    G = scratch("gram", (Y.shape[0], Y.shape[2], Y.shape[2]), Y.dtype, Y.device)
    torch.sum(parts, dim=1, out=G)
    return G


def gram_parts(Y: torch.Tensor, width: int, gram: str, split_rows: int = 0, columns: int = 0,
               zero: bool = False) -> torch.Tensor:
    """Y^T Y as parts (batch x splits x ob x ob) by gram_kernel in `gram`'s precision, its rows
    split over programs split_rows at a time where Y is taller (TwoLevelKnobs.gram_split_rows;
    0: not split, one part). columns > 0 (TwoLevelKnobs.gram_columns): programs of that many
    columns, and only the blocks above the block diagonal (width x width blocks) are written;
    the others hold anything. Y above each inner panel's diagonal may hold anything; zero
    (TwoLevelKnobs.zero_fill gram): the launch writes zeros there."""
    batch, L, ob = Y.shape
    splits = triton.cdiv(L, split_rows) if split_rows else 1
    if splits > 1:
        parts = scratch("gram_parts", (batch, splits, ob, ob), Y.dtype, Y.device)
    else:  # one part: G itself, where gram_product sums several
        parts = scratch("gram", (batch, ob, ob), Y.dtype, Y.device)[:, None]
    cw = min(columns, ob) if columns else ob
    gram_kernel[((ob // width) * (ob // cw), splits, batch)](
        Y, parts, L, split_rows if splits > 1 else L, Y.stride(0), Y.stride(1), parts.stride(0), parts.stride(1),
        parts.stride(2), OB=ob, B=width, CW=cw, UPPER=columns > 0, BM=GRAM_BM, PREC=gram, ZERO=zero, num_warps=4,
        **pdl_launch())
    return parts


def block_t(Y: torch.Tensor, inner_T: torch.Tensor, width: int, out: torch.Tensor, gram: str = "cublas",
            gram_split_rows: int = 0, gram_columns: int = 0, gram_sum: str = "launch", zero: bool = False):
    """wy_merge's result in one launch after the Gram product (gram_product(Y, width, gram,
    gram_split_rows, gram_columns, zero)): every inner panel `width` wide (a block with a far
    update is whole), inner_T: batch x ob/width x width x width. gram_sum block_t
    (TwoLevelKnobs.gram_sum): the Gram parts go to block_t_kernel as they are, and it sums them."""
    batch, _, ob = Y.shape
    assert ob % width == 0 and inner_T.shape[-1] == width and inner_T.shape[1] >= ob // width
    assert not zero or gram != "cublas", "cuBLAS's Gram product reads Y's zeros: a launch writes them first"
    if gram_sum == "block_t" and gram != "cublas":
        parts = gram_parts(Y, width, gram, gram_split_rows, gram_columns, zero)
    else:
        parts = gram_product(Y, width, gram, gram_split_rows, gram_columns, zero)[:, None]
    splits = parts.shape[1]
    block_t_kernel[(ob // width, batch)](
        parts, inner_T, out, parts.stride(0), parts.stride(1), splits, parts.stride(2), inner_T.stride(0),
        inner_T.stride(1), inner_T.stride(2), out.stride(0), out.stride(1), OB=ob, B=width,
        SPLITS=triton.next_power_of_2(splits), num_warps=1 if width <= 16 else 2, **pdl_launch())
    return out
