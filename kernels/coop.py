"""The cooperative panel: NC programs per matrix share a tall panel's rows.

A panel too tall for one program's registers (thousands of rows, tiny batch)
is split by rows over NC programs that each keep their slice in registers.
Once per reflector they exchange, through global memory, exactly what the
reflector needs (panel.py explains why it suffices): row k of the panel and
proj = sum over rows r > k of x_r * panel[r, :]. Every program sums the NC
partials and applies the reflector to its own rows.
An atomic counter per matrix is the barrier, so all NC programs of a matrix
must be resident at once (batch * NC well under the SM count) and the
interpreter, which runs programs one after another, can only run NC = 1.
"""
import os

import torch
import triton
import triton.language as tl

from .panel import column_sums, load_slice, pick_warps, reflect, store_v
from .scratch import scratch


@triton.jit
def coop_panel_kernel(
    src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, part_ptr, count_ptr,
    n, L, bw, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
    NC: tl.constexpr, BR: tl.constexpr, BB: tl.constexpr, WRITE_T: tl.constexpr,
):
    """Grid: (NC, batch). Program (p, i) owns panel rows [p*BR, (p+1)*BR) of matrix i.

    Arguments as householder_panel_kernel's, plus part_ptr (batch x 2 x NC x
    2*BB fp32: row_k then proj; two slots, alternating by reflector, so a fast program
    never overwrites partials a slow one still reads) and count_ptr (batch
    int32 counters, zero at launch). Invariants: BR, BB powers of two, BB >= 16,
    NC * BR >= L, and all NC programs of a matrix co-resident.
    """
    p = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    rows = p * BR + tl.arange(0, BR)
    cols = tl.arange(0, BB)
    P, offs, in_panel, T, taus = load_slice(src_ptr, pid, n, panel_off, rows, cols, L, bw, BB)
    PW: tl.constexpr = 2 * BB
    parts = part_ptr + pid * 2 * NC * PW
    for k in range(0, bw):
        x, tail, row_k, proj = column_sums(P, rows, cols, k)
        mine = parts + (k % 2) * NC * PW + p * PW
        tl.store(mine + cols, row_k)
        tl.store(mine + BB + cols, proj)
        # Barrier: every program's partial sums for reflector k are in memory.
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid, 1, sem="release") + 1
        while arrived < (k + 1) * NC:
            arrived = tl.atomic_add(count_ptr + pid, 0, sem="acquire")
        tl.debug_barrier()
        slot = parts + (k % 2) * NC * PW
        row_k = tl.zeros((BB,), dtype=tl.float32)
        proj = tl.zeros((BB,), dtype=tl.float32)
        for q in tl.static_range(NC):
            row_k += tl.load(slot + q * PW + cols, cache_modifier=".cg")
            proj += tl.load(slot + q * PW + BB + cols, cache_modifier=".cg")
        P, T, taus = reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k)
    tl.store(dst_ptr + pid * n * n + offs, P, mask=in_panel)
    store_v(v_ptr, P, rows, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld)
    if p == 0:
        tl.store(tau_ptr + pid * n + tau_off + cols, taus, mask=cols < bw)
        if WRITE_T:
            tl.store(t_ptr + pid * t_bs + cols[:, None] * t_ld + cols[None, :], T)


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def coop_programs_allowed(programs: int, batch: int, device) -> int:
    """The program count actually used: all programs must be co-resident, and the
    interpreter (programs run one after another) can only run one."""
    if interpreted() or device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    while programs > 1 and batch * programs > sms:
        programs //= 2
    return programs


def coop_panel(src, dst, tau, T, V, j, bw, *, programs, num_warps, v_col_off=0, v_row_off=None):
    """householder_panel's contract, with the panel's rows split over `programs` programs."""
    batch, n, _ = dst.shape
    L = n - j
    NC = coop_programs_allowed(programs, batch, dst.device)
    BR = triton.next_power_of_2(triton.cdiv(L, NC))
    BB = max(16, triton.next_power_of_2(bw))
    parts = scratch("coop_parts", (batch, 2, NC, 2 * BB), torch.float32, dst.device)
    count = scratch("coop_count", (batch,), torch.int32, dst.device).zero_()
    coop_panel_kernel[(NC, batch)](
        src, dst, tau, T if T is not None else tau, V, parts, count,
        n, L, bw, j * n + j, j, T.stride(0) if T is not None else 0, T.stride(1) if T is not None else 0,
        j if v_row_off is None else v_row_off, v_col_off, V.shape[2],
        NC=NC, BR=BR, BB=BB, WRITE_T=T is not None, num_warps=pick_warps(num_warps, BR),
    )
