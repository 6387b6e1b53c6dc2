"""The trailing strip against strip_ref, for each precision the interpreter computes
(kernel_helpers.CPU_MODELED_PRECISIONS; the GPU tests cover tf32 and tf32x3)."""
import pytest
import torch
from kernel_helpers import CPU_MODELED_PRECISIONS, STRIP_TOLERANCE, strip_error

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
