"""The warp driver (kernels/warp.py): a whole QR of n <= 32 in one warp, a column a lane.

On the interpreter the column broadcast is a sum over the lanes (no inline assembly there), so
these tests check the arithmetic against the unblocked reference; the indexed shuffle and the
layout it needs have the compile check below (Triton's compiler for sm_90, no GPU) and the GPU
twin test_warp_driver_on_gpu in test_gpu_kernels.py.
"""
import os
import subprocess
import sys

import pytest
import torch
from kernel_helpers import SETTINGS, harness_check, route, sass_loop_count, sass_loop_lines, special_matrices

from qrsub.kernels import plan, routing
from qrsub.kernels.launch import interpreted
from qrsub.kernels.naive import panel_ref
from qrsub.kernels.panel import approx_reciprocals
from qrsub.kernels.warp import warp_qr



# (panel.sigma, panel.row_chains): the champion's, each lane's own tail sum, and the chains' ends.
SIGMA_CHAINS = [("broadcast", 4), ("own", 4), ("own", 8), ("broadcast", 1)]


@pytest.mark.parametrize("n", [1, 2, 5, 16, 17, 31, 32])
@pytest.mark.parametrize("sigma,chains", SIGMA_CHAINS)
def test_warp_qr_matches_the_unblocked_reference(n, sigma, chains):
    """Random, a zero column, all zeros, identity, rank deficient; outputs start as NaN, so every
    entry of H and tau must be written."""
    A = special_matrices(n)
    H = torch.full_like(A, float("nan"))
    tau = torch.full((A.shape[0], n), float("nan"), device=A.device)
    before = A.clone()
    warp_qr(A, H, tau, plan.PanelKnobs(sigma=sigma, row_chains=chains))
    assert torch.equal(A, before), "the kernel must not write to its input"
    for i in range(A.shape[0]):
        P, tau_ref, _, _ = panel_ref(A[i].double().cpu())  # one panel as wide as the matrix
        torch.testing.assert_close(H[i].double().cpu(), P, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(tau[i].double().cpu(), tau_ref, atol=2e-5, rtol=1e-4)


def test_a_zero_tail_gives_tau_zero_and_keeps_the_column():
    A = torch.triu(torch.randn(2, 12, 12)).to(special_matrices(1).device)  # every tail exactly zero
    H, tau = torch.empty_like(A), torch.empty(2, 12, device=A.device)
    warp_qr(A, H, tau)
    assert torch.equal(tau, torch.zeros_like(tau))
    assert torch.equal(H, A)


@pytest.mark.parametrize("reciprocal", plan.RECIPROCALS)  # approx divides on the interpreter
def test_the_warp_route_passes_the_harness_gate(reciprocal):
    A = special_matrices(32, batch=6, seed=3)
    warp = route(f"warp-gate-{reciprocal}", driver="warp", n_range=(1, 32), panel=dict(reciprocal=reciprocal))
    H, tau = routing.qr_routed(A, [warp], SETTINGS)
    assert harness_check(A, H, tau) < 0.5


def test_warp_routes_end_at_32():
    with pytest.raises(ValueError, match=r"n: got n 1\.\.64 with driver warp.*ends at 32"):
        route("too-tall", driver="warp", n_range=(1, 64))
    with pytest.raises(ValueError, match=r"n: got n 1\.\. with driver warp"):
        route("open", driver="warp")
    with pytest.raises(ValueError, match="n <= 32"):
        warp_qr(torch.zeros(1, 33, 33), torch.zeros(1, 33, 33), torch.zeros(1, 33))


COLUMN_A_LANE = "sizePerThread = [1, 1], threadsPerWarp = [1, 32], warpsPerCTA = [1, 1], order = [1, 0]"


def warp_flags(approx: bool = False, own_sigma: bool = False, chains: int = 4, arch: int = 90) -> tuple:
    """tools/sass_loop.py's flags for warp_qr_kernel as the launcher compiles it for sm_ARCH (APPROX:
    panel.reciprocal approx; OWN_SIGMA: panel.sigma own; CHAINS: panel.row_chains)."""
    return ("--kernel", "warp.warp_qr_kernel", "--arch", str(arch), "--warps", "1", "--const", f"NB={plan.WARP_MAX_N}",
            "--const", "SHUFFLE=True", "--const", f"APPROX={approx}", "--const", f"OWN_SIGMA={own_sigma}",
            "--const", f"CHAINS={chains}")


def test_the_launcher_never_specializes_n():
    """The compile check below sees n as a plain int, as the launcher passes it only when n is
    not specialized at all: Triton turns an int equal to 1 into a constant, whose offsets are
    contiguous down the rows as well, and the tile is no longer a column a lane (the first GPU
    run failed at n = 1 that way, sixteenth session's kernel)."""
    probe = """
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import native_specialize_impl
from qrsub.kernels.warp import warp_qr_kernel
(n,) = [p for p in warp_qr_kernel.params if p.name == "n"]
for value in (1, 16, 32):
    print(native_specialize_impl(BaseBackend, value, False, not n.do_not_specialize,
                                 not n.do_not_specialize_on_alignment)[0])
"""
    # Compiled mode: the interpreter's kernels have no launcher (and no params).
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "TRITON_INTERPRET": "0"}, check=True)
    assert run.stdout.split() == ["i32"] * 3, f"n reaches the compiler as {run.stdout.split()}"


