"""graph.mode concurrent on the CPU: its knob rules, the batch split, per-group scratch, the
graph policy, and the eager first call group by group. Capture and replay need a GPU:
tests/test_gpu_concurrent.py."""
from types import SimpleNamespace

import pytest
import torch
from kernel_helpers import SETTINGS, route, special_matrices

from qrsub.kernels import graphs, plan, routing, scratch
from qrsub.kernels.graphs import GroupGraphs, graph_wanted, group_spans
from qrsub.kernels.routing import DRIVER_FUNCTIONS as DRIVERS

# ---------------------------------------------------------------------------
# The knobs


def test_a_concurrent_route_takes_its_groups():
    r = route(graph=dict(mode="concurrent", groups=10))
    assert (r.graph.mode, r.graph.groups) == ("concurrent", 10)


@pytest.mark.parametrize("graph,driver,match", [
    (dict(mode="concurrent"), "blocked", "graph.mode: got concurrent with graph.groups 0"),
    (dict(mode="concurrent", groups=1), "blocked", "graph.mode: got concurrent with graph.groups 1"),
    (dict(mode="concurrent", groups=33), "blocked", r"graph.groups: an integer in 0..32"),
    (dict(mode="capture", groups=4), "blocked", "graph.groups: got 4 with graph.mode capture; allowed: 0"),
    (dict(mode="off", groups=4), "blocked", "graph.groups: got 4 with graph.mode off"),
    (dict(mode="concurrent", groups=4), "coop", "graph.mode: got concurrent with driver coop"),
    (dict(mode="concurrent", groups=4), "twolevel", "got concurrent with driver twolevel.*workspace"),
    (dict(mode="concurrent", groups=4), "geqrf", "graph.mode: got concurrent with driver geqrf"),
])
def test_groups_mean_something_only_in_mode_concurrent(graph, driver, match):
    with pytest.raises(ValueError, match=match):
        route(driver=driver, graph=graph)


def test_each_driver_is_either_concurrent_or_refused_with_a_reason():
    assert plan.CONCURRENT_DRIVERS == ("blocked",)
    assert set(plan.CONCURRENT_REFUSED) == set(plan.DRIVERS) - {"blocked"}


# ---------------------------------------------------------------------------
# The batch split


@pytest.mark.parametrize("batch,groups,sizes", [
    (640, 10, [64] * 10),
    (12, 3, [4, 4, 4]),
    (10, 4, [3, 3, 2, 2]),
    (16, 10, [2] * 6 + [1] * 4),
    (3, 10, [1, 1, 1]),       # never an empty group
    (1, 2, [1]),
])
def test_groups_are_contiguous_and_as_even_as_possible(batch, groups, sizes):
    spans = group_spans(batch, groups)
    assert [hi - lo for lo, hi in spans] == sizes
    assert spans[0][0] == 0 and spans[-1][1] == batch
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "contiguous, in batch order"


# ---------------------------------------------------------------------------
# Scratch per group


def test_a_scope_gets_its_own_buffers_and_outside_keeps_the_old_ones():
    shape = (3, 7, 5)
    outside = scratch.scratch("scope-test", shape, torch.float32, "cpu")
    with scratch.scratch_scope("group0"):
        first = scratch.scratch("scope-test", shape, torch.float32, "cpu")
        assert scratch.scratch("scope-test", shape, torch.float32, "cpu") is first, "reused inside its scope"
    with scratch.scratch_scope("group1"):
        second = scratch.scratch("scope-test", shape, torch.float32, "cpu")
    assert len({id(outside), id(first), id(second)}) == 3, "two groups of one size never share"
    assert scratch.scratch("scope-test", shape, torch.float32, "cpu") is outside


def test_scopes_nest_and_the_outer_one_comes_back_after_an_error():
    with scratch.scratch_scope("a"):
        with pytest.raises(RuntimeError):
            with scratch.scratch_scope("b"):
                assert scratch._SCRATCH_SCOPE == "a/b"
                raise RuntimeError("a driver failed")
        assert scratch._SCRATCH_SCOPE == "a"
    assert scratch._SCRATCH_SCOPE == ""


# ---------------------------------------------------------------------------
# Which inputs are graphed


def cuda_like(numel: int):
    """What graph_wanted reads of an input, for sizes a CPU test cannot allocate on a GPU."""
    return SimpleNamespace(is_cuda=True, numel=lambda: numel)


def test_concurrent_graphs_inputs_over_graph_max_numel_and_capture_does_not():
    settings = plan.Settings(graph_min_numel=5000, graph_max_numel=100_000_000)
    big = cuda_like(640 * 512 * 512)  # 167,772,160 elements: 640x512
    assert graph_wanted(route(graph=dict(mode="concurrent", groups=10)), settings, big)
    assert not graph_wanted(route(graph=dict(mode="capture")), settings, big)
    small = cuda_like(4000)
    assert not graph_wanted(route(graph=dict(mode="concurrent", groups=10)), settings, small)
    assert not graph_wanted(route(graph=dict(mode="concurrent", groups=2)), settings, torch.zeros(2, 64, 64))


