"""The TSQR panel (coop.exchange tsqr): its torch reference against the one-program panel's, and the
kernels through the interpreter with several programs (two launches, no spinning: the interpreter
runs them one after another). test_gpu_kernels.py runs up to 32 programs on a GPU."""
import pytest
import torch
from kernel_helpers import harness_check, route, special_matrices

from qrsub.kernels.blocked import qr_coop
from qrsub.kernels.naive import panel_ref, signed_lu_ref, tsqr_panel_ref
from qrsub.kernels.plan import PanelKnobs
from qrsub.kernels.tsqr import tsqr_panel


def q_of(V, T):
    """The orthogonal Q = I - V T V^T of a compact-WY pair."""
    return torch.eye(V.shape[0], dtype=V.dtype) - V @ T @ V.T


@pytest.mark.parametrize("L,b,programs,rows", [(100, 16, 4, 32), (64, 16, 2, 32), (70, 8, 3, 32), (40, 16, 4, 16)])
def test_reference_reproduces_the_one_program_panel(L, b, programs, rows):
    """With every column's tail nonzero, TSQR's reconstruction is dlarfg's Householder QR."""
    A = torch.randn(L, b, dtype=torch.float64, generator=torch.Generator().manual_seed(L))
    P, tau, T, V = tsqr_panel_ref(A, programs, rows)
    P_ref, tau_ref, T_ref, V_ref = panel_ref(A)
    for got, want in ((P, P_ref), (tau, tau_ref), (T, T_ref), (V, V_ref)):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_reference_reflects_where_dlarfg_skips():
    """An upper-triangular panel with a zero column: dlarfg skips every reflector (tau 0), the
    reconstruction reflects each (tau 2) and flips R's rows; Q R is still the panel."""
    A = torch.triu(torch.randn(64, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    A[:, 5] = 0
    P, tau, T, V = tsqr_panel_ref(A, 4, 16)
    torch.testing.assert_close(tau, torch.full((16,), 2.0, dtype=torch.float64))
    Q = q_of(V, T)
    torch.testing.assert_close(Q[:, :16] @ torch.triu(P[:16]), A, atol=1e-12, rtol=0)
    torch.testing.assert_close(Q.T @ Q, torch.eye(64, dtype=torch.float64), atol=1e-12, rtol=0)


def test_signed_lu_has_pivots_of_at_least_one():
    Q, _ = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2)))
    L1, U, s = signed_lu_ref(Q)
    torch.testing.assert_close(L1 @ U, Q - torch.diag(s), atol=1e-12, rtol=0)
    assert (torch.diagonal(U).abs() >= 1).all()
    assert torch.equal(torch.diagonal(L1), torch.ones(16, dtype=torch.float64))


@pytest.mark.parametrize("n,j,programs,unroll,broadcast", [
    (48, 16, 2, 4, "sum"), (48, 0, 4, 0, "sum"), (48, 0, 1, 4, "sum"), (40, 8, 2, 4, "shuffle")])
def test_kernels_match_the_reference(n, j, programs, unroll, broadcast):
    """The two launches against tsqr_panel_ref on the edge cases (a zero column, all zeros, the
    identity, rank deficient), and the columns left of the panel untouched. The interpreter takes
    the summing broadcast where shuffle is asked (no inline assembly)."""
    bw = 16
    A = special_matrices(n)
    dst = A.clone()
    tau = torch.zeros(A.shape[0], n)
    T = torch.zeros(A.shape[0], bw, bw)
    V = torch.zeros(A.shape[0], n, bw)
    tsqr_panel(A, dst, tau, T, V, j, bw, programs=programs, knobs=PanelKnobs(num_warps=4, unroll=unroll),
               broadcast=broadcast)
    rows = max(bw, 1 << (-(-(n - j) // programs) - 1).bit_length())
    for i in range(A.shape[0]):
        P, tau_ref, T_ref, V_ref = tsqr_panel_ref(A[i, j:, j:j + bw].double(), programs, rows)
        torch.testing.assert_close(dst[i, j:, j:j + bw].double(), P, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(tau[i, j:j + bw].double(), tau_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(T[i].double(), T_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(V[i, j:].double(), V_ref, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(dst[:, :, :j], A[:, :, :j])


def test_a_narrow_panel_takes_the_one_program_panel():
    """A ragged last panel (bw under 16): the reconstruction would reflect its zero padding, so the
    one-program panel factors it (dlarfg's tau 0 on the zero column stays 0)."""
    n, j, bw = 40, 28, 12
    A = special_matrices(n)
    dst = A.clone()
    tau = torch.zeros(A.shape[0], n)
    V = torch.zeros(A.shape[0], n, 16)
    tsqr_panel(A, dst, tau, None, V, j, bw, programs=2, knobs=PanelKnobs(num_warps=4, unroll=0))
    for i in range(A.shape[0]):
        P, tau_ref, _, _ = panel_ref(A[i, j:, j:j + bw].double())
        torch.testing.assert_close(dst[i, j:, j:j + bw].double(), P, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(tau[i, j:j + bw].double(), tau_ref, atol=2e-5, rtol=1e-4)


def test_coop_driver_with_tsqr_passes_the_gate():
    """qr_coop with every panel taller than 32 rows by TSQR over 4 programs, on the edge cases."""
    n = 64
    A = special_matrices(n)
    r = route(driver="coop", panel=dict(width=16, unroll=4), strip=dict(bm=32, bn=16),
              twolevel=dict(outer=32), coop=dict(programs=4, max_rows=32, exchange="tsqr"))
    H, tau = qr_coop(A, r)
    assert harness_check(A, H, tau) < 0.5
