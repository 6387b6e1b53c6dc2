"""The cooperative panel: NC programs per matrix share a tall panel's rows.

A panel too tall for one program's registers (thousands of rows, tiny batch)
is split by rows over NC programs that each keep their slice in registers.
Once per reflector they exchange, through global memory, exactly what the
reflector needs (panel.py explains why it suffices): row k of the panel and
proj = sum over rows r > k of x_r * panel[r, :]. Every program sums the NC
partials and applies the reflector to its own rows.
The exchange (CoopKnobs.exchange) is an atomic counter per matrix as the
barrier, or a slot per reflector whose words start as a sentinel and are
polled until all are written: by the whole program (slots), whose loop test is
a reduction across its warps, or by each thread alone for its own words (spin).
Either way the programs wait on each other, so all NC programs of a matrix must
be resident at once (batch * NC well under the SM count) and the interpreter,
which runs programs one after another, can only run NC = 1.
"""
import torch
import triton
import triton.language as tl

from .launch import interpreted, pdl_launch, wait_for_previous
from .panel import (approx_reciprocals, column_sums, grouped_reflect, grouped_sums, load_slice, reflect, row_slices,
                    store_v)
from .plan import SLOT_EXCHANGES
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
def ring_slot(k, first, NSLOTS: tl.constexpr, RESET: tl.constexpr):
    """The slot reflector k exchanges through: the k-th from this launch's first, which is 0
    with host fills and BB or 0 with CoopKnobs.slot_reset parity (this launch's set); with RESET
    (slot_reset kernel) the k-th of the ring of NSLOTS = BB + 1 slots from first (k = -1: the
    slot before first)."""
    if RESET:
        slot = first + k  # first < NSLOTS and -1 <= k < NSLOTS: one wrap either way, no division
        return tl.where(slot >= NSLOTS, slot - NSLOTS, tl.where(slot < 0, slot + NSLOTS, slot))
    else:
        return first + k


@triton.jit
def clear_own_words(slot_ptr, pid, p, slot, cols, when, NC: tl.constexpr, BB: tl.constexpr, NSLOTS: tl.constexpr):
    """Set this program's row_k and proj words of `slot` (the values cols, as the exchange stored
    them: the same threads) back to SLOT_SENTINEL where `when`."""
    PW: tl.constexpr = 2 * BB
    mine = slot_ptr + ((pid * NSLOTS + slot) * NC + p) * PW
    sentinel = (tl.full(cols.shape, SLOT_SENTINEL, tl.int32)).to(tl.float32, bitcast=True)
    keep = (cols >= 0) & when
    tl.store(mine + cols, sentinel, mask=keep)
    tl.store(mine + BB + cols, sentinel, mask=keep)


@triton.jit
def clear_own_set(slot_ptr, pid, p, start, NC: tl.constexpr, BB: tl.constexpr, NSLOTS: tl.constexpr):
    """With CoopKnobs.slot_reset parity: this program's words of the BB slots from `start` (the
    set the launch before used) back to SLOT_SENTINEL, in one store."""
    PW: tl.constexpr = 2 * BB
    slots = start + tl.arange(0, BB)
    mine = slot_ptr + ((pid * NSLOTS + slots[:, None]) * NC + p) * PW + tl.arange(0, PW)[None, :]
    tl.store(mine, tl.full((BB, PW), SLOT_SENTINEL, tl.int32).to(tl.float32, bitcast=True))


@triton.jit
def clear_previous_slot(slot_ptr, pid, p, k, first, cols, NC: tl.constexpr, BB: tl.constexpr,
                        NSLOTS: tl.constexpr, RESET: tl.constexpr):
    """With RESET, once reflector k's exchange is done: this program's words of reflector k - 1's
    slot back to the sentinel. Every other program wrote its words of slot k only after it had
    read all of slot k - 1 (and passed the barrier after), so nobody reads them again."""
    if RESET:
        clear_own_words(slot_ptr, pid, p, ring_slot(k - 1, first, NSLOTS, RESET), cols, k > 0, NC, BB, NSLOTS)


