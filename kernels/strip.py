"""The fused trailing strip: C <- C - V (T^T (V^T C)) for one panel's reflectors.

One program per (strip of BN trailing columns, matrix): a first row loop
accumulates W = V^T C (BB x BN) in registers, W becomes T^T W, a second row loop
writes C - V W. Nothing goes through global memory but C itself.

With StripKnobs.fuse_next (the blocked driver), fused_strip_kernel instead applies one panel's
reflector and projects the next panel's in the same pass, so C is read once a panel, not
twice; W (already T^T V^T C) waits in global memory between launches.

When batch x column strips leaves most SMs idle (a batch of 2, a strip inside a
128-column block), StripKnobs.split_rows splits the rows too: one launch writes
each row split's partial W, a second sums them and updates its rows.
"""
import torch
import triton
import triton.language as tl

from .plan import MIN_DOT_WIDTH
from .launch import pdl_launch, register_cap, wait_for_previous
from .precision import dot_a_parts, dot_prec, unpack_fp16_parts
from .relocate import moved, relocation_args
from .scratch import scratch


@triton.jit
def project_rows(src, vb, v_ld, n, r_lo, r_hi, ncols, cn, W,
                 BB: tl.constexpr, BM: tl.constexpr, NUM_STAGES: tl.constexpr, PROJECT: tl.constexpr):
    """W + V^T C over rows [r_lo, r_hi) of one matrix's block (src at the block's first element,
    row stride n; vb at V's first row, row stride v_ld, BB columns) and columns cn (< ncols)."""
    cb = tl.arange(0, BB)
    for r0 in tl.range(r_lo, r_hi, BM, num_stages=NUM_STAGES):
        rm = r0 + tl.arange(0, BM)
        v = tl.load(vb + rm[:, None] * v_ld + cb[None, :], mask=rm[:, None] < r_hi, other=0.0).to(tl.float32)
        c = tl.load(src + rm[:, None] * n + cn[None, :], mask=(rm[:, None] < r_hi) & (cn[None, :] < ncols), other=0.0)
        W = dot_prec(tl.trans(v), c, W, PROJECT)
    return W


@triton.jit
def load_v(at, mask, V_PARTS: tl.constexpr):
    """A tile of V at the pointers `at`, as the pair v_dot takes: (v, v) in fp32, or with V_PARTS
    (StripKnobs.v_parts) the fp16x3 parts the panel stored, packed (precision.unpack_fp16_parts)."""
    if V_PARTS:
        return unpack_fp16_parts(tl.load(at, mask=mask, other=0))
    else:
        v = tl.load(at, mask=mask, other=0.0).to(tl.float32)
        return v, v


@triton.jit
def v_dot(v0, v1, b, acc, PREC: tl.constexpr, V_PARTS: tl.constexpr):
    """acc + v @ b in PREC for load_v's pair (v0, v1), or its transposes: dot_prec's bits either way."""
    if V_PARTS:
        return dot_a_parts(v0, v1, b, acc)
    else:
        return dot_prec(v0, b, acc, PREC)


@triton.jit
def apply_rows(src, dst, vb, v_ld, n, r_lo, r_hi, ncols, cn, W,
               BB: tl.constexpr, BM: tl.constexpr, NUM_STAGES: tl.constexpr, APPLY: tl.constexpr,
               V_PARTS: tl.constexpr):
    """C - V W over rows [r_lo, r_hi) and columns cn (< ncols), read from src, written to dst
    (V_PARTS: load_v)."""
    cb = tl.arange(0, BB)
    for r0 in tl.range(r_lo, r_hi, BM, num_stages=NUM_STAGES):
        rm = r0 + tl.arange(0, BM)
        mask = (rm[:, None] < r_hi) & (cn[None, :] < ncols)
        v0, v1 = load_v(vb + rm[:, None] * v_ld + cb[None, :], rm[:, None] < r_hi, V_PARTS)
        c = tl.load(src + rm[:, None] * n + cn[None, :], mask=mask, other=0.0)
        c = c - v_dot(v0, v1, W, tl.zeros((BM, cn.shape[0]), dtype=tl.float32), APPLY, V_PARTS)
        tl.store(dst + rm[:, None] * n + cn[None, :], c, mask=mask)


