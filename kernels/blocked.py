"""Drivers: whole-matrix blocked Householder QR from the panel and strip stages.

Each takes A and its route (plan.Route) and reads the route's knobs by name.

- `qr_blocked`: single level. Panel j, then one fused strip over all trailing columns
  (or, with strip.fuse_next, panel j's update fused with panel j+1's projection).
- `qr_twolevel`: inner panels of width b inside outer blocks of O columns; strips
  update the block's own columns, then one wide block reflector with K = O updates
  the far columns with the merged block T: batched GEMMs through cuBLAS (tf32
  allowed by the plan), or the fused strip kernel with BB = O.
- `qr_coop`: the two-level driver whose tall panels use the cooperative
  panel (several programs per matrix).
- `qr_geqrf`: torch.geqrf, the service's starter.

Every driver reads A and writes fresh H and tau: the harness times repeated
calls on the same input objects, so the input must stay as it was.
The first panel and strip read A directly, so no defensive clone is made.
"""
import contextlib
import dataclasses

import torch

from .capture import capture_point
from .coop import coop_panel
from .panel import Pending, householder_panel, padded_width
from .plan import FAR_STRIP_TILE, FIRST_FAR_TILE, TRITON_TCONTRACTS, PrecisionKnobs
from .precision import rounded_tf32
from .scratch import scratch, scratch_scope
from .strip import fused_strip, rank_update, trailing_strip
from .tproduct import t_product
from .tsqr import tsqr_panel
from .wy import block_t, wy_merge


def qr_geqrf(A: torch.Tensor, route):
    return torch.geqrf(A)


def output_buffer(A: torch.Tensor) -> torch.Tensor:
    """One uninitialized buffer for the batch A's H and tau (output_views), so that a graph's
    outputs are copied out in one launch (graphs.copied_out) and moved by one offset
    (graph.mode relocate)."""
    batch, n, _ = A.shape
    return torch.empty(batch * n * n + batch * n, dtype=A.dtype, device=A.device)


def output_views(flat: torch.Tensor, A: torch.Tensor) -> tuple:
    """(H, tau): views of output_buffer(A)'s FLAT, H first."""
    batch, n, _ = A.shape
    return flat[:batch * n * n].view(batch, n, n), flat[batch * n * n:].view(batch, n)


def new_outputs(A: torch.Tensor) -> tuple:
    """(H, tau) for the batch A, uninitialized, in one buffer."""
    return output_views(output_buffer(A), A)


def panels(n: int, b: int) -> list:
    """[(first column, width)] of the panels of b columns (the last may be narrower)."""
    return [(j, min(b, n - j)) for j in range(0, n, b)]


def qr_blocked(A: torch.Tensor, route, out=None):
    """Single-level blocked QR: for each panel of route.panel.width columns, the panel, then
    its reflector applied to every column right of it (strip.fuse_next says how). OUT: the
    (H, tau) to write (output_views of one buffer), else new ones."""
    H, tau = new_outputs(A) if out is None else out
    if not route.strip.fuse_next:
        blocked_two_pass(A, H, tau, route)
    elif route.strip.halves == 2 and A.shape[0] >= 2:
        blocked_fused_halves(A, H, tau, route)
    else:
        for more in fused_steps(A, H, tau, route):
            if more:
                capture_point()
    return H, tau


def panel_buffers(A, route, name: str):
    """(T, V) scratch of one panel of route.panel.width columns (padded to BB): batch x BB x BB and
    batch x n x BB, V's rows indexed like the matrix's; with strip.v_parts, V is int32 (each
    value's fp16x3 parts packed in one word: precision.pack_fp16_parts)."""
    batch, n, _ = A.shape
    BB = padded_width(min(route.panel.width, n))
    parts = route.strip.v_parts
    return (scratch("T" + name, (batch, BB, BB), A.dtype, A.device),
            scratch("V" + name, (batch, n, BB), torch.int32 if parts else A.dtype, A.device))


def blocked_two_pass(A, H, tau, route):
    """Each panel, then one trailing strip (trailing_strip: C read twice, written once)."""
    n = A.shape[1]
    T, V = panel_buffers(A, route, "")
    for j, bw in panels(n, min(route.panel.width, n)):
        src = A if j == 0 else H
        last = j + bw >= n
        householder_panel(src, H, tau, None if last else T, None if last else V, j, bw, knobs=route.panel)
        if not last:
            capture_point()
            trailing_strip(src, H, V, T, j, j + bw, n - j - bw, strip=route.strip, precision=route.precision)