@triton.jit
def exchange_slots(slot_ptr, pid, p, k, row_k, proj, cols, first, NC: tl.constexpr, BB: tl.constexpr,
                   NSLOTS: tl.constexpr, RESET: tl.constexpr):
    """Sum row_k and proj over the NC programs of matrix pid through reflector k's own slot
    (ring_slot), every word SLOT_SENTINEL until written: each program writes its partials and
    polls the slot's words themselves until none holds the sentinel. No atomics, and the poll
    that ends the wait already brings the partials. RESET: clear_previous_slot after."""
    PW: tl.constexpr = 2 * BB
    slot = slot_ptr + (pid * NSLOTS + ring_slot(k, first, NSLOTS, RESET)) * NC * PW
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
    clear_previous_slot(slot_ptr, pid, p, k, first, cols, NC, BB, NSLOTS, RESET)
    return tl.sum(row_parts, axis=0), tl.sum(proj_parts, axis=0)


# exchange spin builds its inline PTX at compile time through triton.constexpr_function (Triton
# 3.5 on; the H200 runs 3.6). Without it this module still imports, and coop_panel refuses spin.
HAS_CONSTEXPR_FUNCTION = hasattr(triton, "constexpr_function")
compile_time = triton.constexpr_function if HAS_CONSTEXPR_FUNCTION else (lambda fn: fn)


@compile_time
def settled_sums_ptx(nc, bb, pack):
    """Inline PTX for exchange_spin, PACK values a thread, every operand 32 bits (Triton 3.6 left
    three of four packed 64-bit pointer operands undefined; packed 32-bit operands it numbers
    plainly: each operand's PACK values in turn). Outputs: $e value e's row_k, $(PACK + e) its
    proj, each summed over the programs in program order. Inputs: $(2 PACK + e) the byte offset
    of value e's row_k word in program 0's partials; $(3 PACK) and $(4 PACK) the low and high
    halves of the slot's address (the same in every copy); a fourth input the PTX never reads
    (exchange_spin says why). A value's proj word lies 4 BB bytes after its row_k word, and
    program q's copies 8 BB q bytes after program 0's. The loop loads all 2 NC PACK words at once
    and loads them all again while any still holds SLOT_SENTINEL, so that a thread waits one round
    trip to memory when its partners were first, and on nobody else."""
    count = 2 * nc * pack  # word i: value i // (2 nc), part i // nc % 2 (row_k, proj), program i % nc
    sentinel = f"{SLOT_SENTINEL.value:#x}"
    ptx = ["{", ".reg .pred unwritten;", f".reg .b32 w<{count}>;", f".reg .b64 base, at<{pack}>;",
           f"mov.b64 base, {{${3 * pack}, ${4 * pack}}};"]
    ptx += [f"cvt.u64.u32 at{e}, ${2 * pack + e}; add.s64 at{e}, at{e}, base;" for e in range(pack)]
    ptx.append("again${:uid}:")
    ptx += [f"ld.volatile.global.b32 w{i}, [at{i // (2 * nc)}+{8 * bb * (i % nc) + 4 * bb * (i // nc % 2)}];"
            for i in range(count)]
    ptx.append(f"setp.eq.b32 unwritten, w0, {sentinel};")
    ptx += [f"setp.eq.or.b32 unwritten, w{i}, {sentinel}, unwritten;" for i in range(1, count)]
    ptx.append("@unwritten bra again${:uid};")
    # Each part's sum into its program-0 word, then out.
    ptx += [f"add.f32 w{i - i % nc}, w{i - i % nc}, w{i};" for i in range(count) if i % nc]
    ptx += [f"mov.b32 ${e}, w{2 * nc * e}; mov.b32 ${pack + e}, w{2 * nc * e + nc};" for e in range(pack)]
    ptx.append("}")
    return tl.constexpr(" ".join(ptx))


@compile_time
def settled_sums_constraints(pack):
    """settled_sums_ptx's operands: two 32-bit outputs, then four 32-bit inputs (each PACK wide)."""
    return tl.constexpr(",".join(["=r"] * (2 * pack) + ["r"] * (4 * pack)))


