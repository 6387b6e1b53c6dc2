"""Routing: pick a route (driver + knobs) per (n, batch), and the public entry `qr_routed`.

Routes are flat dicts (see qrsub.variant for the schema); the first whose
inclusive n and batch ranges hold the input wins. A route whose kernels fail
to compile on this Triton falls back to torch.geqrf at its first launch:
drivers never write to their input, so nothing needs undoing.
"""
import functools
import sys

import torch

from .blocked import DRIVERS
from .coop import interpreted
from .graphs import ShapeGraphs, graph_wanted

_GRAPHS = ShapeGraphs()
_BROKEN_ROUTES = set()
_LAUNCHED_ROUTES = set()


def in_range(value: int, lo: int, hi) -> bool:
    return lo <= value and (hi is None or value <= hi)


def select_route(n: int, batch: int, routes: list) -> dict:
    for route in routes:
        if in_range(n, route["n_min"], route["n_max"]) and in_range(batch, route["batch_min"], route["batch_max"]):
            return route
    raise ValueError(f"no route matches n={n}, batch={batch}: the variant's routes must cover every shape")


def qr(A: torch.Tensor, plan: dict):
    """Factor A (batch x n x n fp32) with one route's driver, eagerly: (H, tau)."""
    return DRIVERS[plan["driver"]](A, plan)


def runnable(A: torch.Tensor, plan: dict) -> bool:
    """Triton kernels need a GPU, or the interpreter for CPU tensors."""
    if plan["driver"] == "geqrf" or plan["name"] in _BROKEN_ROUTES:
        return False
    return A.is_cuda or interpreted()


def qr_routed(A: torch.Tensor, routes: list, settings: dict):
    """custom_kernel's body: route, then run eagerly or through a per-shape graph."""
    batch, n, _ = A.shape
    plan = select_route(n, batch, routes)
    if not runnable(A, plan):
        return torch.geqrf(A)
    driver = functools.partial(qr, plan=plan)
    try:
        if graph_wanted(plan, settings, A):
            key = (plan["name"], tuple(A.shape), str(A.device))
            out = _GRAPHS.run(key, driver, A, settings["clone_outputs"])
        else:
            out = driver(A)
    except Exception as err:  # only a first launch may fall back: later errors are real bugs
        if plan["name"] in _LAUNCHED_ROUTES:
            raise
        _BROKEN_ROUTES.add(plan["name"])
        print(f"qrsub: route {plan['name']!r} failed ({type(err).__name__}: {err}); "
              "using torch.geqrf for it", file=sys.stderr)
        return torch.geqrf(A)
    _LAUNCHED_ROUTES.add(plan["name"])
    return out
