"""graph.head (kernels/capture.py): a graph captured in two parts, cut at a driver's capture point.

The CPU has no CUDA graphs: SplitGraph is checked against a stand-in that records what the real
one would be asked, and the drivers' capture points against a recording of their launches.
test_gpu_kernels.py replays split graphs on the GPU."""
import pytest
import torch
from kernel_helpers import route, special_matrices

from qrsub.kernels import blocked, capture
from qrsub.kernels.routing import DRIVER_FUNCTIONS as DRIVERS


class RecordedGraph:
    """Stands in for torch.cuda.CUDAGraph: logs its calls, with its own pool token."""
    log = []

    def __init__(self):
        self.name = f"g{sum(1 for e in self.log if e[0] == 'new')}"
        self.log.append(("new", self.name))

    def capture_begin(self, *pool, **options):
        self.log.append(("begin", self.name, pool, options))

    def capture_end(self):
        self.log.append(("end", self.name))

    def pool(self):
        return f"pool-of-{self.name}"

    def replay(self):
        self.log.append(("replay", self.name))


@pytest.fixture
def recorded(monkeypatch):
    RecordedGraph.log = []
    monkeypatch.setattr(torch.cuda, "CUDAGraph", RecordedGraph)
    return RecordedGraph.log


def test_a_split_graph_cuts_once_after_its_head(recorded):
    graph = capture.SplitGraph(2)
    graph.capture_begin(capture_error_mode="global")
    for _ in range(4):
        graph.point()
    graph.capture_end()
    graph.replay()
    assert recorded == [("new", "g0"), ("begin", "g0", (), {"capture_error_mode": "global"}),
                        ("end", "g0"), ("new", "g1"),
                        ("begin", "g1", ("pool-of-g0",), {"capture_error_mode": "global"}),
                        ("end", "g1"), ("replay", "g0"), ("replay", "g1")]


def test_a_head_past_the_call_s_points_leaves_one_graph(recorded):
    graph = capture.SplitGraph(5)
    graph.capture_begin()
    graph.point()
    graph.capture_end()
    assert len(graph.parts) == 1 and recorded[-1] == ("end", "g0")
    assert isinstance(capture.new_graph(0), RecordedGraph), "head 0: the plain graph"


def launch_log(monkeypatch, names):
    """[launch name or 'point', ...] of the blocked module's launches and capture points."""
    log = []
    for name in names:
        real = getattr(blocked, name)
        monkeypatch.setattr(blocked, name, lambda *a, _real=real, _name=name, **k: log.append(_name) or _real(*a, **k))
    monkeypatch.setattr(blocked, "capture_point", lambda: log.append("point"))
    return log


@pytest.mark.parametrize("n,strip", [(1, {}), (16, dict(fuse_next=True)), (37, dict(fuse_next=True)),
                                     (37, dict(fuse_next=True, tail_update=True)), (37, {})])
def test_blocked_points_fall_between_launches(monkeypatch, n, strip):
    """A point after every panel and strip that more launches follow, none after the last: a cut
    there would leave an empty graph, which CUDA cannot replay. n 1: one panel, no point."""
    log = launch_log(monkeypatch, ["householder_panel", "fused_strip", "rank_update", "trailing_strip"])
    DRIVERS["blocked"](special_matrices(n), route(panel=dict(width=16), strip=strip))
    assert log[-1] != "point" and log[0] != "point"
    assert all(not (a == b == "point") for a, b in zip(log, log[1:]))
    panels = log.count("householder_panel")
    assert panels == -(-n // 16)
    strips = log.count("fused_strip") + log.count("trailing_strip")
    assert log.count("point") == panels - 1 + (strips if strip else 0)


def test_twolevel_points_follow_every_inner_panel_but_the_last(monkeypatch):
    log = []
    monkeypatch.setattr(blocked, "capture_point", lambda: log.append("point"))
    A = special_matrices(40)
    DRIVERS["twolevel"](A, route(driver="twolevel", panel=dict(width=16), twolevel=dict(outer=32)))
    assert log.count("point") == 2  # panels at columns 0, 16, 32: the last is the matrix's last
