"""The trailing strip against strip_ref, for each precision, through the interpreter."""
import pytest
import torch
from kernel_helpers import DEVICE

from qrsub.kernels.naive import panel_ref, strip_ref
from qrsub.kernels.precision import PRECISIONS
from qrsub.kernels.strip import trailing_strip

# Relative error bounds per precision (one product of O(1) data): fp32-like, then one 16-bit pass.
TOLERANCE = {"fp32": 1e-5, "tf32x3": 1e-5, "fp16x3": 1e-5, "tf32": 3e-3, "fp16x2lo": 3e-3, "fp16": 3e-3}


def reflectors(L, bw, BB, seed=0):
    g = torch.Generator().manual_seed(seed)
    _, _, T, V = panel_ref(torch.randn(L, bw, generator=g, dtype=torch.float64))
    Vp = torch.zeros(L, BB, dtype=torch.float64)
    Tp = torch.zeros(BB, BB, dtype=torch.float64)
    Vp[:, :bw], Tp[:bw, :bw] = V, T
    return Vp, Tp


@pytest.mark.parametrize("prec", PRECISIONS)
@pytest.mark.parametrize("n,j,bw", [(40, 0, 16), (37, 5, 7), (50, 16, 16)])
def test_strip_matches_reference(prec, n, j, bw):
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
    trailing_strip(A, out, V, T, j, c0, n - c0, bm=16, bn=16, stages=2, warps=4,
                   prec_project=prec, prec_t=prec, prec_apply=prec)
    for i in range(batch):
        ref = strip_ref(A[i, j:, c0:].double().cpu(), V[i, j:].double().cpu(), T[i].double().cpu())
        err = (out[i, j:, c0:].double().cpu() - ref).norm() / ref.norm()
        assert err < TOLERANCE[prec], f"{prec}: relative error {err:.2e}"
    assert torch.equal(out[:, :j, :], A[:, :j, :]), "rows above the panel must stay"
    assert torch.equal(out[:, :, :c0], A[:, :, :c0]), "columns left of the strip must stay"
