"""A two-level block's T: the WY merge and the Gram recurrence, against larft over the whole
block (and the merge against wy_merge_ref)."""
import pytest
import torch
from kernel_helpers import DEVICE

from qrsub.kernels.naive import larft, panel_ref, wy_merge_ref
from qrsub.kernels.wy import block_t_from_gram, wy_merge


def test_wy_merge_equals_larft_of_the_whole_block():
    g = torch.Generator().manual_seed(3)
    L, widths = 30, [8, 8, 5]
    ob = sum(widths)
    _, tau, _, V = panel_ref(torch.randn(L, ob, generator=g, dtype=torch.float64))
    inner = torch.zeros(1, len(widths), 8, 8, dtype=torch.float64)
    Ts, done = [], 0
    for i, w in enumerate(widths):
        Ti = larft(V[:, done:done + w], tau[done:done + w])
        inner[0, i, :w, :w] = Ti
        Ts.append(Ti)
        done += w
    out = torch.empty(1, ob, ob, dtype=torch.float64)
    wy_merge(V[None], inner, widths, out)
    torch.testing.assert_close(out[0], larft(V, tau))
    torch.testing.assert_close(out[0], wy_merge_ref(V, Ts))


@pytest.mark.parametrize("L,ob,J", [(30, 21, 0), (40, 32, 5), (7, 1, 2)])
def test_t_from_gram_equals_larft(L, ob, J):
    """twolevel.block_t: gram, through the interpreter, with a zero column (tau = 0) included."""
    g = torch.Generator().manual_seed(4)
    panel = torch.randn(L, ob, generator=g, dtype=torch.float64)
    panel[:, ob // 2] = 0
    _, tau_block, _, V = panel_ref(panel)
    batch, n = 2, J + L
    tau = torch.zeros(batch, n)
    tau[:, J:J + ob] = tau_block.float()
    Y = V.float().expand(batch, L, ob).contiguous().to(DEVICE)
    out = torch.full((batch, ob + 3, ob + 3), float("nan"))[:, :ob, :ob].to(DEVICE)  # a strided view
    block_t_from_gram(Y, tau.to(DEVICE), J, out)
    for i in range(batch):
        torch.testing.assert_close(out[i].double().cpu(), larft(V, tau_block), atol=1e-5, rtol=1e-4)
