"""Split-precision tensor-core products with fp32 accumulation.

`dot_prec(a, b, acc, PREC)` returns `acc + a @ b` computed as PREC says (the
names are plan.PRECISIONS, the values of the PrecisionKnobs):

- "fp32"     no tensor cores (IEEE fp32 FMA), exact to fp32 rounding
- "tf32"     one tf32 pass (10-bit mantissa inputs, rounded to nearest first: round_tf32)
- "tf32_exact" one tf32 pass on inputs already rounded to tf32 (round_tf32_kernel), which the
             tensor cores take as they are; internal: not a PrecisionKnobs value
- "tf32x3"   Triton's three-pass tf32 split, close to fp32
- "fp16x3"   x = hi + lo with hi = fp16(x), lo = fp16(x - hi): Ah Bh + Ah Bl + Al Bh
- "fp16x2lo" Ah Bh + Ah Bl (drops A's low part: for A whose entries fp16 holds well, e.g. V)
- "fp16"     one fp16 pass

fp16 splits hold values up to 65504: callers use them on Householder data,
whose magnitudes stay far below that for qr_v2's inputs.
"""
import triton
import triton.language as tl

from .launch import pdl_launch, wait_for_previous


@triton.jit
def split_fp16(x):
    """x (fp32) -> (hi, lo), both fp16, with hi + lo close to x to about 22 bits."""
    hi = x.to(tl.float16)
    lo = (x - hi.to(tl.float32)).to(tl.float16)
    return hi, lo


@triton.jit
def pack_fp16_parts(x):
    """x (fp32) as one 32-bit word (int32) holding split_fp16(x): hi's bits in the low half, lo's in
    the high half. A 4-byte store, as x's own: a store of fp16 tiles would make Triton give the
    values it stores 8 columns a thread, which breaks the layout the grouped panel's indexed
    shuffle relies on (panel.group_broadcast; on the H200 that returned NaN, thirteenth session)."""
    hi, lo = split_fp16(x)
    low = hi.to(tl.uint16, bitcast=True).to(tl.uint32)
    high = lo.to(tl.uint16, bitcast=True).to(tl.uint32)
    return (low | (high << 16)).to(tl.int32, bitcast=True)


@triton.jit
def unpack_fp16_parts(word):
    """(hi, lo), fp16, from pack_fp16_parts' word: split_fp16's parts, bit for bit."""
    bits = word.to(tl.uint32, bitcast=True)
    hi = (bits & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    lo = (bits >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    return hi, lo


@triton.jit
def round_tf32(x):
    """x (fp32) rounded to the nearest tf32 value (10 mantissa bits, ties to even), still fp32.

    tl.dot's tf32 hands fp32 registers to the tensor cores, which drop the low 13 bits: a
    truncation, biased toward zero, whose errors add up along K instead of cancelling.
    cuBLAS rounds; on the H200 a Triton tf32 far update without this took 4x1024 mixed from
    8.4 to 11.4 of the gate's 20 (docs/perf-log.md, eighth session). Finite inputs only.
    """
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def dot_prec(a, b, acc, PREC: tl.constexpr):
    """acc + a @ b in the precision PREC (a constexpr string; see the module docstring).

    Every dimension must be at least 16 (tl.dot's minimum).
    """
    if PREC == "fp32":
        acc = tl.dot(a, b, acc, input_precision="ieee")
    elif PREC == "tf32":
        acc = tl.dot(round_tf32(a), round_tf32(b), acc, input_precision="tf32")
    elif PREC == "tf32_exact":
        acc = tl.dot(a, b, acc, input_precision="tf32")
    elif PREC == "tf32x3":
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    elif PREC == "fp16x3":
        a_hi, a_lo = split_fp16(a)
        acc = dot_a_parts(a_hi, a_lo, b, acc)
    elif PREC == "fp16x2lo":
        a_hi = a.to(tl.float16)
        b_hi, b_lo = split_fp16(b)
        acc = tl.dot(a_hi, b_lo, acc)
        acc = tl.dot(a_hi, b_hi, acc)
    else:
        tl.static_assert(PREC == "fp16", "unknown precision")
        acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)
    return acc


@triton.jit
def dot_a_parts(a_hi, a_lo, b, acc):
    """fp16x3's acc + a @ b with a given as its parts (a_hi, a_lo = split_fp16(a), e.g. as the
    panel stored them, packed: StripKnobs.v_parts): dot_prec's bits, without splitting a again."""
    b_hi, b_lo = split_fp16(b)
    acc = tl.dot(a_lo, b_hi, acc)
    acc = tl.dot(a_hi, b_lo, acc)
    return tl.dot(a_hi, b_hi, acc)


@triton.jit
def round_tf32_kernel(x_ptr, y_ptr, numel, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Grid: (cdiv(numel, BLOCK),). Program p writes round_tf32 of elements [p*BLOCK, (p+1)*BLOCK)
    of the contiguous x to y (which may be x). PDL: launch.wait_for_previous first."""
    wait_for_previous(PDL)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    tl.store(y_ptr + offs, round_tf32(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def rounded_tf32(x, out):
    """out = x rounded to tf32 (both contiguous fp32 of one size; out may be x), in one launch.
    A "tf32_exact" product of such operands equals a "tf32" one, and its kernel can load them
    straight to shared memory instead of rounding them in registers on the way."""
    assert x.is_contiguous() and out.is_contiguous() and x.numel() == out.numel()
    block = 1024
    round_tf32_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block, **pdl_launch())
    return out
