"""The TSQR panel (coop.exchange tsqr): a tall panel's rows split over programs that exchange
once a panel, not once a reflector.

The cooperative panel (coop.py) sums partials across its programs for every reflector: a round
trip through memory and a wait on the slowest program, sixteen times a 16-column panel. Here
three launches do without any wait:

1. tsqr_local_kernel: each program factors its own slice of rows alone;
2. tsqr_combine_kernel, one program a matrix: it factors the stack of the slices' R factors
   (NC b x b blocks), forms the stack's share of Q's first b columns, and takes the signed LU of
   Q's top b x b block Q1: Q1 - diag(s) = L1 U (s_k = -sign of each pivot; no pivoting needed,
   |U_kk| >= 1). This is the reconstruction of Householder vectors from Q of Ballard, Demmel,
   Grigori, Jacquelin, Nguyen and Solomonik ("Reconstructing Householder vectors from
   Tall-Skinny QR", 2014): V = Q U^-1 below the top block and L1 in it, T = -U diag(s) L1^-T,
   R = diag(s) R_stack;
3. tsqr_apply_kernel: each program writes its slice's rows of V (and R on top of slice 0).

That is the Householder QR in dlarfg's sign convention wherever each reflector's column has
a nonzero tail; where dlarfg would skip one (tau 0: an exactly upper-triangular panel), this
one reflects (tau between 1 and 2) and R's row changes sign. Both are valid QR factorizations
(naive.tsqr_panel_ref is the torch reference).

The programs need not be resident together, so the interpreter runs several, and a matrix may
have more programs than the SMs allow the cooperative panel.
"""
import triton
import triton.language as tl

from .launch import interpreted, pdl_launch, wait_for_previous
from .panel import (approx_reciprocals, factor_grouped, factor_summing, householder_panel, load_slice, row_slices,
                    store_v, unit_lower)
from .precision import dot_prec
from .scratch import scratch


@triton.jit
def tsqr_local_kernel(src_ptr, local_ptr, tloc_ptr, n, L, bw, panel_off,
                      NC: tl.constexpr, BR: tl.constexpr, BB: tl.constexpr, UNROLL: tl.constexpr,
                      GROUPED: tl.constexpr, SHUFFLE: tl.constexpr, PDL: tl.constexpr, APPROX: tl.constexpr):
    """Grid: (NC, batch). Program (p, i) factors panel rows [p BR, (p+1) BR) of matrix i alone (zero
    past row L) and stores the factored slice (its R above its V) at rows [p BR, (p+1) BR) of
    matrix i's NC BR x BB block of local_ptr, its T at block (i, p) of tloc_ptr (batch x NC x BB x BB).

    GROUPED: the slice held as column groups (panel.factor_grouped, SHUFFLE its indexed shuffle),
    where panel.shuffle_layout_holds. Invariants: bw == BB (full-width panels), NC, BR, BB powers
    of two, BR >= BB >= 16. PDL: launch.wait_for_previous first. APPROX (PanelKnobs.reciprocal
    approx): the reflectors' reciprocals by the hardware's alone (panel.reflector)."""
    wait_for_previous(PDL)
    p = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    rows = p * BR + tl.arange(0, BR)
    cols = tl.arange(0, BB)
    P, _, _, _, _ = load_slice(src_ptr, pid, n, panel_off, rows, cols, L, bw, BB, True)
    local_rows = tl.arange(0, BR)
    if GROUPED:
        G: tl.constexpr = BB // 4
        groups = tl.arange(0, G)[:, None] * 4 + tl.arange(0, 4)[None, :]
        P, T, _ = factor_grouped(tl.reshape(P, (BR, G, 4)), local_rows[:, None], groups, 0, UNROLL, SHUFFLE, APPROX)
        P = tl.reshape(P, (BR, BB))
        T = tl.reshape(T, (BB, BB))
    else:
        P, T, _ = factor_summing(P, local_rows, cols, UNROLL, APPROX)
    tl.store(local_ptr + (pid * NC * BR + rows[:, None]) * BB + cols[None, :], P)
    tl.store(tloc_ptr + ((pid * NC + p) * BB + cols[:, None]) * BB + cols[None, :], T)


