"""The cooperative panel: NC programs per matrix share a tall panel's rows.

A panel too tall for one program's registers (thousands of rows, tiny batch)
is split by rows over NC programs that each keep their slice in registers.
Once per reflector they exchange, through global memory, exactly what the
reflector needs (panel.py explains why it suffices): row k of the panel and
proj = sum over rows r > k of x_r * panel[r, :]. Every program sums the NC
partials and applies the reflector to its own rows.
The exchange (CoopKnobs.exchange) is an atomic counter per matrix as the
barrier, or a slot per reflector whose words start as a sentinel and are
polled until all are written. Either way the programs wait on each other, so
all NC programs of a matrix must be resident at once (batch * NC well under the
SM count) and the interpreter, which runs programs one after another, can only
run NC = 1.
"""
import torch
import triton
import triton.language as tl

from .launch import interpreted, pdl_launch, wait_for_previous
from .panel import by_rows, column_sums, load_slice, padded_width, reflect, store_v
from .scratch import scratch


# A NaN with a payload no arithmetic produces (NVIDIA GPUs return the canonical NaN
# 0x7FFFFFFF): a slot word still holding it has not been written for this launch.
SLOT_SENTINEL = tl.constexpr(0x7FC0DEAD)


@triton.jit
def exchange_counter(part_ptr, count_ptr, pid, p, k, row_k, proj, cols, NC: tl.constexpr, BB: tl.constexpr):
    """Sum row_k and proj over the NC programs of matrix pid: partials through two alternating
    slots (a fast program never overwrites partials a slow one still reads), an atomic counter
    as the barrier, then one more read of the partials."""
    PW: tl.constexpr = 2 * BB
    parts = part_ptr + pid * 2 * NC * PW
    mine = parts + (k % 2) * NC * PW + p * PW
    tl.store(mine + cols, row_k)
    tl.store(mine + BB + cols, proj)
    tl.debug_barrier()  # every thread's share of this program's partials is stored
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
    return row_k, proj


@triton.jit
def unwritten(words):
    """How many of the words still hold SLOT_SENTINEL."""
    return tl.sum((words.to(tl.int32, bitcast=True) == SLOT_SENTINEL).to(tl.int32))


@triton.jit
def exchange_slots(slot_ptr, pid, p, k, row_k, proj, cols, NC: tl.constexpr, BB: tl.constexpr):
    """Sum row_k and proj over the NC programs of matrix pid through reflector k's own slot,
    filled with SLOT_SENTINEL before the launch: each program writes its partials and polls
    the slot's words themselves until none holds the sentinel. No atomics, and the poll that
    ends the wait already brings the partials."""
    PW: tl.constexpr = 2 * BB
    slot = slot_ptr + (pid * BB + k) * NC * PW
    tl.store(slot + p * PW + cols, row_k)
    tl.store(slot + p * PW + BB + cols, proj)
    words = tl.arange(0, NC)[:, None] * PW + cols[None, :]
    row_parts = tl.zeros((NC, BB), dtype=tl.float32)  # Triton's loops carry only what exists before them
    proj_parts = tl.zeros((NC, BB), dtype=tl.float32)
    waiting = 1
    while waiting > 0:
        row_parts = tl.load(slot + words, volatile=True)
        proj_parts = tl.load(slot + BB + words, volatile=True)
        waiting = unwritten(row_parts) + unwritten(proj_parts)
    return tl.sum(row_parts, axis=0), tl.sum(proj_parts, axis=0)


@triton.jit
def coop_step(P, T, taus, rows, cols, k, part_ptr, count_ptr, pid, p, NC: tl.constexpr, BB: tl.constexpr,
              SLOTS: tl.constexpr, BELOW: tl.constexpr):
    """Reflector k on this program's rows, its sums exchanged with the matrix's other programs
    (BELOW: this program's rows all lie below the panel's diagonal, panel.row_masks)."""
    x, tail, row_k, proj = column_sums(P, rows, cols, k, BELOW)
    if SLOTS:
        row_k, proj = exchange_slots(part_ptr, pid, p, k, row_k, proj, cols, NC, BB)
    else:
        row_k, proj = exchange_counter(part_ptr, count_ptr, pid, p, k, row_k, proj, cols, NC, BB)
    return reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, BELOW)


@triton.jit
def coop_reflectors(P, T, taus, rows, cols, bw, part_ptr, count_ptr, pid, p, NC: tl.constexpr,
                    BB: tl.constexpr, SLOTS: tl.constexpr, UNROLL: tl.constexpr, BELOW: tl.constexpr):
    """The panel's reflector loop on this program's rows (UNROLL as householder_panel_kernel's)."""
    if UNROLL == 0:
        for k in range(0, bw):
            P, T, taus = coop_step(P, T, taus, rows, cols, k, part_ptr, count_ptr, pid, p, NC, BB, SLOTS, BELOW)
    else:
        for k0 in range(0, BB, UNROLL):
            for r in tl.static_range(UNROLL):
                P, T, taus = coop_step(P, T, taus, rows, cols, k0 + r, part_ptr, count_ptr, pid, p, NC, BB,
                                       SLOTS, BELOW)
    return P, T, taus