@triton.jit
def exchange_spin(slot_ptr, pid, p, k, row_k, proj, cols, first, NC: tl.constexpr, BB: tl.constexpr,
                  SPIN: tl.constexpr, NSLOTS: tl.constexpr, RESET: tl.constexpr):
    """exchange_slots' sums without a reduction across the program while it waits: each thread
    polls the words of its own values, SPIN of them at once (settled_sums_ptx), and adds the NC
    partials in program order, the same in every program. cols: the column of each value of row_k
    and proj (any shape: the grouped program's is (G, 4)); SPIN must divide the values a thread
    holds. SPIN 0 (the interpreter, one program): one plain load of each word. The barrier
    after it brings the warps together again, which keeps ptxas from guarding the shuffles that
    follow against diverged warps.

    The loop also takes this program's row_k, which it never reads: with inputs made only of
    constants and the slot's address, Triton 3.6 rebuilt the whole loop in each layout its
    results are used in (4 loops a reflector, one round trip each, one after another: ptxas, 1,024
    x 16 grouped, 8 warps); an input that already has one layout pins the loop to it, and the
    results are converted instead. The slot, and RESET's clearing after, as exchange_slots'."""
    PW: tl.constexpr = 2 * BB
    slot = slot_ptr + (pid * NSLOTS + ring_slot(k, first, NSLOTS, RESET)) * NC * PW
    tl.store(slot + p * PW + cols, row_k)
    tl.store(slot + p * PW + BB + cols, proj)
    if SPIN > 0:
        address = tl.full(cols.shape, 0, tl.int64) + tl.cast(slot, tl.int64)
        row_sum, proj_sum = tl.inline_asm_elementwise(
            settled_sums_ptx(NC, BB, SPIN), settled_sums_constraints(SPIN),
            [cols * 4, address.to(tl.int32), (address >> 32).to(tl.int32), row_k.to(tl.int32, bitcast=True)],
            dtype=(tl.float32, tl.float32), is_pure=False, pack=SPIN)
        tl.debug_barrier()
    else:
        row_sum = tl.load(slot + cols)
        proj_sum = tl.load(slot + BB + cols)
        for q in tl.static_range(1, NC):
            row_sum += tl.load(slot + q * PW + cols)
            proj_sum += tl.load(slot + q * PW + BB + cols)
    clear_previous_slot(slot_ptr, pid, p, k, first, cols, NC, BB, NSLOTS, RESET)
    return row_sum, proj_sum


@triton.jit
def exchange(part_ptr, count_ptr, pid, p, k, row_k, proj, cols, first, NC: tl.constexpr, BB: tl.constexpr,
             EXCHANGE: tl.constexpr, SPIN: tl.constexpr, NSLOTS: tl.constexpr, RESET: tl.constexpr):
    """row_k and proj summed over the NC programs of matrix pid, by CoopKnobs.exchange (slots
    and spin through the ring's slots from `first`: ring_slot)."""
    if EXCHANGE == "spin":
        return exchange_spin(part_ptr, pid, p, k, row_k, proj, cols, first, NC, BB, SPIN, NSLOTS, RESET)
    elif EXCHANGE == "slots":  # flat (BB,) for the slots: the grouped slices hold (G, 4)
        row_k, proj = exchange_slots(part_ptr, pid, p, k, tl.reshape(row_k, (BB,)), tl.reshape(proj, (BB,)),
                                     tl.arange(0, BB), first, NC, BB, NSLOTS, RESET)
        return tl.reshape(row_k, cols.shape), tl.reshape(proj, cols.shape)
    else:
        return exchange_counter(part_ptr, count_ptr, pid, p, k, row_k, proj, cols, NC, BB)


@triton.jit
def coop_step(P, T, taus, rows, cols, k, part_ptr, count_ptr, pid, p, first, NC: tl.constexpr, BB: tl.constexpr,
              EXCHANGE: tl.constexpr, BELOW: tl.constexpr, GROUPED: tl.constexpr, SHUFFLE: tl.constexpr,
              SPIN: tl.constexpr, APPROX: tl.constexpr, NSLOTS: tl.constexpr, RESET: tl.constexpr):
    """Reflector k on this program's rows, its sums exchanged with the matrix's other programs
    (BELOW: this program's rows all lie below the panel's diagonal, panel.row_masks). GROUPED:
    the slice held as (BR, G, 4) (panel.grouped_sums and grouped_reflect, SHUFFLE their
    broadcast); T and tau only where they are stored, in the program with the diagonal.
    APPROX: panel.reflector's. first, NSLOTS, RESET: the exchange's ring (ring_slot)."""
    if GROUPED:
        x, tail, row_k, proj = grouped_sums(P, rows, cols, k, SHUFFLE, 0, BELOW)
    else:
        x, tail, row_k, proj = column_sums(P, rows, cols, k, BELOW)
    row_k, proj = exchange(part_ptr, count_ptr, pid, p, k, row_k, proj, cols, first, NC, BB, EXCHANGE, SPIN,
                           NSLOTS, RESET)
    if GROUPED:
        return grouped_reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, 0, BELOW, not BELOW, APPROX)
    else:
        return reflect(P, T, taus, x, tail, row_k, proj, rows, cols, k, BELOW, APPROX)


