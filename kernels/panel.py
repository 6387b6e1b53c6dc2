"""The Householder panel: one program per matrix factors an L x bw panel in registers.

For each column k of the panel it forms the reflector with LAPACK's dlarfg
convention (beta = -sign(alpha) * ||x||, tau = (beta - alpha) / beta,
v = x / (alpha - beta) below the unit diagonal; a column whose tail is exactly
zero gets tau = 0 and is left as it is), applies it to the panel's later
columns, and builds the compact-WY factor T (dlarft, forward, columnwise) in the
same loop.

One reduction over the rows per reflector gives everything the reflector needs:
row k of the panel and proj = tail^T panel, where tail is column k below row k.
Then alpha = row_k[k], ||tail||^2 = proj[k], and w = v^T panel = row_k +
proj / (alpha - beta). w's first k entries are v_j . v_k (the panel's columns
j < k store v_j below their diagonal), which is what T's column k needs.
The cooperative panel (coop.py) uses the same two steps, summing row_k and
proj across programs in between.
"""
from dataclasses import dataclass

import triton
import triton.language as tl

from .plan import MIN_DOT_WIDTH
from .launch import interpreted, pdl_launch, register_cap, wait_for_previous
from .precision import dot_prec, pack_fp16_parts
from .relocate import moved, relocation_args


@triton.jit
def add_pairs(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


@triton.jit
def row_masks(rows, k, BELOW: tl.constexpr):
    """(rows > k, rows == k). BELOW: the slice's rows all lie below row k (a second row tile,
    or a cooperative program other than the first), so the masks are constants the compiler
    folds, where a slice starting at a run-time row could not be folded."""
    if BELOW:
        return tl.full(rows.shape, True, tl.int1), tl.full(rows.shape, False, tl.int1)
    else:
        return rows > k, rows == k


@triton.jit
def neg_zeros(shape):
    """A tile of -0.0 (the bits 0x80000000): the masked-out terms of a sum, which the compiler drops
    where the mask is known at compile time (s + -0.0 is s for every s; s + 0.0 turns -0.0 into
    +0.0, so that addition must stay)."""
    return tl.full(shape, -2147483648, tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def column_sums(P, rows, cols, k, BELOW: tl.constexpr):
    """(x, tail, row_k, proj) of the panel slice P for reflector k: x is column k,
    tail its part below row k; row_k and proj are sums over this slice's rows
    (BELOW: row_masks').

    The masked-out entries of the sums for x and row_k are -0.0, not 0.0: s + (-0.0) is s
    for every s, so where the mask is known at compile time (PanelKnobs.unroll) the
    compiler drops those additions; s + 0.0 it must keep, since it turns -0.0 into +0.0
    (ptxas, BL 512 x BB 32 at unroll 4: 714 instructions per reflector instead of 750)."""
    neg_zero = neg_zeros(P.shape)
    below, at = row_masks(rows, k, BELOW)
    x = tl.sum(tl.where((cols == k)[None, :], P, neg_zero), axis=1)
    tail = tl.where(below, x, 0.0)
    row_k, proj = tl.reduce((tl.where(at[:, None], P, neg_zero), tail[:, None] * P), 0, add_pairs)
    return x, tail, row_k, proj


@triton.jit
def reflector(alpha, sigma, APPROX: tl.constexpr):
    """(tau, 1 / (alpha - beta), the new diagonal) of the reflector with alpha on the diagonal
    and sigma = ||tail||^2 below it (dlarfg's convention); tau 0 and the diagonal kept when the
    tail is exactly zero. APPROX: both reciprocals by the hardware's alone (reciprocal)."""
    reflects = sigma > 0.0
    norm = tl.sqrt(alpha * alpha + sigma)
    beta = tl.where(alpha >= 0.0, -norm, norm)
    # Divide only where the reflector exists: beta and alpha - beta are zero otherwise.
    if APPROX:
        tau_k = tl.where(reflects, (beta - alpha) * reciprocal(tl.where(reflects, beta, 1.0)), 0.0)
        scale = tl.where(reflects, reciprocal(tl.where(reflects, alpha - beta, 1.0)), 0.0)
    else:
        tau_k = tl.where(reflects, (beta - alpha) / tl.where(reflects, beta, 1.0), 0.0)
        scale = tl.where(reflects, 1.0 / tl.where(reflects, alpha - beta, 1.0), 0.0)
    return tau_k, scale, tl.where(reflects, beta, alpha)


def approx_reciprocals(reciprocal: str) -> bool:
    """The kernels' APPROX for PanelKnobs.reciprocal: approx only where the kernel is compiled (the
    interpreter runs no inline assembly, so there every reflector divides)."""
    return reciprocal == "approx" and not interpreted()


@triton.jit
def reciprocal(x):
    """1 / x by the hardware's reciprocal alone (rcp.approx.ftz.f32: within 1 ulp, subnormals
    flushed), without fp32 division's range handling around it: four dependent instructions fewer
    on a reflector's chain (PanelKnobs.reciprocal approx; GPU only: the interpreter runs no inline
    assembly, and its launchers pass APPROX false)."""
    return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32,
                                     is_pure=True, pack=1)


@triton.jit
def reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, BELOW: tl.constexpr, APPROX: tl.constexpr):
    """Form reflector k from the summed row_k and proj, apply it to the panel slice P
    (columns right of k; column k becomes beta over v), and extend T and tau
    (BELOW: row_masks'; APPROX: reflector's)."""
    below, at = row_masks(rows, k, BELOW)
    alpha = tl.sum(tl.where(cols == k, row_k, 0.0), axis=0)
    sigma = tl.sum(tl.where(cols == k, proj, 0.0), axis=0)
    tau_k, scale, diag = reflector(alpha, sigma, APPROX)
    w = row_k + proj * scale
    v = tl.where(at, 1.0, tail * scale)
    coef = tl.where(cols > k, tau_k * w, 0.0)
    new_col = tl.where(below, v, tl.where(at, diag, x))
    is_col = cols == k
    P = tl.where(is_col[None, :], new_col[:, None], P - v[:, None] * coef[None, :])
    # T[:k, k] = -tau_k T[:k, :k] (V[:, :k]^T v_k); T[k, k] = tau_k.
    t_col = -tau_k * tl.sum(T * tl.where(cols < k, w, 0.0)[None, :], axis=1)
    t_col = tl.where(is_col, tau_k, tl.where(cols < k, t_col, 0.0))
    T = tl.where(is_col[None, :], t_col[:, None], T)
    taus = tl.where(is_col, tau_k, taus)
    return P, T, taus


