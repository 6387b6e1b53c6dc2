"""Routing: first match wins, coverage errors, graph policy, the first-launch fallback."""
import pytest
import torch
from kernel_helpers import plan, special_matrices

from qrsub.kernels import routing
from qrsub.kernels.graphs import graph_wanted

SETTINGS = {"graph_min_numel": 5000, "graph_max_numel": 10**8, "clone_outputs": True}


def test_first_matching_route_wins():
    routes = [plan(name="small", n_max=63), plan(name="tiny-batch", batch_max=4), plan(name="rest")]
    assert routing.select_route(32, 100, routes)["name"] == "small"
    assert routing.select_route(64, 4, routes)["name"] == "tiny-batch"
    assert routing.select_route(64, 5, routes)["name"] == "rest"


def test_uncovered_shape_is_an_error():
    with pytest.raises(ValueError, match="n=100, batch=1"):
        routing.select_route(100, 1, [plan(n_max=63)])


def test_graph_policy():
    A = torch.zeros(2, 64, 64)
    assert not graph_wanted(plan(graph="capture"), SETTINGS, A), "CPU tensors are never captured"
    assert not graph_wanted(plan(graph="off"), SETTINGS, A)


def test_routed_kernel_passes_the_checker():
    A = special_matrices(20, batch=3)
    H, tau = routing.qr_routed(A, [plan(name="ok")], SETTINGS)
    torch.testing.assert_close(H.double(), torch.geqrf(A.double())[0], atol=1e-4, rtol=1e-3)


def test_first_launch_failure_falls_back_to_geqrf(capsys):
    bad = plan(name="bad-strip", strip_bm=12)  # not a power of two: the kernel cannot build
    A = special_matrices(20, batch=2)
    H, tau = routing.qr_routed(A, [bad], SETTINGS)
    assert torch.equal(H, torch.geqrf(A)[0])
    assert "bad-strip" in capsys.readouterr().err
    H2, _ = routing.qr_routed(A, [bad], SETTINGS)  # the route stays on geqrf afterwards
    assert torch.equal(H2, H)
