"""The cooperative panel: its reduction scheme in torch for several programs, and the
kernel itself through the interpreter with one program (programs spin on each other,
which the interpreter, running them one after another, cannot do; test_gpu_kernels.py
runs 2, 4 and 8 programs on a GPU)."""

import pytest
import torch
from kernel_helpers import route, sass_loop_lines, special_matrices

from qrsub.kernels.coop import SLOT_SENTINEL, coop_panel, resident_programs, spin_width
from qrsub.kernels.naive import coop_panel_ref, panel_ref
from qrsub.kernels.panel import shuffle_layout_holds
from qrsub.kernels.plan import PanelKnobs


@pytest.mark.parametrize("programs", [1, 2, 3, 8])
@pytest.mark.parametrize("L,b", [(40, 8), (33, 16), (7, 4)])
def test_partial_sums_reproduce_the_panel(programs, L, b):
    A = special_matrices(L).double().cpu()
    for i in range(A.shape[0]):
        P, tau = coop_panel_ref(A[i, :, :b], programs)
        P_ref, tau_ref, _, _ = panel_ref(A[i, :, :b])
        torch.testing.assert_close(P, P_ref)
        torch.testing.assert_close(tau, tau_ref)


def assert_matches_panel_ref(A, dst, tau, T, V, j, bw):
    """The factored panel columns [j, j+bw) of every matrix, tau, T and V against panel_ref's."""
    for i in range(A.shape[0]):
        P, tau_ref, T_ref, V_ref = panel_ref(A[i, j:, j:j + bw].double().cpu())
        torch.testing.assert_close(dst[i, j:, j:j + bw].double().cpu(), P, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(tau[i, j:j + bw].double().cpu(), tau_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(T[i].double().cpu(), T_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(V[i, j:].double().cpu(), V_ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("unroll", [0, 4])
@pytest.mark.parametrize("exchange", ["counter", "slots", "spin"])
def test_kernel_with_one_program_matches_reference(exchange, unroll):
    A = special_matrices(36)
    j, bw = 4, 16
    dst = A.clone()
    tau = torch.zeros(A.shape[0], 36, device=A.device)
    T = torch.zeros(A.shape[0], 16, 16, device=A.device)
    V = torch.zeros(A.shape[0], 36, 16, device=A.device)
    coop_panel(A, dst, tau, T, V, j, bw, programs=4, exchange=exchange, knobs=PanelKnobs(num_warps=4, unroll=unroll))
    assert_matches_panel_ref(A, dst, tau, T, V, j, bw)


@pytest.mark.parametrize("exchange", ["slots", "spin"])
@pytest.mark.parametrize("n,j,bw", [(64, 16, 16), (48, 0, 16), (80, 32, 32)])
def test_grouped_slices_match_reference(n, j, bw, exchange):
    """coop.broadcast shuffle: each slice held as column groups (panel.grouped_sums and
    grouped_reflect), sums exchanged by slots or spin. The interpreter runs one program and sums
    instead of shuffling (test_gpu_kernels.py runs several, shuffling)."""
    assert shuffle_layout_holds(n, j, bw, bw, 64, 4)
    A = special_matrices(n)
    dst = A.clone()
    tau = torch.zeros(A.shape[0], n, device=A.device)
    T = torch.zeros(A.shape[0], bw, bw, device=A.device)
    V = torch.zeros(A.shape[0], n, bw, device=A.device)
    coop_panel(A, dst, tau, T, V, j, bw, programs=4, exchange=exchange, broadcast="shuffle",
               knobs=PanelKnobs(num_warps=4, unroll=4))
    assert_matches_panel_ref(A, dst, tau, T, V, j, bw)
    torch.testing.assert_close(dst[:, :, :j], A[:, :, :j])  # columns left of the panel untouched


def test_grouped_slices_need_slots_or_spin():
    A = special_matrices(64)
    with pytest.raises(ValueError, match="needs exchange slots or spin"):
        coop_panel(A, A.clone(), torch.zeros(A.shape[0], 64), torch.zeros(A.shape[0], 16, 16),
                   torch.zeros(A.shape[0], 64, 16), 16, 16, programs=4, exchange="counter", broadcast="shuffle",
                   knobs=PanelKnobs(num_warps=4, unroll=4))


UNROLL = 4


@pytest.mark.parametrize("programs,rows,width,warps,grouped,full,arch,reset", [
    (4, 1024, 16, 8, True, True, 90, False), (4, 512, 16, 4, True, True, 90, False),  # giant, huge
    (2, 1024, 16, 8, True, True, 90, False),
    (8, 256, 32, 4, True, True, 90, False), (2, 1024, 32, 4, False, True, 90, False),  # twins
    (4, 512, 16, 4, False, False, 90, False), (2, 64, 16, 1, True, True, 90, False),
    # the champion's giant and huge panels compiled for the B200 (sm_100): no GPU here has run them
    (4, 1024, 16, 8, True, True, 100, False), (4, 512, 16, 4, True, True, 100, False),
    # ... and with the slots cleared by the kernel (coop.slot_reset kernel: the ring's slots; parity)
    (4, 1024, 16, 8, True, True, 90, "kernel"), (4, 512, 16, 4, True, True, 90, "kernel"),
    (4, 1024, 16, 8, True, True, 90, "parity"), (4, 512, 16, 4, True, True, 90, "parity"),
    (4, 1024, 16, 8, True, True, 100, "parity")])  # champion-b200-shuffle's giant route
def test_spin_polls_once_a_reflector_with_every_operand_defined(programs, rows, width, warps, grouped, full, arch,
                                                                reset, monkeypatch):
    """coop.exchange spin: the PTX loop (settled_sums_ptx) takes spin_width values a thread. The
    interpreter cannot run it, so this compiles the cooperative panel for sm_90, and for sm_100 (the
    B200) on the champion's shapes (tools/sass_loop.py,
    Triton's compiler, no GPU) and reads the PTX: one poll loop a reflector (UNROLL of them in
    each of the kernel's two loops, program 0's and the others'), loading every program's row_k and
    proj words of the thread's values, and no operand that nothing writes (Triton passes those
    where a thread holds fewer values than it packs). Without the unread row_k operand Triton
    built 4 loops a reflector, and a 64-bit pointer operand packed 4 came out undefined."""
    monkeypatch.setattr("qrsub.kernels.coop.interpreted", lambda: False)
    pack = spin_width()
    consts = dict(NC=programs, BR=rows, BB=width, WRITE_T=True, FULL=full, EXCHANGE="spin", UNROLL=UNROLL,
                  GROUPED=grouped, SHUFFLE=grouped, SPIN=pack, PDL=False, RESET=reset == "kernel",
                  PARITY=reset == "parity")
    lines = sass_loop_lines("--asm-loops", "--arch", str(arch), "--warps", str(warps), "--kernel", "coop.coop_panel_kernel",
                            "--int-ptr", "count_ptr", *(f"--const={k}={v}" for k, v in consts.items()))
    loops = [line for line in lines if line.startswith("asm loop:")]
    assert loops == [f"asm loop: {2 * programs * pack} loads; undefined operands: none"] * (2 * UNROLL)


@pytest.mark.parametrize("programs,batch,sms,used", [
    (16, 2, 132, 16), (16, 8, 132, 16), (16, 9, 132, 8), (4, 60, 132, 2), (8, 200, 132, 1), (1, 1, 132, 1)])
def test_programs_are_halved_until_all_are_resident(programs, batch, sms, used):
    assert resident_programs(programs, batch, sms) == used


def dirty_slots(ring, batch_index=0):
    """The ring slots of one matrix holding any word that is not the sentinel."""
    words = ring[batch_index].view(torch.int32).reshape(ring.shape[1], -1)
    return [s for s in range(ring.shape[1]) if bool((words[s] != SLOT_SENTINEL.value).any())]


@pytest.mark.parametrize("exchange", ["slots", "spin"])
def test_kernel_cleared_slots_give_the_host_filled_slots_factors(exchange):
    """coop.slot_reset kernel: the ring of BB + 1 slots, no fill launch. Four launches in a row
    (panels at j = 0, 16, 32, 48): each leaves only its last slot written, one slot before the
    last launch's, clears the one the launch before left, and counts itself; the factors are the
    host-filled slots' (the interpreter runs one program a matrix, so the sums are one part)."""
    from qrsub.kernels.coop import slot_ring

    n, bw = 80, 16
    A = special_matrices(n, batch=3)
    ring, count = slot_ring(A.shape[0], bw, 1, A.device)
    start = int(count[0])
    outputs = {}
    for reset in ("host", "kernel"):
        dst, tau = A.clone(), torch.zeros(A.shape[0], n)
        T, V = torch.zeros(A.shape[0], bw, bw), torch.zeros(A.shape[0], n, bw)
        for launch, j in enumerate(range(0, 64, bw)):
            coop_panel(dst if j else A, dst, tau, T, V, j, bw, programs=4, exchange=exchange,
                       knobs=PanelKnobs(num_warps=4, unroll=4), slot_reset=reset)
            if reset == "kernel":
                t = start + launch
                last = ((-t) % (bw + 1) + bw - 1) % (bw + 1)
                assert dirty_slots(ring) == [last], f"launch {launch}: only its last slot is written"
                assert int(count[0]) == t + 1
        outputs[reset] = dst, tau
    torch.testing.assert_close(outputs["kernel"][0], outputs["host"][0])
    torch.testing.assert_close(outputs["kernel"][1], outputs["host"][1])


@pytest.mark.parametrize("exchange,unroll", [("spin", 4), ("slots", 0)])
def test_parity_sets_give_the_host_filled_slots_factors(exchange, unroll):
    """coop.slot_reset parity: two sets of BB slots, no fill launch. Five launches in a row (a
    narrow last panel among them, which the ring refuses without unroll; unrolled loops walk all
    BB slots): each leaves only its own set written, having cleared the set the launch before used, and counts itself; the
    factors are the host-filled slots' (one program a matrix in the interpreter)."""
    from qrsub.kernels.coop import slot_ring

    n, bw = 80, 16
    A = special_matrices(n, batch=3)
    sets, count = slot_ring(A.shape[0], bw, 1, A.device, "parity")
    start = int(count[0])
    outputs = {}
    for reset in ("host", "parity"):
        dst, tau = A.clone(), torch.zeros(A.shape[0], n)
        T, V = torch.zeros(A.shape[0], bw, bw), torch.zeros(A.shape[0], n, bw)
        for launch, j in enumerate(range(0, n, bw)):
            width = min(bw, n - j - 3) if j + bw >= n else bw  # the last panel 13 wide
            coop_panel(dst if j else A, dst, tau, T, V, j, width, programs=4, exchange=exchange,
                       knobs=PanelKnobs(num_warps=4, unroll=unroll), slot_reset=reset)
            if reset == "parity":
                t = start + launch
                used = range((t % 2) * bw, (t % 2) * bw + (bw if unroll else width))  # unrolled: all BB
                assert dirty_slots(sets) == list(used), f"launch {launch}: only its own set's slots are written"
                assert int(count[0]) == t + 1
        outputs[reset] = dst, tau
    torch.testing.assert_close(outputs["parity"][0], outputs["host"][0])
    torch.testing.assert_close(outputs["parity"][1], outputs["host"][1])


def test_kernel_cleared_slots_need_sentinel_slots_and_an_unrolled_loop():
    A = special_matrices(48)

    def factor(exchange, unroll):
        coop_panel(A, A.clone(), torch.zeros(A.shape[0], 48), torch.zeros(A.shape[0], 16, 16),
                   torch.zeros(A.shape[0], 48, 16), 0, 16, programs=4, exchange=exchange,
                   knobs=PanelKnobs(num_warps=4, unroll=unroll), slot_reset="kernel")

    with pytest.raises(ValueError, match="slot_reset kernel needs exchange slots or spin and panel.unroll > 0"):
        factor("counter", 4)
    with pytest.raises(ValueError, match="got exchange spin, unroll 0"):
        factor("spin", 0)


def test_a_route_clears_slots_in_the_kernel_only_where_they_exist():
    coop = dict(programs=4, max_rows=512, exchange="spin", slot_reset="kernel")
    route(driver="coop", panel=dict(width=16, unroll=4), twolevel=dict(outer=128), coop=coop)
    with pytest.raises(ValueError, match="coop.slot_reset: got kernel with coop.exchange counter;"):
        route(driver="coop", panel=dict(width=16, unroll=4), coop={**coop, "exchange": "counter"})
    parity = {**coop, "slot_reset": "parity"}
    route(driver="coop", panel=dict(width=16, unroll=0), coop=parity)  # parity needs no unrolled loop
    with pytest.raises(ValueError, match="coop.slot_reset: got parity with coop.exchange counter;"):
        route(driver="coop", panel=dict(width=16, unroll=4), coop={**parity, "exchange": "counter"})
    with pytest.raises(ValueError, match="coop.slot_reset: got kernel with panel.unroll 0;"):
        route(driver="coop", panel=dict(width=16, unroll=0), coop=coop)
