"""graph.mode concurrent on a real GPU (marker `gpu`; skipped without one): the groups'
captures joined as edge-less branches of one graph, replayed, against the eager driver.

What only a GPU can confirm: torch's CUDAGraph(keep_graph=True) hands raw_cuda_graph() to
cuda.bindings' cudaGraphAddChildGraphNode as a plain int, the graph torch then instantiates
and replays runs every branch, and the call stays ordered with the caller's work on
whichever queue torch has current."""
import pytest
import torch
from kernel_helpers import harness_check, route

from qrsub.kernels import plan, routing, scratch
from qrsub.kernels.routing import DRIVER_FUNCTIONS as DRIVERS

pytestmark = pytest.mark.gpu

# Every input is graphed, whatever its size (mode concurrent ignores graph_max_numel anyway).
SETTINGS = plan.Settings(graph_min_numel=0, graph_max_numel=10**9, clone_outputs=True)
BATCH, N, GROUPS = 12, 400, 3   # three groups of four: equal sizes, so scratch must be per group
KNOBS = dict(panel=dict(width=32, num_warps=4), strip=dict(bm=32, bn=64, num_stages=4, num_warps=2),
             precision=dict(project="fp16x3", tcontract="fp32", apply="fp16x3"))


def matrices(seed: int, batch: int = BATCH, n: int = N) -> torch.Tensor:
    g = torch.Generator("cuda").manual_seed(seed)
    A = torch.randn(batch, n, n, device="cuda", generator=g) * torch.logspace(0, -2, n, device="cuda")
    A[1, :, n // 3] = 0  # a zero column: tau = 0 there
    return A.contiguous()


def concurrent_route(name: str, groups: int = GROUPS):
    return route(name, graph=dict(mode="concurrent", groups=groups), **KNOBS)


def assert_matches(out, ref):
    """Bit for bit, or within 1e-6 of the largest entry."""
    for got, want in zip(out, ref):
        assert got.shape == want.shape
        assert float((got - want).abs().max()) <= 1e-6 * float(want.abs().max())


def test_replays_match_the_eager_driver_and_return_independent_outputs():
    r = concurrent_route("cc-blocked")
    inputs = [matrices(seed) for seed in range(3)]
    refs = [DRIVERS["blocked"](A, r) for A in inputs]
    first = routing.qr_routed(inputs[0], [r], SETTINGS)      # eager, group by group; then captured
    key = ("cc-blocked", (BATCH, N, N), str(inputs[0].device))
    assert key in routing._GROUP_GRAPHS.graphs, "the first call captured the groups"
    outputs = [routing.qr_routed(A, [r], SETTINGS) for A in inputs]   # replays
    torch.cuda.synchronize()
    for out, ref, A in zip([first, *outputs], [refs[0], *refs], [inputs[0], *inputs]):
        assert_matches(out, ref)
        assert harness_check(A, *out) < 0.5
    # The harness keeps every output alive: a later replay must not change an earlier answer.
    assert outputs[0][0].data_ptr() != outputs[1][0].data_ptr()
    assert_matches(outputs[0], refs[0])
    groups = {k[0] for k in scratch._SCRATCH if k[0].startswith("group")}
    assert groups >= {"group0", "group1", "group2"}, "each group got its own scratch"


def test_the_branches_are_child_graphs_without_edges():
    from cuda.bindings import runtime

    def checked(result):
        status, *out = result
        assert status == runtime.cudaError_t.cudaSuccess, getattr(status, "name", status)
        return out

    r = concurrent_route("cc-structure", groups=4)
    A = matrices(7)
    routing.qr_routed(A, [r], SETTINGS)
    graph = routing._GROUP_GRAPHS.graphs[("cc-structure", tuple(A.shape), A.device)][0]
    raw = graph.raw_cuda_graph()
    _, count = checked(runtime.cudaGraphGetRootNodes(raw, 0))
    roots, count = checked(runtime.cudaGraphGetRootNodes(raw, count))
    kinds = [checked(runtime.cudaGraphNodeGetType(node))[0] for node in list(roots)[:count]]
    # Groups 1..3 are roots of their own; group 0's captured kernels are the graph's own chain.
    assert kinds.count(runtime.cudaGraphNodeType.cudaGraphNodeTypeGraph) == 3


def test_the_call_is_ordered_with_the_callers_queue():
    """Torch replays the graph on its current queue: input written and output read on a
    non-default one see the factorization between them."""
    r = concurrent_route("cc-queue")
    ref = DRIVERS["blocked"](matrices(11), r)
    routing.qr_routed(matrices(12), [r], SETTINGS)    # eager and capture, on the default queue
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        A = matrices(11)                               # written on the side queue just before
        H, tau = routing.qr_routed(A, [r], SETTINGS)
        copies = (H * 1, tau * 1)                      # read on the side queue just after
    side.synchronize()
    assert_matches(copies, ref)

