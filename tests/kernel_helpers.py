"""Shared helpers for the kernel tests: interpreter setup, inputs, plans, compile checks."""
import os
import subprocess
import sys
from pathlib import Path

import torch

from qrsub.kernels import plan
from qrsub.kernels.naive import panel_ref, strip_ref
from qrsub.kernels.strip import trailing_strip

# conftest.py sets TRITON_INTERPRET where there is no GPU: kernels then run on CPU tensors.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SASS_LOOP = Path(__file__).resolve().parent.parent / "tools" / "sass_loop.py"


# Knobs for small shapes, by section; a test changes a few with route(panel=dict(width=8), ...).
SMALL_KNOBS = dict(panel=dict(width=16, num_warps=4), strip=dict(bm=16, bn=16, num_stages=2, num_warps=4),
                   precision=dict(project="fp32", tcontract="fp32", apply="fp32"),
                   twolevel=dict(outer=32, far_precision="fp32"), coop=dict(programs=1, max_rows=64),
                   graph=dict(mode="off"))


def sass_loop_lines(*flags: str) -> list:
    """The lines tools/sass_loop.py prints with FLAGS: a kernel compiled for sm_90 by Triton's own
    compiler, in a process without TRITON_INTERPRET, so these compile checks run on the CPU."""
    run = subprocess.run([sys.executable, str(SASS_LOOP), *flags], capture_output=True, text=True,
                         env={**os.environ, "TRITON_INTERPRET": "0"}, check=True)
    return run.stdout.splitlines()


def sass_load_layouts(*flags: str) -> list:
    """The `load:` lines of sass_loop.py's --load-layouts output with FLAGS: each load's layout."""
    return [line for line in sass_loop_lines("--load-layouts", *flags) if line.startswith("load:")]


def sass_loop_count(label: str, *flags: str) -> int:
    """The instruction count on sass_loop.py's one line `LABEL: N instructions...` (kernel or loop)."""
    (line,) = [ln for ln in sass_loop_lines(*flags) if ln.startswith(f"{label}: ")]
    return int(line.split()[1])


def route(name="test", driver="blocked", n_range=(1, None), batch_range=(1, None), **sections) -> plan.Route:
    """A plan.Route with SMALL_KNOBS, each section updated by the keyword of its name."""
    groups = {s: plan.SECTIONS[s](**{**SMALL_KNOBS[s], **sections.pop(s, {})}) for s in plan.SECTIONS}
    assert not sections, f"unknown sections {sorted(sections)}"
    return plan.Route(name=name, n_range=n_range, batch_range=batch_range, driver=driver, **groups)


# The precisions Triton's interpreter really computes: it rounds fp16 operands as the GPU
# does and multiplies in fp32, but runs tf32 and tf32x3 as plain fp32 (it ignores
# input_precision). Tests of those two on the CPU would pass without testing them: the
# GPU tests cover them.
CPU_MODELED_PRECISIONS = tuple(p for p in plan.PRECISIONS if not p.startswith("tf32"))

SETTINGS = plan.Settings(graph_min_numel=5000, graph_max_numel=10**8, clone_outputs=True)


def special_matrices(n: int, batch: int = 5, seed: int = 0) -> torch.Tensor:
    """A batch holding the edge cases: random, a zero column, all zeros, identity, rank deficient."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(batch, n, n, generator=g)
    if batch > 1 and n > 2:
        A[1, :, n // 2] = 0
    if batch > 2:
        A[2] = 0
    if batch > 3:
        A[3] = torch.eye(n)
    if batch > 4 and n > 1:
        A[4, :, (3 * n) // 4:] = 0
    return A.to(DEVICE)


def harness_check(A, H, tau) -> float:
    """Run the harness's own checker (task/reference.py); return the factor margin
    (scaled factor residual / its gate). Fails the test on a failing verdict."""
    import re

    from qrsub.harness import checker_gates, harness_on_path

    harness_on_path()
    import reference

    ok, message = reference.check_implementation(A, (H, tau))
    assert ok, message
    return float(re.search(r"scaled_factor_residual=([0-9.eE+-]+)", message).group(1)) / checker_gates().factor


# Relative error bounds per precision (one product of O(1) data): fp32-like, then one 16-bit pass.
STRIP_TOLERANCE = {"fp32": 1e-5, "tf32x3": 1e-5, "fp16x3": 1e-5, "tf32": 3e-3, "fp16x2lo": 3e-3, "fp16": 3e-3}


def reflectors(L, bw, BB, seed=0):
    """V and T (float64, padded to BB) of a random L x bw panel."""
    g = torch.Generator().manual_seed(seed)
    _, _, T, V = panel_ref(torch.randn(L, bw, generator=g, dtype=torch.float64))
    Vp = torch.zeros(L, BB, dtype=torch.float64)
    Tp = torch.zeros(BB, BB, dtype=torch.float64)
    Vp[:, :bw], Tp[:bw, :bw] = V, T
    return Vp, Tp


def strip_error(prec, n, j, bw, split_rows=0):
    """Largest relative error of the strip over the batch, and the inputs and output."""
    batch, BB = 2, 16
    g = torch.Generator().manual_seed(1)
    A = torch.randn(batch, n, n, generator=g)
    V = torch.zeros(batch, n, BB)
    T = torch.zeros(batch, BB, BB)
    for i in range(batch):
        Vi, Ti = reflectors(n - j, bw, BB, seed=i)
        V[i, j:], T[i] = Vi.float(), Ti.float()
    A, V, T = A.to(DEVICE), V.to(DEVICE), T.to(DEVICE)
    out = A.clone()
    c0 = j + bw
    trailing_strip(A, out, V, T, j, c0, n - c0, strip=plan.StripKnobs(bm=16, bn=16, num_stages=2, num_warps=4, split_rows=split_rows),
                   precision=plan.PrecisionKnobs(project=prec, tcontract=prec, apply=prec))
    errors = []
    for i in range(batch):
        ref = strip_ref(A[i, j:, c0:].double().cpu(), V[i, j:].double().cpu(), T[i].double().cpu())
        errors.append(float((out[i, j:, c0:].double().cpu() - ref).norm() / ref.norm()))
    return max(errors), A, out, c0