def test_routing_sends_a_concurrent_route_to_its_groups(monkeypatch):
    calls = []
    monkeypatch.setattr(routing._GROUP_GRAPHS, "run", lambda key, driver, A, groups: calls.append((key, groups)))
    monkeypatch.setattr(routing._GRAPHS, "run", lambda *args: pytest.fail("the per-shape graphs ran"))
    A = torch.zeros(4, 8, 8)
    routing.run_graphed(route("cc", graph=dict(mode="concurrent", groups=3)), SETTINGS, None, A)
    assert calls == [(("cc", (4, 8, 8), torch.device("cpu")), 3)]


# ---------------------------------------------------------------------------
# The first call: eager, group by group


def test_the_first_call_factors_group_by_group_with_each_groups_scratch(monkeypatch):
    captured = []
    monkeypatch.setattr(GroupGraphs, "capture", staticmethod(lambda driver, A, spans: captured.append(spans)))
    scopes = []
    real_scratch = scratch.scratch

    def recording_scratch(name, shape, dtype, device):
        scopes.append(scratch._SCRATCH_SCOPE)
        return real_scratch(name, shape, dtype, device)

    from qrsub.kernels import blocked
    monkeypatch.setattr(blocked, "scratch", recording_scratch)
    r = route(graph=dict(mode="concurrent", groups=3))
    A = special_matrices(20, batch=5)
    before = A.clone()
    H, tau = GroupGraphs().run(("cc", tuple(A.shape), "cpu"), lambda X: DRIVERS["blocked"](X, r), A, groups=3)
    assert torch.equal(A, before), "the input stays as it was"
    H_ref, tau_ref = DRIVERS["blocked"](A, r)
    torch.testing.assert_close(H, H_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(tau, tau_ref, atol=1e-6, rtol=1e-5)
    assert captured == [[(0, 2), (2, 4), (4, 5)]], "then each group is captured"
    assert set(scopes) >= {"group0", "group1", "group2"} and "" in scopes  # the reference ran unscoped
    assert scopes.index("group0") < scopes.index("group1") < scopes.index("group2")


def test_outputs_are_joined_in_batch_order_into_fresh_tensors():
    parts = [(torch.full((2, 3, 3), float(i)), torch.full((2, 3), float(i))) for i in range(3)]
    H, tau = graphs.joined(parts)
    assert H.shape == (6, 3, 3) and tau.shape == (6, 3)
    assert H[:, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert all(H.data_ptr() != h.data_ptr() for h, _ in parts)


# ---------------------------------------------------------------------------
# The capture's wiring, with torch's graph API stood in for (the GPU test runs the real one)


class FakeGraph:
    """Records what GroupGraphs asks of a torch CUDAGraph. Its 'capture' runs the body eagerly."""

    made = []

    def __init__(self, keep_graph=False):
        self.keep_graph, self.instantiated, self.replays = keep_graph, 0, 0
        self.handle = 1000 + len(FakeGraph.made)
        FakeGraph.made.append(self)

    def raw_cuda_graph(self):
        assert self.keep_graph, "raw_cuda_graph needs keep_graph=True"
        return self.handle

    def instantiate(self):
        self.instantiated += 1

    def replay(self):
        self.replays += 1


class FakeCapture:
    def __init__(self, graph):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_capture_joins_every_other_group_to_group_0s_graph_and_replays_it_once(monkeypatch):
    FakeGraph.made = []
    added = []
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", FakeCapture)
    monkeypatch.setattr(graphs, "add_child_graph", lambda parent, child: added.append((parent, child)))
    r = route(graph=dict(mode="concurrent", groups=3))
    A = special_matrices(20, batch=5)
    group_graphs = GroupGraphs()
    key = ("cc", tuple(A.shape), "cpu")
    driver = lambda X: DRIVERS["blocked"](X, r)  # noqa: E731
    first = group_graphs.run(key, driver, A, groups=3)
    parent, children = FakeGraph.made[0], FakeGraph.made[1:]
    assert len(children) == 2 and all(g.keep_graph for g in FakeGraph.made)
    assert added == [(parent.handle, c.handle) for c in children], "edge-less children of group 0's graph"
    assert (parent.instantiated, parent.replays) == (1, 0) and all(c.instantiated == 0 for c in children)
    second = group_graphs.run(key, driver, A, groups=3)
    assert parent.replays == 1 and all(c.replays == 0 for c in children), "one launch per call"
    torch.testing.assert_close(second, first)
    assert second[0].data_ptr() != group_graphs.graphs[key][2][0][0].data_ptr(), "never a graph buffer"
