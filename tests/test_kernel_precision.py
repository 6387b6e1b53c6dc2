"""precision.round_tf32 and rounded_tf32 against naive.round_tf32_ref (round to nearest even at
10 mantissa bits), the packed fp16x3 parts against split_fp16, and strip.rank_update against
naive.rank_update_ref."""
import pytest
import torch
import triton
import triton.language as tl
from kernel_helpers import DEVICE

from qrsub.kernels import plan
from qrsub.kernels.naive import rank_update_ref, round_tf32_ref
from qrsub.kernels.precision import pack_fp16_parts, round_tf32, rounded_tf32, split_fp16, unpack_fp16_parts
from qrsub.kernels.strip import rank_update


@triton.jit
def _round_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, round_tf32(tl.load(x_ptr + offs)))


def test_round_tf32_rounds_to_nearest_even():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, generator=g) * torch.logspace(-20, 20, 1024)
    # exact ties (low 13 bits 0x1000) on an even and an odd kept bit, and their neighbours
    base = torch.tensor([1.0, 1.0 + 2.0 ** -10, -3.0, 0.5 + 2.0 ** -11], dtype=torch.float32)
    bits = base.view(torch.int32)
    ties = torch.cat([bits + 0x1000, bits + 0x0FFF, bits + 0x1001]).view(torch.float32)
    x = torch.cat([x[: 1024 - ties.numel()], ties]).to(DEVICE)
    y = torch.empty_like(x)
    _round_kernel[(1,)](x, y, N=1024)
    assert torch.equal(y.cpu(), round_tf32_ref(x.cpu()))
    assert (y.cpu().view(torch.int32) & 0x1FFF).eq(0).all(), "13 low bits cleared"
    out = dict(zip(x.cpu().view(torch.int32).tolist(), y.cpu().view(torch.int32).tolist()))
    one, odd = bits[0].item(), bits[1].item()  # 1.0 keeps an even last bit, 1 + 2^-10 an odd one
    assert out[one + 0x1000] == one, "a tie goes to the even neighbour: down"
    assert out[odd + 0x1000] == odd + 0x2000, "a tie goes to the even neighbour: up"
    assert out[one + 0x1001] == one + 0x2000, "past the midpoint rounds up (truncation would not)"
    assert out[one + 0x0FFF] == one


def test_rounded_tf32_rounds_a_whole_tensor_out_of_place_and_in_place():
    x = (torch.randn(3, 700, generator=torch.Generator().manual_seed(1)) * 1e3).to(DEVICE)
    expected = round_tf32_ref(x.cpu())
    out = rounded_tf32(x, torch.empty_like(x))
    assert torch.equal(out.cpu(), expected) and not torch.equal(x.cpu(), expected)
    rounded_tf32(x, x)
    assert torch.equal(x.cpu(), expected)


@pytest.mark.parametrize("rank_rows", [0, 16])
@pytest.mark.parametrize("precision", ["fp32", "tf32_exact"])
@pytest.mark.parametrize("n,row0,col0", [(40, 0, 16), (37, 5, 21), (50, 0, 32)])
def test_rank_update_matches_reference(n, row0, col0, precision, rank_rows):
    """C - Y W read from src and written to dst, the rest of dst untouched (a partial column tile
    at n = 37; on the CPU tf32 is fp32, so both precisions give the fp32 product). rank_rows 16:
    the rows split over 2-4 programs (32, 40 and 50 rows), the last one partial at 40 and 50."""
    g = torch.Generator().manual_seed(n)
    batch, BB = 2, 16
    src = torch.randn(batch, n, n, generator=g)
    V = torch.randn(batch, n, BB, generator=g)
    W = torch.randn(batch, BB, n - col0, generator=g)
    dst = torch.full_like(src, float("nan"))
    src, V, W, dst = src.to(DEVICE), V.to(DEVICE), W.to(DEVICE), dst.to(DEVICE)
    before = src.clone()
    rank_update(src, dst, V, W, row0, col0, precision=precision, v_row_off=row0,
                strip=plan.StripKnobs(bm=16, bn=16, num_stages=2, num_warps=4, rank_rows=rank_rows))
    expected = rank_update_ref(src[:, row0:, col0:].cpu(), V[:, row0:].cpu(), W.cpu())
    torch.testing.assert_close(dst[:, row0:, col0:].double().cpu(), expected, atol=1e-4, rtol=1e-4)
    assert torch.isnan(dst[:, :row0]).all() and torch.isnan(dst[:, :, :col0]).all(), "only its block is written"
    assert torch.equal(src, before), "src is read only"


def test_rank_update_s_row_splits_give_the_same_bits():
    """strip.rank_rows moves rows between programs, never between row tiles: the result is the
    one-program update's to the bit (fp16x3, whose three products a tile sums in one order), so
    a variant that only splits keeps its accuracy figures. 70 rows by 32: a partial last split."""
    g = torch.Generator().manual_seed(5)
    batch, n, BB, col0 = 3, 70, 16, 16
    src = torch.randn(batch, n, n, generator=g).to(DEVICE)
    V = torch.randn(batch, n, BB, generator=g).to(DEVICE)
    W = torch.randn(batch, BB, n - col0, generator=g).to(DEVICE)
    outs = []
    for rank_rows in (0, 32):
        dst = torch.zeros_like(src)
        rank_update(src, dst, V, W, 0, col0, precision="fp16x3", v_row_off=0,
                    strip=plan.StripKnobs(bm=16, bn=32, num_stages=2, num_warps=4, rank_rows=rank_rows))
        outs.append(dst)
    assert torch.equal(outs[0], outs[1])
    assert outs[0][:, :, col0:].abs().sum() > 0, "the update was written"


@triton.jit
def _parts_kernel(x_ptr, hi_ptr, lo_ptr, uhi_ptr, ulo_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    hi, lo = split_fp16(x)
    tl.store(hi_ptr + offs, hi)
    tl.store(lo_ptr + offs, lo)
    uhi, ulo = unpack_fp16_parts(pack_fp16_parts(x))
    tl.store(uhi_ptr + offs, uhi)
    tl.store(ulo_ptr + offs, ulo)


def test_packed_parts_unpack_to_split_fp16_s_bits():
    """strip.v_parts stores V as pack_fp16_parts' words and the strips unpack them: the parts
    must be split_fp16's, bit for bit, signs, zeros and fp16's subnormal lo parts included."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, generator=g) * torch.logspace(-6, 3, 256)
    x[:4] = torch.tensor([0.0, -0.0, 1.0, -1.0])
    x = x.to(DEVICE)
    parts = [torch.empty(256, dtype=torch.float16, device=DEVICE) for _ in range(4)]
    _parts_kernel[(1,)](x, *parts, N=256)
    hi, lo, uhi, ulo = (p.view(torch.int16) for p in parts)
    assert torch.equal(uhi, hi) and torch.equal(ulo, lo)
    assert (lo != 0).any() and (hi < 0).any(), "the inputs exercise lo parts and signs"