def fused_steps(A, H, tau, route, late_strips=False):
    """strip.fuse_next, as a generator that yields after each panel and after each strip
    (blocked_fused_halves interleaves two of them) whether more launches follow: panel k's
    reflector is applied to the columns right of panel k+1 in the same pass that projects
    panel k+1's (fused_strip), so C is read once a panel.

    Panel k+1's own columns are updated first (rank_update, the panel itself with
    panel.apply_pending, or the strip before it with strip.tail_update), since it must be
    factored before its V exists. Panels alternate between two (T, V) buffers; W (batch x BB x n, by the matrix's columns) carries T^T V^T C
    from one pass to the next. late_strips: the strips wait for the launch before them at their
    end (with settings.pdl; blocked_fused_halves says why that is safe).
    """
    (T0, V0), (T1, V1) = panel_buffers(A, route, ""), panel_buffers(A, route, "_next")
    Ts, Vs = (T0, T1), (V0, V1)
    W = scratch("W_next", (A.shape[0], T0.shape[1], A.shape[1]), A.dtype, A.device)
    n = A.shape[1]
    steps = panels(n, min(route.panel.width, n))
    last = len(steps) == 1
    parts = route.strip.v_parts
    householder_panel(A, H, tau, None if last else Ts[0], None if last else Vs[0], 0, steps[0][1], knobs=route.panel,
                      v_parts=parts)
    yield not last
    if last:
        return
    tail = route.strip.tail_update
    fused_strip(A, H, None, Vs[0], W, Ts[0], 0, steps[0][1], 0, strip=route.strip, precision=route.precision,
                late_wait=late_strips, tail_cols=steps[1][1] if tail else 0, v_parts=parts)
    yield True
    for k, ((j, bw), (jn, bwn)) in enumerate(zip(steps, steps[1:])):
        src = A if j == 0 else H
        Va, Vb, Tb = Vs[k % 2], Vs[(k + 1) % 2], Ts[(k + 1) % 2]
        pending = None
        if route.panel.apply_pending:
            pending = Pending(src, Va, W[:, :, jn:], j, route.precision.apply)
        elif not tail:  # with the tail, the strip before this panel has applied it
            rank_update(src, H, Va, W[:, :, jn:jn + bwn], j, jn, strip=route.strip,
                        precision=route.precision.apply, v_row_off=j, ncols=bwn, v_parts=parts)
        last = jn + bwn >= n
        householder_panel(H, H, tau, None if last else Tb, None if last else Vb, jn, bwn, knobs=route.panel,
                          pending=pending, v_parts=parts)
        yield not last
        if not last:
            tail_cols = steps[k + 2][1] if tail else 0
            fused_strip(src, H, Va, Vb, W, Tb, j, jn + bwn, jn, strip=route.strip, precision=route.precision,
                        late_wait=late_strips, tail_cols=tail_cols, v_parts=parts)
            yield True


def blocked_fused_halves(A, H, tau, route):
    """strip.halves 2: fused_steps on each half of the batch, half Y one step behind half X, so
    that the launches run ... panel X(k), strip Y(k-1), [rank update] panel Y(k), strip X(k),
    [rank update] panel X(k+1), strip Y(k) ... Each strip follows the other half's panel,
    which it does not read: with settings.pdl its programs start beside that panel and wait
    for it at their end. Every other launch waits at its start, and every launch lets the
    next one start only after its own wait, so launches still finish in order: a strip's
    inputs (its half's panel, two launches back, and everything before) are done before the
    panel ahead of it lets it start. The halves use scratch buffers of their own."""
    mid = A.shape[0] // 2
    halves = [(lo, hi, f"half{i}") for i, (lo, hi) in enumerate(((0, mid), (mid, A.shape[0])))]
    steps = []
    for lo, hi, label in halves:
        with scratch_scope(label):
            steps.append(fused_steps(A[lo:hi], H[lo:hi], tau[lo:hi], route, late_strips=True))

    done = object()

    def advance(i) -> bool:
        """Run half i's next launch (a panel with its rank update, or a strip); False once it has none."""
        with scratch_scope(halves[i][2]):
            return next(steps[i], done) is not done

    # X's first panel, then Y's first panel; then X's strip and panel, Y's strip and panel, ...
    # (a generator that is done returns nothing more; the other one finishes alone)
    advance(0)
    advance(1)
    running = [True, True]
    while any(running):
        for i in (0, 1):
            if running[i]:
                running[i] = advance(i) and advance(i)


