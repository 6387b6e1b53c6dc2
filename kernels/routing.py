"""Routing: pick a route (plan.Route) per (n, batch), and the public entry `qr_routed`.

The first route that covers the input's n and batch wins. A route whose kernels
Triton cannot build on this machine (a compile error, too little shared memory
or registers, a ptxas failure) falls back to torch.geqrf at its first launch:
drivers never write to their input, so nothing needs undoing. The fallback is
the submission's safety net on the service and loud everywhere else: it prints
one line to stderr, is recorded in FALLBACKS, and with QRSUB_STRICT_ROUTES=1 in
the environment it raises instead (fallback.py holds that contract). Any other error
(a bug, a wrong knob) always raises.
"""
import functools
import os
import sys

import torch
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources, PTXASError

from .blocked import qr_blocked, qr_coop, qr_geqrf, qr_twolevel
from .fallback import FALLBACK_LINE, STRICT_ENV
from .graphs import GroupGraphs, InputGraphs, RelocatedGraphs, ShapeGraphs, graph_wanted
from .launch import dependent_launches, interpreted
from .plan import DRIVERS
from .warp import qr_warp

# Each driver name of plan.DRIVERS is the function qr_<name>.
DRIVER_FUNCTIONS = {name: globals()[f"qr_{name}"] for name in DRIVERS}
# What can differ between this machine and another one that runs the same file.
BUILD_ERRORS = (CompilationError, OutOfResources, PTXASError)
# (route name, reason) of every route that fell back in this process, in order
# (fallback.FALLBACK_LIST names this list for the tools).
FALLBACKS = []

_GRAPHS = ShapeGraphs()
_GROUP_GRAPHS = GroupGraphs()
_INPUT_GRAPHS = InputGraphs()
_RELOCATED_GRAPHS = RelocatedGraphs()
_LAUNCHED_ROUTES = set()


class RouteBuildFailed(RuntimeError):
    """A route's kernels did not build on this machine, and QRSUB_STRICT_ROUTES forbids the fallback."""


def select_route(n: int, batch: int, routes):
    for route in routes:
        if route.covers(n, batch):
            return route
    raise ValueError(f"no route matches n={n}, batch={batch}: the variant's routes must cover every shape")


def qr(A: torch.Tensor, route, out=None):
    """Factor A (batch x n x n fp32) with one route's driver, eagerly: (H, tau). OUT, (H, tau)
    to write, is for the drivers of plan.RELOCATE_DRIVERS only."""
    if out is None:
        return DRIVER_FUNCTIONS[route.driver](A, route)
    return DRIVER_FUNCTIONS[route.driver](A, route, out=out)


def fell_back(route) -> bool:
    return bool(FALLBACKS) and any(name == route.name for name, _ in FALLBACKS)


def runnable(A: torch.Tensor, route) -> bool:
    """Triton kernels need a GPU, or the interpreter for CPU tensors."""
    if route.driver == "geqrf" or fell_back(route):
        return False
    return A.is_cuda or interpreted()


def fall_back(route, err: Exception):
    """Record and announce a route's build failure, or raise it where fallbacks are refused."""
    reason = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    if os.environ.get(STRICT_ENV, "0") not in ("", "0"):
        raise RouteBuildFailed(f"route {route.name!r} did not build ({reason}); on the service this "
                               "submission would run torch.geqrf for it instead") from err
    FALLBACKS.append((route.name, reason))
    print(FALLBACK_LINE.format(route=route.name, reason=reason), file=sys.stderr, flush=True)


def graph_key(route, A) -> tuple:
    """The key of the route's graphs for A's shape in every store: (name, A.shape, A.device),
    a torch.Size (equal to the plain tuple) and a torch.device (cheaper than its name: at 20x32
    a call's host time is what the GPU waits for)."""
    return route.name, A.shape, A.device


def run_graphed(route, settings, driver, A, owner=None):
    """The route's call through its graphs: concurrent batch groups, one graph per input tensor,
    one graph per shape replayed where the input lies (relocate), or one per shape with copies.
    OWNER: the caller's routes, under which an input's own graph is found again (InputGraphs.replay)."""
    key = graph_key(route, A)
    if route.graph.mode == "concurrent":
        return _GROUP_GRAPHS.run(key, driver, A, route.graph.groups)
    head = route.graph.head
    if route.graph.mode == "inplace":
        return _INPUT_GRAPHS.run(key, driver, A, head, owner)
    if route.graph.mode == "relocate":
        return _RELOCATED_GRAPHS.run(key, driver, A, head)
    return _GRAPHS.run(key, driver, A, settings.clone_outputs, settings.packed_outputs, head)


def qr_routed(A: torch.Tensor, routes, settings):
    """custom_kernel's body: route, then run eagerly or through the route's graphs. An input
    with a graph of its own under these routes (graph.mode inplace) replays it first thing."""
    out = _INPUT_GRAPHS.replay(A, routes)
    if out is not None:
        return out
    batch, n, _ = A.shape
    route = select_route(n, batch, routes)
    if not runnable(A, route):
        return torch.geqrf(A)
    driver = functools.partial(qr, route=route)
    try:
        with dependent_launches(settings.pdl):
            out = run_graphed(route, settings, driver, A, routes) if graph_wanted(route, settings, A) else driver(A)
    except BUILD_ERRORS as err:  # only a first launch may fall back: later, the kernels are built
        if route.name in _LAUNCHED_ROUTES:
            raise
        fall_back(route, err)
        return torch.geqrf(A)
    _LAUNCHED_ROUTES.add(route.name)
    return out
