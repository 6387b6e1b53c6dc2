"""generate_input: determinism, draw order and each case's structure (small shapes, CPU)."""
import pytest
import torch

from qrsub.task.reference import (EPS32, MIXED_PROFILES, apply_case, generate_input,
                                  mixed_labels)

CASES = ["dense", "upper", "diagonal", "rankdef", "nearrank", "clustered", "band",
         "nearcollinear", "rowscale", "mixed"]


def _gen(seed):
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return gen


def _randn(gen, *shape):
    return torch.randn(shape, dtype=torch.float32, generator=gen)


def _col_scales(cond, n):
    return torch.logspace(0, -cond, n, dtype=torch.float32)


@pytest.mark.parametrize("case", CASES)
def test_deterministic_contiguous_float32(case):
    a = generate_input(3, 16, 2, 1234, case)
    b = generate_input(3, 16, 2, 1234, case)
    c = generate_input(3, 16, 2, 1235, case)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.shape == (3, 16, 16) and a.dtype == torch.float32 and a.is_contiguous()
    assert a.device.type == "cpu"


def test_case_name_is_case_insensitive():
    assert torch.equal(generate_input(2, 8, 1, 5, "RankDef"), generate_input(2, 8, 1, 5, "rankdef"))


def test_unknown_case_raises():
    with pytest.raises(ValueError, match="unknown QR test case"):
        generate_input(1, 4, 0, 1, "triangular")


def test_dense_scales_columns_by_cond():
    raw = _randn(_gen(7), 2, 12, 12)
    assert torch.equal(generate_input(2, 12, 0, 7), raw)
    assert torch.equal(generate_input(2, 12, 3, 7), raw * _col_scales(3, 12))


def test_upper_is_triangular_with_shifted_diagonal():
    n = 10
    raw = _randn(_gen(3), 2, n, n)
    a = generate_input(2, n, 1, 3, "upper")
    assert torch.equal(torch.tril(a, -1), torch.zeros_like(a))
    expected = torch.triu(raw) + torch.diag_embed(torch.linspace(1.0, 0.25, n))
    assert torch.allclose(a, expected * _col_scales(1, n), rtol=0, atol=0)


def test_diagonal_signs_and_magnitudes():
    n, cond = 9, 1
    a = generate_input(4, n, cond, 11, "diagonal")
    d = torch.diagonal(a, dim1=-2, dim2=-1)
    assert torch.equal(a, torch.diag_embed(d))
    # cond below 2 still spans 10^0 .. 10^-2
    assert torch.equal(d.abs(), torch.logspace(0, -2, n, dtype=torch.float32).expand(4, n))
    # the signs come from a second draw after the first randn
    gen = _gen(11)
    _randn(gen, 4, n, n)
    signs = torch.sign(_randn(gen, 4, n)).clamp(min=0) * 2 - 1
    assert torch.equal(torch.sign(d), signs)


def test_rankdef_zero_tail_columns_and_rank():
    n = 16
    rank = 3 * n // 4
    a = generate_input(3, n, 2, 21, "rankdef")
    raw = _randn(_gen(21), 3, n, n)
    assert torch.equal(a[:, :, rank:], torch.zeros(3, n, n - rank))
    assert torch.equal(a[:, :, :rank], (raw * _col_scales(2, n))[:, :, :rank])
    assert torch.linalg.matrix_rank(a.double()).tolist() == [rank] * 3


def test_rankdef_keeps_one_column_for_tiny_n():
    a = generate_input(1, 1, 0, 5, "rankdef")
    assert a.item() != 0  # rank = max(1, 0) keeps the single column


def test_nearrank_tail_copies_head_plus_noise():
    n = 16
    rank, tail = 12, 4
    gen = _gen(8)
    raw = _randn(gen, 2, n, n)
    noise = _randn(gen, 2, n, tail)
    a = generate_input(2, n, 0, 8, "nearrank")
    assert torch.equal(a[:, :, :rank], raw[:, :, :rank])
    assert torch.equal(a[:, :, rank:], raw[:, :, :tail] + 1e-5 * noise)
    diff = (a[:, :, rank:] - a[:, :, :tail]).abs().max()
    assert 0 < diff < 1e-4