@triton.jit
def group_broadcast(xg, k, SHUFFLE: tl.constexpr):
    """Column k of the panel, for every column group: xg (BL, G) holds each thread's own
    register k % 4 of its group; the group k // 4 holds column k. SHUFFLE: one indexed
    shuffle per row register from the lane of the same row that holds group k // 4, where a
    reduction over the groups costs log2(G) shuffles and additions. The shuffle relies on the
    layout panel_program_grouped gets from its 16-byte loads: 4 columns a thread, the G
    groups of a row on G consecutive lanes (panel_launch takes the grouped program only
    where that holds, and the GPU tests check it). The interpreter cannot run inline
    assembly: it takes the reduction."""
    if SHUFFLE:
        G: tl.constexpr = xg.shape[1]
        src = tl.full(xg.shape, 0, tl.int32) + k // 4
        row_mask = tl.full(xg.shape, 32 - G, tl.int32)  # lane & row_mask: the first lane of the row
        return tl.inline_asm_elementwise(
            "{ .reg .u32 l; mov.u32 l, %laneid; and.b32 l, l, $3; or.b32 l, l, $2; "
            "shfl.sync.idx.b32 $0, $1, l, 0x1f, 0xffffffff; }",
            "=r,r,r,r", [xg, src, row_mask], dtype=tl.float32, is_pure=True, pack=1)
    else:
        groups = tl.arange(0, xg.shape[1])
        x = tl.sum(tl.where(groups[None, :] == k // 4, xg, 0.0), axis=1)
        return tl.broadcast_to(x[:, None], xg.shape)


@triton.jit
def grouped_sums(P, rows, cols, k, SHUFFLE: tl.constexpr, C0: tl.constexpr, BELOW: tl.constexpr):
    """column_sums for the panel held as (BL, G, 4) (grouped_step): (x, tail, row_k, proj), each
    row vector (BL, G), one copy per column group, and row_k and proj (G, 4)."""
    neg_zero = neg_zeros(P.shape)
    below, at = row_masks(rows, k, BELOW)
    xg = tl.sum(tl.where((cols % 4 == k % 4)[None, :, :], P, neg_zero), axis=2)  # within a thread
    x = group_broadcast(xg, k - C0, SHUFFLE)
    tail = tl.where(below, x, 0.0)
    row_k, proj = tl.reduce((tl.where(at[:, :, None], P, neg_zero), tail[:, :, None] * P), 0, add_pairs)
    return x, tail, row_k, proj


@triton.jit
def grouped_reflector(P, x, tail, row_k, proj, rows, cols, k, BELOW: tl.constexpr, APPROX: tl.constexpr):
    """Reflector k of the panel held as (BL, G, 4), from grouped_sums' (x, tail, row_k, proj),
    applied to the columns right of k (column k becomes beta over v): (P, w, tau_k), with w =
    row_k + proj / (alpha - beta), which left of k is the Gram row V[:, :k]^T v_k that T's
    recurrence needs. APPROX: reflector's."""
    below, at = row_masks(rows, k, BELOW)
    is_col = cols == k
    alpha = tl.sum(tl.sum(tl.where(is_col, row_k, 0.0), axis=1), axis=0)
    sigma = tl.sum(tl.sum(tl.where(is_col, proj, 0.0), axis=1), axis=0)
    tau_k, scale, diag = reflector(alpha, sigma, APPROX)
    w = row_k + proj * scale
    v = tl.where(at, 1.0, tail * scale)
    coef = tl.where(cols > k, tau_k * w, 0.0)
    new_col = tl.where(below, v, tl.where(at, diag, x))
    P = tl.where(is_col[None, :, :], new_col[:, :, None], P - v[:, :, None] * coef[None, :, :])
    return P, w, tau_k


@triton.jit
def grouped_reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, C0: tl.constexpr, BELOW: tl.constexpr,
                    WITH_T: tl.constexpr, APPROX: tl.constexpr):
    """reflect for the panel held as (BL, G, 4) (grouped_reflector), T's column k and tau_k added.
    WITH_T false leaves T and taus as they are (a cooperative program that does not store
    them). APPROX: reflector's."""
    P, w, tau_k = grouped_reflector(P, x, tail, row_k, proj, rows, cols, k, BELOW, APPROX)
    if WITH_T:
        is_col = cols == k
        t_rows = C0 + tl.arange(0, T.shape[0])
        t_col = -tau_k * tl.sum(tl.sum(T * tl.where(cols < k, w, 0.0)[None, :, :], axis=2), axis=1)
        t_col = tl.where(t_rows == k, tau_k, tl.where(t_rows < k, t_col, 0.0))
        T = tl.where(is_col[None, :, :], t_col[:, None, None], T)
        taus = tl.where(is_col, tau_k, taus)
    return P, T, taus


@triton.jit
def grouped_step(P, T, taus, rows, cols, k, SHUFFLE: tl.constexpr, C0: tl.constexpr, APPROX: tl.constexpr):
    """Reflector k on the panel held as (BL, G, 4): column c is group (c - C0) // 4, entry c % 4.
    The same arithmetic as column_sums and reflect, with each row vector held as (BL, G),
    one copy per column group, so that column k reaches every group by group_broadcast.
    cols: (G, 4) column indices, from C0 (0, or a split panel's right half: PanelKnobs.split);
    rows: (BL, 1); T: (4 G, G, 4), its rows the columns from C0 too. APPROX: reflector's."""
    x, tail, row_k, proj = grouped_sums(P, rows, cols, k, SHUFFLE, C0, False)
    return grouped_reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, C0, False, True, APPROX)


@triton.jit
def grouped_tiles_step(P, P2, T, taus, rows, rows2, cols, k, SHUFFLE: tl.constexpr, APPROX: tl.constexpr):
    """grouped_step on the panel's two row tiles (PanelKnobs.row_tiles 2), P and P2, both held as
    (rows, G, 4): their sums add up before reflector k is formed. The second tile's rows start at
    BL >= BB > k, so its masks fold (BELOW)."""
    x, tail, row_k, proj = grouped_sums(P, rows, cols, k, SHUFFLE, 0, False)
    x2, tail2, row_k2, proj2 = grouped_sums(P2, rows2, cols, k, SHUFFLE, 0, True)
    row_k, proj = row_k + row_k2, proj + proj2
    P2, _, _ = grouped_reflect(P2, T, taus, x2, tail2, row_k, proj, rows2, cols, k, 0, True, False, APPROX)
    P, T, taus = grouped_reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, 0, False, True, APPROX)
    return P, P2, T, taus