@pytest.mark.parametrize("arch", [90, 100])  # 100: the B200's sm_100, which no GPU here has run
def test_the_warp_tile_is_a_column_a_lane_where_it_is_shuffled(arch):
    """lane_broadcast's shuffle reads column k from lane k, row by row, which holds only where
    the tile is laid out one column a lane with every row in the lane's registers. The
    interpreter cannot see layouts, so this compiles the kernel for sm_90 and for the B200's
    sm_100 (tools/sass_loop.py) and reads the load's layout and the layout each shuffle reads:
    with n specialized on its alignment Triton would load 4 columns a lane (16-byte loads) and
    the shuffle would mix columns."""
    assert sass_loop_lines(*warp_flags(arch=arch), "--load-layouts") == [f"load: {COLUMN_A_LANE}"]
    shuffles = sass_loop_lines(*warp_flags(arch=arch), "--asm-layouts")
    assert len(shuffles) == plan.WARP_MAX_N, "one shuffle op a reflector"
    assert set(shuffles) == {f"asm: {COLUMN_A_LANE}"}


@pytest.mark.parametrize("arch", [90, 100])
def test_each_lane_holds_its_own_columns_sum_where_sigma_is_shuffled(arch):
    """panel.sigma own: each lane's sum over its own column (a vector sliced from the tile's
    layout) reaches the others by a shuffle from lane k, which holds only where that vector is
    one value a lane, lane c's being column c's. The interpreter sums instead (no shuffle), so
    the compiled kernel's layouts are read here; the GPU twin checks the arithmetic."""
    shuffles = sass_loop_lines(*warp_flags(own_sigma=True, arch=arch), "--asm-layouts")
    assert sorted(shuffles) == sorted([f"asm: {COLUMN_A_LANE}"] * plan.WARP_MAX_N
                                      + [f"asm: slice 0 of {COLUMN_A_LANE}"] * plan.WARP_MAX_N)


def test_the_approximate_reciprocal_shortens_each_reflector():
    """panel.reciprocal approx replaces fp32 division's range handling around the hardware
    reciprocal (two divisions a reflector). The interpreter cannot run it (it divides), so this
    counts the compiled kernel's SASS for sm_90; its arithmetic is the GPU twin's
    (test_warp_driver_on_gpu, reciprocal approx). Triton 3.6 gave 3,368 against 3,784."""
    divided = sass_loop_count("kernel", *warp_flags(approx=False))
    approximated = sass_loop_count("kernel", *warp_flags(approx=True))
    assert approximated <= divided - 8 * plan.WARP_MAX_N, f"{approximated} instructions against {divided}"


def test_every_driver_takes_the_reciprocal_knob():
    """geqrf has no panel and ignores panel.reciprocal as it ignores every panel knob, so a
    variant that extends the champion (approx in its defaults) may add a geqrf route."""
    for driver in plan.DRIVERS:
        route(f"{driver}-rcp", driver=driver, n_range=(1, 32), panel=dict(reciprocal="approx"))
    with pytest.raises(ValueError, match=r"panel\.reciprocal: one of div, approx"):
        route("unknown-rcp", driver="warp", n_range=(1, 32), panel=dict(reciprocal="exact"))


def test_the_interpreter_always_divides():
    """approx_reciprocals decides every kernel's APPROX: the interpreter runs no inline assembly,
    so on it a route with reciprocal approx divides (these CPU tests check that route's arithmetic,
    the GPU twins its reciprocal)."""
    assert approx_reciprocals("div") is False
    assert approx_reciprocals("approx") is (not interpreted())
