"""The cooperative panel: its reduction scheme in torch for several programs, and the
kernel itself through the interpreter with one program (programs spin on each other,
which the interpreter, running them one after another, cannot do; test_gpu_kernels.py
runs 2, 4 and 8 programs on a GPU)."""

import pytest
import torch
from kernel_helpers import sass_loop_lines, special_matrices

from qrsub.kernels.coop import coop_panel, resident_programs, spin_width
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


@pytest.mark.parametrize("programs,rows,width,warps,grouped,full,arch", [
    (4, 1024, 16, 8, True, True, 90), (4, 512, 16, 4, True, True, 90), (2, 1024, 16, 8, True, True, 90),  # giant, huge
    (8, 256, 32, 4, True, True, 90), (2, 1024, 32, 4, False, True, 90), (4, 512, 16, 4, False, False, 90),  # twins
    (2, 64, 16, 1, True, True, 90),
    # the champion's giant and huge panels compiled for the B200 (sm_100): no GPU here has run them
    (4, 1024, 16, 8, True, True, 100), (4, 512, 16, 4, True, True, 100)])
def test_spin_polls_once_a_reflector_with_every_operand_defined(programs, rows, width, warps, grouped, full, arch,
                                                                monkeypatch):
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
                  GROUPED=grouped, SHUFFLE=grouped, SPIN=pack, PDL=False)
    lines = sass_loop_lines("--asm-loops", "--arch", str(arch), "--warps", str(warps), "--kernel", "coop.coop_panel_kernel",
                            *(f"--const={k}={v}" for k, v in consts.items()))
    loops = [line for line in lines if line.startswith("asm loop:")]
    assert loops == [f"asm loop: {2 * programs * pack} loads; undefined operands: none"] * (2 * UNROLL)


@pytest.mark.parametrize("programs,batch,sms,used", [
    (16, 2, 132, 16), (16, 8, 132, 16), (16, 9, 132, 8), (4, 60, 132, 2), (8, 200, 132, 1), (1, 1, 132, 1)])
def test_programs_are_halved_until_all_are_resident(programs, batch, sms, used):
    assert resident_programs(programs, batch, sms) == used
