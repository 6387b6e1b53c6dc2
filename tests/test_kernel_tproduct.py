"""tproduct.t_product against torch in float64: on the CPU through the interpreter for the
precisions it models, and tf32x3 (which the interpreter runs as plain fp32) on the GPU."""
import pytest
import torch
from kernel_helpers import CPU_MODELED_PRECISIONS, DEVICE

from qrsub.kernels.naive import t_product_ref
from qrsub.kernels.plan import TwoLevelKnobs
from qrsub.kernels.tproduct import t_product

DEFAULT = TwoLevelKnobs()
TILES = (DEFAULT.tproduct_bn, DEFAULT.tproduct_bk, DEFAULT.tproduct_warps)  # the knobs' defaults


def upper_t_and_w(batch, ob, ncols, seed=0):
    """T as the far update holds it: the top-left ob x ob of a larger buffer (row stride
    wider than ob), upper triangular; W: batch x ob x ncols."""
    g = torch.Generator().manual_seed(seed)
    buf = torch.randn(batch, ob + 16, ob + 16, generator=g)
    T = buf.to(DEVICE)[:, :ob, :ob]
    T.copy_(torch.triu(T))
    W = torch.randn(batch, ob, ncols, generator=g).to(DEVICE)
    return T, W


def relative_error(T, W, out):
    ref = t_product_ref(T.cpu(), W.cpu())
    return float((out.double().cpu() - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("ob,ncols", [(32, 40), (64, 5), (32, 64), (64, 130)])
@pytest.mark.parametrize("precision", [p for p in CPU_MODELED_PRECISIONS if p in ("fp32", "fp16x3")])
def test_t_product_matches_torch(ob, ncols, precision):
    T, W = upper_t_and_w(2, ob, ncols)
    out = t_product(T, W, precision, *TILES)
    assert out.shape == W.shape
    assert relative_error(T, W, out) < (1e-6 if precision == "fp32" else 1e-5)


@pytest.mark.parametrize("bn,bk,num_warps", [(16, 16, 1), (32, 64, 2), (128, 32, 8)])
def test_t_product_tiles_give_the_same_product(bn, bk, num_warps):
    # TwoLevelKnobs.tproduct_bn, _bk, _warps: ncols 70 leaves a ragged last column tile at every bn.
    T, W = upper_t_and_w(2, 64, 70, seed=1)
    out = t_product(T, W, "fp16x3", bn, bk, num_warps)
    assert relative_error(T, W, out) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="tf32 needs a GPU")
def test_t_product_in_tf32x3_is_close_to_fp32_on_the_gpu():
    T, W = upper_t_and_w(3, 128, 300)
    err_3 = relative_error(T, W, t_product(T, W, "tf32x3", *TILES))
    err_1 = relative_error(T, W, t_product(T, W, "tf32", *TILES).clone())
    assert err_3 < 1e-5, err_3
    assert err_1 > 10 * err_3, "tf32x3 must recover what one tf32 pass loses"