@triton.jit
def gram_step(P, taus, rows, cols, k, g_ptr, g_ld, SHUFFLE: tl.constexpr, STORE: tl.constexpr,
              APPROX: tl.constexpr):
    """grouped_step for PanelKnobs.t_build after: reflector k with tau_k added, and in place of
    T's column its recurrence needs, the Gram row left of k with tau_k on the diagonal stored
    to row k at g_ptr (row stride g_ld; STORE: where T is written at all), for t_from_gram_rows
    after the loop. A store a reflector, off the chain from one reflector to the next."""
    x, tail, row_k, proj = grouped_sums(P, rows, cols, k, SHUFFLE, 0, False)
    P, w, tau_k = grouped_reflector(P, x, tail, row_k, proj, rows, cols, k, False, APPROX)
    if STORE:
        tl.store(g_ptr + k * g_ld + cols, tl.where(cols < k, w, tl.where(cols == k, tau_k, 0.0)))
    return P, tl.where(cols == k, tau_k, taus)


@triton.jit
def t_from_gram_rows(g_ptr, g_ld, BB: tl.constexpr):
    """T (BB x BB, upper triangular) of the compact WY form from the rows gram_step stored at
    g_ptr: T[k, k] = tau_k and T[:k, k] = -tau_k T[:k, :k] G[k, :k], the recurrence
    grouped_reflect runs inside the loop. The caller orders the rows' stores before these loads
    (a barrier); each step loads row k onto every row of the tile, so no value changes layout."""
    r = tl.arange(0, BB)[:, None]
    c = tl.arange(0, BB)[None, :]
    T = tl.zeros((BB, BB), dtype=tl.float32)
    for k in tl.static_range(BB):
        g = tl.load(g_ptr + k * g_ld + c + 0 * r, mask=(c < k) & (r < k), other=0.0)
        tau_k = tl.load(g_ptr + k * g_ld + k)
        t_col = -tau_k * tl.sum(T * g, axis=1)
        T = tl.where(c == k, tl.where(r == k, tau_k, tl.where(r < k, t_col[:, None], 0.0)), T)
    return T


@triton.jit
def t_from_gram_doubling(g_ptr, g_ld, BB: tl.constexpr):
    """t_from_gram_rows' T by doubling instead of a chain of BB steps: T starts as diag(tau),
    and each level joins neighbouring diagonal blocks of size s into [[T1, -T1 S12 T2], [0, T2]],
    where S12 = V1^T V2 is the Gram block between them. T being block diagonal at size s,
    T - T (S masked to those blocks) T is exactly that, so a level is two BB x BB products (fp32
    FMAs), log2(BB) levels in all. The caller orders the rows' stores before this load."""
    r = tl.arange(0, BB)[:, None]
    c = tl.arange(0, BB)[None, :]
    # S[r, c] = v_r^T v_c above the diagonal (row c's entry r as gram_step stored it), tau_r on it.
    S = tl.load(g_ptr + c * g_ld + r, mask=r <= c, other=0.0)
    T = tl.where(r == c, S, 0.0)
    for level in tl.static_range(7):  # BB <= 128
        if (1 << level) < BB:
            s = 1 << level
            joined = (r // (2 * s) == c // (2 * s)) & ((r // s) % 2 == 0) & ((c // s) % 2 == 1)
            TS = tl.dot(T, tl.where(joined, S, 0.0), input_precision="ieee")
            T = T - tl.dot(TS, T, input_precision="ieee")
    return T


@triton.jit
def load_slice(src_ptr, pid, n, panel_off, rows, cols, L, bw, BB: tl.constexpr, FULL: tl.constexpr):
    """The panel rows `rows` of matrix pid (zero outside L x bw), with their offsets and
    mask for the final store, and the zero T and tau the reflector loop starts from.

    FULL (bw == BB) masks rows only: a mask that is constant along each row lets the
    loads and stores move 16 bytes per thread, which gives the panel a layout whose row
    vectors (x, tail, v) are replicated over 8 lanes rather than 32: 4x fewer registers."""
    if FULL:
        in_panel = tl.broadcast_to(rows[:, None] < L, (rows.shape[0], BB))
    else:
        in_panel = (rows[:, None] < L) & (cols[None, :] < bw)
    offs = panel_off + rows[:, None] * n + cols[None, :]
    P = tl.load(src_ptr + pid * n * n + offs, mask=in_panel, other=0.0)
    return P, offs, in_panel, tl.zeros((BB, BB), dtype=tl.float32), tl.zeros((BB,), dtype=tl.float32)


@triton.jit
def store_v(v_ptr, P, rows, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld, V_PARTS: tl.constexpr):
    """V of the panel slice P (unit diagonal, zeros above and past bw) into the V buffer
    (store_v_tile: V_PARTS)."""
    V = tl.where(rows[:, None] > cols[None, :], P, tl.where(rows[:, None] == cols[None, :], 1.0, 0.0))
    V = tl.where((rows[:, None] < L) & (cols[None, :] < bw), V, 0.0)
    v_offs = (v_row_off + rows[:, None]) * v_ld + v_col_off + cols[None, :]
    store_v_tile(v_ptr + pid * n * v_ld + v_offs, V, rows[:, None] < L, V_PARTS)


@triton.jit
def store_v_tile(at, V, mask, V_PARTS: tl.constexpr):
    """V's tile (fp32) at `at`, in the V buffer's type; with V_PARTS (StripKnobs.v_parts) as its
    fp16x3 parts packed in one 32-bit word a value (precision.pack_fp16_parts, an int32 buffer),
    which the strips unpack as they are."""
    if V_PARTS:
        tl.store(at, pack_fp16_parts(V), mask=mask)
    else:
        tl.store(at, V.to(at.dtype.element_ty), mask=mask)


@triton.jit
def panel_step(P, P2, T, taus, rows, rows2, cols, k, BL2: tl.constexpr, APPROX: tl.constexpr):
    """Reflector k on the panel's row tiles: P, and P2 when BL2 > 0 (their sums add up first);
    APPROX: reflector's."""
    x, tail, row_k, proj = column_sums(P, rows, cols, k, False)
    if BL2 > 0:  # the second tile's rows start at BL >= BB > k
        x2, tail2, row_k2, proj2 = column_sums(P2, rows2, cols, k, True)
        row_k, proj = row_k + row_k2, proj + proj2
        P2, _, _ = reflect(P2, T, taus, x2, tail2, row_k, proj, rows2, cols, k, True, APPROX)
    P, T, taus = reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, False, APPROX)
    return P, P2, T, taus


