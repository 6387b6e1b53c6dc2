"""The panel kernel against panel_ref (float64), through the interpreter on the CPU."""
import pytest
import torch
from kernel_helpers import DEVICE, special_matrices

from qrsub.kernels.naive import panel_ref
from qrsub.kernels.panel import householder_panel, padded_width, by_rows, row_tiles_of
from qrsub.kernels.plan import PanelKnobs


def run_panel(A, j, bw, separate_src=False, row_tiles=1, unroll=0):
    batch, n, _ = A.shape
    BB = padded_width(bw)
    dst = A.clone()
    src = A.clone() if separate_src else dst
    if separate_src:
        dst.fill_(float("nan"))  # every panel entry must be written from src
    tau = torch.zeros(batch, n, device=A.device)
    T = torch.full((batch, BB, BB), float("nan"), device=A.device)
    V = torch.full((batch, n, BB), float("nan"), device=A.device)
    knobs = PanelKnobs(width=bw, num_warps=4, row_tiles=row_tiles, unroll=unroll)
    householder_panel(src, dst, tau, T, V, j, bw, knobs=knobs)
    return dst, tau, T, V


# unroll 0 is the run-time loop over bw; 1, 4 and 8 unroll over the padded width, which
# for a ragged panel (bw < 16) runs reflectors on the zero columns past bw.
@pytest.mark.parametrize("unroll", [0, 1, 4, 8])
@pytest.mark.parametrize("n,j,bw,row_tiles", [
    (1, 0, 1, 1), (5, 0, 3, 1), (20, 0, 16, 1), (37, 5, 16, 1), (40, 8, 32, 1), (17, 10, 7, 1),
    # two row tiles: 48 rows as 32 + 16; 44 rows (the second tile partly past L), a ragged width
    (48, 0, 16, 2), (50, 6, 13, 2),
])
def test_panel_matches_reference(n, j, bw, row_tiles, unroll):
    A = special_matrices(n)
    dst, tau, T, V = run_panel(A, j, bw, row_tiles=row_tiles, unroll=unroll)
    for i in range(A.shape[0]):
        P, tau_ref, T_ref, V_ref = panel_ref(A[i, j:, j:j + bw].double().cpu())
        torch.testing.assert_close(dst[i, j:, j:j + bw].double().cpu(), P, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(tau[i, j:j + bw].double().cpu(), tau_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(T[i, :bw, :bw].double().cpu(), T_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(V[i, j:, :bw].double().cpu(), V_ref, atol=2e-5, rtol=1e-4)
        assert torch.all(T[i, bw:, :] == 0) and torch.all(T[i, :, bw:] == 0), "T must be zero past the panel"
        assert torch.all(V[i, j:, bw:] == 0), "V must be zero past the panel"


def test_panel_leaves_other_columns_alone():
    A = special_matrices(24)
    dst, *_ = run_panel(A, 8, 8)
    assert torch.equal(dst[:, :, :8], A[:, :, :8])
    assert torch.equal(dst[:, :, 16:], A[:, :, 16:])
    assert torch.equal(dst[:, :8, 8:16], A[:, :8, 8:16])


def test_panel_reads_a_separate_source():
    A = special_matrices(20)
    dst, tau, _, _ = run_panel(A, 0, 16, separate_src=True)
    same, tau_same, _, _ = run_panel(A, 0, 16)
    assert torch.equal(dst[:, :, :16], same[:, :, :16])
    assert torch.equal(tau, tau_same)


@pytest.mark.parametrize("unroll", [0, 4])
def test_zero_tail_gives_zero_tau_and_keeps_the_column(unroll):
    A = torch.zeros(1, 6, 6, device=DEVICE)
    A[0, 0, 0] = -3.0  # tail exactly zero: geqrf leaves it and sets tau = 0
    A[0, :, 1] = torch.arange(1.0, 7.0)
    dst, tau, T, _ = run_panel(A, 0, 2, unroll=unroll)
    assert tau[0, 0] == 0 and dst[0, 0, 0] == -3.0 and T[0, 0, 0] == 0
    assert tau[0, 1] > 0


def test_by_rows_rules():
    assert by_rows(8, 512) == 8
    rule = [[128, 2], [512, 4], [None, 8]]
    assert [by_rows(rule, r) for r in (64, 128, 256, 512, 1024)] == [2, 2, 4, 4, 8]
    assert by_rows([[128, 2]], 4096) == 2


def test_two_row_tiles_only_where_they_hold_fewer_rows():
    assert row_tiles_of(288, 2) == (256, 32)    # instead of 512
    assert row_tiles_of(352, 2) == (256, 128)
    assert row_tiles_of(480, 2) == (512, 0)     # 256 + 256 saves nothing
    assert row_tiles_of(512, 2) == (512, 0)     # a power of two already
    assert row_tiles_of(264, 2) == (512, 0)     # the rest (8 rows) too small to pay for itself
    assert row_tiles_of(288, 1) == (512, 0)
    assert row_tiles_of(48, 2, 32) == (32, 16)
    assert row_tiles_of(48, 2, 64) == (64, 0)     # the first tile must hold the BB diagonal rows



def test_a_register_cap_is_a_launch_option_only_when_set():
    from qrsub.kernels.launch import register_cap

    assert register_cap(0) == {} and register_cap(168) == {"maxnreg": 168}


def test_a_register_cap_by_rows_caps_only_the_short_panels():
    """panel.max_registers [[256, 168], [null, 0]]: 168 registers at a padded height of 256 or
    less (three 4-warp programs an SM without a spill, ptxas for sm_90), none above."""
    from qrsub.kernels.panel import panel_launch

    A, tau = torch.zeros(2, 320, 320), torch.zeros(2, 320)
    knobs = PanelKnobs(width=32, max_registers=[[256, 168], [None, 0]])
    options = {j: panel_launch(A, A, tau, None, None, j, 32, knobs=knobs)[2] for j in (0, 64, 288)}
    assert options[0] == {"num_warps": 4}, "320 rows pad to 512: no cap"
    assert options[64] == {"num_warps": 4, "maxnreg": 168}, "256 rows"
    assert options[288] == {"num_warps": 4, "maxnreg": 168}, "32 rows"


def test_a_capped_panel_factors_like_an_uncapped_one():
    """panel.max_registers reaches the launch (the interpreter takes the option and ignores it;
    the GPU twin caps for real)."""
    A = special_matrices(40, batch=2)
    results = []
    for cap in (0, 168):
        dst, tau = A.clone(), torch.zeros(2, 40, device=A.device)
        householder_panel(dst, dst, tau, None, None, 0, 16, knobs=PanelKnobs(width=16, max_registers=cap))
        results.append((dst, tau))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("n,row0,j,bw", [(40, 0, 16, 16), (37, 16, 32, 5), (80, 0, 16, 16)])
def test_a_panel_applies_its_pending_update_first(n, row0, j, bw):
    """panel.apply_pending: the previous panel's C - Y W on this panel's columns (rows row0..,
    read from a separate source), then the panel, in one launch: as rank_update_ref then
    panel_ref in float64. (37, 16, 32, 5): a ragged panel narrower than Y; (80, 0, ...): two
    64-row steps of the update, the second partial."""
    from qrsub.kernels.naive import rank_update_ref
    from qrsub.kernels.panel import Pending

    batch, YB = 3, 16
    g = torch.Generator().manual_seed(5)
    A = special_matrices(n, batch=batch)
    Y = torch.randn(batch, n, YB, generator=g).to(DEVICE) / 4
    W = torch.randn(batch, YB, n, generator=g).to(DEVICE) / 4
    dst = torch.full_like(A, float("nan"))
    BB = padded_width(bw)
    tau, T, V = torch.zeros(batch, n, device=A.device), torch.zeros(batch, BB, BB, device=A.device), \
        torch.zeros(batch, n, BB, device=A.device)
    householder_panel(A, dst, tau, T, V, j, bw, knobs=PanelKnobs(width=bw, num_warps=4, unroll=4),
                      pending=Pending(A, Y, W[:, :, j:], row0, "fp32"))
    for i in range(batch):
        updated = rank_update_ref(A[i, row0:, j:j + bw].cpu(), Y[i, row0:].cpu(), W[i, :, j:j + bw].cpu())
        torch.testing.assert_close(dst[i, row0:j, j:j + bw].double().cpu(), updated[:j - row0], atol=1e-5, rtol=1e-5)
        P, tau_ref, T_ref, _ = panel_ref(updated[j - row0:])
        torch.testing.assert_close(dst[i, j:, j:j + bw].double().cpu(), P, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(tau[i, j:j + bw].double().cpu(), tau_ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(T[i, :bw, :bw].double().cpu(), T_ref, atol=2e-5, rtol=1e-4)
    assert torch.isnan(dst[:, :row0]).all() and torch.isnan(dst[:, :, :j]).all() and torch.isnan(dst[:, :, j + bw:]).all(), \
        "only rows row0.. of the panel's columns are written"
