"""The block T (the torch merge and the one-launch kernel) against larft over the whole block
and against wy_merge_ref."""
import pytest
import torch
from kernel_helpers import DEVICE

from qrsub.kernels.naive import larft, panel_ref, wy_merge_ref
from qrsub.kernels.wy import block_t, gram_product, wy_merge


def test_wy_merge_equals_larft_of_the_whole_block():
    g = torch.Generator().manual_seed(3)
    L, widths = 30, [8, 8, 5]
    ob = sum(widths)
    _, tau, _, V = panel_ref(torch.randn(L, ob, generator=g, dtype=torch.float64))
    inner = torch.zeros(1, len(widths), 8, 8, dtype=torch.float64)
    Ts, done = [], 0
    for i, w in enumerate(widths):
        Ti = larft(V[:, done:done + w], tau[done:done + w])
        inner[0, i, :w, :w] = Ti
        Ts.append(Ti)
        done += w
    out = torch.empty(1, ob, ob, dtype=torch.float64)
    wy_merge(V[None], inner, widths, out)
    torch.testing.assert_close(out[0], larft(V, tau))
    torch.testing.assert_close(out[0], wy_merge_ref(V, Ts))



@pytest.mark.parametrize("ob,width", [(32, 16), (64, 16), (128, 32)])
@pytest.mark.parametrize("gram", ["cublas", "fp16x3"])
def test_block_t_kernel_equals_the_merge(ob, width, gram):
    """One launch per block (TwoLevelKnobs.block_t: kernel) against the torch merge and larft,
    on a block with an exactly zero column (tau = 0: a zero row and column in T)."""
    g = torch.Generator().manual_seed(ob)
    batch, L = 2, ob + 24
    Y = torch.zeros(batch, L, ob)
    inner = torch.zeros(batch, ob // width, width, width)
    whole = []
    for i in range(batch):
        A = torch.randn(L, ob, generator=g, dtype=torch.float64)
        A[:, ob // 2 + 1] = 0
        _, tau, _, V = panel_ref(A)
        Y[i] = V.float()
        for k in range(ob // width):
            inner[i, k] = larft(V[:, k * width:(k + 1) * width], tau[k * width:(k + 1) * width]).float()
        whole.append(larft(V, tau))
    Y, inner = Y.to(DEVICE), inner.to(DEVICE)
    out = torch.full((batch, ob, ob), float("nan"), device=DEVICE)  # every entry must be written
    block_t(Y, inner, width, out, gram)
    merged = wy_merge(Y, inner, [width] * (ob // width), torch.empty_like(out))
    torch.testing.assert_close(out, merged, atol=1e-5, rtol=1e-4)
    for i in range(batch):
        torch.testing.assert_close(out[i].double().cpu(), whole[i], atol=1e-4, rtol=1e-3)


def block_reflectors(batch, L, ob, seed=0):
    """Y (batch x L x ob, unit lower trapezoidal) of random blocks, as a two-level block holds them."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([panel_ref(torch.randn(L, ob, generator=g, dtype=torch.float64))[3].float()
                        for _ in range(batch)]).to(DEVICE)


@pytest.mark.parametrize("L,ob,width", [(40, 32, 16), (77, 64, 32)])
def test_gram_kernel_matches_torch(L, ob, width):
    """fp16x3 on tensor cores (the interpreter rounds fp16 operands as the GPU does) against the
    float64 product; the GPU test covers tf32x3, which the interpreter runs as plain fp32.
    L=77: a last row tile only partly inside Y."""
    Y = block_reflectors(2, L, ob)
    G = gram_product(Y, width, "fp16x3")
    ref = Y.double().transpose(1, 2) @ Y.double()
    assert float((G.double() - ref).abs().max() / ref.abs().max()) < 1e-6
    rounded = Y.half().double()  # one fp16 pass would miss the bound by far: the split is real
    assert float((rounded.transpose(1, 2) @ rounded - ref).abs().max() / ref.abs().max()) > 1e-5


@pytest.mark.parametrize("L,ob,width,split_rows", [(77, 32, 16, 32), (100, 64, 16, 32), (130, 64, 32, 64)])
def test_gram_split_over_rows_sums_to_the_whole_product(L, ob, width, split_rows):
    """TwoLevelKnobs.gram_split_rows: the splits' parts summed give Y^T Y as the unsplit kernel
    does, to fp32 rounding (another order of sums). (100, 64, 16, 32): row strips 2 and 3 of G
    start below row 32, so their first split walks no row and must write zeros; L=77 and 130:
    a last split only partly inside Y."""
    Y = block_reflectors(2, L, ob, seed=L)
    whole = gram_product(Y, width, "fp16x3").clone()
    split = gram_product(Y, width, "fp16x3", split_rows)
    ref = Y.double().transpose(1, 2) @ Y.double()
    assert float((split.double() - ref).abs().max() / ref.abs().max()) < 1e-6
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-5)


def test_a_split_gram_feeds_the_block_t_kernel():
    """block_t with gram_split_rows gives the unsplit block T, to rounding."""
    g = torch.Generator().manual_seed(11)
    batch, L, ob, width = 2, 90, 32, 16
    Y, inner = torch.zeros(batch, L, ob), torch.zeros(batch, ob // width, width, width)
    for i in range(batch):
        _, tau, _, V = panel_ref(torch.randn(L, ob, generator=g, dtype=torch.float64))
        Y[i] = V.float()
        for k in range(ob // width):
            inner[i, k] = larft(V[:, k * width:(k + 1) * width], tau[k * width:(k + 1) * width]).float()
    Y, inner = Y.to(DEVICE), inner.to(DEVICE)
    split = block_t(Y, inner, width, torch.empty(batch, ob, ob, device=DEVICE), "fp16x3", 32)
    whole = block_t(Y, inner, width, torch.empty(batch, ob, ob, device=DEVICE), "fp16x3")
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("L,split_rows,columns", [(90, 32, 0), (150, 32, 16), (40, 32, 0)])
def test_block_t_summing_the_gram_parts_gives_the_summed_gram_s_t(L, split_rows, columns):
    """TwoLevelKnobs.gram_sum block_t: block_t_kernel sums the row splits' parts as it reads G
    (here 3, 5 and 2 parts, through 4, 8 and 2 unrolled loads; the masked ones add nothing)
    instead of a torch launch summing them first: the same T, to the sums' rounding. The
    special blocks: a zero column, so a zero row and column of T."""
    g = torch.Generator().manual_seed(L)
    batch, ob, width = 2, 32, 16
    Y, inner = torch.zeros(batch, L, ob), torch.zeros(batch, ob // width, width, width)
    for i in range(batch):
        block = torch.randn(L, ob, generator=g, dtype=torch.float64)
        block[:, 3] = 0.0
        _, tau, _, V = panel_ref(block)
        Y[i] = V.float()
        for k in range(ob // width):
            inner[i, k] = larft(V[:, k * width:(k + 1) * width], tau[k * width:(k + 1) * width]).float()
    Y, inner = Y.to(DEVICE), inner.to(DEVICE)

    def t(gram_sum):
        return block_t(Y, inner, width, torch.empty(batch, ob, ob, device=DEVICE), "fp16x3", split_rows, columns,
                       gram_sum)

    launched, summed = t("launch"), t("block_t")
    torch.testing.assert_close(summed, launched, atol=1e-6, rtol=1e-5)
    assert torch.equal(summed[0, 3], torch.zeros(ob, device=DEVICE)), "the zero column's row of T"


@pytest.mark.parametrize("L,split_rows", [(77, 0), (100, 32)])
def test_the_gram_kernel_ignores_y_above_the_diagonal_and_zeroes_it(L, split_rows):
    """TwoLevelKnobs.zero_fill gram: with garbage above each inner panel's diagonal, the Gram
    product masks it (the same G as from the zeros) and leaves zeros there, for the far update."""
    g = torch.Generator().manual_seed(L)
    batch, ob, width = 2, 64, 16
    Y = torch.randn(batch, L, ob, generator=g).to(DEVICE)
    above = torch.arange(L, device=DEVICE)[:, None] < (torch.arange(ob, device=DEVICE) // width * width)[None, :]
    Y[:, above] = 0.0
    clean = gram_product(Y, width, "fp16x3", split_rows).clone()
    Y[:, above] = 7.0
    dirty = gram_product(Y, width, "fp16x3", split_rows, zero=True)
    assert torch.equal(dirty, clean)
    assert torch.equal(Y[:, above], torch.zeros_like(Y[:, above])), "the zeros were written"


def upper_blocks(ob, width):
    """The mask of the blocks above the block diagonal (width x width blocks) of an ob x ob matrix."""
    blocks = torch.arange(ob) // width
    return blocks[:, None] < blocks[None, :]


@pytest.mark.parametrize("L,ob,width,columns,split_rows", [(77, 64, 16, 32, 0), (100, 64, 16, 16, 32),
                                                           (90, 32, 16, 64, 0)])
def test_gram_by_column_chunks_writes_the_blocks_block_t_reads(L, ob, width, columns, split_rows):
    """TwoLevelKnobs.gram_columns: programs of `columns` columns, those wholly left of their rows'
    first column past the diagonal block skipped: the blocks above the block diagonal equal the
    whole kernel's, split over rows or not. columns 64 > ob 32: one chunk a row strip."""
    Y = block_reflectors(2, L, ob, seed=L + columns)
    whole = gram_product(Y, width, "fp16x3").clone()
    chunks = gram_product(Y, width, "fp16x3", split_rows, columns)
    upper = upper_blocks(ob, width).to(DEVICE)
    torch.testing.assert_close(chunks[:, upper], whole[:, upper], atol=1e-5, rtol=1e-5)


def test_a_gram_by_column_chunks_skips_the_blocks_block_t_does_not_read():
    """The skipped programs write nothing: G's blocks on and below the diagonal keep what the
    scratch buffer held (NaN here), so the skip is real."""
    Y = block_reflectors(1, 70, 64, seed=4)
    G = gram_product(Y, 16, "fp16x3")
    G.fill_(float("nan"))
    G = gram_product(Y, 16, "fp16x3", columns=32)
    upper = upper_blocks(64, 16).to(DEVICE)
    assert not G[:, upper].isnan().any()
    assert G[0, 48:, :].isnan().all(), "the last row strip feeds no block of T"
    assert G[0, 16:32, :32].isnan().all(), "row strip 1's first chunk lies on and left of its diagonal block"
