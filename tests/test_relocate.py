"""graph.mode relocate (kernels/relocate.py, graphs.RelocatedGraphs): launches made inside
`relocating` read the input and write the outputs through the table's offsets.

On the CPU the interpreter runs the launches at once, so a driver run inside `relocating` with
a table pointing at other tensors is exactly what a replay does on the GPU: it must factor the
other input into the other outputs, bit for bit as an eager call does, and never touch the
tensors it was given. test_gpu_kernels.py replays real graphs."""
import pytest
import torch
from kernel_helpers import route, special_matrices

from qrsub.kernels import plan, relocate
from qrsub.kernels.blocked import output_buffer, output_views, qr_blocked
from qrsub.kernels.graphs import RelocatedGraphs
from qrsub.kernels.relocate import ALIGN_ELEMENTS, offsets, relocating

# (n, panel width, strip): a single panel (n 1, 16), ragged last panels, the fused and the
# two-pass strips, and the two-pass strip with its rows split over programs.
CASES = [
    (1, 8, {}),
    (16, 16, dict(fuse_next=True)),
    (23, 8, dict(fuse_next=True)),
    (37, 16, dict(fuse_next=True)),
    (37, 16, dict(fuse_next=True, halves=2)),
    (37, 16, dict(fuse_next=True, tail_update=True)),
    (37, 16, {}),
    (40, 16, dict(split_rows=16)),
]


def relocated_call(captured_A, A, knobs, **route_sections):
    """qr_blocked launched on captured_A and captured outputs (NaN) inside `relocating`, with the
    table pointing at A and at fresh outputs: (the fresh outputs' H and tau, the captured buffer)."""
    captured_out = output_buffer(captured_A).fill_(float("nan"))
    out = output_buffer(A)
    table = relocate.new_table(A.device)
    table.copy_(torch.tensor(offsets(captured_A.data_ptr(), captured_out.data_ptr(), A, out)))
    with relocating(table, captured_A, captured_out):
        qr_blocked(captured_A, knobs, out=output_views(captured_out, captured_A))
    return output_views(out, A), captured_out


@pytest.mark.parametrize("n,width,strip", CASES)
def test_a_relocated_call_factors_the_table_s_tensors(n, width, strip):
    """Edge cases: n 1, n not a multiple of the panel width, the special matrices' zero and
    rank-deficient columns."""
    A = special_matrices(n)
    captured_A = torch.zeros_like(A)
    knobs = route(panel=dict(width=width), strip=strip)
    (H, tau), captured_out = relocated_call(captured_A, A, knobs)
    H_ref, tau_ref = qr_blocked(A, knobs)
    assert torch.equal(H, H_ref) and torch.equal(tau, tau_ref), "a replay gives an eager call's bits"
    assert torch.isnan(captured_out).all(), "the captured outputs are never written"
    assert torch.equal(captured_A, torch.zeros_like(A))


def test_a_relocated_pending_panel_reads_the_moved_input():
    """panel.apply_pending: the panel's prologue reads the previous panel's source through the
    table too (pre_src)."""
    A = special_matrices(37)
    knobs = route(panel=dict(width=16, apply_pending=True), strip=dict(fuse_next=True))
    (H, tau), _ = relocated_call(torch.zeros_like(A), A, knobs)
    H_ref, tau_ref = qr_blocked(A, knobs)
    assert torch.equal(H, H_ref) and torch.equal(tau, tau_ref)


def test_offsets_refuse_what_would_misalign_the_kernels():
    base = torch.zeros(4 * ALIGN_ELEMENTS.value)
    A = base[:ALIGN_ELEMENTS.value]
    out = base[ALIGN_ELEMENTS.value:]
    assert offsets(A.data_ptr(), out.data_ptr(), A, out) == [0, 0]
    assert offsets(A.data_ptr(), out.data_ptr(), base[ALIGN_ELEMENTS.value:], base[2 * ALIGN_ELEMENTS.value:]) \
        == [ALIGN_ELEMENTS.value, ALIGN_ELEMENTS.value]
    assert offsets(A.data_ptr(), out.data_ptr(), base[1:], out) is None, "4 bytes off: eager instead"


def test_slots_outside_relocating_are_none():
    A = torch.zeros(1, 2, 2)
    table, slots = relocate.relocation_args(A, SRC_SLOT=A, DST_SLOT=A)
    assert table is A and slots == dict(SRC_SLOT=relocate.NO_SLOT, DST_SLOT=relocate.NO_SLOT)
    flat = output_buffer(A)
    H, tau = output_views(flat, A)
    with relocating(relocate.new_table(A.device), A, flat):
        table, slots = relocate.relocation_args(A, SRC_SLOT=A[:, 1:], DST_SLOT=H, TAU_SLOT=tau, V=torch.zeros(2),
                                                NONE=None)
    assert slots == dict(SRC_SLOT=relocate.INPUT_SLOT, DST_SLOT=relocate.OUTPUT_SLOT,
                         TAU_SLOT=relocate.OUTPUT_SLOT, V=relocate.NO_SLOT, NONE=relocate.NO_SLOT)
    with pytest.raises(RuntimeError, match="nest"):
        with relocating(table, A, flat), relocating(table, A, flat):
            pass


class StandInGraph:
    """Records replays; the test replays by running the driver itself (the CPU has no graphs)."""

    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1


def test_first_call_eager_then_captured_later_calls_replay_into_fresh_outputs(monkeypatch):
    captures = []

    def stand_in_capture(driver, A, head):
        captures.append((A.data_ptr(), head))
        return StandInGraph(), relocate.new_table(A.device), A.data_ptr(), output_buffer(A), tuple(A.stride())

    monkeypatch.setattr(RelocatedGraphs, "capture", staticmethod(stand_in_capture))
    graphed, A, B = RelocatedGraphs(), torch.zeros(1, 4, 4), torch.zeros(1, 4, 4)
    eager = []
    driver = lambda X: eager.append(X.data_ptr()) or (X, X)  # noqa: E731
    graphed.run("k", driver, A, head=3)
    assert eager == [A.data_ptr()] and captures == [(A.data_ptr(), 3)], \
        "the first call runs, then captures (split after the route's graph.head points)"
    graph, table, *_ = graphed.graphs["k"]
    H1, tau1 = graphed.run("k", driver, B)
    H2, _ = graphed.run("k", driver, B)
    assert graph.replays == 2 and eager == [A.data_ptr()], "no eager call once captured"
    assert H1.data_ptr() != H2.data_ptr() and H1.shape == (1, 4, 4) and tau1.shape == (1, 4), "fresh outputs"
    assert table[0].item() * 4 == B.data_ptr() - A.data_ptr()
    graphed.run("k", driver, torch.zeros(1, 4, 8)[:, :, :4])  # other strides: eagerly
    assert len(eager) == 2 and graph.replays == 2


@pytest.mark.parametrize("driver", ["twolevel", "coop", "geqrf"])
def test_relocate_refuses_drivers_with_cublas_products(driver):
    problems = plan.graph_problems(driver, plan.GraphKnobs(mode="relocate"))
    assert problems and problems[0][0] == ("graph", "mode") and "relocate with driver blocked" in problems[0][1]
    assert not plan.graph_problems("blocked", plan.GraphKnobs(mode="relocate"))
