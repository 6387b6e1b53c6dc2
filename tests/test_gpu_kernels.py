"""The kernels on a real GPU (marker `gpu`; skipped without one): compiled Triton, the
cooperative panel with several programs spinning on each other, tensor-core precisions
and CUDA graphs, at sizes the interpreter cannot reach."""
import pytest
import torch
from kernel_helpers import harness_check, plan

from qrsub.kernels import routing
from qrsub.kernels.blocked import DRIVERS
from qrsub.kernels.coop import coop_panel
from qrsub.kernels.naive import panel_ref

pytestmark = pytest.mark.gpu


def gpu_matrices(batch, n, seed=0, cond=2):
    g = torch.Generator("cuda").manual_seed(seed)
    A = torch.randn(batch, n, n, device="cuda", generator=g)
    A = A * torch.logspace(0, -cond, n, device="cuda")
    A[0, :, n // 3] = 0  # an exactly zero column: tau = 0 there
    return A.contiguous()


@pytest.mark.parametrize("programs", [2, 4, 8])
def test_cooperative_panel_with_several_programs(programs):
    n, j, bw = 1536, 0, 32
    A = gpu_matrices(2, n)
    dst = A.clone()
    tau = torch.zeros(2, n, device="cuda")
    T = torch.zeros(2, 32, 32, device="cuda")
    V = torch.zeros(2, n, 32, device="cuda")
    coop_panel(A, dst, tau, T, V, j, bw, programs=programs, num_warps=4)
    for i in range(2):
        P, tau_ref, T_ref, _ = panel_ref(A[i, :, :bw].double().cpu())
        torch.testing.assert_close(dst[i, :, :bw].double().cpu(), P, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(tau[i, :bw].double().cpu(), tau_ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(T[i].double().cpu(), T_ref, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("driver,n,knobs", [
    ("blocked", 200, dict(panel_width=16, strip_bm=32, strip_bn=16)),
    ("blocked", 520, dict(panel_width=32, strip_bm=32, strip_bn=64, panel_warps=[[256, 4], [None, 8]])),
    ("twolevel", 1100, dict(panel_width=16, outer=128, strip_bm=64, strip_bn=32, far_precision="tf32", panel_warps=[[None, 8]])),
    ("coop", 1600, dict(panel_width=32, outer=256, coop_programs=4, coop_max_rows=512, strip_bm=64, strip_bn=32, panel_warps=[[None, 8]])),
])
@pytest.mark.parametrize("prec", ["fp16x3", "tf32x3"])
def test_drivers_pass_the_gate_on_gpu(driver, n, knobs, prec):
    A = gpu_matrices(3, n)
    p = plan(driver=driver, prec_project=prec, prec_apply=prec, prec_tcontract="fp32", **knobs)
    H, tau = DRIVERS[driver](A, p)
    margin = harness_check(A, H, tau)
    assert margin < 0.5, f"factor residual at {margin:.2f} of the gate"


def test_graph_replays_return_independent_outputs():
    """The harness keeps several outputs alive: each replay's result must be its own tensor."""
    settings = {"graph_min_numel": 0, "graph_max_numel": 10**9, "clone_outputs": True}
    route = plan(name="graph-test", panel_width=16, strip_bm=32, strip_bn=16, graph="capture")
    inputs = [gpu_matrices(4, 96, seed=s) for s in range(4)]
    outputs = [routing.qr_routed(A, [route], settings) for A in inputs]
    for A, (H, tau) in zip(inputs, outputs):
        harness_check(A, H, tau)
    assert outputs[1][0].data_ptr() != outputs[2][0].data_ptr()
