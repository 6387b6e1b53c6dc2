"""Drivers: whole-matrix blocked Householder QR from the panel and strip stages.

- `qr_blocked`: single level. Panel j, then one fused strip over all trailing columns.
- `qr_twolevel`: inner panels of width b inside outer blocks of O columns; strips
  update the block's own columns, then one batched GEMM with K = O (cuBLAS,
  tf32 allowed by the plan) updates the far columns with the merged block T.
- `qr_coop_twolevel`: the two-level driver whose tall panels use the cooperative
  panel (several programs per matrix).
- `qr_geqrf`: torch.geqrf, the service's starter.

Every driver reads A and writes fresh H and tau: the harness times repeated
calls on the same input objects, so the input must stay as it was.
The first panel and strip read A directly, so no defensive clone is made.
"""
import contextlib

import torch

from .panel import householder_panel, panel_block_sizes
from .strip import trailing_strip
from .wy import wy_merge
from .coop import coop_panel
from .scratch import scratch

def strip_knobs(plan: dict) -> dict:
    return dict(bm=plan["strip_bm"], bn=plan["strip_bn"], stages=plan["strip_stages"],
                warps=plan["strip_warps"], prec_project=plan["prec_project"],
                prec_t=plan["prec_tcontract"], prec_apply=plan["prec_apply"])


def qr_geqrf(A: torch.Tensor, plan: dict):
    return torch.geqrf(A)


def qr_blocked(A: torch.Tensor, plan: dict):
    """Single-level blocked QR: for each panel of width b, panel then one trailing strip."""
    batch, n, _ = A.shape
    b = min(plan["panel_width"], n)
    BB = panel_block_sizes(1, b)[1]
    H = torch.empty_like(A)
    tau = torch.empty(batch, n, dtype=A.dtype, device=A.device)
    T = scratch("T", (batch, BB, BB), A.dtype, A.device)
    V = scratch("V", (batch, n, BB), A.dtype, A.device)
    knobs = strip_knobs(plan)
    for j in range(0, n, b):
        bw = min(b, n - j)
        src = A if j == 0 else H
        last = j + bw >= n
        householder_panel(src, H, tau, None if last else T, None if last else V, j, bw,
                          num_warps=plan["panel_warps"])
        if not last:
            trailing_strip(src, H, V, T, j, j + bw, n - j - bw, **knobs)
    return H, tau


@contextlib.contextmanager
def matmul_tf32(allowed: bool):
    """Allow or forbid tf32 in cuBLAS products inside the block, restoring the caller's choice."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def far_update(src, H, Y, Tb, J, ob):
    """H[:, J:, J+ob:] = src[:, J:, J+ob:] - Y (Tb^T (Y^T C)): one wide block reflector."""
    C = src[:, J:, J + ob:]
    W = torch.bmm(Tb.transpose(1, 2), torch.bmm(Y.transpose(1, 2), C))
    out = H[:, J:, J + ob:]
    if src is not H:
        out.copy_(C)
    out.baddbmm_(Y, W, alpha=-1.0)


def qr_twolevel(A: torch.Tensor, plan: dict, panel=None):
    """Two-level blocked QR: outer blocks of O columns, inner panels of width b >= 16.

    `panel(src, H, tau, T, V, j, bw, v_col_off, v_row_off)` factors one inner
    panel; by default the one-program-per-matrix panel.
    """
    batch, n, _ = A.shape
    O, b = plan["outer"], plan["panel_width"]
    assert b >= 16 and O % b == 0, "two-level needs panel_width >= 16 dividing outer"
    if panel is None:
        def panel(src, H, tau, T, V, j, bw, v_col_off, v_row_off):
            householder_panel(src, H, tau, T, V, j, bw, num_warps=plan["panel_warps"],
                              v_col_off=v_col_off, v_row_off=v_row_off)
    H = torch.empty_like(A)
    tau = torch.empty(batch, n, dtype=A.dtype, device=A.device)
    Tin = scratch("Tin", (batch, O // b, b, b), A.dtype, A.device)
    Tb = scratch("Tb", (batch, O, O), A.dtype, A.device)
    Vb = scratch("Vb", (batch, n, O), A.dtype, A.device)
    knobs = strip_knobs(plan)
    for J in range(0, n, O):
        ob = min(O, n - J)
        far = J + ob < n
        Vb[:, J:J + ob].zero_()  # rows above each inner diagonal must read as zero
        widths = []
        for j in range(J, J + ob, b):
            bw = min(b, J + ob - j)
            src = A if J == 0 else H
            src_panel = A if j == 0 else H
            BB = panel_block_sizes(1, bw)[1]
            Ti = Tin[:, len(widths), :BB, :BB]
            panel(src_panel, H, tau, Ti, Vb, j, bw, j - J, j)
            widths.append(bw)
            if j + bw < J + ob:
                # Before the first block's far update, columns right of the block still live in A.
                trailing_strip(A if j == 0 else H, H, Vb, Ti, j, j + bw, J + ob - j - bw,
                               v_col_off=j - J, **knobs)
        if far:
            Y = Vb[:, J:, :ob]
            wy_merge(Y, Tin, widths, Tb[:, :ob, :ob])
            with matmul_tf32(plan["far_precision"] == "tf32"):
                far_update(src, H, Y, Tb[:, :ob, :ob], J, ob)
    return H, tau


def qr_coop_twolevel(A: torch.Tensor, plan: dict):
    """Two-level QR whose tall inner panels (height > coop_max_rows) use the cooperative panel."""
    one_cta_rows = plan["coop_max_rows"]

    def panel(src, H, tau, T, V, j, bw, v_col_off, v_row_off):
        if H.shape[1] - j > one_cta_rows:
            coop_panel(src, H, tau, T, V, j, bw, programs=plan["coop_programs"],
                       num_warps=plan["panel_warps"], v_col_off=v_col_off, v_row_off=v_row_off)
        else:
            householder_panel(src, H, tau, T, V, j, bw, num_warps=plan["panel_warps"],
                              v_col_off=v_col_off, v_row_off=v_row_off)
    return qr_twolevel(A, plan, panel)


DRIVERS = {"geqrf": qr_geqrf, "blocked": qr_blocked, "twolevel": qr_twolevel, "coop": qr_coop_twolevel}
