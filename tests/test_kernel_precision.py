"""precision.round_tf32 against a torch reference of round-to-nearest-even at 10 mantissa bits."""
import torch
import triton
import triton.language as tl
from kernel_helpers import DEVICE

from qrsub.kernels.precision import round_tf32, rounded_tf32


@triton.jit
def _round_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, round_tf32(tl.load(x_ptr + offs)))


def round_tf32_ref(x: torch.Tensor) -> torch.Tensor:
    """Nearest fp32 value with the low 13 mantissa bits zero, ties to the even one (float64 math)."""
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    low, kept = bits & 0x1FFF, bits & ~0x1FFF & 0xFFFFFFFF
    up = (low > 0x1000) | ((low == 0x1000) & (((kept >> 13) & 1) == 1))
    out = torch.where(up, kept + 0x2000, kept)
    return (out - ((out >> 31) << 32)).to(torch.int32).view(torch.float32)


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
