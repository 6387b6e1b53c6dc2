"""The one-warp QR: a whole matrix of at most 32 columns factored by one warp, a column a lane.

The blocked panel spreads a panel's rows over lanes and warps, so every reflector needs
reductions across lanes (shuffles) and, with more than one warp, across warps (barriers and
shared memory): at 20x32 its 32 reflectors take about 11 us, a chain of about 350 ns each.
Here lane c holds column c (one register a row), so the sums over rows that a reflector needs
are additions inside a thread, and the only exchange is column k itself: one indexed shuffle
a row from lane k. No barrier, no shared memory.

For each column k (dlarfg's convention, as panel.reflector): every lane receives column k
(x), forms from it alpha = x_k and sigma = ||x below k||^2 (each lane the same values, so no
second exchange), and its own proj_c = x_tail . column c; then w_c = row_k_c + proj_c / (alpha
- beta) and column c -= v (tau w_c). No T: the route is one panel, with no trailing update.
"""
import triton
import triton.language as tl

from .blocked import new_outputs
from .launch import interpreted
from .panel import approx_reciprocals, neg_zeros, reflector
from .plan import WARP_MAX_N, PanelKnobs
from .relocate import moved, relocation_args

@triton.jit
def shuffle_from(X, k):
    """X as lane k holds it, on every lane: one indexed shuffle a register (GPU only)."""
    src = tl.full(X.shape, 0, tl.int32) + k
    return tl.inline_asm_elementwise("shfl.sync.idx.b32 $0, $1, $2, 0x1f, 0xffffffff;", "=r,r,r",
                                     [X, src], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def lane_broadcast(P, k, SHUFFLE: tl.constexpr):
    """Column k of P (rows x lanes) on every lane: each row's register from lane k by one indexed
    shuffle. It relies on P's layout being a column a lane (warp_qr_kernel's load gives it:
    tools/sass_loop.py --load-layouts shows it, and tests/test_kernel_warp.py checks). The
    interpreter cannot run inline assembly: it sums over the columns instead."""
    if SHUFFLE:
        return shuffle_from(P, k)
    else:
        cols = tl.arange(0, P.shape[1])
        x = tl.sum(tl.where(cols[None, :] == k, P, 0.0), axis=1)
        return tl.broadcast_to(x[:, None], P.shape)


@triton.jit
def lane_value(v, k, SHUFFLE: tl.constexpr):
    """Lane k's entry of v (one value a lane, as a sum over P's rows leaves it) on every lane."""
    if SHUFFLE:
        return shuffle_from(v, k)
    else:
        picked = tl.sum(tl.where(tl.arange(0, v.shape[0]) == k, v, 0.0), axis=0)
        return tl.zeros_like(v) + picked


@triton.jit
def row_sum(X, keep, CHAINS: tl.constexpr):
    """sum over rows of X where keep (a row mask the compiler knows), as CHAINS interleaved chains
    (PanelKnobs.row_chains): masked terms are -0.0 (panel.neg_zeros), which the compiler drops."""
    neg_zero = neg_zeros(X.shape)
    rows = tl.arange(0, X.shape[0])[:, None]
    total = tl.sum(tl.where(keep & (rows % CHAINS == 0), X, neg_zero), axis=0)
    for q in tl.static_range(1, CHAINS):
        total += tl.sum(tl.where(keep & (rows % CHAINS == q), X, neg_zero), axis=0)
    return total


@triton.jit
def warp_reflect(P, taus, scales, rows, cols, lanes, k, SHUFFLE: tl.constexpr, APPROX: tl.constexpr,
                 OWN_SIGMA: tl.constexpr, CHAINS: tl.constexpr):
    """Reflector k of the tile P (a column a lane), applied to the columns right of k: (P, taus,
    scales) with taus[k] = tau and scales[k] = 1 / (alpha - beta) (APPROX: panel.reflector's).
    Column k keeps x below its new diagonal beta: scale_rows turns it into v once, after the last
    reflector, which saves a product a row a reflector (later reflectors never touch the columns
    left of theirs). OWN_SIGMA (PanelKnobs.sigma own): ||x below k||^2 is lane k's sum over its
    own column, which needs no shuffle of x first; CHAINS: row_sum's."""
    x = lane_broadcast(P, k, SHUFFLE)
    below = rows > k
    at = rows == k
    alpha = row_sum(x, at, CHAINS)
    if OWN_SIGMA:
        sigma = lane_value(row_sum(P * P, below, CHAINS), k, SHUFFLE)
    else:
        sigma = row_sum(x * x, below, CHAINS)
    proj = row_sum(x * P, below, CHAINS)
    row_k = row_sum(P, at, CHAINS)
    tau_k, scale, diag = reflector(alpha, sigma, APPROX)
    # Column c -= v (tau w_c), v = [1; x scale]: row k by coef, the rows below by x (scale coef).
    # Zero on lane k and left of it, so those columns stay as they are without a select a row.
    coef = tl.where(lanes > k, tau_k * (row_k + proj * scale), 0.0)[None, :]
    P = tl.where(below, P - x * (scale * coef), P)
    P = tl.where(at, tl.where(cols == k, diag, P - coef), P)
    taus = tl.where(lanes == k, tau_k, taus)
    scales = tl.where(lanes == k, scale, scales)
    return P, taus, scales


@triton.jit
def scale_rows(P, scales, rows, cols):
    """Each column's rows below its diagonal times its reflector's scale: x becomes v."""
    return tl.where(rows > cols, P * scales[None, :], P)


@triton.jit(do_not_specialize=["n"])
def warp_qr_kernel(a_ptr, h_ptr, tau_ptr, table_ptr, n,
                   NB: tl.constexpr, SHUFFLE: tl.constexpr, APPROX: tl.constexpr,
                   OWN_SIGMA: tl.constexpr, CHAINS: tl.constexpr, SRC_SLOT: tl.constexpr, DST_SLOT: tl.constexpr, TAU_SLOT: tl.constexpr):
    """Grid: (batch,), one warp a program. Program i factors matrix i (n x n, n <= NB) of a_ptr
    into H (h_ptr) and tau (tau_ptr), geqrf's compact form.

    Lane c holds column c as NB registers, rows padded with zeros to NB; columns past n are
    zero, so their reflectors are the identity (tau 0) and are not stored. n is not specialized
    at all: the load then moves one value a lane and Triton lays the tile out a column a lane,
    the layout lane_broadcast relies on. Specialized, a 16-divisible n gives 16-byte loads (4
    columns a lane) and n = 1 becomes a constant whose offsets are contiguous down the rows too;
    either way the shuffle would mix columns. a, h and tau move by the relocation table's slots
    (relocate.py). APPROX (PanelKnobs.reciprocal approx): the reflectors' reciprocals by the
    hardware's alone (panel.reciprocal); OWN_SIGMA (PanelKnobs.sigma own) and CHAINS
    (PanelKnobs.row_chains): warp_reflect's."""
    a_ptr = moved(a_ptr, table_ptr, SRC_SLOT)
    h_ptr = moved(h_ptr, table_ptr, DST_SLOT)
    tau_ptr = moved(tau_ptr, table_ptr, TAU_SLOT)
    pid = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, NB)[:, None]
    cols = tl.arange(0, NB)[None, :]
    inside = (rows < n) & (cols < n)
    offs = pid * n * n + rows * n + cols
    P = tl.load(a_ptr + offs, mask=inside, other=0.0)
    lanes = tl.arange(0, NB)
    taus = tl.zeros((NB,), dtype=tl.float32)
    scales = tl.zeros((NB,), dtype=tl.float32)
    for k in tl.static_range(NB):
        P, taus, scales = warp_reflect(P, taus, scales, rows, cols, lanes, k, SHUFFLE, APPROX, OWN_SIGMA,
                                       CHAINS)
    P = scale_rows(P, scales, rows, cols)
    tl.store(h_ptr + offs, P, mask=inside)
    tl.store(tau_ptr + pid * n + lanes, taus, mask=lanes < n)