@triton.jit
def block_of(X, q, NB: tl.constexpr):
    """Rows [q BB, (q+1) BB) of the (NB BB, BB) tile X, as a (BB, BB) tile (q may be a run-time value)."""
    BB: tl.constexpr = X.shape[1]
    blocks = tl.arange(0, NB)[:, None, None]
    return tl.sum(tl.where(blocks == q, tl.reshape(X, (NB, BB, BB)), 0.0), axis=0)


@triton.jit
def signed_lu(Q1, idx):
    """(L1, U, s) with Q1 - diag(s) = L1 U: L1 unit lower, U upper, s_k = -1 where the k-th pivot
    (as elimination reaches it) is >= 0, else +1, so that |U_kk| = |pivot| + 1. idx: arange(BB)."""
    eye = (idx[:, None] == idx[None, :]).to(tl.float32)
    A = Q1
    U = tl.zeros(Q1.shape, dtype=tl.float32)
    Lk = tl.zeros(Q1.shape, dtype=tl.float32)
    s = tl.zeros(idx.shape, dtype=tl.float32)
    for k in range(0, Q1.shape[0]):
        row = tl.sum(tl.where((idx == k)[:, None], A, 0.0), axis=0)
        pivot = tl.sum(tl.where(idx == k, row, 0.0), axis=0)
        s_k = tl.where(pivot < 0.0, 1.0, -1.0)
        u_row = tl.where(idx == k, pivot - s_k, tl.where(idx > k, row, 0.0))
        col = tl.sum(tl.where((idx == k)[None, :], A, 0.0), axis=1)
        l_col = tl.where(idx > k, col / (pivot - s_k), 0.0)
        A = A - l_col[:, None] * tl.where(idx > k, u_row, 0.0)[None, :]
        U = tl.where((idx == k)[:, None], u_row[None, :], U)
        Lk = tl.where((idx == k)[None, :], l_col[:, None], Lk)
        s = tl.where(idx == k, s_k, s)
    return Lk + eye, U, s


@triton.jit
def solve_right_upper(Q, U, idx):
    """V with V U = Q, column by column (U upper triangular, BB x BB; Q any rows x BB). idx: arange(BB)."""
    V = tl.zeros(Q.shape, dtype=tl.float32)
    for k in range(0, U.shape[0]):
        u_col = tl.sum(tl.where((idx == k)[None, :], U, 0.0), axis=1)  # U[:, k], by row of U
        u_kk = tl.sum(tl.where(idx == k, u_col, 0.0), axis=0)
        q_k = tl.sum(tl.where((idx == k)[None, :], Q, 0.0), axis=1)
        done = tl.sum(V * tl.where(idx < k, u_col, 0.0)[None, :], axis=1)
        V = tl.where((idx == k)[None, :], ((q_k - done) / u_kk)[:, None], V)
    return V


@triton.jit
def solve_right_unit_lower_t(M, L1, idx):
    """X with X L1^T = M (L1 unit lower triangular, BB x BB), column by column. idx: arange(BB)."""
    X = tl.zeros(M.shape, dtype=tl.float32)
    for j in range(0, L1.shape[0]):
        l_row = tl.sum(tl.where((idx == j)[:, None], L1, 0.0), axis=0)  # L1[j, :]
        done = tl.sum(X * tl.where(idx < j, l_row, 0.0)[None, :], axis=1)
        m_j = tl.sum(tl.where((idx == j)[None, :], M, 0.0), axis=1)
        X = tl.where((idx == j)[None, :], (m_j - done)[:, None], X)
    return X


@triton.jit
def fp32_dot(a, b):
    """a @ b in IEEE fp32 (no tensor-core rounding): Q and its reconstruction carry the panel's accuracy."""
    return dot_prec(a, b, tl.zeros((a.shape[0], b.shape[1]), dtype=tl.float32), "fp32")


@triton.jit
def small_dot(a, b):
    """a @ b in fp32 as one rank-1 update per column of a (b: BB x BB), for tsqr_combine_kernel's
    small tiles: Triton's IEEE dot there took the kernel to kilobytes of stack a thread (ptxas,
    Triton 3.6, one warp: 3,600 bytes at NC 8, 10,096 at NC 16)."""
    idx = tl.arange(0, b.shape[0])
    out = tl.zeros((a.shape[0], b.shape[1]), dtype=tl.float32)
    for k in range(0, b.shape[0]):
        a_k = tl.sum(tl.where((idx == k)[None, :], a, 0.0), axis=1)
        b_k = tl.sum(tl.where((idx == k)[:, None], b, 0.0), axis=0)
        out += a_k[:, None] * b_k[None, :]
    return out


