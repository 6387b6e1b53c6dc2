"""tools/tproduct_tiles.py: its arguments, the shapes of a call's T products, and that every
configuration it times computes T^T W (on the CPU through the interpreter; the timings need a GPU)."""
import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import tproduct_tiles  # noqa: E402


def test_shapes_read_as_batch_n_and_outer():
    assert tproduct_tiles.shape_arg("60x1024:128") == (60, 1024, 128)
    with pytest.raises(argparse.ArgumentTypeError, match="expected BATCHxN:OUTER"):
        tproduct_tiles.shape_arg("60x1024")


def test_a_call_has_one_t_product_per_block_with_far_columns():
    pairs = tproduct_tiles.operands(2, 100, 32, device="cpu")
    assert [tuple(W.shape) for _, W in pairs] == [(2, 32, 68), (2, 32, 36), (2, 32, 4)]
    assert all(T.shape == (2, 32, 32) and bool((T.tril(-1) == 0).all()) for T, _ in pairs)


def test_every_configuration_computes_the_product():
    configs = tproduct_tiles.configurations(["fp16x3"], [16, 64], [16, 64], [2], outer=32)
    assert sorted(configs) == ["cublas fp32", "cublas tf32", "fp16x3 bn 16 bk 16 warps 2",
                               "fp16x3 bn 64 bk 16 warps 2"]  # bk 64 does not fit a 32-row T
    pairs = tproduct_tiles.operands(2, 100, 32, device="cpu")
    for label, product in configs.items():
        assert tproduct_tiles.worst_error(pairs, product) < 1e-5, label


def test_the_default_shapes_are_the_champions_triton_t_products():
    # The champion's large, huge and giant routes run the T product in Triton (fp16x3 since the
    # twenty-ninth session), at outer 128, 256 and 256.
    assert tproduct_tiles.champion_shapes() == [(60, 1024, 128), (8, 2048, 256), (2, 4096, 256)]
