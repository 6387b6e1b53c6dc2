"""One program per matrix factors a whole outer block: the two-level driver's inner loop in one launch.

For the outer block of columns [J, J + ob) the program factors inner panels of
width B one after another (the panel kernel's loop, panel.py, in registers),
and after each applies its reflectors to the block's columns right of it
(strip.py's `update_columns`, T straight from registers). Then it builds the
block's own T (ob x ob) from the Gram matrix G = V^T V of the block's V:
column k of T is -tau_k T[:k, :k] G[:k, k], with T[k, k] = tau_k, which is
what the WY merge computes from the inner T's, without their launches.
Between phases the program's threads meet at a barrier, which also orders
their global stores and loads.

Why: a reflector's cost in the panel grows with the panel's width, and the
trailing traffic shrinks with the block's width. Inner panels of 16 inside an
outer block of 64 halve both against single-level panels of 32, and the block
costs one launch instead of one per inner panel and in-block strip.
"""
import triton
import triton.language as tl

from .panel import column_sums, load_slice, padded_height, pick_warps, reflect, store_v
from .precision import dot_prec
from .strip import update_columns
from .wy import t_from_gram


@triton.jit
def inner_step(src_ptr, h_ptr, tau_ptr, v_ptr, pid, n, j, block_end, v_col, v_ld,
               BL: tl.constexpr, B: tl.constexpr, FULL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               NUM_STAGES: tl.constexpr, PROJECT: tl.constexpr, TCONTRACT: tl.constexpr, APPLY: tl.constexpr):
    """Inner panel j of matrix pid (rows j.., BL >= n - j of them in registers; read from src_ptr,
    written to h_ptr), its V into columns v_col.. of the V buffer, then its update of the block's
    columns j + B .. block_end (read from src_ptr, written to h_ptr)."""
    L = n - j
    bw = tl.minimum(B, L)
    rows = tl.arange(0, BL)
    cols = tl.arange(0, B)
    P, offs, in_panel, T, taus = load_slice(src_ptr, pid, n, j * n + j, rows, cols, L, bw, B, FULL)
    for k in range(0, bw):
        x, tail, row_k, proj = column_sums(P, rows, cols, k)
        P, T, taus = reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k)
    tl.store(h_ptr + pid * n * n + offs, P, mask=in_panel)
    tl.store(tau_ptr + pid * n + j + cols, taus, mask=cols < bw)
    store_v(v_ptr, P, rows, cols, L, bw, pid, n, j, v_col, v_ld)
    tl.debug_barrier()  # V and the panel's columns are in memory for every thread
    ncols = block_end - j - bw
    first = j * n + j + bw
    vb = v_ptr + pid * n * v_ld + j * v_ld + v_col
    for c0 in range(0, ncols, BN):
        update_columns(src_ptr + pid * n * n + first, h_ptr + pid * n * n + first, vb, v_ld, n, L, ncols,
                       c0 + tl.arange(0, BN), T, B, BM, NUM_STAGES, PROJECT, TCONTRACT, APPLY)
    tl.debug_barrier()  # the next inner panel reads columns this update wrote


@triton.jit
def block_t(tau_ptr, v_ptr, t_ptr, pid, n, J, ob, v_ld, t_bs, BO: tl.constexpr, BM: tl.constexpr):
    """The block's T (BO x BO, zero beyond ob) from G = V^T V over rows J.. and the block's taus."""
    cb = tl.arange(0, BO)
    vb = v_ptr + pid * n * v_ld + J * v_ld
    G = tl.zeros((BO, BO), dtype=tl.float32)
    for r0 in range(0, n - J, BM):
        rm = r0 + tl.arange(0, BM)
        v = tl.load(vb + rm[:, None] * v_ld + cb[None, :], mask=(rm[:, None] < n - J) & (cb[None, :] < ob),
                    other=0.0).to(tl.float32)
        # tf32x3: fp32-like accuracy on tensor cores (T feeds the far update of every later column).
        G = dot_prec(tl.trans(v), v, G, "tf32x3")
    taus = tl.load(tau_ptr + pid * n + J + cb, mask=cb < ob, other=0.0)
    T = t_from_gram(G, taus, cb, ob)
    tl.store(t_ptr + pid * t_bs + cb[:, None] * BO + cb[None, :], T)


@triton.jit
def factor_block_kernel(src_ptr, h_ptr, tau_ptr, v_ptr, t_ptr, n, J, ob, v_ld, t_bs,
                        B: tl.constexpr, BL: tl.constexpr, FULL: tl.constexpr, BO: tl.constexpr,
                        BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr,
                        PROJECT: tl.constexpr, TCONTRACT: tl.constexpr, APPLY: tl.constexpr):
    """Grid: (batch,). Program i factors columns [J, J + ob) of matrix i, rows J..n.

    The first inner panel and its update read src_ptr (A for the first block, else H);
    everything else reads and writes h_ptr. V goes to rows J.. and columns 0..ob of the
    batch x n x v_ld V buffer (the caller zeroes rows J..J+ob first: rows above each inner
    panel's diagonal are never written); tau to tau_ptr[i*n + J..]; the block's T (BO x BO,
    row stride BO) to t_ptr + i*t_bs.
    Invariants: B, BL, BO, BM, BN powers of two >= 16; BL >= n - J; BO >= ob; v_ld >= BO;
    FULL only when every inner panel is B wide.
    """
    pid = tl.program_id(0).to(tl.int64)
    block_end = J + ob
    inner_step(src_ptr, h_ptr, tau_ptr, v_ptr, pid, n, J, block_end, 0, v_ld,
               BL, B, FULL, BM, BN, NUM_STAGES, PROJECT, TCONTRACT, APPLY)
    for j in range(J + B, block_end, B):
        inner_step(h_ptr, h_ptr, tau_ptr, v_ptr, pid, n, j, block_end, j - J, v_ld,
                   BL, B, FULL, BM, BN, NUM_STAGES, PROJECT, TCONTRACT, APPLY)
    block_t(tau_ptr, v_ptr, t_ptr, pid, n, J, ob, v_ld, t_bs, BO, BM)


def factor_block(src, H, tau, Vb, Tb, J, ob, route):
    """Factor columns [J, J+ob) of every matrix in one launch (see the module docstring).

    Vb: batch x n x BO (rows J..J+ob zeroed here); Tb: batch x BO x BO, contiguous per
    matrix. route.panel.width is the inner width B and route.panel.num_warps, picked by the
    block's padded height, the kernel's warps; route.strip and route.precision shape the
    in-block updates.
    """
    batch, n, _ = H.shape
    B, BO = route.panel.width, Tb.shape[-1]
    BL = padded_height(n - J)
    Vb[:, J:J + ob].zero_()
    factor_block_kernel[(batch,)](
        src, H, tau, Vb, Tb, n, J, ob, Vb.shape[2], Tb.stride(0),
        B=B, BL=BL, FULL=ob % B == 0, BO=BO,
        BM=route.strip.bm, BN=route.strip.bn, NUM_STAGES=route.strip.num_stages,
        PROJECT=route.precision.project, TCONTRACT=route.precision.tcontract, APPLY=route.precision.apply,
        num_warps=pick_warps(route.panel.num_warps, BL),
    )
