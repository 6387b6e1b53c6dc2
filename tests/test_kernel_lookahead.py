"""The look-ahead launch (kernels/lookahead.py): the blocked driver with it gives exactly
what it gives without it, panel by panel, and the plan refuses the knob where the launch
cannot work."""
import pytest
import torch
from kernel_helpers import DEVICE, harness_check, route, special_matrices

from qrsub.kernels import plan
from qrsub.kernels.blocked import qr_blocked
from qrsub.kernels.lookahead import strip_then_panel
from qrsub.kernels.naive import panel_ref
from qrsub.kernels.panel import householder_panel


@pytest.mark.parametrize("order", ["interleaved", "panels_first"])
@pytest.mark.parametrize("n,width,bn", [(1, 16, 16), (16, 16, 16), (23, 8, 16), (40, 16, 32), (50, 16, 16)])
def test_lookahead_driver_matches_the_plain_driver(n, width, bn, order):
    """Same kernels, same order of operations per matrix: on the interpreter the result is
    bit for bit the plain driver's (n=23 with width 8: a ragged last panel; n=50: four panels
    and a 2-column last one; n=1 and 16: one panel, no look-ahead launch)."""
    A = special_matrices(n)
    before = A.clone()
    plain = route(panel=dict(width=width), strip=dict(bn=bn))
    ahead = route(panel=dict(width=width), strip=dict(bn=bn, lookahead=order))
    H_ref, tau_ref = qr_blocked(A, plain)
    H, tau = qr_blocked(A, ahead)
    assert torch.equal(A, before), "drivers must not write to their input"
    if DEVICE == "cpu":
        assert torch.equal(H, H_ref) and torch.equal(tau, tau_ref)
    else:  # another num_warps may sum the tensor-core products in another order
        torch.testing.assert_close(H, H_ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(tau, tau_ref, atol=1e-5, rtol=1e-4)
    assert harness_check(A, H, tau) < 0.5


def test_one_launch_updates_the_strip_and_factors_the_next_panel():
    """strip_then_panel on its own: the trailing columns equal the strip's reference update
    and the next panel equals panel_ref of those updated columns (tau, T and V included)."""
    batch, n, b, BB = 2, 40, 16, 16
    A = special_matrices(n, batch=batch)
    H = torch.empty_like(A)
    tau = torch.zeros(batch, n, device=A.device)
    T = torch.zeros(2, batch, BB, BB, device=A.device)
    V = torch.zeros(2, batch, n, BB, device=A.device)
    householder_panel(A, H, tau, T[0], V[0], 0, b, num_warps=4)
    knobs = route(strip=dict(bn=16, lookahead="interleaved"))
    strip_then_panel(A, H, tau, V[0], T[0], V[1], T[1], 0, b, b, strip=knobs.strip,
                     precision=knobs.precision, panel_warps=4)
    for i in range(batch):
        Vi, Ti = V[0, i].double().cpu(), T[0, i].double().cpu()
        C = A[i, :, b:].double().cpu()
        updated = C - Vi @ (Ti.T @ (Vi.T @ C))
        torch.testing.assert_close(H[i, :b, b:].double().cpu(), updated[:b], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(H[i, b:, 2 * b:].double().cpu(), updated[b:, b:], atol=1e-5, rtol=1e-4)
        P, tau_ref, T_ref, V_ref = panel_ref(updated[b:, :b])
        torch.testing.assert_close(H[i, b:, b:2 * b].double().cpu(), P, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(tau[i, b:2 * b].double().cpu(), tau_ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(T[1, i].double().cpu(), T_ref, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(V[1, i, b:].double().cpu(), V_ref, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("driver,strip,message", [
    ("twolevel", dict(lookahead="interleaved"), "with driver twolevel"),
    ("blocked", dict(lookahead="interleaved", split_rows=32), "with strip.split_rows 32"),
    ("blocked", dict(lookahead="panels_first", bn=16), "strip.bn 16 < panel.width 32"),
])
def test_the_plan_refuses_a_lookahead_it_cannot_run(driver, strip, message):
    with pytest.raises(ValueError, match=message):
        route(driver=driver, panel=dict(width=32), strip=strip)
    assert plan.StripKnobs().lookahead == "off"
