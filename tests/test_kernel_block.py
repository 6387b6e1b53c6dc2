"""The fused outer block (kernels/block.py) against panel_ref: a block of width ob is one
ob-wide panel, so its H columns, tau, V and T must be what panel_ref gives for it."""
import pytest
import torch
from kernel_helpers import DEVICE, route, special_matrices

from qrsub.kernels.block import factor_block
from qrsub.kernels.naive import panel_ref


def run_block(A, J, ob, width, outer):
    batch, n, _ = A.shape
    H = A.clone()
    tau = torch.zeros(batch, n, device=A.device)
    Vb = torch.full((batch, n, outer), float("nan"), device=A.device)
    Tb = torch.full((batch, outer, outer), float("nan"), device=A.device)
    r = route(driver="twolevel", panel=dict(width=width), twolevel=dict(outer=outer, inner="fused"))
    factor_block(A, H, tau, Vb, Tb, J, ob, r)
    return H, tau, Vb, Tb


@pytest.mark.parametrize("n,J,ob,width,outer", [
    (40, 0, 32, 16, 32),    # two inner panels, columns right of the block left alone
    (37, 5, 32, 16, 32),    # a block that starts inside the matrix
    (21, 0, 21, 16, 32),    # the last block: partial inner panel (16 + 5), n not a multiple of 16
    (1, 0, 1, 16, 32),      # n = 1
])
def test_block_matches_one_wide_panel(n, J, ob, width, outer):
    A = special_matrices(n)   # zero columns, all-zero, identity and rank-deficient matrices included
    H, tau, Vb, Tb = run_block(A, J, ob, width, outer)
    for i in range(A.shape[0]):
        P, tau_ref, T_ref, V_ref = panel_ref(A[i, J:, J:J + ob].double().cpu())
        torch.testing.assert_close(H[i, J:, J:J + ob].double().cpu(), P, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(tau[i, J:J + ob].double().cpu(), tau_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(Vb[i, J:, :ob].double().cpu(), V_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(Tb[i, :ob, :ob].double().cpu(), T_ref, atol=2e-5, rtol=1e-4)
    assert torch.equal(H[:, :, J + ob:], A[:, :, J + ob:]), "columns right of the block are the far update's"
    assert torch.equal(H[:, :J, :], A[:, :J, :]) and torch.equal(H[:, :, :J], A[:, :, :J])