@triton.jit
def coop_reflectors(P, T, taus, rows, cols, bw, part_ptr, count_ptr, pid, p, first, NC: tl.constexpr,
                    BB: tl.constexpr, EXCHANGE: tl.constexpr, UNROLL: tl.constexpr, BELOW: tl.constexpr,
                    GROUPED: tl.constexpr, SHUFFLE: tl.constexpr, SPIN: tl.constexpr, APPROX: tl.constexpr,
                    NSLOTS: tl.constexpr, RESET: tl.constexpr):
    """The panel's reflector loop on this program's rows (UNROLL and APPROX as householder_panel_kernel's;
    first, NSLOTS, RESET: coop_step's)."""
    if UNROLL == 0:
        for k in range(0, bw):
            P, T, taus = coop_step(P, T, taus, rows, cols, k, part_ptr, count_ptr, pid, p, first, NC, BB, EXCHANGE,
                                   BELOW, GROUPED, SHUFFLE, SPIN, APPROX, NSLOTS, RESET)
    else:
        for k0 in range(0, BB, UNROLL):
            for r in tl.static_range(UNROLL):
                P, T, taus = coop_step(P, T, taus, rows, cols, k0 + r, part_ptr, count_ptr, pid, p, first, NC,
                                       BB, EXCHANGE, BELOW, GROUPED, SHUFFLE, SPIN, APPROX, NSLOTS, RESET)
    return P, T, taus