@triton.jit
def block_pointers(src_ptr, dst_ptr, v_ptr, pid, n, c_off, v_row_off, v_col_off, v_ld):
    """Matrix pid's trailing block in src and dst (its first element at c_off) and its V's first row."""
    return (src_ptr + pid * n * n + c_off, dst_ptr + pid * n * n + c_off,
            v_ptr + pid * n * v_ld + v_row_off * v_ld + v_col_off)


@triton.jit
def trailing_strip_kernel(
    src_ptr, dst_ptr, v_ptr, t_ptr, table_ptr,
    n, L, ncols, c_off, v_row_off, v_col_off, v_ld, t_bs, t_ld,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr,
    PROJECT: tl.constexpr, TCONTRACT: tl.constexpr, APPLY: tl.constexpr,
    SRC_SLOT: tl.constexpr, DST_SLOT: tl.constexpr, PDL: tl.constexpr,
):
    """Grid: (cdiv(ncols, BN), batch). Program (s, i) is strip_program(s, i), its src and dst
    moved by the relocation table's slots (relocate.py; NO_SLOT: as given)."""
    wait_for_previous(PDL)
    src_ptr = moved(src_ptr, table_ptr, SRC_SLOT)
    dst_ptr = moved(dst_ptr, table_ptr, DST_SLOT)
    strip_program(src_ptr, dst_ptr, v_ptr, t_ptr, tl.program_id(0), tl.program_id(1).to(tl.int64),
                  n, L, ncols, c_off, v_row_off, v_col_off, v_ld, t_bs, t_ld,
                  BB, BM, BN, NUM_STAGES, PROJECT, TCONTRACT, APPLY)


@triton.jit
def strip_program(
    src_ptr, dst_ptr, v_ptr, t_ptr, s, pid,
    n, L, ncols, c_off, v_row_off, v_col_off, v_ld, t_bs, t_ld,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr,
    PROJECT: tl.constexpr, TCONTRACT: tl.constexpr, APPLY: tl.constexpr,
):
    """One program owns columns [s*BN, (s+1)*BN) of matrix pid's (an int64 index) trailing
    block: rows [0, L) x columns [0, ncols) starting at element c_off (= j*n + j + bw), read
    from src_ptr and written to dst_ptr.

    V: rows v_row_off.. and columns v_col_off.. (BB of them, zero beyond the
    panel's width) of the batch x n x v_ld buffer; T: BB x BB at
    t_ptr + i*t_bs with row stride t_ld (zero beyond the panel's width).
    BM, BN, NUM_STAGES are StripKnobs' bm, bn, num_stages; PROJECT, TCONTRACT,
    APPLY are PrecisionKnobs' project, tcontract, apply.
    Invariants: BB, BM, BN are powers of two >= 16.
    """
    cn = s * BN + tl.arange(0, BN)
    cb = tl.arange(0, BB)
    src, dst, vb = block_pointers(src_ptr, dst_ptr, v_ptr, pid, n, c_off, v_row_off, v_col_off, v_ld)
    W = project_rows(src, vb, v_ld, n, 0, L, ncols, cn, tl.zeros((BB, BN), dtype=tl.float32),
                     BB, BM, NUM_STAGES, PROJECT)
    T = tl.load(t_ptr + pid * t_bs + cb[:, None] * t_ld + cb[None, :])
    W = dot_prec(tl.trans(T), W, tl.zeros((BB, BN), dtype=tl.float32), TCONTRACT)
    apply_rows(src, dst, vb, v_ld, n, 0, L, ncols, cn, W, BB, BM, NUM_STAGES, APPLY, False)