@triton.jit
def apply_pending(src_ptr, dst_ptr, y_ptr, w_ptr, pid, n, rows, bw, c_off, y_row_off, y_ld, w_bs, w_ld,
                  BB: tl.constexpr, YB: tl.constexpr, BM: tl.constexpr, APPLY: tl.constexpr):
    """dst = src - Y W on `rows` rows x bw columns of matrix pid from element c_off (the previous
    panel's reflector on this panel's columns, before they are factored), BM rows at a time.
    Y: YB columns of the batch x n x y_ld buffer y_ptr, rows y_row_off..; W: YB x BB at
    w_ptr + pid*w_bs, row stride w_ld (only its first bw columns are read)."""
    cb = tl.arange(0, BB)
    yb = tl.arange(0, YB)
    W = tl.load(w_ptr + pid * w_bs + yb[:, None] * w_ld + cb[None, :], mask=cb[None, :] < bw, other=0.0)
    for r0 in tl.range(0, rows, BM):
        rm = r0 + tl.arange(0, BM)
        mask = (rm[:, None] < rows) & (cb[None, :] < bw)
        offs = pid * n * n + c_off + rm[:, None] * n + cb[None, :]
        y = tl.load(y_ptr + pid * n * y_ld + (y_row_off + rm[:, None]) * y_ld + yb[None, :],
                    mask=rm[:, None] < rows, other=0.0)
        c = tl.load(src_ptr + offs, mask=mask, other=0.0)
        c = c - dot_prec(y, W, tl.zeros((BM, BB), dtype=tl.float32), APPLY)
        tl.store(dst_ptr + offs, c, mask=mask)


@triton.jit
def householder_panel_kernel(
    src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, pre_src_ptr, y_ptr, w_ptr, table_ptr,
    n, L, bw, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
    pre_rows, y_row_off, y_ld, w_bs, w_ld,
    BL: tl.constexpr, BB: tl.constexpr, WRITE_T: tl.constexpr, WRITE_V: tl.constexpr,
    FULL: tl.constexpr, BL2: tl.constexpr, UNROLL: tl.constexpr, GROUPED: tl.constexpr,
    SHUFFLE: tl.constexpr, PENDING: tl.constexpr, YB: tl.constexpr, PRE_BM: tl.constexpr,
    PRE_APPLY: tl.constexpr, SPLIT: tl.constexpr, V_PARTS: tl.constexpr, APPROX: tl.constexpr,
    T_BUILD: tl.constexpr, SRC_SLOT: tl.constexpr, DST_SLOT: tl.constexpr, TAU_SLOT: tl.constexpr, PRE_SLOT: tl.constexpr,
    PDL: tl.constexpr,
):
    """Grid: (batch,). Program i owns the whole panel of matrix i (panel_program).

    PENDING (PanelKnobs.apply_pending): first, apply_pending writes the previous panel's update
    of this panel's columns into dst (rows from pre_rows above the panel's first row, read from
    pre_src_ptr), and the panel then reads dst; a barrier orders the program's own stores
    before its loads. SPLIT (PanelKnobs.split 2, where the grouped program runs and BB >= 32):
    panel_program_split instead. src, dst, tau and pre_src move by the relocation table's slots
    (relocate.py; NO_SLOT: as given). PDL: launch.wait_for_previous first."""
    wait_for_previous(PDL)
    src_ptr = moved(src_ptr, table_ptr, SRC_SLOT)
    dst_ptr = moved(dst_ptr, table_ptr, DST_SLOT)
    tau_ptr = moved(tau_ptr, table_ptr, TAU_SLOT)
    pre_src_ptr = moved(pre_src_ptr, table_ptr, PRE_SLOT)
    pid = tl.program_id(0).to(tl.int64)
    if PENDING:
        apply_pending(pre_src_ptr, dst_ptr, y_ptr, w_ptr, pid, n, L + pre_rows, bw, panel_off - pre_rows * n,
                      y_row_off, y_ld, w_bs, w_ld, BB, YB, PRE_BM, PRE_APPLY)
        tl.debug_barrier()
        src_ptr = dst_ptr
    if SPLIT:
        panel_program_split(src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, pid, n, L, panel_off, tau_off, t_bs, t_ld,
                            v_row_off, v_col_off, v_ld, BL, BB, WRITE_T, WRITE_V, UNROLL, SHUFFLE, V_PARTS, APPROX)
    else:
        panel_program(src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, pid,
                      n, L, bw, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
                      BL, BB, WRITE_T, WRITE_V, FULL, BL2, UNROLL, GROUPED, SHUFFLE, V_PARTS, APPROX, T_BUILD)