@triton.jit
def coop_panel_kernel(
    src_ptr, dst_ptr, tau_ptr, t_ptr, v_ptr, part_ptr, count_ptr,
    n, L, bw, panel_off, tau_off, t_bs, t_ld, v_row_off, v_col_off, v_ld,
    NC: tl.constexpr, BR: tl.constexpr, BB: tl.constexpr, WRITE_T: tl.constexpr, FULL: tl.constexpr,
    EXCHANGE: tl.constexpr, UNROLL: tl.constexpr, GROUPED: tl.constexpr, SHUFFLE: tl.constexpr,
    SPIN: tl.constexpr, PDL: tl.constexpr, APPROX: tl.constexpr, NSLOTS: tl.constexpr, RESET: tl.constexpr,
    PARITY: tl.constexpr,
):
    """Grid: (NC, batch). Program (p, i) owns panel rows [p*BR, (p+1)*BR) of matrix i.

    Arguments as householder_panel_kernel's, plus the exchange's buffers. EXCHANGE
    (CoopKnobs.exchange) slots or spin: part_ptr is batch x BB x NC x 2*BB fp32 (a slot per
    reflector, every word SLOT_SENTINEL at launch) and count_ptr is unused; SPIN: the values a
    thread polls at once in spin's PTX loop (settled_sums_ptx; 0 in the interpreter). counter:
    part_ptr is batch x 2 x NC x 2*BB fp32 (row_k then proj, two alternating slots) and count_ptr
    batch int32 counters, zero at launch. UNROLL
    as householder_panel_kernel's (the exchange slots are indexed by k, so the extra zero columns
    of a narrow panel use slots that exist: there are BB of them). GROUPED (CoopKnobs.broadcast
    shuffle, where panel.shuffle_layout_holds for a slice): the slice held as (BR, G, 4) as
    panel_program_grouped holds its tile, SHUFFLE its indexed shuffle. Invariants: NC, BR, BB
    powers of two, BB >= 16, BR >= BB, NC * BR >= L, and all NC programs of a matrix co-resident.
    PDL: launch.wait_for_previous first (before any program spins on another). APPROX
    (PanelKnobs.reciprocal approx): the reflectors' reciprocals by the hardware's alone
    (panel.reflector).

    RESET (CoopKnobs.slot_reset kernel): part_ptr is a ring of NSLOTS = BB + 1 slots a matrix
    and count_ptr counts matrix i's launches so far. Launch t exchanges reflector k through slot
    (s_t + k) mod NSLOTS, with s_t = -t mod NSLOTS: each launch starts one slot before the last,
    so it skips the one slot the launch before left written (its last), and clears it; every
    other slot is cleared inside the launch that used it (clear_previous_slot). The ring is
    all SLOT_SENTINEL when first allocated. Program 0 counts the launch once its last exchange
    is done: every program has read the count by then (each wrote its last slot after).

    PARITY (CoopKnobs.slot_reset parity): part_ptr holds two sets of BB slots a matrix (NSLOTS =
    2 * BB) and count_ptr counts matrix i's launches. Launch t exchanges through set t mod 2 and
    first sets its own words of the other set, which launch t - 1 used and left written, back to
    the sentinel (clear_own_set): launch t - 1 has ended, and launch t + 1 finds them clean. No
    clearing inside the reflector loop. Both sets are all SLOT_SENTINEL when first allocated, and
    program 0 counts the launch as with RESET.
    """
    wait_for_previous(PDL)
    p = tl.program_id(0)
    pid = tl.program_id(1).to(tl.int64)
    first = 0
    if RESET:
        first = (NSLOTS - tl.load(count_ptr + pid) % NSLOTS) % NSLOTS
        clear_own_words(part_ptr, pid, p, ring_slot(-1, first, NSLOTS, RESET), tl.arange(0, BB), True, NC, BB,
                        NSLOTS)
    if PARITY:
        first = (tl.load(count_ptr + pid) % 2) * BB
        clear_own_set(part_ptr, pid, p, BB - first, NC, BB, NSLOTS)
    rows = p * BR + tl.arange(0, BR)
    cols = tl.arange(0, BB)
    P, offs, in_panel, T, taus = load_slice(src_ptr, pid, n, panel_off, rows, cols, L, bw, BB, FULL)
    first_rows, slice_rows, loop_cols = tl.arange(0, BR), rows, cols
    if GROUPED:
        G: tl.constexpr = BB // 4
        P = tl.reshape(P, (BR, G, 4))
        T = tl.zeros((BB, G, 4), dtype=tl.float32)
        taus = tl.zeros((G, 4), dtype=tl.float32)
        first_rows, slice_rows = first_rows[:, None], rows[:, None]
        loop_cols = tl.arange(0, G)[:, None] * 4 + tl.arange(0, 4)[None, :]
    # Program 0 holds the panel's diagonal; the others' rows all lie below it (BR >= BB),
    # which lets the compiler fold their row masks (panel.row_masks).
    if p == 0:  # rows as a constant range (p * BR is zero here), so its masks fold as the panel's do
        P, T, taus = coop_reflectors(P, T, taus, first_rows, loop_cols, bw, part_ptr, count_ptr, pid, p, first, NC,
                                     BB, EXCHANGE, UNROLL, False, GROUPED, SHUFFLE, SPIN, APPROX, NSLOTS, RESET)
        if RESET or PARITY:
            tl.atomic_add(count_ptr + pid, 1)
    else:
        P, T, taus = coop_reflectors(P, T, taus, slice_rows, loop_cols, bw, part_ptr, count_ptr, pid, p, first, NC,
                                     BB, EXCHANGE, UNROLL, True, GROUPED, SHUFFLE, SPIN, APPROX, NSLOTS, RESET)
    if GROUPED:
        P = tl.reshape(P, (BR, BB))
        T = tl.reshape(T, (BB, BB))
        taus = tl.reshape(taus, (BB,))
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


def spin_width() -> int:
    """exchange_spin's values a thread polls at once: 4, what every layout of the cooperative
    slices gives a thread (summing or grouped, 16 or 32 columns, 1 to 8 warps: the CPU tests
    compile them for sm_90 and count one poll a reflector). Triton passes a thread holding fewer
    undefined operands, silently. 0 in the interpreter, which cannot run inline assembly."""
    return 0 if interpreted() else 4


def coop_programs_allowed(programs: int, batch: int, device) -> int:
    """The program count actually used: resident_programs on a GPU; one in the interpreter,
    which runs programs one after another."""
    if interpreted() or device.type != "cuda":
        return 1
    return resident_programs(programs, batch, torch.cuda.get_device_properties(device).multi_processor_count)