@triton.jit
def fused_strip_kernel(
    src_ptr, dst_ptr, va_ptr, vb_ptr, w_ptr, t_ptr, table_ptr,
    n, L, ncols, c_off, v_row_off, v_ld, next_row, w_bs, w_ld, t_bs, t_ld, tail_cols,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr,
    PROJECT: tl.constexpr, TCONTRACT: tl.constexpr, APPLY: tl.constexpr, APPLY_PREV: tl.constexpr,
    SRC_SLOT: tl.constexpr, DST_SLOT: tl.constexpr, PDL: tl.constexpr, LATE_WAIT: tl.constexpr,
    TAIL: tl.constexpr, V_PARTS: tl.constexpr,
):
    """Grid: (cdiv(ncols, BN), batch). Program (s, i) owns columns [s*BN, (s+1)*BN) of matrix i's
    trailing block (rows [0, L) x columns [0, ncols) from element c_off, read from src_ptr,
    written to dst_ptr) and the same columns of W (BB x ncols at w_ptr + i*w_bs, row stride w_ld).

    With APPLY_PREV, W holds one panel's T_a^T V_a^T C: one pass over the rows writes
    C' = C - V_a W and, from the same registers, sums the next panel's V_b^T C' over rows
    [next_row, L); T_b^T of that sum overwrites W's tile. Without it (the first panel: nothing
    pending), the pass only projects, and C is not written. Either way C is read once.

    V_a, V_b: the two panels' V in batch x n x v_ld buffers, rows v_row_off.. (the block's row 0),
    BB columns; V_b's rows above next_row are never read. T_b: BB x BB at t_ptr + i*t_bs, row
    stride t_ld. With TAIL (StripKnobs.tail_update), program (0, i) then applies V_b and the new
    W to the next panel's columns (the block's first tail_cols <= BB, rows [next_row, L)), as the
    next step's rank_update_kernel would: C' written by this program, so a barrier comes first.
    src and dst move by the relocation table's slots (relocate.py). With PDL,
    launch.wait_for_previous comes first, or last with LATE_WAIT (strip.halves: the launch
    before is the other half's panel, which this pass does not read).
    Invariants: BB, BM, BN are powers of two >= 16; each program reads and writes
    only its own W columns, so W_b may overwrite W_a in place.
    """
    if not LATE_WAIT:
        wait_for_previous(PDL)
    src_ptr = moved(src_ptr, table_ptr, SRC_SLOT)
    dst_ptr = moved(dst_ptr, table_ptr, DST_SLOT)
    s = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    cn = s * BN + tl.arange(0, BN)
    cb = tl.arange(0, BB)
    w_tile = w_ptr + pid * w_bs + cb[:, None] * w_ld + cn[None, :]
    src, dst, va = block_pointers(src_ptr, dst_ptr, va_ptr, pid, n, c_off, v_row_off, 0, v_ld)
    vb = vb_ptr + pid * n * v_ld + v_row_off * v_ld
    if APPLY_PREV:
        Wa = tl.load(w_tile, mask=cn[None, :] < ncols, other=0.0)
    Wb = tl.zeros((BB, BN), dtype=tl.float32)
    for r0 in tl.range(0, L, BM, num_stages=NUM_STAGES):
        rm = r0 + tl.arange(0, BM)
        in_rows = rm[:, None] < L
        mask = in_rows & (cn[None, :] < ncols)
        c = tl.load(src + rm[:, None] * n + cn[None, :], mask=mask, other=0.0)
        if APPLY_PREV:
            v0, v1 = load_v(va + rm[:, None] * v_ld + cb[None, :], in_rows, V_PARTS)
            c = c - v_dot(v0, v1, Wa, tl.zeros((BM, BN), dtype=tl.float32), APPLY, V_PARTS)
            tl.store(dst + rm[:, None] * n + cn[None, :], c, mask=mask)
        v0, v1 = load_v(vb + rm[:, None] * v_ld + cb[None, :], in_rows & (rm[:, None] >= next_row), V_PARTS)
        Wb = v_dot(tl.trans(v0), tl.trans(v1), c, Wb, PROJECT, V_PARTS)
    T = tl.load(t_ptr + pid * t_bs + cb[:, None] * t_ld + cb[None, :])
    Wb = dot_prec(tl.trans(T), Wb, tl.zeros((BB, BN), dtype=tl.float32), TCONTRACT)
    tl.store(w_tile, Wb, mask=cn[None, :] < ncols)
    if TAIL:
        if s == 0:
            # The rows of C' and the W columns this program stored, by other threads of it.
            tl.debug_barrier()
            w_next = tl.load(w_ptr + pid * w_bs + cb[:, None] * w_ld + cb[None, :],
                             mask=cb[None, :] < tail_cols, other=0.0)
            c_now = src  # without APPLY_PREV this pass wrote no C': the next panel's columns are in src
            if APPLY_PREV:
                c_now = dst
            apply_rows(c_now, dst, vb, v_ld, n, next_row, L, tail_cols, cb, w_next, BB, BM, NUM_STAGES, APPLY,
                       V_PARTS)
    if LATE_WAIT:
        wait_for_previous(PDL)


