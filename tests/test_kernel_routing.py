"""Routing: first match wins, coverage errors, graph policy, the narrow and loud fallback."""
import pytest
import torch
from kernel_helpers import SETTINGS, harness_check, route, special_matrices
from triton.compiler.errors import CompilationError

from qrsub.kernels import routing
from qrsub.kernels.graphs import graph_wanted
from qrsub.kernels.plan import DRIVERS


def test_first_matching_route_wins():
    routes = [route("small", n_range=(1, 63)), route("tiny-batch", batch_range=(1, 4)), route("rest")]
    assert routing.select_route(32, 100, routes).name == "small"
    assert routing.select_route(64, 4, routes).name == "tiny-batch"
    assert routing.select_route(64, 5, routes).name == "rest"


def test_uncovered_shape_is_an_error():
    with pytest.raises(ValueError, match="n=100, batch=1"):
        routing.select_route(100, 1, [route(n_range=(1, 63))])


def test_every_driver_name_has_its_function():
    assert set(routing.DRIVER_FUNCTIONS) == set(DRIVERS)
    assert all(fn.__name__ == f"qr_{name}" for name, fn in routing.DRIVER_FUNCTIONS.items())


def test_graph_policy():
    A = torch.zeros(2, 64, 64)
    assert not graph_wanted(route(graph=dict(mode="capture")), SETTINGS, A), "CPU tensors are never captured"
    assert not graph_wanted(route(graph=dict(mode="off")), SETTINGS, A)


def test_routed_kernel_passes_the_checker():
    A = special_matrices(20, batch=3)
    H, tau = routing.qr_routed(A, [route("ok")], SETTINGS)
    assert harness_check(A, H, tau) < 0.5


def failing_driver(monkeypatch, error):
    """Make the blocked driver raise `error` (as a kernel that cannot build would)."""
    def broken(A, route):
        raise error
    monkeypatch.setitem(routing.DRIVER_FUNCTIONS, "blocked", broken)
    monkeypatch.setattr(routing, "FALLBACKS", [])
    monkeypatch.delenv(routing.STRICT_ENV, raising=False)


def test_a_build_failure_falls_back_to_geqrf_and_says_so(monkeypatch, capsys):
    failing_driver(monkeypatch, CompilationError(None, None, None))
    A = special_matrices(20, batch=2)
    H, tau = routing.qr_routed(A, [route("bad-build")], SETTINGS)
    assert torch.equal(H, torch.geqrf(A)[0])
    err = capsys.readouterr().err
    assert err.startswith("qrsub: route 'bad-build' fell back to torch.geqrf: CompilationError")
    assert [name for name, _ in routing.FALLBACKS] == ["bad-build"]
    H2, _ = routing.qr_routed(A, [route("bad-build")], SETTINGS)  # the route stays on geqrf afterwards
    assert torch.equal(H2, H) and len(routing.FALLBACKS) == 1


def test_strict_mode_raises_instead_of_falling_back(monkeypatch):
    failing_driver(monkeypatch, CompilationError(None, None, None))
    monkeypatch.setenv(routing.STRICT_ENV, "1")
    with pytest.raises(routing.RouteBuildFailed, match="route 'strict' did not build"):
        routing.qr_routed(special_matrices(20, batch=2), [route("strict")], SETTINGS)
    assert routing.FALLBACKS == []


@pytest.mark.parametrize("error", [KeyError("panel_width"), AssertionError("b >= 16"), RuntimeError("bug")])
def test_other_errors_are_never_hidden(monkeypatch, error):
    failing_driver(monkeypatch, error)
    with pytest.raises(type(error)):
        routing.qr_routed(special_matrices(20, batch=2), [route("buggy")], SETTINGS)
    assert routing.FALLBACKS == []


def test_the_fallback_line_is_the_one_the_tools_read(monkeypatch, capsys):
    """The submission's stderr line and FALLBACKS list are what qrsub.fallbacks parses."""
    from qrsub import fallbacks

    failing_driver(monkeypatch, CompilationError(None, None, None))
    routing.qr_routed(special_matrices(20, batch=2), [route("seen-by-tools")], SETTINGS)
    [seen] = fallbacks.in_output(capsys.readouterr().err)
    assert seen.route == "seen-by-tools" and seen.reason.startswith("CompilationError")
    assert fallbacks.in_module(routing) == [seen]