def coop_panel(src, dst, tau, T, V, j, bw, *, programs, exchange, knobs, broadcast="sum", v_col_off=0,
               v_row_off=None, slot_reset="host"):
    """householder_panel's contract, with the panel's rows split over `programs` programs
    (CoopKnobs.programs, fewer where they would not all be resident) that sum their partials
    per reflector by CoopKnobs.exchange ("counter", "slots" or "spin"). `knobs` (PanelKnobs) gives
    num_warps by the rows one program holds, and unroll. broadcast (CoopKnobs.broadcast) shuffle
    holds each slice as column groups where panel.shuffle_layout_holds (exchange slots or spin).
    slot_reset (CoopKnobs.slot_reset) kernel: the slots as coop_panel_kernel's ring, no fill;
    parity: two sets of slots, each launch clearing the one the launch before used, no fill."""
    batch, n, _ = dst.shape
    L = n - j
    NC = coop_programs_allowed(programs, batch, dst.device)
    BB, BR, num_warps, grouped = row_slices(n, j, bw, NC, knobs, broadcast)
    if exchange == "spin" and not HAS_CONSTEXPR_FUNCTION:
        raise RuntimeError(f"coop.exchange spin needs triton.constexpr_function (Triton 3.5 or later); "
                           f"this is Triton {triton.__version__}: use exchange slots")
    if broadcast == "shuffle" and exchange == "counter":
        raise ValueError("coop broadcast shuffle needs exchange slots or spin, got counter")
    reset, parity = slot_reset == "kernel", slot_reset == "parity"
    if reset and (exchange not in SLOT_EXCHANGES or knobs.unroll == 0):
        raise ValueError(f"coop slot_reset kernel needs exchange slots or spin and panel.unroll > 0, got "
                         f"exchange {exchange}, unroll {knobs.unroll}")
    if parity and exchange not in SLOT_EXCHANGES:
        raise ValueError(f"coop slot_reset parity needs exchange slots or spin, got exchange {exchange}")
    if reset or parity:
        parts, count = slot_ring(batch, BB, NC, dst.device, slot_reset)
    else:
        count = scratch("coop_count", (batch,), torch.int32, dst.device)
        if exchange in SLOT_EXCHANGES:
            parts = scratch("coop_slots", (batch, slots_a_matrix(BB, "host"), NC, 2 * BB), torch.float32, dst.device)
            fill_sentinel(parts)
        else:
            parts = scratch("coop_parts", (batch, 2, NC, 2 * BB), torch.float32, dst.device)
            count.zero_()
    coop_panel_kernel[(NC, batch)](
        src, dst, tau, T if T is not None else tau, V, parts, count,
        n, L, bw, j * n + j, j, T.stride(0) if T is not None else 0, T.stride(1) if T is not None else 0,
        j if v_row_off is None else v_row_off, v_col_off, V.shape[2],
        NC=NC, BR=BR, BB=BB, WRITE_T=T is not None, FULL=bw == BB, EXCHANGE=exchange, UNROLL=knobs.unroll,
        GROUPED=grouped, SHUFFLE=grouped and not interpreted(), SPIN=spin_width(),
        APPROX=approx_reciprocals(knobs.reciprocal), NSLOTS=slots_a_matrix(BB, slot_reset), RESET=reset,
        PARITY=parity,
        num_warps=num_warps, **pdl_launch(),
    )


def fill_sentinel(slots: torch.Tensor):
    """Every word of the exchange's fp32 slots set to SLOT_SENTINEL's bits: not yet written."""
    slots.view(torch.int32).fill_(SLOT_SENTINEL.value)


def slots_a_matrix(BB: int, slot_reset: str) -> int:
    """The exchange's slots a matrix by CoopKnobs.slot_reset: one a reflector with host fills, a
    ring of BB + 1 (kernel), two sets of BB (parity)."""
    return {"host": BB, "kernel": BB + 1, "parity": 2 * BB}[slot_reset]


def slot_ring(batch: int, BB: int, NC: int, device, slot_reset: str = "kernel"):
    """coop_panel_kernel's slots for slot_reset kernel (a ring of BB + 1) or parity (two sets of
    BB): (slots, launch counts), every word the sentinel when allocated. The counts are the
    slots' own (their position follows their launches alone), so they are keyed by the shape."""
    shape = (batch, slots_a_matrix(BB, slot_reset), NC, 2 * BB)
    ring = scratch(f"coop_{slot_reset}_slots", shape, torch.float32, device, init=fill_sentinel)
    count = scratch(f"coop_{slot_reset}_launches_{BB}_{NC}", (batch,), torch.int32, device, init=torch.Tensor.zero_)
    return ring, count