@triton.jit
def rank_update_kernel(
    src_ptr, dst_ptr, v_ptr, w_ptr, table_ptr,
    n, L, ncols, c_off, v_row_off, v_col_off, v_ld, w_bs, w_ld, rows_per,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr, APPLY: tl.constexpr,
    SRC_SLOT: tl.constexpr, DST_SLOT: tl.constexpr, PDL: tl.constexpr, V_PARTS: tl.constexpr,
):
    """Grid: (cdiv(ncols, BN), cdiv(L, rows_per), batch). Program (s, p, i) writes C - V W on
    columns [s*BN, (s+1)*BN) and rows [p*rows_per, (p+1)*rows_per) of matrix i's block (rows
    [0, L), read from src_ptr, written to dst_ptr, as strip_program's), W given: BB x ncols at
    w_ptr + i*w_bs, row stride w_ld. W is whole, so a row split needs nothing from the others
    (StripKnobs.rank_rows; rows_per = L: one program walks every row). The last product of a
    cuBLAS far update, where C and the result live in different tensors (A and H). src and dst
    move by the relocation table's slots (relocate.py). V_PARTS: V as the panel's fp16x3 parts
    (load_v).
    Invariants: rows_per is a multiple of BM or at least L, so each row keeps the tile (and
    the bits) it has without a split."""
    wait_for_previous(PDL)
    src_ptr = moved(src_ptr, table_ptr, SRC_SLOT)
    dst_ptr = moved(dst_ptr, table_ptr, DST_SLOT)
    s = tl.program_id(0)
    r_lo = tl.program_id(1) * rows_per
    pid = tl.program_id(2).to(tl.int64)
    cn = s * BN + tl.arange(0, BN)
    cb = tl.arange(0, BB)
    W = tl.load(w_ptr + pid * w_bs + cb[:, None] * w_ld + cn[None, :], mask=cn[None, :] < ncols, other=0.0)
    src, dst, vb = block_pointers(src_ptr, dst_ptr, v_ptr, pid, n, c_off, v_row_off, v_col_off, v_ld)
    apply_rows(src, dst, vb, v_ld, n, r_lo, tl.minimum(r_lo + rows_per, L), ncols, cn, W, BB, BM, NUM_STAGES, APPLY,
               V_PARTS)