@contextlib.contextmanager
def matmul_tf32(allowed: bool):
    """Allow or forbid tf32 in cuBLAS products inside the block, restoring the caller's choice."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def far_update(src, H, Vb, Tb, J, ob, route):
    """H[:, J:, J+ob:] = src[:, J:, J+ob:] - Y (Tb^T (Y^T C)) with Y = Vb[:, J:, :ob]: one wide block
    reflector, as route.twolevel.far_update says."""
    if route.twolevel.far_update == "strip":
        trailing_strip(src, H, Vb, Tb, J, J + ob, H.shape[1] - J - ob, strip=knob_tiles(route, FAR_STRIP_TILE),
                       precision=far_strip_precision(route.twolevel), v_row_off=J)
    else:
        far_update_cublas(src, H, Vb, Tb, J, ob, route)


def far_update_cublas(src, H, Vb, Tb, J, ob, route):
    """The far update as three batched cuBLAS GEMMs in twolevel.far_precision, the small T
    product in twolevel.far_tcontract's; from A (the first block), the last product by
    strip.rank_update where twolevel.first_far says so (first_direct)."""
    twolevel = route.twolevel
    Y = Vb[:, J:, :ob]
    C = src[:, J:, J + ob:]
    large_tf32 = twolevel.far_precision == "tf32"
    with matmul_tf32(large_tf32):
        W = torch.bmm(Y.transpose(1, 2), C)
    if twolevel.far_tcontract in TRITON_TCONTRACTS:
        W = t_product(Tb, W, twolevel.far_tcontract, twolevel.tproduct_bn, twolevel.tproduct_bk,
                      twolevel.tproduct_warps)
    else:
        with matmul_tf32(large_tf32 and twolevel.far_tcontract == "tf32"):
            W = torch.bmm(Tb.transpose(1, 2), W)
    if src is not H and twolevel.first_far != "copy":
        first_direct(src, H, Vb, W.contiguous(), J, ob, route)
        return
    out = H[:, J:, J + ob:]
    with matmul_tf32(large_tf32):
        if src is H:
            out.baddbmm_(Y, W, alpha=-1.0)
        else:  # the first block reads A: torch copies C into H, then one product in place
            torch.baddbmm(C, Y, W, alpha=-1.0, out=out)


def first_direct(src, H, Vb, W, J, ob, route):
    """The first block's C - Y W from A (src) into H in one Triton launch: in fp32, or in tf32
    with the operands rounded to nearest (as cuBLAS does) inside the launch (first_far direct)
    or by a launch each before it (direct_rounded: Y copied, W rounded in place)."""
    precision = "tf32" if route.twolevel.far_precision == "tf32" else "fp32"
    V = Vb
    if precision == "tf32" and route.twolevel.first_far == "direct_rounded":
        # J = 0 and ob = outer here (the first block, full), so Vb[:, J:, :ob] is all of Vb
        V = rounded_tf32(Vb, scratch("Y_tf32", tuple(Vb.shape), Vb.dtype, Vb.device))
        rounded_tf32(W, W)
        precision = "tf32_exact"
    rank_update(src, H, V, W, J, J + ob, strip=knob_tiles(route, FIRST_FAR_TILE), precision=precision, v_row_off=J)


def knob_tiles(route, tile_knobs: dict):
    """The route's StripKnobs with the TwoLevelKnobs of tile_knobs ({twolevel knob: StripKnobs
    field}, plan.FIRST_FAR_TILE or FAR_STRIP_TILE) in place of their fields where they are set."""
    tiles = {field: getattr(route.twolevel, name) for name, field in tile_knobs.items()}
    return dataclasses.replace(route.strip, **{field: value for field, value in tiles.items() if value})


def far_strip_precision(twolevel):
    """The strip far update's PrecisionKnobs: far_precision for V^T C and C - V W, far_tcontract for
    T^T W (fp32 where far_precision is: an fp32 far update is fp32 throughout, as cuBLAS's is)."""
    tcontract = "fp32" if twolevel.far_precision == "fp32" else twolevel.far_tcontract
    return PrecisionKnobs(project=twolevel.far_precision, tcontract=tcontract, apply=twolevel.far_precision)


def one_program_panel(route):
    """The inner-panel function of qr_twolevel: one program per matrix."""
    def panel(src, H, tau, T, V, j, bw, v_col_off, v_row_off):
        householder_panel(src, H, tau, T, V, j, bw, knobs=route.panel, v_col_off=v_col_off, v_row_off=v_row_off)
    return panel


def factor_block(src, H, tau, Vb, Tb, J, ob, route, panel, far):
    """The outer block [J, J+ob): a launch per inner panel and in-block strip, then (when a
    far update follows) the block's T, as route.twolevel.block_t says (wy.py). Vb's rows above
    each inner panel's diagonal are zeroed first by a launch, or (TwoLevelKnobs.zero_fill gram)
    by the Gram product's launch: only the block T and the far update read them, and a last
    block, with neither, leaves them as they are."""
    batch, n, _ = H.shape
    b = route.panel.width
    Tin = scratch("Tin", (batch, route.twolevel.outer // b, b, b), H.dtype, H.device)
    zero_in_gram = route.twolevel.zero_fill == "gram"
    if not zero_in_gram:
        Vb[:, J:J + ob].zero_()  # rows above each inner diagonal must read as zero
    widths = []
    for j in range(J, J + ob, b):
        bw = min(b, J + ob - j)
        BB = padded_width(bw)
        Ti = Tin[:, len(widths), :BB, :BB]
        # Before the first block's far update, columns right of the block still live in A (src).
        panel(src if j == 0 else H, H, tau, Ti, Vb, j, bw, j - J, j)
        if j + bw < n:
            capture_point()
        widths.append(bw)
        if j + bw < J + ob:
            trailing_strip(src if j == 0 else H, H, Vb, Ti, j, j + bw, J + ob - j - bw,
                           strip=route.strip, precision=route.precision, v_col_off=j - J)
    if far and route.twolevel.block_t == "kernel":
        two = route.twolevel
        block_t(Vb[:, J:, :ob], Tin, b, Tb[:, :ob, :ob], two.gram, two.gram_split_rows, two.gram_columns,
                two.gram_sum, zero_in_gram)
    elif far:
        wy_merge(Vb[:, J:, :ob], Tin, widths, Tb[:, :ob, :ob])


def qr_twolevel(A: torch.Tensor, route, panel=None):
    """Two-level blocked QR: outer blocks of route.twolevel.outer columns, inner panels of
    route.panel.width (>= 16 and dividing the outer block: plan.route_problems checks both).

    `panel(src, H, tau, T, V, j, bw, v_col_off, v_row_off)` factors one inner panel; by
    default the one-program-per-matrix panel. far_update then applies each block to the
    columns right of it.
    """
    batch, n, _ = A.shape
    O = route.twolevel.outer
    panel = panel or one_program_panel(route)
    H, tau = new_outputs(A)
    Tb = scratch("Tb", (batch, O, O), A.dtype, A.device)
    Vb = scratch("Vb", (batch, n, O), A.dtype, A.device)
    for J in range(0, n, O):
        ob = min(O, n - J)
        far = J + ob < n
        src = A if J == 0 else H
        factor_block(src, H, tau, Vb, Tb, J, ob, route, panel, far)
        if far:
            far_update(src, H, Vb, Tb[:, :ob, :ob], J, ob, route)
    return H, tau


def qr_coop(A: torch.Tensor, route):
    """Two-level QR whose inner panels taller than route.coop.max_rows use the cooperative panel
    (coop.py), or with coop.exchange tsqr the TSQR panel (tsqr.py)."""
    one_program = one_program_panel(route)

    def panel(src, H, tau, T, V, j, bw, v_col_off, v_row_off):
        coop = route.coop
        if H.shape[1] - j <= coop.max_rows:
            return one_program(src, H, tau, T, V, j, bw, v_col_off, v_row_off)
        if coop.exchange == "tsqr":
            tsqr_panel(src, H, tau, T, V, j, bw, programs=coop.programs, knobs=route.panel, broadcast=coop.broadcast,
                       v_col_off=v_col_off, v_row_off=v_row_off)
        else:
            coop_panel(src, H, tau, T, V, j, bw, programs=coop.programs, exchange=coop.exchange,
                       broadcast=coop.broadcast, knobs=route.panel, v_col_off=v_col_off, v_row_off=v_row_off,
                       slot_reset=coop.slot_reset)
    return qr_twolevel(A, route, panel)