@triton.jit
def tsqr_combine_kernel(local_ptr, tloc_ptr, x_ptr, top_ptr, tau_ptr, t_ptr, n, tau_off, t_bs, t_ld,
                        NC: tl.constexpr, BR: tl.constexpr, BB: tl.constexpr, WRITE_T: tl.constexpr,
                        PDL: tl.constexpr, APPROX: tl.constexpr):
    """Grid: (batch,), combine_warps warps (one for a stack of up to 128 rows: every reduction stays
    inside it, no barrier). Program i combines tsqr_local_kernel's slices of matrix i and leaves
    what tsqr_apply_kernel needs:

    - the stack of the slices' R factors, factored: R, Y, T_c;
    - B = [I; 0] - Y T_c Y_0^T (NC BB x BB: block q is B_q, slice q's share of Q's first
      columns, whose rows of Q are [B_q; 0] - V_q T_q V_q[:BB]^T B_q);
    - Q's top block Q1 (slice 0's first BB rows) and its signed LU, Q1 - diag(s) = L1 U;
    - X = B U^-1 at x_ptr (batch x NC BB x BB): slice q's V is then [X_q; 0] - V_q T_q V_q[:BB]^T X_q;
    - top (batch x BB x BB): diag(s) R on and above the diagonal, L1 below; tau, and T = -U diag(s)
      L1^-T (WRITE_T). PDL: launch.wait_for_previous first. APPROX: the stack's reflectors as
      tsqr_local_kernel's."""
    wait_for_previous(PDL)
    pid = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BB)
    eye = (idx[:, None] == idx[None, :]).to(tl.float32)
    local = local_ptr + pid * NC * BR * BB
    srows = tl.arange(0, NC * BB)
    stack = tl.load(local + ((srows // BB) * BR + srows % BB)[:, None] * BB + idx[None, :])
    stack = tl.where((srows % BB)[:, None] <= idx[None, :], stack, 0.0)
    F, Tc, _ = factor_summing(stack, srows, idx, 0, APPROX)
    Y = unit_lower(F, srows, idx, NC * BB)
    R = tl.where(idx[:, None] <= idx[None, :], block_of(F, 0, NC), 0.0)
    K = small_dot(Tc, tl.trans(block_of(Y, 0, NC)))
    B = (srows[:, None] == idx[None, :]).to(tl.float32) - small_dot(Y, K)
    B_0 = block_of(B, 0, NC)
    top_0 = unit_lower(tl.load(local + idx[:, None] * BB + idx[None, :]), idx, idx, BB)
    T_0 = tl.load(tloc_ptr + pid * NC * BB * BB + idx[:, None] * BB + idx[None, :])
    Q1 = B_0 - small_dot(top_0, small_dot(T_0, small_dot(tl.trans(top_0), B_0)))
    L1, U, s = signed_lu(Q1, idx)
    tl.store(x_ptr + pid * NC * BB * BB + srows[:, None] * BB + idx[None, :], solve_right_upper(B, U, idx))
    top = tl.where(idx[:, None] <= idx[None, :], s[:, None] * R, L1)
    tl.store(top_ptr + pid * BB * BB + idx[:, None] * BB + idx[None, :], top)
    T = solve_right_unit_lower_t(-U * s[None, :], L1, idx)
    tl.store(tau_ptr + pid * n + tau_off + idx, tl.sum(tl.where(eye > 0.0, T, 0.0), axis=1))
    if WRITE_T:
        tl.store(t_ptr + pid * t_bs + idx[:, None] * t_ld + idx[None, :], T)


@triton.jit
def tsqr_apply_kernel(local_ptr, tloc_ptr, x_ptr, top_ptr, dst_ptr, v_ptr, n, L, panel_off, v_row_off, v_col_off,
                      v_ld, NC: tl.constexpr, BR: tl.constexpr, BB: tl.constexpr, PDL: tl.constexpr):
    """Grid: (NC, batch). Program (p, i) writes panel rows [p BR, (p+1) BR) of matrix i (rows below L
    untouched) as householder_panel_kernel writes them, and their V into the V buffer: V = [X_p; 0] -
    V_p Z with Z = T_p V_p[:BB]^T X_p, from tsqr_combine_kernel's X and slice p's local V and T;
    slice 0's first BB rows are tsqr_combine_kernel's top (R above the diagonal, L1 below). PDL:
    launch.wait_for_previous first."""
    wait_for_previous(PDL)
    p = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    idx = tl.arange(0, BB)
    rows = tl.arange(0, BR)
    first = rows[:, None] < BB
    local = local_ptr + (pid * NC * BR + p * BR) * BB
    V = unit_lower(tl.load(local + rows[:, None] * BB + idx[None, :]), rows, idx, BR)
    top = unit_lower(tl.load(local + idx[:, None] * BB + idx[None, :]), idx, idx, BB)
    T = tl.load(tloc_ptr + ((pid * NC + p) * BB + idx[:, None]) * BB + idx[None, :])
    xs = x_ptr + (pid * NC + p) * BB * BB
    Z = fp32_dot(T, fp32_dot(tl.trans(top), tl.load(xs + idx[:, None] * BB + idx[None, :])))
    out = tl.load(xs + rows[:, None] * BB + idx[None, :], mask=first, other=0.0) - fp32_dot(V, Z)
    if p == 0:
        out = tl.where(first, tl.load(top_ptr + pid * BB * BB + rows[:, None] * BB + idx[None, :], mask=first,
                                      other=0.0), out)
    prow = p * BR + rows
    in_panel = tl.broadcast_to(prow[:, None] < L, (BR, BB))
    tl.store(dst_ptr + pid * n * n + panel_off + prow[:, None] * n + idx[None, :], out, mask=in_panel)
    store_v(v_ptr, out, prow, idx, L, BB, pid, n, v_row_off, v_col_off, v_ld, False)


def combine_warps(stack_rows: int) -> int:
    """tsqr_combine_kernel's warps for a stack of R factors this tall: one up to 128 rows (every
    reduction inside the warp), then one more warp a 128 rows (ptxas, Triton 3.6: one warp spills
    1 KB a thread at 256 rows, two warps 376 bytes)."""
    return max(1, stack_rows // 128)


def tsqr_panel(src, dst, tau, T, V, j, bw, *, programs, knobs, broadcast="sum", v_col_off=0, v_row_off=None):
    """householder_panel's contract by TSQR over `programs` slices of the panel's rows (any
    number: nothing waits on another program), in three launches: the slices, their combination
    (one warp a matrix), and the slices' rows of R and V. `knobs` (PanelKnobs) gives num_warps by
    the rows one program holds, and unroll; broadcast shuffle holds each slice as column groups
    where panel.shuffle_layout_holds. A narrow panel (bw not a power of two of at least 16: the
    ragged last one) takes the one-program panel: the reconstruction would turn its zero padding
    columns into reflectors."""
    batch, n, _ = dst.shape
    L = n - j
    NC = programs
    BB, BR, num_warps, grouped = row_slices(n, j, bw, NC, knobs, broadcast)
    if bw != BB:
        householder_panel(src, dst, tau, T, V, j, bw, knobs=knobs, v_col_off=v_col_off, v_row_off=v_row_off)
        return
    local = scratch("tsqr_local", (batch, NC * BR, BB), dst.dtype, dst.device)
    tloc = scratch("tsqr_t", (batch, NC, BB, BB), dst.dtype, dst.device)
    x = scratch("tsqr_x", (batch, NC * BB, BB), dst.dtype, dst.device)
    top = scratch("tsqr_top", (batch, BB, BB), dst.dtype, dst.device)
    approx = approx_reciprocals(knobs.reciprocal)
    tsqr_local_kernel[(NC, batch)](
        src, local, tloc, n, L, bw, j * n + j,
        NC=NC, BR=BR, BB=BB, UNROLL=knobs.unroll, GROUPED=grouped, SHUFFLE=grouped and not interpreted(),
        APPROX=approx, num_warps=num_warps, **pdl_launch())
    tsqr_combine_kernel[(batch,)](
        local, tloc, x, top, tau, T if T is not None else tau, n, j,
        T.stride(0) if T is not None else 0, T.stride(1) if T is not None else 0,
        NC=NC, BR=BR, BB=BB, WRITE_T=T is not None, APPROX=approx, num_warps=combine_warps(NC * BB),
        **pdl_launch())
    tsqr_apply_kernel[(NC, batch)](
        local, tloc, x, top, dst, V, n, L, j * n + j, j if v_row_off is None else v_row_off, v_col_off, V.shape[2],
        NC=NC, BR=BR, BB=BB, num_warps=num_warps, **pdl_launch())