@triton.jit
def project_split_kernel(
    src_ptr, v_ptr, w_ptr, table_ptr, n, L, ncols, c_off, v_row_off, v_col_off, v_ld, rows_per, w_bs, w_ss, w_ld,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr, PROJECT: tl.constexpr,
    SRC_SLOT: tl.constexpr, PDL: tl.constexpr,
):
    """Grid: (cdiv(ncols, BN), splits, batch). Program (s, p, i) writes W_p = V^T C over rows
    [p*rows_per, (p+1)*rows_per) of matrix i's trailing block and its columns [s*BN, (s+1)*BN)
    to the BB x BN tile at w_ptr + i*w_bs + p*w_ss + s*BN (row stride w_ld).
    Arguments otherwise as trailing_strip_kernel's. Invariant: rows_per is a multiple of BM."""
    wait_for_previous(PDL)
    src_ptr = moved(src_ptr, table_ptr, SRC_SLOT)
    s = tl.program_id(0)
    p = tl.program_id(1)
    pid = tl.program_id(2).to(tl.int64)
    cn = s * BN + tl.arange(0, BN)
    cb = tl.arange(0, BB)
    src, _, vb = block_pointers(src_ptr, src_ptr, v_ptr, pid, n, c_off, v_row_off, v_col_off, v_ld)
    W = project_rows(src, vb, v_ld, n, p * rows_per, tl.minimum((p + 1) * rows_per, L), ncols, cn,
                     tl.zeros((BB, BN), dtype=tl.float32), BB, BM, NUM_STAGES, PROJECT)
    tl.store(w_ptr + pid * w_bs + p * w_ss + cb[:, None] * w_ld + cn[None, :], W)


@triton.jit
def apply_split_kernel(
    src_ptr, dst_ptr, v_ptr, t_ptr, w_ptr, table_ptr,
    n, L, ncols, c_off, v_row_off, v_col_off, v_ld, t_bs, t_ld, rows_per, splits, w_bs, w_ss, w_ld,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr,
    TCONTRACT: tl.constexpr, APPLY: tl.constexpr, SRC_SLOT: tl.constexpr, DST_SLOT: tl.constexpr,
    PDL: tl.constexpr,
):
    """Grid: (cdiv(ncols, BN), splits, batch). Program (s, p, i) sums the splits' W tiles of its
    columns (project_split_kernel's), forms T^T W, and writes C - V (T^T W) on its rows and
    columns of matrix i's trailing block."""
    wait_for_previous(PDL)
    src_ptr = moved(src_ptr, table_ptr, SRC_SLOT)
    dst_ptr = moved(dst_ptr, table_ptr, DST_SLOT)
    s = tl.program_id(0)
    p = tl.program_id(1)
    pid = tl.program_id(2).to(tl.int64)
    cn = s * BN + tl.arange(0, BN)
    cb = tl.arange(0, BB)
    W = tl.zeros((BB, BN), dtype=tl.float32)
    for q in range(0, splits):
        W += tl.load(w_ptr + pid * w_bs + q * w_ss + cb[:, None] * w_ld + cn[None, :])
    T = tl.load(t_ptr + pid * t_bs + cb[:, None] * t_ld + cb[None, :])
    W = dot_prec(tl.trans(T), W, tl.zeros((BB, BN), dtype=tl.float32), TCONTRACT)
    src, dst, vb = block_pointers(src_ptr, dst_ptr, v_ptr, pid, n, c_off, v_row_off, v_col_off, v_ld)
    apply_rows(src, dst, vb, v_ld, n, p * rows_per, tl.minimum((p + 1) * rows_per, L), ncols, cn, W,
               BB, BM, NUM_STAGES, APPLY, False)


def strip_columns(strip, ncols: int) -> int:
    """BN, the columns per program: StripKnobs.bn, but no wider than the strip's columns padded to
    a power of two (at least MIN_DOT_WIDTH): a program over mostly masked columns still walks
    every row twice."""
    return min(strip.bn, max(MIN_DOT_WIDTH, triton.next_power_of_2(ncols)))


