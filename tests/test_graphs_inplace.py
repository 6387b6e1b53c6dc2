"""graph.mode inplace (kernels/graphs.py, InputGraphs): which call runs eagerly, captures or
replays, and which graphs are kept. The graphs are stand-ins here; test_gpu_kernels.py
replays real ones."""
import torch

from qrsub.kernels import graphs
from qrsub.kernels.graphs import InputGraphs


class StandInGraph:
    """Replays the captured driver on the tensor it was captured with, as a CUDA graph would."""

    def __init__(self, driver, A):
        self.driver, self.A, self.replays = driver, A, 0
        self.out = torch.empty_like(A)

    def replay(self):
        self.replays += 1
        self.out.copy_(self.driver(self.A))


def stand_in_capture(driver, A, head):
    graph = StandInGraph(driver, A)
    return graph, graph.out


def test_first_call_eager_second_captures_later_calls_replay(monkeypatch):
    monkeypatch.setattr(InputGraphs, "capture", staticmethod(stand_in_capture))
    calls = []
    driver = lambda X: calls.append(X.data_ptr()) or X * 2  # noqa: E731
    graphed, A = InputGraphs(), torch.arange(6.0).reshape(1, 2, 3)
    first = graphed.run("k", driver, A)
    assert calls == [A.data_ptr()] and not graphed.graphs["k"], "a tensor called once is never captured"
    second = graphed.run("k", driver, A)
    (_ref, graph, out), = graphed.graphs["k"].values()
    assert graph.replays == 1 and second is out
    A.add_(1)  # refilled in place: the replay reads the tensor where it lies
    third = graphed.run("k", driver, A)
    assert graph.replays == 2 and third is out and torch.equal(third, A * 2)
    assert torch.equal(first, torch.arange(6.0).reshape(1, 2, 3) * 2)


def test_each_input_tensor_gets_outputs_of_its_own(monkeypatch):
    monkeypatch.setattr(InputGraphs, "capture", staticmethod(stand_in_capture))
    graphed = InputGraphs()
    inputs = [torch.full((1, 2, 2), float(i)) for i in range(3)]
    for _ in range(3):
        outs = [graphed.run("k", lambda X: X + 1, A) for A in inputs]
    assert [o[0, 0, 0].item() for o in outs] == [1.0, 2.0, 3.0]
    assert len({o.data_ptr() for o in outs}) == 3


def test_the_least_recently_used_graphs_go_past_the_byte_budget(monkeypatch):
    monkeypatch.setattr(InputGraphs, "capture", staticmethod(stand_in_capture))
    inputs = [torch.zeros(1, 4, 4) for _ in range(3)]  # 64 bytes each
    graphed = InputGraphs(input_bytes=128)  # room for two
    for A in inputs + inputs:  # eager three times, then three captures
        graphed.run("k", lambda X: X, A)
    assert [key[0] for key in graphed.graphs["k"]] == [A.data_ptr() for A in inputs[1:]]
    graphed.run("k", lambda X: X, inputs[1])  # a replay makes it the most recently used
    graphed.run("k", lambda X: X, inputs[0])  # dropped, so called once again: eager
    assert [key[0] for key in graphed.graphs["k"]] == [inputs[2].data_ptr(), inputs[1].data_ptr()]
    graphed.run("k", lambda X: X, inputs[0])  # captured, and inputs[2] goes
    assert [key[0] for key in graphed.graphs["k"]] == [inputs[1].data_ptr(), inputs[0].data_ptr()]


def test_inplace_routes_graph_what_capture_routes_graph():
    from kernel_helpers import SETTINGS, route

    A = torch.zeros(2, 64, 64)
    assert not graphs.graph_wanted(route(graph=dict(mode="inplace")), SETTINGS, A), "CPU tensors never"


def test_a_new_tensor_at_a_freed_address_never_overwrites_held_outputs(monkeypatch):
    """The harness's check: outputs = [kernel(d.clone()) for d in data], all checked at the end.
    Each clone is freed before the next lands at its address; a replay there would rewrite the
    outputs of the earlier clones the harness still holds. Views of one buffer stand in for
    clones at one address, each a new tensor object."""
    monkeypatch.setattr(InputGraphs, "capture", staticmethod(stand_in_capture))
    graphed, buffer = InputGraphs(), torch.empty(1, 2, 2)

    def at_the_same_address(value):
        clone = buffer.view(1, 2, 2)
        clone.fill_(value)
        return clone

    outs = [graphed.run("k", lambda X: X + 1, at_the_same_address(float(i))) for i in range(4)]
    assert [o[0, 0, 0].item() for o in outs] == [1.0, 2.0, 3.0, 4.0]


def test_a_live_tensor_called_again_replays_its_own_graph(monkeypatch):
    """The timed loop calls on the same input objects every repetition: those replay."""
    monkeypatch.setattr(InputGraphs, "capture", staticmethod(stand_in_capture))
    graphed, A = InputGraphs(), torch.ones(1, 2, 2)
    for _ in range(4):
        graphed.run("k", lambda X: X + 1, A)
    (_ref, graph, _out), = graphed.graphs["k"].values()
    assert graph.replays == 3


def test_replay_finds_a_captured_input_under_its_owner_only(monkeypatch):
    """qr_routed's first look (InputGraphs.replay): the graph captured for this very tensor,
    under the same routes, with its shape and strides unchanged; anything else goes the long way."""
    monkeypatch.setattr(InputGraphs, "capture", staticmethod(stand_in_capture))
    graphed, owner, A = InputGraphs(), ["routes"], torch.ones(1, 2, 2)
    double = lambda X: X * 2  # noqa: E731
    graphed.run("k", double, A, owner=owner)
    assert graphed.replay(A, owner) is None, "called once: no graph yet"
    graphed.run("k", double, A, owner=owner)  # captured
    (_ref, graph, out), = graphed.graphs["k"].values()
    A.add_(1)
    assert graphed.replay(A, owner) is out and graph.replays == 2 and torch.equal(out, A * 2)
    assert graphed.replay(A, ["other routes"]) is None
    assert graphed.replay(torch.ones(1, 2, 2), owner) is None, "another tensor"
    assert graphed.replay(A.view(1, 4), owner) is None, "another tensor object at the address"
    A.resize_(1, 1, 4)  # the same object, reshaped in place
    assert graphed.replay(A, owner) is None and graph.replays == 2


def test_replay_forgets_a_graph_the_byte_budget_dropped(monkeypatch):
    monkeypatch.setattr(InputGraphs, "capture", staticmethod(stand_in_capture))
    inputs = [torch.zeros(1, 4, 4) for _ in range(3)]  # 64 bytes each
    graphed, owner = InputGraphs(input_bytes=128), ["routes"]  # room for two
    for A in inputs + inputs:
        graphed.run("k", lambda X: X, A, owner=owner)
    assert graphed.replay(inputs[0], owner) is None, "the oldest graph was dropped"
    assert all(graphed.replay(A, owner) is not None for A in inputs[1:])
    assert inputs[0].data_ptr() not in graphed.addresses