@triton.jit
def panel_program(
    src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, pid,
    n, L, bw, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
    BL: tl.constexpr, BB: tl.constexpr, WRITE_T: tl.constexpr, WRITE_V: tl.constexpr,
    FULL: tl.constexpr, BL2: tl.constexpr, UNROLL: tl.constexpr, GROUPED: tl.constexpr,
    SHUFFLE: tl.constexpr, V_PARTS: tl.constexpr, APPROX: tl.constexpr, T_BUILD: tl.constexpr,
):
    """One program factors the whole panel of matrix pid (an int64 index).

    The panel is rows [0, L) x columns [0, bw) of the n x n matrix starting at
    element `panel_off` (= j*n + j); it is read from `src_ptr`, factored, and
    written to `dst_ptr` (the same tensor, or the output when the panel reads
    the input). tau goes to tau_ptr[i*n + tau_off + k]. T (BB x BB, zero
    outside bw x bw) goes to t_ptr + i*t_bs with row stride t_ld; V (unit diagonal, zeros above,
    fp32 or fp16 per v_ptr's type) to rows v_row_off.. and columns
    v_col_off.. of the batch x n x v_ld buffer v_ptr.

    BL2 > 0 (PanelKnobs.row_tiles 2) holds the rows as two tiles, [0, BL) and [BL, BL+BL2),
    whose sums add up before each reflector, as the cooperative panel's slices do: a panel a
    little taller than a power of two then does not pay for the next power of two.

    UNROLL (PanelKnobs.unroll) 0 loops over the bw reflectors at run time. UNROLL u > 0 loops
    over all BB columns, u reflectors per iteration unrolled at compile time: with k known to
    the compiler, most of the per-column and per-row masks fold away (ptxas for sm_90 at BL 512,
    BB 32, 4 warps: 750 instructions per reflector at u = 4 against 1,805). Columns past bw
    are zero (the load masks them), so their reflectors are the identity (tau 0).

    GROUPED (PanelKnobs.broadcast shuffle, where householder_panel allows it) runs
    panel_program_grouped instead, SHUFFLE its indexed shuffle, T_BUILD (PanelKnobs.t_build)
    where and how its T is built. APPROX (PanelKnobs.reciprocal approx): the reflectors'
    reciprocals by the hardware's alone (reflector).

    Invariants: BL + BL2 >= L; BL >= BB when BL2 > 0; BL, BL2 (when not 0) and BB >= bw are
    powers of two; BB >= 16 when T feeds tl.dot; the panel fits in registers
    ((BL + BL2) * BB / (32 * num_warps) values a thread).
    """
    if GROUPED:
        panel_program_grouped(src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, pid, n, L, bw, panel_off, tau_off,
                              t_bs, t_ld, v_row_off, v_col_off, v_ld, BL, BB, BL2, WRITE_T, WRITE_V, UNROLL,
                              SHUFFLE, V_PARTS, APPROX, T_BUILD)
        return
    rows = tl.arange(0, BL)
    cols = tl.arange(0, BB)
    P, offs, in_panel, T, taus = load_slice(src_ptr, pid, n, panel_off, rows, cols, L, bw, BB, FULL)
    rows2 = BL + tl.arange(0, BL2 if BL2 > 0 else 1)
    P2 = P  # stands in for the second tile when there is none (BL2 == 0): never read
    if BL2 > 0:
        P2, offs2, in_panel2, _, _ = load_slice(src_ptr, pid, n, panel_off, rows2, cols, L, bw, BB, FULL)
    if UNROLL == 0:
        for k in range(0, bw):
            P, P2, T, taus = panel_step(P, P2, T, taus, rows, rows2, cols, k, BL2, APPROX)
    else:
        for k0 in range(0, BB, UNROLL):
            for r in tl.static_range(UNROLL):
                P, P2, T, taus = panel_step(P, P2, T, taus, rows, rows2, cols, k0 + r, BL2, APPROX)
    tl.store(dst_ptr + pid * n * n + offs, P, mask=in_panel)
    tl.store(tau_ptr + pid * n + tau_off + cols, taus, mask=cols < bw)
    if WRITE_T:
        tl.store(t_ptr + pid * t_bs + cols[:, None] * t_ld + cols[None, :], T)
    if WRITE_V:
        store_v(v_ptr, P, rows, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld, V_PARTS)
    if BL2 > 0:
        tl.store(dst_ptr + pid * n * n + offs2, P2, mask=in_panel2)
        if WRITE_V:
            store_v(v_ptr, P2, rows2, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld, V_PARTS)


@triton.jit
def panel_program_grouped(
    src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, pid,
    n, L, bw, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
    BL: tl.constexpr, BB: tl.constexpr, BL2: tl.constexpr, WRITE_T: tl.constexpr, WRITE_V: tl.constexpr,
    UNROLL: tl.constexpr, SHUFFLE: tl.constexpr, V_PARTS: tl.constexpr, APPROX: tl.constexpr,
    T_BUILD: tl.constexpr,
):
    """panel_program for PanelKnobs.broadcast shuffle: one row tile, bw == BB, the rows
    16-byte aligned. The tile is loaded as (BL, BB) and reshaped to (BL, BB // 4, 4), which
    keeps its layout (4 columns a thread, a row's groups on consecutive lanes); T is held the
    same way, (BB, BB // 4, 4). T_BUILD (PanelKnobs.t_build) after or doubling: the loop
    stores each reflector's Gram row into T's place instead (gram_step), and T is built from
    those rows once the loop is done (t_from_gram_rows or t_from_gram_doubling), so the loop
    carries no T. BL2 > 0 (PanelKnobs.row_tiles 2; only with T_BUILD loop): a second tile of rows [BL, BL + BL2), held the same way
    (grouped_tiles_step)."""
    rows = tl.arange(0, BL)
    cols = tl.arange(0, BB)
    P2, offs, in_panel, _, _ = load_slice(src_ptr, pid, n, panel_off, rows, cols, L, bw, BB, True)
    G: tl.constexpr = BB // 4
    P = tl.reshape(P2, (BL, G, 4))
    Q = P  # stands in for the second tile when there is none (BL2 == 0): never read
    if BL2 > 0:
        rows2 = BL + tl.arange(0, BL2)
        Q2, offs2, in_panel2, _, _ = load_slice(src_ptr, pid, n, panel_off, rows2, cols, L, bw, BB, True)
        Q = tl.reshape(Q2, (BL2, G, 4))
    cols2 = tl.arange(0, G)[:, None] * 4 + tl.arange(0, 4)[None, :]
    T = tl.zeros((BB, G, 4), dtype=tl.float32)
    taus = tl.zeros((G, 4), dtype=tl.float32)
    g_ptr = t_ptr + pid * t_bs
    if T_BUILD != "loop":
        if UNROLL == 0:
            for k in range(0, bw):
                P, taus = gram_step(P, taus, rows[:, None], cols2, k, g_ptr, t_ld, SHUFFLE, WRITE_T, APPROX)
        else:
            for k0 in range(0, BB, UNROLL):
                for r in tl.static_range(UNROLL):
                    P, taus = gram_step(P, taus, rows[:, None], cols2, k0 + r, g_ptr, t_ld, SHUFFLE, WRITE_T,
                                        APPROX)
    elif BL2 > 0:
        if UNROLL == 0:
            for k in range(0, bw):
                P, Q, T, taus = grouped_tiles_step(P, Q, T, taus, rows[:, None], rows2[:, None], cols2, k, SHUFFLE,
                                                   APPROX)
        else:
            for k0 in range(0, BB, UNROLL):
                for r in tl.static_range(UNROLL):
                    P, Q, T, taus = grouped_tiles_step(P, Q, T, taus, rows[:, None], rows2[:, None], cols2, k0 + r,
                                                       SHUFFLE, APPROX)
    elif UNROLL == 0:
        for k in range(0, bw):
            P, T, taus = grouped_step(P, T, taus, rows[:, None], cols2, k, SHUFFLE, 0, APPROX)
    else:
        for k0 in range(0, BB, UNROLL):
            for r in tl.static_range(UNROLL):
                P, T, taus = grouped_step(P, T, taus, rows[:, None], cols2, k0 + r, SHUFFLE, 0, APPROX)
    P2 = tl.reshape(P, (BL, BB))
    tl.store(dst_ptr + pid * n * n + offs, P2, mask=in_panel)
    tl.store(tau_ptr + pid * n + tau_off + tl.reshape(cols2, (BB,)), tl.reshape(taus, (BB,)))
    if WRITE_V and T_BUILD != "loop":  # before T: built after the loop, T finds the tile's registers free
        store_v(v_ptr, P2, rows, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld, V_PARTS)
    if WRITE_T:
        if T_BUILD != "loop":
            tl.debug_barrier()  # every Gram row stored before any is read
            if T_BUILD == "doubling":
                T2 = t_from_gram_doubling(g_ptr, t_ld, BB)
            else:
                T2 = t_from_gram_rows(g_ptr, t_ld, BB)
            tl.debug_barrier()  # every row read before T takes their place
        else:
            T2 = tl.reshape(T, (BB, BB))
        tl.store(g_ptr + cols[:, None] * t_ld + cols[None, :], T2)
    if WRITE_V and T_BUILD == "loop":  # after T: there, storing V first lengthens the stack (ptxas)
        store_v(v_ptr, P2, rows, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld, V_PARTS)
    if BL2 > 0:
        Q2 = tl.reshape(Q, (BL2, BB))
        tl.store(dst_ptr + pid * n * n + offs2, Q2, mask=in_panel2)
        if WRITE_V:
            store_v(v_ptr, Q2, rows2, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld, V_PARTS)