def strip_launch(src, dst, V, T, row0, col0, ncols, *, strip, precision, v_row_off=None, v_col_off=0):
    """(arguments, compile-time constants, num_warps, column tiles) of strip_program for rows
    [row0, n) x columns [col0, col0+ncols), by parameter name: trailing_strip launches them
    as they are, or split_strip with the rows split over programs."""
    n = dst.shape[1]
    BN = strip_columns(strip, ncols)
    table, slots = relocation_args(dst, SRC_SLOT=src, DST_SLOT=dst)
    args = dict(src_ptr=src, dst_ptr=dst, v_ptr=V, t_ptr=T, table_ptr=table, n=n, L=n - row0, ncols=ncols,
                c_off=row0 * n + col0,
                v_row_off=row0 if v_row_off is None else v_row_off, v_col_off=v_col_off, v_ld=V.shape[2],
                t_bs=T.stride(0), t_ld=T.stride(1))
    constants = dict(BB=T.shape[-1], BM=strip.bm, BN=BN, NUM_STAGES=strip.num_stages,
                     PROJECT=precision.project, TCONTRACT=precision.tcontract, APPLY=precision.apply, **slots)
    return args, constants, strip.num_warps, triton.cdiv(ncols, BN)


def trailing_strip(src, dst, V, T, row0, col0, ncols, *, strip, precision, v_row_off=None, v_col_off=0):
    """Apply one panel's block reflector to rows [row0, n) x columns [col0, col0+ncols),
    with the tiles of `strip` (StripKnobs) and the products' `precision` (PrecisionKnobs).

    V: batch x n x ld buffer whose rows row0.. (or v_row_off..) and BB columns
    from v_col_off hold the panel's V; T: batch x BB x BB (any strides, e.g. a
    diagonal block of a larger T). src and dst may be the same tensor.
    """
    args, constants, num_warps, col_tiles = strip_launch(src, dst, V, T, row0, col0, ncols, strip=strip,
                                                         precision=precision, v_row_off=v_row_off,
                                                         v_col_off=v_col_off)
    if strip.split_rows and args["L"] > strip.split_rows:
        split_strip(args, constants, num_warps, col_tiles, strip.split_rows)
        return
    trailing_strip_kernel[(col_tiles, dst.shape[0])](**args, **constants, num_warps=num_warps, **pdl_launch())


def rank_update(src, dst, V, W, row0, col0, *, strip, precision: str, v_row_off: int, ncols=None, v_parts=False):
    """dst[:, row0:, cols] = src[:, row0:, cols] - Y W in `precision` (a dot_prec name) on the
    columns cols = [col0, col0 + ncols) (default: to the last), with Y = V[:, v_row_off:, :BB]
    (BB = W.shape[1], a power of two >= 16) and W batch x BB x ncols, columns contiguous:
    C is read from src and written to dst, no copy of it first. Tiles from `strip`
    (StripKnobs: bm, bn, num_stages, num_warps). v_parts: V holds the panel's fp16x3 parts
    (StripKnobs.v_parts; precision fp16x3). StripKnobs.rank_rows splits the rows over programs."""
    n = dst.shape[1]
    ncols = n - col0 if ncols is None else ncols
    BN = strip_columns(strip, ncols)
    L = n - row0
    rows_per = strip.rank_rows if 0 < strip.rank_rows < L else L
    grid = (triton.cdiv(ncols, BN), triton.cdiv(L, rows_per), dst.shape[0])
    table, slots = relocation_args(dst, SRC_SLOT=src, DST_SLOT=dst)
    rank_update_kernel[grid](src, dst, V, W, table, n=n, L=L, ncols=ncols, c_off=row0 * n + col0,
                             v_row_off=v_row_off, v_col_off=0, v_ld=V.shape[2], w_bs=W.stride(0), w_ld=W.stride(1),
                             rows_per=rows_per,
                             BB=W.shape[1], BM=strip.bm, BN=BN, NUM_STAGES=strip.num_stages, APPLY=precision,
                             V_PARTS=v_parts, **slots, num_warps=strip.num_warps, **pdl_launch())


