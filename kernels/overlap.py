"""The overlapped blocked schedule: one half of the batch's panel beside the other half's strip.

A panel program is latency bound (a reduction and a barrier per reflector, little memory
traffic) and a strip program bandwidth bound. Launched in turn, the GPU runs one kind and
then the other, and every panel launch ends in a tail of a few slow programs. With
PanelKnobs.overlap the blocked driver splits the batch into two halves one step apart, so
that one launch holds half A's panel k and half B's strip of panel k-1 (then half B's
panel k and half A's strip of panel k): both kinds of program share the SMs, and the strip
moves its data while the panels reflect. Everything stays on the caller's queue, in one kernel
per step.

The schedule is blocked.py's (qr_blocked, run_overlapped): each half's stages run in the
order of the plain driver (panel 0, strip 0, panel 1, ...); the halves touch disjoint
matrices, so no program of a launch reads what another program of the same launch writes.
This module holds the fused kernel and its launch.
"""
import triton
import triton.language as tl

from .panel import panel_launch, panel_program
from .strip import strip_launch, strip_program


@triton.jit
def panel_and_strip_kernel(
    p_src_ptr, p_dst_ptr, p_tau_ptr, p_t_ptr, p_v_ptr, p_count,
    p_n, p_L, p_bw, p_panel_off, p_tau_off, p_t_bs, p_t_ld, p_v_row_off, p_v_col_off, p_v_ld,
    s_src_ptr, s_dst_ptr, s_v_ptr, s_t_ptr, s_count, col_tiles,
    s_n, s_L, s_ncols, s_c_off, s_v_row_off, s_v_col_off, s_v_ld, s_t_bs, s_t_ld,
    p_BL: tl.constexpr, p_BB: tl.constexpr, p_WRITE_T: tl.constexpr, p_WRITE_V: tl.constexpr,
    p_FULL: tl.constexpr, p_BL2: tl.constexpr, p_UNROLL: tl.constexpr, p_GROUPED: tl.constexpr,
    p_SHUFFLE: tl.constexpr, s_BB: tl.constexpr, s_BM: tl.constexpr, s_BN: tl.constexpr, s_NUM_STAGES: tl.constexpr,
    s_PROJECT: tl.constexpr, s_TCONTRACT: tl.constexpr, s_APPLY: tl.constexpr,
):
    """Grid: (max(p_count, s_count) * (col_tiles + 1),). Program q = m * (col_tiles + 1) + r:
    r == 0 is panel_program for matrix m of the panel half (when m < p_count), r > 0 is
    strip_program for column tile r - 1 of matrix m of the strip half (when m < s_count).

    The p_ arguments are panel_program's, the s_ arguments strip_program's, each for its half's
    own views of the buffers (matrix 0 of a view is the half's first matrix). Interleaving one
    panel with each matrix's strip tiles spreads the long panel programs over the launch.
    Invariant: the two halves' matrices are disjoint.
    """
    q = tl.program_id(0)
    m = q // (col_tiles + 1)
    r = q % (col_tiles + 1)
    if r == 0:
        if m < p_count:
            panel_program(p_src_ptr, p_dst_ptr, p_tau_ptr, p_t_ptr, p_v_ptr, m.to(tl.int64),
                          p_n, p_L, p_bw, p_panel_off, p_tau_off, p_t_bs, p_t_ld, p_v_row_off, p_v_col_off,
                          p_v_ld, p_BL, p_BB, p_WRITE_T, p_WRITE_V, p_FULL, p_BL2, p_UNROLL, p_GROUPED, p_SHUFFLE)
    else:
        if m < s_count:
            strip_program(s_src_ptr, s_dst_ptr, s_v_ptr, s_t_ptr, r - 1, m.to(tl.int64),
                          s_n, s_L, s_ncols, s_c_off, s_v_row_off, s_v_col_off, s_v_ld, s_t_bs, s_t_ld,
                          s_BB, s_BM, s_BN, s_NUM_STAGES, s_PROJECT, s_TCONTRACT, s_APPLY)


def prefixed(prefix: str, values: dict) -> dict:
    return {prefix + name: value for name, value in values.items()}


def panel_and_strip(panel_call: dict, strip_call: dict):
    """One launch of the panel that `panel_call` describes beside the strip of `strip_call`
    (each the keyword arguments of householder_panel or trailing_strip, on its half's views),
    with the panel's num_warps."""
    p_args, p_constants, num_warps = panel_launch(**panel_call)
    s_args, s_constants, _, col_tiles = strip_launch(**strip_call)
    p_count, s_count = panel_call["dst"].shape[0], strip_call["dst"].shape[0]
    grid = (max(p_count, s_count) * (col_tiles + 1),)
    panel_and_strip_kernel[grid](
        p_count=p_count, s_count=s_count, col_tiles=col_tiles, **prefixed("p_", p_args),
        **prefixed("p_", p_constants), **prefixed("s_", s_args), **prefixed("s_", s_constants),
        num_warps=num_warps)
