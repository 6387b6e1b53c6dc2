"""The look-ahead strip: one launch updates panel k's trailing columns and factors panel k+1.

The panel is latency-bound (one program per matrix walks its reflectors in turn) and
the strip bandwidth-bound; launched one after the other, each leaves the GPU half
idle. Here the program that owns a matrix's first strip of BN >= b columns (which
hold the next panel) factors the next panel right after updating them, while the
matrix's other strip programs, and other matrices' programs, pour their updates
beside it. One launch per step instead of two, and the panel overlaps the strip
inside that launch: no second queue, no concurrent graph branches.

The next panel's V and T go to a second pair of buffers (the driver alternates
them), because the launch's other programs still read panel k's.
"""
import triton
import triton.language as tl

from .panel import factor_panel, padded_height, padded_width, pick_warps
from .strip import update_strip


@triton.jit
def strip_then_panel_kernel(
    src_ptr, dst_ptr, v_ptr, t_ptr, v_next_ptr, t_next_ptr, tau_ptr,
    n, L, ncols, c_off, v_row_off, v_ld, t_bs, t_ld,
    next_L, next_bw, next_off, next_j,
    BB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NUM_STAGES: tl.constexpr,
    PROJECT: tl.constexpr, TCONTRACT: tl.constexpr, APPLY: tl.constexpr,
    BL_NEXT: tl.constexpr, BB_NEXT: tl.constexpr, FULL_NEXT: tl.constexpr, WRITE_NEXT: tl.constexpr,
    PANELS_FIRST: tl.constexpr,
):
    """Grid: (cdiv(ncols, BN), batch), or (batch, cdiv(ncols, BN)) when PANELS_FIRST.
    Program (s, i) updates strip s of matrix i's trailing block exactly as
    trailing_strip_kernel does (same arguments: src to dst, V and T of panel k at v_ptr
    and t_ptr). Program (0, i) then factors matrix i's next panel as
    householder_panel_kernel does: rows [0, next_L) x columns [0, next_bw) from element
    next_off of dst, in place; tau at column next_j; T (when WRITE_NEXT) to t_next_ptr,
    V (when WRITE_NEXT) to rows next_j.. of v_next_ptr, which must not be v_ptr.

    Invariants: BN >= next_bw, so strip 0 holds the whole next panel and no other program
    writes it; the trailing_strip_kernel and householder_panel_kernel invariants.
    """
    if PANELS_FIRST:
        pid = tl.program_id(0).to(tl.int64)
        s = tl.program_id(1)
    else:
        s = tl.program_id(0)
        pid = tl.program_id(1).to(tl.int64)
    update_strip(src_ptr, dst_ptr, v_ptr, t_ptr, s, pid, n, L, ncols, c_off, v_row_off, 0, v_ld, t_bs, t_ld,
                 BB, BM, BN, NUM_STAGES, PROJECT, TCONTRACT, APPLY)
    if s == 0:
        tl.debug_barrier()  # the panel's rows were just written by this program's other threads
        factor_panel(dst_ptr, dst_ptr, tau_ptr, t_next_ptr, v_next_ptr, pid,
                     n, next_L, next_bw, next_off, next_j, t_bs, t_ld, next_j, 0, v_ld,
                     BL_NEXT, BB_NEXT, WRITE_NEXT, WRITE_NEXT, FULL_NEXT)


def strip_then_panel(src, dst, tau, V, T, V_next, T_next, j, bw, next_bw, *, strip, precision,
                     panel_warps):
    """Update columns [j+bw, n) of rows [j, n) with panel j's V and T (from src into dst),
    and factor the next panel, columns [j+bw, j+bw+next_bw), in dst: its tau into tau, and,
    unless it is the last panel, its T and V into T_next and V_next.

    V, V_next: batch x n x BB; T, T_next: batch x BB x BB (V_next, T_next distinct from V, T).
    strip: StripKnobs (its lookahead picks the grid order); precision: PrecisionKnobs;
    panel_warps: PanelKnobs.num_warps, which the whole launch runs at (the panel's registers
    are what limits it).
    """
    batch, n, _ = dst.shape
    L, ncols = n - j, n - j - bw
    next_j = j + bw
    next_L = n - next_j
    assert strip.bn >= next_bw and V_next.data_ptr() != V.data_ptr()
    BL_next, BB_next = padded_height(next_L), padded_width(next_bw)
    strips = triton.cdiv(ncols, strip.bn)
    panels_first = strip.lookahead == "panels_first"
    strip_then_panel_kernel[(batch, strips) if panels_first else (strips, batch)](
        src, dst, V, T, V_next, T_next, tau,
        n, L, ncols, j * n + j + bw, j, V.shape[2], T.stride(0), T.stride(1),
        next_L, next_bw, next_j * n + next_j, next_j,
        BB=T.shape[-1], BM=strip.bm, BN=strip.bn, NUM_STAGES=strip.num_stages,
        PROJECT=precision.project, TCONTRACT=precision.tcontract, APPLY=precision.apply,
        BL_NEXT=BL_next, BB_NEXT=BB_next, FULL_NEXT=next_bw == BB_next,
        WRITE_NEXT=next_j + next_bw < n, PANELS_FIRST=panels_first,
        num_warps=pick_warps(panel_warps, BL_next),
    )
