"""The trailing strip against strip_ref, for each precision the interpreter computes
(kernel_helpers.CPU_MODELED_PRECISIONS; the GPU tests cover tf32 and tf32x3)."""
import pytest
import torch
from kernel_helpers import CPU_MODELED_PRECISIONS, DEVICE, STRIP_TOLERANCE, strip_error

from qrsub.kernels import plan

@pytest.mark.parametrize("split_rows", [0, 16])
@pytest.mark.parametrize("prec", CPU_MODELED_PRECISIONS)
@pytest.mark.parametrize("n,j,bw", [(40, 0, 16), (37, 5, 7), (50, 16, 16)])
def test_strip_matches_reference(prec, n, j, bw, split_rows):
    """split_rows 16: the rows split over 2-3 programs (the last one partial), partial W summed."""
    err, A, out, c0 = strip_error(prec, n, j, bw, split_rows)
    assert err < STRIP_TOLERANCE[prec], f"{prec}: relative error {err:.2e}"
    assert torch.equal(out[:, :j, :], A[:, :j, :]), "rows above the panel must stay"
    assert torch.equal(out[:, :, :c0], A[:, :, :c0]), "columns left of the strip must stay"


def test_split_products_are_really_computed():
    """One fp16 pass is far less accurate than the split: the split is not silently fp32
    and the single pass is not silently exact."""
    one_pass, _, _, _ = strip_error("fp16", 40, 0, 16)
    split, _, _, _ = strip_error("fp16x3", 40, 0, 16)
    assert one_pass > 1e-4 and split < one_pass / 100


def test_a_strip_program_is_no_wider_than_the_columns_it_has():
    from qrsub.kernels.plan import StripKnobs
    from qrsub.kernels.strip import strip_columns

    knobs = StripKnobs(bn=64)
    assert [strip_columns(knobs, c) for c in (1, 16, 17, 33, 64, 500)] == [16, 16, 32, 64, 64, 64]


@pytest.mark.parametrize("prec", ["fp32", "fp16x3"])
@pytest.mark.parametrize("apply_prev", [True, False])
@pytest.mark.parametrize("n,row0,col0,next_row", [(40, 0, 16, 0), (40, 0, 16, 16), (45, 7, 30, 19), (33, 16, 32, 32)])
def test_fused_strip_matches_reference(prec, apply_prev, n, row0, col0, next_row):
    """One pass: C - Va Wa written (apply_prev), and Tb^T Vb^T C' over rows next_row.. replacing W's
    columns from col0. next_row 19 with row0 7: a 16-row tile straddles it (Vb above it masked);
    col0 30 of 45: a ragged last column tile; n 33, col0 32: one column."""
    from qrsub.kernels.naive import fused_strip_ref
    from qrsub.kernels.strip import fused_strip

    batch, BB = 2, 16
    g = torch.Generator().manual_seed(3)
    A = torch.randn(batch, n, n, generator=g)
    Va, Vb = torch.randn(batch, n, BB, generator=g), torch.randn(batch, n, BB, generator=g)
    Vb[:, :next_row] = float("nan")  # rows above the next panel are never read
    Tb, W = torch.randn(batch, BB, BB, generator=g), torch.randn(batch, BB, n, generator=g)
    A, Va, Vb, Tb, W = (t.to(DEVICE) for t in (A, Va, Vb, Tb, W))
    out, W_in = torch.full_like(A, -7.0), W.clone()
    fused_strip(A, out, Va if apply_prev else None, Vb, W, Tb, row0, col0, next_row,
                strip=plan.StripKnobs(bm=16, bn=16, num_stages=2, num_warps=4),
                precision=plan.PrecisionKnobs(project=prec, tcontract=prec, apply=prec))
    for i in range(batch):
        C_ref, W_ref = fused_strip_ref(A[i, row0:, col0:].cpu(), Va[i, row0:].cpu() if apply_prev else None,
                                       W_in[i, :, col0:].cpu(), Vb[i, row0:].cpu(), Tb[i].cpu(), next_row - row0)
        if apply_prev:
            torch.testing.assert_close(out[i, row0:, col0:].double().cpu(), C_ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(W[i, :, col0:].double().cpu(), W_ref, rtol=1e-4, atol=1e-3)
    expected_untouched = torch.full_like(A, -7.0)
    if apply_prev:
        expected_untouched[:, row0:, col0:] = out[:, row0:, col0:]
    assert torch.equal(out, expected_untouched), "only rows row0.. x columns col0.. are written, and only when applying"
    assert torch.equal(W[:, :, :col0], W_in[:, :, :col0]), "W's columns left of col0 stay"
