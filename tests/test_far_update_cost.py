"""tools/far_update_cost.py: its arguments, a call's far updates and their operands, and that every
configuration it times computes the far update (on the CPU through the interpreter; the timings
need a GPU)."""
import argparse
import sys
from pathlib import Path

import pytest
import torch

from kernel_helpers import DEVICE, route

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import far_update_cost  # noqa: E402


def test_shapes_read_as_batch_and_n():
    assert far_update_cost.shape_arg("60x1024") == (60, 1024)
    with pytest.raises(argparse.ArgumentTypeError, match="expected BATCHxN"):
        far_update_cost.shape_arg("60x1024:128")


def test_the_operands_are_block_reflectors():
    g = torch.Generator(device=DEVICE).manual_seed(1)
    Y, T = far_update_cost.block_reflector(2, 40, 16, g, DEVICE)
    assert bool((Y.triu(1) == 0).all()) and bool((Y.diagonal(dim1=1, dim2=2) == 1).all())
    assert bool((T.tril(-1) == 0).all())
    Q = torch.eye(40, dtype=torch.float64) - Y.double() @ T.double() @ Y.double().transpose(1, 2)
    torch.testing.assert_close(Q @ Q.transpose(1, 2), torch.eye(40, dtype=torch.float64).expand(2, 40, 40),
                               atol=1e-5, rtol=0)


def test_a_call_has_one_far_update_per_block_with_far_columns():
    A, blocks = far_update_cost.operands(2, 70, 32, device=DEVICE)
    assert [(J, ob) for J, ob, _, _ in blocks] == [(0, 32), (32, 32)]  # 64-70: the last block, no far update
    for J, ob, Vb, Tb in blocks:
        assert Vb.shape == (2, 70, 32) and bool((Vb[:, :J] == 0).all()) and Tb.shape == (2, ob, ob)


def test_every_configuration_computes_the_far_update():
    base = route(driver="twolevel", panel=dict(width=16), strip=dict(bm=16, bn=16), twolevel=dict(outer=32))
    configs = far_update_cost.configurations(base, ["fp32", "fp16x3"], "fp16x3", [16], [16, 32], [2], [1], [0, 32])
    assert len(configs) == 1 + 2 * 2 * 2
    assert "strip fp16x3 bm 16 bn 32 warps 2 stages 1 split 32" in configs
    assert configs["strip fp32 bm 16 bn 16 warps 2 stages 1"].twolevel.far_tcontract == "tf32"  # fp32 throughout
    A, blocks = far_update_cost.operands(2, 70, 32, device=DEVICE)
    ref = far_update_cost.reference(A, blocks)
    for label in (far_update_cost.ROUTE_AS_IS, "strip fp32 bm 16 bn 16 warps 2 stages 1",
                  "strip fp16x3 bm 16 bn 32 warps 2 stages 1 split 32"):
        assert far_update_cost.worst_error(A, blocks, configs[label], ref) < 1e-5, label


def test_the_default_variant_gives_each_default_shape_a_two_level_route():
    from qrsub.variant import load_variant

    variant = load_variant(far_update_cost.CHAMPION)
    for batch, n, outer in far_update_cost.champion_shapes():
        assert variant.route_for(n, batch).twolevel.outer == outer