@triton.jit
def factor_grouped(P, rows, cols, C0: tl.constexpr, UNROLL: tl.constexpr, SHUFFLE: tl.constexpr,
                   APPROX: tl.constexpr):
    """All reflectors of the (BL, G, 4) tile P whose columns are cols (from C0): (P, T, taus);
    APPROX: reflector's."""
    G: tl.constexpr = P.shape[1]
    T = tl.zeros((4 * G, G, 4), dtype=tl.float32)
    taus = tl.zeros((G, 4), dtype=tl.float32)
    if UNROLL == 0:
        for k in range(C0, C0 + 4 * G):
            P, T, taus = grouped_step(P, T, taus, rows, cols, k, SHUFFLE, C0, APPROX)
    else:
        for k0 in range(C0, C0 + 4 * G, UNROLL):
            for r in tl.static_range(UNROLL):
                P, T, taus = grouped_step(P, T, taus, rows, cols, k0 + r, SHUFFLE, C0, APPROX)
    return P, T, taus


@triton.jit
def factor_summing(P, rows, cols, UNROLL: tl.constexpr, APPROX: tl.constexpr):
    """All reflectors of the (BL, BB) tile P, whose rows start at the panel's diagonal (rows: 0..BL-1),
    by column_sums and reflect: factor_grouped's summing twin: (P, T, taus). UNROLL as
    householder_panel_kernel's; APPROX: reflector's."""
    BB: tl.constexpr = P.shape[1]
    T = tl.zeros((BB, BB), dtype=tl.float32)
    taus = tl.zeros((BB,), dtype=tl.float32)
    if UNROLL == 0:
        for k in range(0, BB):
            x, tail, row_k, proj = column_sums(P, rows, cols, k, False)
            P, T, taus = reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, False, APPROX)
    else:
        for k0 in range(0, BB, UNROLL):
            for r in tl.static_range(UNROLL):
                x, tail, row_k, proj = column_sums(P, rows, cols, k0 + r, False)
                P, T, taus = reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k0 + r, False, APPROX)
    return P, T, taus


@triton.jit
def unit_lower(P, rows, cols, L):
    """V of a factored (BL, bw) slice whose columns are cols: P below the diagonal, 1 on it, 0
    above and past row L."""
    V = tl.where(rows[:, None] > cols[None, :], P, tl.where(rows[:, None] == cols[None, :], 1.0, 0.0))
    return tl.where(rows[:, None] < L, V, 0.0)


@triton.jit
def left_reflector_on_right(src, dst, n, L, T1, HB: tl.constexpr, BM: tl.constexpr):
    """The right half of a split panel (columns HB..2 HB from src, whose (0, 0) is the panel's
    first element; row stride n) becomes Q1^T C = C - V1 T1^T V1^T C in dst, V1 read from the
    factored left half in dst: two passes of BM rows, in SPLIT_PRECISION."""
    left = tl.arange(0, HB)
    right = HB + left
    W = tl.zeros((HB, HB), dtype=tl.float32)
    for r0 in tl.range(0, L, BM):
        rm = r0 + tl.arange(0, BM)
        m = rm[:, None] < L
        v = unit_lower(tl.load(dst + rm[:, None] * n + left[None, :], mask=m, other=0.0), rm, left, L)
        c = tl.load(src + rm[:, None] * n + right[None, :], mask=m, other=0.0)
        W = dot_prec(tl.trans(v), c, W, SPLIT_PRECISION)
    W = tl.dot(tl.trans(T1), W, input_precision="ieee")
    for r0 in tl.range(0, L, BM):
        rm = r0 + tl.arange(0, BM)
        m = rm[:, None] < L
        v = unit_lower(tl.load(dst + rm[:, None] * n + left[None, :], mask=m, other=0.0), rm, left, L)
        c = tl.load(src + rm[:, None] * n + right[None, :], mask=m, other=0.0)
        c = c - dot_prec(v, W, tl.zeros((BM, HB), dtype=tl.float32), SPLIT_PRECISION)
        tl.store(dst + rm[:, None] * n + right[None, :], c, mask=m)


@triton.jit
def halves_gram(dst, n, L, HB: tl.constexpr, BM: tl.constexpr):
    """V1^T V2 of a factored split panel in dst (its (0, 0) at dst, row stride n), BM rows a step."""
    left = tl.arange(0, HB)
    S = tl.zeros((HB, HB), dtype=tl.float32)
    for r0 in tl.range(0, L, BM):
        rm = r0 + tl.arange(0, BM)
        m = rm[:, None] < L
        v1 = unit_lower(tl.load(dst + rm[:, None] * n + left[None, :], mask=m, other=0.0), rm, left, L)
        v2 = unit_lower(tl.load(dst + rm[:, None] * n + HB + left[None, :], mask=m, other=0.0), rm, HB + left, L)
        S = dot_prec(tl.trans(v1), v2, S, SPLIT_PRECISION)
    return S


@triton.jit
def factor_half(src, dst, tau_ptr, v_at, rows, in_rows, groups, L, C0: tl.constexpr, HB: tl.constexpr,
                BL: tl.constexpr, WRITE_V: tl.constexpr, UNROLL: tl.constexpr, SHUFFLE: tl.constexpr,
                V_PARTS: tl.constexpr, APPROX: tl.constexpr):
    """Load columns C0..C0+HB of the panel from src (the grouped layout the shuffle needs), factor
    them, and store them to dst, their tau (tau_ptr at the panel's first) and V (v_at at the
    panel's first row and column, row stride in it; store_v_tile: V_PARTS); returns their T
    (HB x HB)."""
    cols = C0 + tl.arange(0, HB)
    P = tl.load(src + cols[None, :], mask=in_rows, other=0.0)
    G: tl.constexpr = HB // 4
    P, T, taus = factor_grouped(tl.reshape(P, (BL, G, 4)), rows[:, None], C0 + groups, C0, UNROLL, SHUFFLE, APPROX)
    P = tl.reshape(P, (BL, HB))
    tl.store(dst + cols[None, :], P, mask=in_rows)
    tl.store(tau_ptr + C0 + tl.reshape(groups, (HB,)), tl.reshape(taus, (HB,)))
    if WRITE_V:
        store_v_tile(v_at + cols[None, :], unit_lower(P, rows, cols, L), in_rows, V_PARTS)
    return tl.reshape(T, (HB, HB))