def test_clustered_column_scales():
    n = 16
    raw = _randn(_gen(9), 2, n, n)
    a = generate_input(2, n, 5, 9, "clustered")  # cond is ignored
    scales = a[0] / raw[0]
    col = scales[0]
    assert torch.allclose(col[:6], torch.ones(6))
    assert torch.allclose(col[6:10], torch.full((4,), EPS32 ** 0.5))
    assert torch.allclose(col[10:], torch.full((6,), 4 * EPS32))


def test_clustered_small_n_has_no_middle_band():
    n = 6
    raw = _randn(_gen(9), 1, n, n)
    a = generate_input(1, n, 0, 9, "clustered")
    expected = torch.tensor([1, 1, 1, 4 * EPS32, 4 * EPS32, 4 * EPS32], dtype=torch.float32)
    assert torch.equal(a, raw * expected)


@pytest.mark.parametrize("n,bw", [(16, 2), (128, 4)])
def test_band_mask_and_diagonal(n, bw):
    raw = _randn(_gen(4), 2, n, n)
    a = generate_input(2, n, 0, 4, "band")
    i = torch.arange(n)
    outside = (i[:, None] - i[None, :]).abs() > bw
    assert torch.equal(a[:, outside], torch.zeros(2, int(outside.sum())))
    inside = ~outside & (i[:, None] != i[None, :])
    assert torch.equal(a[:, inside], raw[:, inside])
    assert torch.equal(torch.diagonal(a, dim1=-2, dim2=-1),
                      torch.diagonal(raw, dim1=-2, dim2=-1) + torch.linspace(1.0, 0.5, n))


def test_nearcollinear_columns_nearly_equal_and_draw_order():
    n = 12
    gen = _gen(6)
    _randn(gen, 2, n, n)  # the first draw is discarded by this case
    base = _randn(gen, 2, n, 1)
    noise = _randn(gen, 2, n, n)
    a = generate_input(2, n, 0, 6, "nearcollinear")
    assert torch.equal(a, base.expand(2, n, n) + 1e-4 * noise)
    assert (a - a[:, :, :1]).abs().max() < 1e-2


def test_rowscale_scales_rows():
    n = 8
    raw = _randn(_gen(2), 1, n, n)
    a = generate_input(1, n, 1, 2, "rowscale")  # max(cond, 4)
    rows = torch.logspace(0, -4, n, dtype=torch.float32).reshape(1, n, 1)
    assert torch.equal(a, rows * raw)


def _labels_after_first_draw(batch, n, seed):
    gen = _gen(seed)
    _randn(gen, batch, n, n)
    return mixed_labels(batch, gen, "cpu")


@pytest.mark.parametrize("seed", range(40))
def test_mixed_batch_has_dense_and_other(seed):
    labels = _labels_after_first_draw(2, 4, seed)
    assert (labels == 0).any() and (labels != 0).any()


def test_mixed_single_matrix_has_no_guarantee_but_is_valid():
    for seed in range(10):
        labels = _labels_after_first_draw(1, 4, seed)
        assert labels.shape == (1,) and 0 <= int(labels) < len(MIXED_PROFILES)


def test_mixed_applies_profiles_per_matrix():
    batch, n, cond, seed = 12, 16, 2, 31
    gen = _gen(seed)
    raw = _randn(gen, batch, n, n)
    labels = mixed_labels(batch, gen, "cpu")
    expected = raw.clone()
    for k, profile in enumerate(MIXED_PROFILES):
        mask = labels == k
        if mask.any():
            expected[mask] = apply_case(expected[mask], profile, cond, gen)
    a = generate_input(batch, n, cond, seed, "mixed")
    assert torch.equal(a, expected)
    for b, label in enumerate(labels.tolist()):
        if MIXED_PROFILES[label] == "rankdef":
            assert torch.count_nonzero(a[b, :, 12:]) == 0
        if MIXED_PROFILES[label] == "dense":
            assert torch.equal(a[b], raw[b] * _col_scales(cond, n))