@triton.jit
def coop_panel_kernel(
    src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, part_ptr, count_ptr,
    n, L, bw, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
    NC: tl.constexpr, BR: tl.constexpr, BB: tl.constexpr, WRITE_T: tl.constexpr, FULL: tl.constexpr,
    SLOTS: tl.constexpr, UNROLL: tl.constexpr, PDL: tl.constexpr,
):
    """Grid: (NC, batch). Program (p, i) owns panel rows [p*BR, (p+1)*BR) of matrix i.

    Arguments as householder_panel_kernel's, plus the exchange's buffers. SLOTS
    (CoopKnobs.exchange == "slots"): part_ptr is batch x BB x NC x 2*BB fp32 (a slot per
    reflector, every word SLOT_SENTINEL at launch) and count_ptr is unused. Otherwise
    part_ptr is batch x 2 x NC x 2*BB fp32 (row_k then proj, two alternating slots) and
    count_ptr batch int32 counters, zero at launch. UNROLL as householder_panel_kernel's
    (the exchange slots are indexed by k, so the extra zero columns of a narrow panel use
    slots that exist: there are BB of them). Invariants: NC, BR, BB powers of two,
    BB >= 16, BR >= BB, NC * BR >= L, and all NC programs of a matrix co-resident.
    PDL: launch.wait_for_previous first (before any program spins on another).
    """
    wait_for_previous(PDL)
    p = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    rows = p * BR + tl.arange(0, BR)
    cols = tl.arange(0, BB)
    P, offs, in_panel, T, taus = load_slice(src_ptr, pid, n, panel_off, rows, cols, L, bw, BB, FULL)
    # Program 0 holds the panel's diagonal; the others' rows all lie below it (BR >= BB),
    # which lets the compiler fold their row masks (panel.row_masks).
    if p == 0:  # rows as a constant range (p * BR is zero here), so its masks fold as the panel's do
        P, T, taus = coop_reflectors(P, T, taus, tl.arange(0, BR), cols, bw, part_ptr, count_ptr, pid, p, NC, BB,
                                     SLOTS, UNROLL, False)
    else:
        P, T, taus = coop_reflectors(P, T, taus, rows, cols, bw, part_ptr, count_ptr, pid, p, NC, BB, SLOTS,
                                     UNROLL, True)
    tl.store(dst_ptr + pid * n * n + offs, P, mask=in_panel)
    store_v(v_ptr, P, rows, cols, L, bw, pid, n, v_row_off, v_col_off, v_ld, False)
    if p == 0:
        tl.store(tau_ptr + pid * n + tau_off + cols, taus, mask=cols < bw)
        if WRITE_T:
            tl.store(t_ptr + pid * t_bs + cols[:, None] * t_ld + cols[None, :], T)



def resident_programs(programs: int, batch: int, sms: int) -> int:
    """The most programs per matrix, halving from `programs`, whose batch * programs fit one
    per SM: programs spin on each other, so all of them must be resident at once."""
    while programs > 1 and batch * programs > sms:
        programs //= 2
    return programs


def coop_programs_allowed(programs: int, batch: int, device) -> int:
    """The program count actually used: resident_programs on a GPU; one in the interpreter,
    which runs programs one after another."""
    if interpreted() or device.type != "cuda":
        return 1
    return resident_programs(programs, batch, torch.cuda.get_device_properties(device).multi_processor_count)


def coop_panel(src, dst, tau, T, V, j, bw, *, programs, exchange, knobs, v_col_off=0, v_row_off=None):
    """householder_panel's contract, with the panel's rows split over `programs` programs
    (CoopKnobs.programs, fewer where they would not all be resident) that sum their partials
    per reflector by CoopKnobs.exchange ("counter" or "slots"). `knobs` (PanelKnobs) gives
    num_warps by the rows one program holds, and unroll."""
    batch, n, _ = dst.shape
    L = n - j
    NC = coop_programs_allowed(programs, batch, dst.device)
    BB = padded_width(bw)
    BR = max(BB, triton.next_power_of_2(triton.cdiv(L, NC)))
    count = scratch("coop_count", (batch,), torch.int32, dst.device)
    if exchange == "slots":
        parts = scratch("coop_slots", (batch, BB, NC, 2 * BB), torch.float32, dst.device)
        parts.view(torch.int32).fill_(SLOT_SENTINEL.value)
    else:
        parts = scratch("coop_parts", (batch, 2, NC, 2 * BB), torch.float32, dst.device)
        count.zero_()
    coop_panel_kernel[(NC, batch)](
        src, dst, tau, T if T is not None else tau, V, parts, count,
        n, L, bw, j * n + j, j, T.stride(0) if T is not None else 0, T.stride(1) if T is not None else 0,
        j if v_row_off is None else v_row_off, v_col_off, V.shape[2],
        NC=NC, BR=BR, BB=BB, WRITE_T=T is not None, FULL=bw == BB, SLOTS=exchange == "slots",
        UNROLL=knobs.unroll, num_warps=by_rows(knobs.num_warps, BR), **pdl_launch(),
    )