@triton.jit
def panel_program_split(
    src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, pid,
    n, L, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
    BL: tl.constexpr, BB: tl.constexpr, WRITE_T: tl.constexpr, WRITE_V: tl.constexpr,
    UNROLL: tl.constexpr, SHUFFLE: tl.constexpr, V_PARTS: tl.constexpr, APPROX: tl.constexpr,
):
    """panel_program_grouped in two halves of HB = BB / 2 columns (PanelKnobs.split 2): the left
    half's reflectors on the left half only; their block reflector applied to the right half
    (left_reflector_on_right, tensor cores in SPLIT_PRECISION); the right half's reflectors; T merged as
    [[T1, -T1 (V1^T V2) T2], [0, T2]]. Each reflector then walks a BL x HB tile instead of
    BL x BB, and one half is live at a time.

    A half is factored only as loaded from memory: the shuffle needs the load's register layout
    (group_broadcast), which a product's result does not have. So the block update runs in
    BM-row steps through dst, and barriers order the program's own stores before its loads.
    Invariants as panel_program_grouped's, and HB >= 16."""
    HB: tl.constexpr = BB // 2
    BM: tl.constexpr = 64  # rows a step of the block update and the Gram: 8 steps at 512 rows
    rows = tl.arange(0, BL)
    groups = tl.arange(0, HB // 4)[:, None] * 4 + tl.arange(0, 4)[None, :]
    src = src_ptr + pid * n * n + panel_off
    dst = dst_ptr + pid * n * n + panel_off
    in_rows = rows[:, None] < L
    v_at = v_ptr + pid * n * v_ld + (v_row_off + rows[:, None]) * v_ld + v_col_off
    taus_at = tau_ptr + pid * n + tau_off
    T1 = factor_half(src + rows[:, None] * n, dst + rows[:, None] * n, taus_at, v_at, rows, in_rows, groups, L,
                     0, HB, BL, WRITE_V, UNROLL, SHUFFLE, V_PARTS, APPROX)
    tl.debug_barrier()
    left_reflector_on_right(src, dst, n, L, T1, HB, BM)
    tl.debug_barrier()
    T2 = factor_half(dst + rows[:, None] * n, dst + rows[:, None] * n, taus_at, v_at, rows, in_rows, groups, L,
                     HB, HB, BL, WRITE_V, UNROLL, SHUFFLE, V_PARTS, APPROX)
    if WRITE_T:
        tl.debug_barrier()
        cross = -tl.dot(T1, tl.dot(halves_gram(dst, n, L, HB, BM), T2, input_precision="ieee"),
                        input_precision="ieee")
        left = tl.arange(0, HB)
        right = HB + left
        t_at = t_ptr + pid * t_bs
        tl.store(t_at + left[:, None] * t_ld + left[None, :], T1)
        tl.store(t_at + left[:, None] * t_ld + right[None, :], cross)
        tl.store(t_at + right[:, None] * t_ld + left[None, :], tl.zeros((HB, HB), dtype=tl.float32))
        tl.store(t_at + right[:, None] * t_ld + right[None, :], T2)


def padded_width(bw: int) -> int:
    """BB, the padded panel width: a power of two, at least 16 so that T and V feed tl.dot."""
    return max(MIN_DOT_WIDTH, triton.next_power_of_2(bw))


def padded_height(L: int) -> int:
    """BL, the padded panel height: a power of two."""
    return triton.next_power_of_2(max(L, 1))


def row_tiles_of(L: int, row_tiles: int, BB: int = MIN_DOT_WIDTH) -> tuple:
    """(BL, BL2) for a panel of L rows and padded width BB: one tile of padded_height(L) rows
    (BL2 = 0), or, with PanelKnobs.row_tiles 2, half of that plus the rest padded, when that
    holds fewer rows, the second tile has at least MIN_DOT_WIDTH rows (a smaller one costs more
    than it saves) and the first holds the panel's BB diagonal rows (the second tile's
    reflector steps assume all its rows lie below the diagonal)."""
    BL = padded_height(L)
    if row_tiles == 2 and BL > L:
        first, rest = BL // 2, padded_height(L - BL // 2)
        if first + rest < BL and rest >= MIN_DOT_WIDTH and first >= BB:
            return first, rest
    return BL, 0


def by_rows(rule, rows: int):
    """A plan.ByRows knob's value for a panel of ROWS padded rows (PanelKnobs.num_warps,
    max_registers, t_build): one value, or ((rows_max, value), ...) (rows_max None = any)."""
    if not isinstance(rule, (list, tuple)):
        return rule
    for rows_max, value in rule:
        if rows_max is None or rows <= rows_max:
            return value
    return rule[-1][1]


# The split panel's block update and Gram on tensor cores (PanelKnobs.split): fp16x3, as the
# strips' products, which ptxas for sm_90 (Triton 3.6) issues in about half the instructions of
# tf32x3's at 64 rows a step (293 + 176 against 458 + 220).
SPLIT_PRECISION: tl.constexpr = tl.constexpr("fp16x3")
# Rows a step of apply_pending: each step is a load, a product and a store the panel waits for,
# so few and tall (8 for a 512-row panel; ptxas for sm_90 gives the panel the same 254
# registers at 32, 64 or 128).
PENDING_ROWS = 64


@dataclass(frozen=True)
class Pending:
    """The previous panel's update of this panel's columns, which the panel applies before it
    factors them (PanelKnobs.apply_pending): C - Y W over rows [row0, n), C read from src.
    Y: batch x n x YB (rows indexed like the matrix's); W: batch x YB x >= bw, this panel's
    columns first (a view into the W buffer of strip.fuse_next); apply: a dot_prec name."""

    src: object
    Y: object
    W: object
    row0: int
    apply: str


def pending_launch(pending, src, j):
    """(arguments, compile-time constants) of householder_panel_kernel's apply_pending prologue
    for panel column j: none to apply (pending None) sets PENDING false and points its tensors
    at src, which the kernel then never reads."""
    if pending is None:
        return (dict(pre_src_ptr=src, y_ptr=src, w_ptr=src, pre_rows=0, y_row_off=0, y_ld=0, w_bs=0, w_ld=0),
                dict(PENDING=False, YB=MIN_DOT_WIDTH, PRE_BM=MIN_DOT_WIDTH, PRE_APPLY="fp32"))
    Y, W = pending.Y, pending.W
    return (dict(pre_src_ptr=pending.src, y_ptr=Y, w_ptr=W, pre_rows=j - pending.row0, y_row_off=pending.row0,
                 y_ld=Y.shape[2], w_bs=W.stride(0), w_ld=W.stride(1)),
            dict(PENDING=True, YB=Y.shape[2], PRE_BM=PENDING_ROWS, PRE_APPLY=pending.apply))


def shuffle_layout_holds(n: int, j: int, bw: int, BB: int, rows: int, num_warps: int) -> bool:
    """Whether a slice of `rows` padded rows of the panel at column j (bw columns padded to BB, of
    n x n matrices) loads with the layout group_broadcast's shuffle needs: the full width (the
    mask then constant along a row), rows starting 16-byte aligned (n and j multiples of 16) and
    at least 4 values a thread, so that Triton loads 4 columns a thread (ptxas and the TTGIR for
    sm_90 show that layout at every such shape we compiled; a tile of 2 values a thread splits
    a group over 2 lanes)."""
    return bw == BB and n % 16 == 0 and j % 16 == 0 and rows * BB >= 4 * 32 * num_warps


def row_slices(n: int, j: int, bw: int, programs: int, knobs, broadcast: str) -> tuple:
    """(BB, BR, num_warps, grouped) of the panel at column j (bw columns, n x n matrices) with its
    rows split over `programs` programs (the cooperative and TSQR panels): BB its padded width,
    BR the padded rows a program holds, num_warps PanelKnobs.num_warps for BR rows, grouped
    whether the slices are held as column groups (broadcast shuffle, where
    shuffle_layout_holds)."""
    BB = padded_width(bw)
    BR = max(BB, triton.next_power_of_2(triton.cdiv(n - j, programs)))
    num_warps = by_rows(knobs.num_warps, BR)
    return BB, BR, num_warps, broadcast == "shuffle" and shuffle_layout_holds(n, j, bw, BB, BR, num_warps)


def panel_launch(src, dst, tau, T, V, j, bw, *, knobs, v_col_off=0, v_row_off=None, pending=None, v_parts=False):
    """(arguments, compile-time constants, launch options: num_warps and any register cap) of
    panel_program for columns [j, j+bw) of every matrix, by parameter name, as householder_panel
    launches them. PanelKnobs.num_warps and max_registers pick their values by the padded
    height. PanelKnobs.broadcast shuffle takes the grouped program where its layout holds (in each
    row tile: shuffle_layout_holds). Elsewhere the panel sums: the factors are the same either way.
    PanelKnobs.split 2 splits the grouped program's columns in two halves where the rows are one
    tile and each half is at least MIN_DOT_WIDTH wide and, like the whole tile, holds at least 4
    values a thread (the shuffle's layout); elsewhere the panel is factored whole. v_parts
    (StripKnobs.v_parts): V is written as its fp16x3 parts, packed (store_v_tile), V then int32."""
    n = dst.shape[1]
    L = n - j
    BB = padded_width(bw)
    BL, BL2 = row_tiles_of(L, knobs.row_tiles, BB)
    args = dict(
        src_ptr=src, dst_ptr=dst, tau_ptr=tau, t_ptr=T if T is not None else tau,
        v_ptr=V if V is not None else tau, n=n, L=L, bw=bw, panel_off=j * n + j, tau_off=j,
        t_bs=T.stride(0) if T is not None else 0, t_ld=T.stride(1) if T is not None else 0,
        v_row_off=j if v_row_off is None else v_row_off, v_col_off=v_col_off,
        v_ld=V.shape[2] if V is not None else 0)
    num_warps = by_rows(knobs.num_warps, BL + BL2)
    grouped = (knobs.broadcast == "shuffle" and shuffle_layout_holds(n, j, bw, BB, BL, num_warps)
               and (BL2 == 0 or shuffle_layout_holds(n, j, bw, BB, BL2, num_warps)))
    one_tile = grouped and BL2 == 0  # split and t_build after hold the rows as one tile
    constants = dict(BL=BL, BB=BB, WRITE_T=T is not None, WRITE_V=V is not None, FULL=bw == BB, BL2=BL2,
                     UNROLL=knobs.unroll, GROUPED=grouped, SHUFFLE=grouped and not interpreted(),
                     SPLIT=one_tile and knobs.split == 2 and BB >= 2 * MIN_DOT_WIDTH
                     and BL * (BB // 2) >= 4 * 32 * num_warps, V_PARTS=v_parts,
                     APPROX=approx_reciprocals(knobs.reciprocal))
    constants["T_BUILD"] = by_rows(knobs.t_build, BL) if one_tile and not constants["SPLIT"] else "loop"
    pre_args, pre_constants = pending_launch(pending, src, j)
    table, slots = relocation_args(dst, SRC_SLOT=src, DST_SLOT=dst, TAU_SLOT=tau,
                                   PRE_SLOT=pending.src if pending is not None else None)
    options = {"num_warps": num_warps, **register_cap(by_rows(knobs.max_registers, BL + BL2))}
    return {**args, **pre_args, "table_ptr": table}, {**constants, **pre_constants, **slots}, options


def householder_panel(src, dst, tau, T, V, j, bw, *, knobs, v_col_off=0, v_row_off=None, pending=None,
                      v_parts=False):
    """Factor panel columns [j, j+bw) of every matrix, rows [j, n), as `knobs` (PanelKnobs:
    num_warps by the rows the tiles hold, row_tiles, unroll) say.

    src, dst: batch x n x n fp32 (may be the same tensor); tau: batch x n;
    T: batch x BB x BB fp32 (any batch and row strides) or None; V: batch x n x ld (fp32/fp16) or None.
    V's rows are indexed like the matrix's (row r of the panel lands at row
    v_row_off + r, default j) so a two-level block can stack its panels.
    pending (Pending, or None): an update of the panel's columns to apply first.
    v_parts (StripKnobs.v_parts): V holds fp16x3's parts of each value, packed (int32).
    """
    args, constants, options = panel_launch(src, dst, tau, T, V, j, bw, knobs=knobs, v_col_off=v_col_off,
                                            v_row_off=v_row_off, pending=pending, v_parts=v_parts)
    householder_panel_kernel[(dst.shape[0],)](**args, **constants, **options, **pdl_launch())