def warp_qr(A, H, tau, knobs=PanelKnobs()):
    """H, tau = the QR of every matrix of A (batch x n x n fp32, n <= plan.WARP_MAX_N) in geqrf's
    compact form; A is only read. knobs: the route's PanelKnobs, of which reciprocal (the
    interpreter divides), sigma and row_chains apply."""
    batch, n, _ = A.shape
    if n > WARP_MAX_N:
        raise ValueError(f"the one-warp QR takes n <= {WARP_MAX_N}, got n = {n}")
    table, slots = relocation_args(H, SRC_SLOT=A, DST_SLOT=H, TAU_SLOT=tau)
    warp_qr_kernel[(batch,)](A, H, tau, table, n, NB=WARP_MAX_N, SHUFFLE=not interpreted(),
                             APPROX=approx_reciprocals(knobs.reciprocal), OWN_SIGMA=knobs.sigma == "own",
                             CHAINS=knobs.row_chains, **slots, num_warps=1)


def qr_warp(A, route, out=None):
    """The warp driver: (H, tau) of A (n <= plan.WARP_MAX_N) by warp_qr_kernel, one launch. OUT:
    the (H, tau) to write (blocked.output_views of one buffer), else new ones. Of the route's panel,
    strip and precision knobs only panel.reciprocal, sigma and row_chains apply (one warp, no
    trailing update)."""
    H, tau = new_outputs(A) if out is None else out
    warp_qr(A, H, tau, route.panel)
    return H, tau