def split_strip(args, constants, num_warps, col_tiles, rows_per):
    """strip_launch's strip with its rows split over programs (StripKnobs.split_rows rows each):
    partial projections in one launch, their sum and the update in a second."""
    dst, BB, BN = args["dst_ptr"], constants["BB"], constants["BN"]
    splits = triton.cdiv(args["L"], rows_per)
    W = scratch("strip_w", (dst.shape[0], splits, BB, col_tiles * BN), torch.float32, dst.device)
    tiles = dict(BB=BB, BM=constants["BM"], BN=BN, NUM_STAGES=constants["NUM_STAGES"], num_warps=num_warps)
    split = dict(rows_per=rows_per, w_ptr=W, w_bs=W.stride(0), w_ss=W.stride(1), w_ld=W.stride(2))
    grid = (col_tiles, splits, dst.shape[0])
    shared = {name: args[name] for name in ("n", "L", "ncols", "c_off", "v_row_off", "v_col_off", "v_ld")}
    project_split_kernel[grid](src_ptr=args["src_ptr"], v_ptr=args["v_ptr"], table_ptr=args["table_ptr"],
                               **shared, **split, PROJECT=constants["PROJECT"], SRC_SLOT=constants["SRC_SLOT"],
                               **tiles, **pdl_launch())
    apply_split_kernel[grid](src_ptr=args["src_ptr"], dst_ptr=dst, v_ptr=args["v_ptr"], t_ptr=args["t_ptr"],
                             table_ptr=args["table_ptr"], t_bs=args["t_bs"], t_ld=args["t_ld"], splits=splits,
                             **shared, **split, TCONTRACT=constants["TCONTRACT"], APPLY=constants["APPLY"],
                             SRC_SLOT=constants["SRC_SLOT"], DST_SLOT=constants["DST_SLOT"], **tiles,
                             **pdl_launch())


def fused_strip(src, dst, Va, Vb, W, Tb, row0, col0, next_row, *, strip, precision, late_wait=False,
                tail_cols=0, v_parts=False):
    """One pass over rows [row0, n) x columns [col0, n): C - Va W from src into dst where Va is
    given (None: the first panel, nothing to apply; dst is then not written), and W's columns
    [col0, n) replaced by Tb^T Vb^T C over rows [next_row, n) of the updated C. tail_cols > 0
    (strip.tail_update: the next panel's width): then also dst's columns [col0, col0+tail_cols)
    = C' - Vb W over rows [next_row, n), the next panel's pending update.

    Va, Vb: batch x n x BB (rows indexed like the matrix's); W: batch x BB x n; Tb: batch x BB x BB.
    Tiles from `strip` (StripKnobs), products in `precision` (PrecisionKnobs). late_wait: the
    kernel waits for the launch before it at its end (fused_strip_kernel's LATE_WAIT). v_parts:
    Va and Vb hold the panel's fp16x3 parts, packed (StripKnobs.v_parts; int32).
    """
    n = dst.shape[1]
    ncols = n - col0
    BN = strip_columns(strip, ncols)
    Wc = W[:, :, col0:]
    table, slots = relocation_args(dst, SRC_SLOT=src, DST_SLOT=dst)
    fused_strip_kernel[(triton.cdiv(ncols, BN), dst.shape[0])](
        src, dst, Vb if Va is None else Va, Vb, Wc, Tb, table, n=n, L=n - row0, ncols=ncols, c_off=row0 * n + col0,
        v_row_off=row0, v_ld=Vb.shape[2], next_row=next_row - row0, w_bs=Wc.stride(0), w_ld=Wc.stride(1),
        t_bs=Tb.stride(0), t_ld=Tb.stride(1), tail_cols=tail_cols, BB=Tb.shape[-1], BM=strip.bm, BN=BN,
        NUM_STAGES=strip.num_stages, PROJECT=precision.project, TCONTRACT=precision.tcontract,
        APPLY=precision.apply, APPLY_PREV=Va is not None, LATE_WAIT=late_wait, TAIL=tail_cols > 0, V_PARTS=v_parts,
        **slots,
        num_warps=strip.num_warps, **register_cap(strip.max_registers), **pdl_launch())
