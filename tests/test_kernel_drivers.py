"""Each driver's full QR on small shapes: against geqrf and through the harness's checker."""
import pytest
import torch
from kernel_helpers import CPU_MODELED_PRECISIONS, DEVICE, harness_check, route, special_matrices

from qrsub.kernels import plan
from qrsub.kernels.panel import padded_width
from qrsub.kernels.strip import strip_columns
from qrsub.kernels.routing import DRIVER_FUNCTIONS as DRIVERS

SHAPES = [1, 2, 5, 16, 23, 40]


@pytest.mark.parametrize("driver", ["blocked", "twolevel", "coop", "warp"])
@pytest.mark.parametrize("n", SHAPES)
def test_driver_matches_geqrf_and_passes_the_gate(driver, n):
    if driver in plan.TWO_LEVEL_DRIVERS and n < 16:
        pytest.skip("two-level drivers take n >= panel width (routes send small n elsewhere)")
    if driver == "warp" and n > plan.WARP_MAX_N:
        pytest.skip(f"the warp driver takes n <= {plan.WARP_MAX_N}")
    A = special_matrices(n)
    knobs = route(driver=driver, panel=dict(width=16 if driver != "blocked" else 8), coop=dict(max_rows=20),
                  n_range=(1, plan.WARP_MAX_N) if driver == "warp" else (1, None))
    before = A.clone()
    H, tau = DRIVERS[driver](A, knobs)
    assert torch.equal(A, before), "drivers must not write to their input"
    assert H._base is not None and tau._base is H._base, "H and tau in one buffer (graphs.copied_out)"
    H_ref, tau_ref = torch.geqrf(A.double().cpu())
    torch.testing.assert_close(H.double().cpu(), H_ref, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(tau.double().cpu(), tau_ref, atol=1e-4, rtol=1e-3)
    margin = harness_check(A, H, tau)
    assert margin < 0.5, f"factor residual at {margin:.2f} of the gate"


@pytest.mark.parametrize("n,width,prec,pending", [(1, 8, "fp32", False), (16, 16, "fp32", False),
                                                  (23, 8, "fp32", False), (37, 16, "fp32", False),
                                                  (37, 16, "fp16x3", False), (23, 8, "fp32", True),
                                                  (37, 16, "fp16x3", True)])
def test_fused_next_gives_the_two_pass_result(n, width, prec, pending):
    """strip.fuse_next moves where C is read, not the arithmetic: where the strip's 16-row tiles
    divide the panel width they start at the same rows, and the interpreter gives the same bits.
    panel.apply_pending moves the next panel's update into the panel's launch, whose taller
    row steps may sum in another order: close, not always the same bits.
    Edge cases: one panel (n 1, 16), a ragged last panel (23, 37), the special matrices' zero
    and rank-deficient columns."""
    A = special_matrices(n)
    precision = dict(project=prec, tcontract="fp32", apply=prec)
    H0, tau0 = DRIVERS["blocked"](A, route(panel=dict(width=width), precision=precision))
    H1, tau1 = DRIVERS["blocked"](A, route(panel=dict(width=width, apply_pending=pending), strip=dict(fuse_next=True),
                                           precision=precision))
    if width % 16 == 0 and not pending:
        assert torch.equal(H0, H1) and torch.equal(tau0, tau1)
    else:
        torch.testing.assert_close(H1, H0, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(tau1, tau0, atol=1e-5, rtol=1e-5)
    assert harness_check(A, H1, tau1) < 0.5


FP16X3 = dict(project="fp16x3", tcontract="fp32", apply="fp16x3")


@pytest.mark.parametrize("n,panel", [(1, dict(width=16)), (37, dict(width=16)),
                                     (64, dict(width=32, broadcast="shuffle", unroll=4, split=2))])
def test_v_parts_give_the_same_bits(n, panel):
    """strip.v_parts: the panel stores V's fp16x3 parts and the fused pass and rank update load
    them as they are, where they split V in registers before: the same products on the same
    fp16 values, so the same bits. One panel (n 1), a ragged last panel (37), the split panel
    (which stores V by halves); the special matrices' zero and rank-deficient columns."""
    A = special_matrices(n)
    H0, tau0 = DRIVERS["blocked"](A, route(panel=panel, strip=dict(fuse_next=True), precision=FP16X3))
    H1, tau1 = DRIVERS["blocked"](A, route(panel=panel, strip=dict(fuse_next=True, v_parts=True), precision=FP16X3))
    assert torch.equal(H0, H1) and torch.equal(tau0, tau1)


def test_v_parts_need_the_fused_driver_and_fp16x3():
    with pytest.raises(ValueError, match="strip.v_parts: got true with strip.fuse_next false"):
        route(strip=dict(v_parts=True), precision=FP16X3)
    with pytest.raises(ValueError, match="strip.v_parts: got true with panel.apply_pending or strip.tail_update"):
        route(strip=dict(v_parts=True, fuse_next=True, tail_update=True), precision=FP16X3)
    with pytest.raises(ValueError, match="strip.v_parts: got true with precision.project fp32"):
        route(strip=dict(v_parts=True, fuse_next=True))
    route(strip=dict(v_parts=True, fuse_next=True), precision=FP16X3)


@pytest.mark.parametrize("n,width,prec", [(1, 8, "fp32"), (16, 16, "fp32"), (23, 8, "fp32"), (37, 16, "fp32"),
                                          (37, 16, "fp16x3"), (64, 16, "fp16x3"), (70, 32, "fp32")])
def test_tail_update_gives_the_rank_update_s_result(n, width, prec):
    """strip.tail_update moves the next panel's update from rank_update's launch into the tail of
    the strip before it: the same rows, row tiles and products, so the same bits wherever the
    next panel is as wide as the padded panel (rank_update's column tile is then BB wide too).
    A narrower last panel (70 = 2 x 32 + 6) gets a 16-column tile in rank_update against the
    tail's 32: close. Edge cases: one panel (n 1, 16), ragged last panels, the special matrices'
    zero and rank-deficient columns."""
    A = special_matrices(n)
    precision = dict(project=prec, tcontract="fp32", apply=prec)
    launched = DRIVERS["blocked"](A, route(panel=dict(width=width), strip=dict(fuse_next=True), precision=precision))
    tailed = DRIVERS["blocked"](A, route(panel=dict(width=width), strip=dict(fuse_next=True, tail_update=True),
                                         precision=precision))
    knobs = route(panel=dict(width=width), strip=dict(fuse_next=True))
    last_width = n % width or width
    if strip_columns(knobs.strip, last_width) == padded_width(width):
        assert torch.equal(launched[0], tailed[0]) and torch.equal(launched[1], tailed[1])
    else:
        torch.testing.assert_close(tailed[0], launched[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(tailed[1], launched[1], atol=1e-5, rtol=1e-5)
    assert harness_check(A, *tailed) < 0.5


def test_tail_update_launches_no_rank_update(monkeypatch):
    """The point of the knob: a panel and a strip a step, the rank_update launch gone."""
    from qrsub.kernels import blocked

    calls = []
    real = blocked.rank_update
    monkeypatch.setattr(blocked, "rank_update", lambda *a, **k: calls.append(1) or real(*a, **k))
    DRIVERS["blocked"](special_matrices(48), route(panel=dict(width=16), strip=dict(fuse_next=True, tail_update=True)))
    assert calls == []
    DRIVERS["blocked"](special_matrices(48), route(panel=dict(width=16), strip=dict(fuse_next=True)))
    assert len(calls) == 2


def test_a_strip_register_cap_reaches_only_the_fused_pass_s_launch(monkeypatch):
    """strip.max_registers: every fused pass launches with maxnreg, and nothing else changes (the
    interpreter takes the option and ignores it; the GPU twin stripregs caps for real). A ragged
    last panel (37 = 2 x 16 + 5) and the special matrices' zero and rank-deficient columns."""
    from qrsub.kernels import strip as strip_module

    real = strip_module.fused_strip_kernel
    caps = []

    class Recording:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                caps.append(kwargs.get("maxnreg"))
                return real[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(strip_module, "fused_strip_kernel", Recording())
    A = special_matrices(37)
    capped = DRIVERS["blocked"](A, route(panel=dict(width=16), strip=dict(fuse_next=True, max_registers=128)))
    assert caps == [128, 128]  # three panels: a fused pass after each but the last
    caps.clear()
    plain = DRIVERS["blocked"](A, route(panel=dict(width=16), strip=dict(fuse_next=True)))
    assert caps == [None, None]
    assert torch.equal(capped[0], plain[0]) and torch.equal(capped[1], plain[1])


@pytest.mark.parametrize("n,batch", [(1, 5), (16, 5), (37, 5), (37, 2), (37, 1), (48, 3)])
def test_halves_give_the_whole_batch_s_bits(n, batch):
    """strip.halves 2 only reorders launches (each half a step behind the other) and gives each
    half its own buffers: every matrix sees the same kernels on the same data. Edge cases: one
    panel (n 1, 16), a ragged last panel, halves of unequal size, a batch of one (whole)."""
    A = special_matrices(n, batch=batch)
    whole = DRIVERS["blocked"](A, route(panel=dict(width=16), strip=dict(fuse_next=True)))
    halves = DRIVERS["blocked"](A, route(panel=dict(width=16), strip=dict(fuse_next=True, halves=2)))
    assert torch.equal(whole[0], halves[0]) and torch.equal(whole[1], halves[1])


def test_halves_run_each_strip_after_the_other_half_s_panel(monkeypatch):
    """The launch order the PDL overlap relies on: X's panel, Y's panel, then per step X's
    strip, X's next rank update and panel, Y's strip, Y's rank update and panel."""
    from qrsub.kernels import blocked

    order = []
    for name in ("householder_panel", "fused_strip", "rank_update"):
        real = getattr(blocked, name)

        def record(*args, _real=real, _name=name, **kwargs):
            order.append((_name[0].upper(), "XY"[args[1].data_ptr() != H_base[0]]))
            return _real(*args, **kwargs)
        monkeypatch.setattr(blocked, name, record)
    A = special_matrices(48, batch=4)
    H_base = []
    real_outputs = blocked.new_outputs

    def outputs(X):
        H, tau = real_outputs(X)
        H_base.append(H.data_ptr())
        return H, tau
    monkeypatch.setattr(blocked, "new_outputs", outputs)
    blocked.qr_blocked(A, route(panel=dict(width=16), strip=dict(fuse_next=True, halves=2)))
    text = " ".join(kind + half for kind, half in order)
    assert text == ("HX HY FX RX HX FY RY HY FX RX HX FY RY HY"), text


@pytest.mark.parametrize("prec", [p for p in CPU_MODELED_PRECISIONS if p.endswith("x3")])
def test_split_precision_drivers_pass_the_gate(prec):
    # One 16-bit pass (fp16, tf32) fails the gate at small n (it scales with n): routes choose per n.
    A = special_matrices(48, batch=3)
    knobs = route(precision=dict(project=prec, tcontract="fp32", apply=prec))
    H, tau = DRIVERS["blocked"](A, knobs)
    harness_check(A, H, tau)


def test_geqrf_driver_is_torch_geqrf():
    A = special_matrices(6)
    H, tau = DRIVERS["geqrf"](A, route(driver="geqrf"))
    H_ref, tau_ref = torch.geqrf(A)
    assert torch.equal(H, H_ref) and torch.equal(tau, tau_ref)


def test_drivers_reuse_scratch_buffers():
    from qrsub.kernels import scratch

    A = special_matrices(20, batch=2)
    DRIVERS["blocked"](A, route())
    count = len(scratch._SCRATCH)
    DRIVERS["blocked"](A, route())
    assert len(scratch._SCRATCH) == count


@pytest.mark.parametrize("driver", plan.TWO_LEVEL_DRIVERS)
def test_a_two_level_route_refuses_narrow_panels(driver):
    with pytest.raises(ValueError, match="panel.width: got 8 with driver"):
        route(driver=driver, panel=dict(width=8))



def test_block_t_kernel_gives_the_merge_result():
    """twolevel.block_t: kernel builds each block's T in one launch; the factorization is the
    merge's to rounding (n=40, outer 32: a block with a far update, then a ragged one; coop
    shares the block code)."""
    A = special_matrices(40, batch=3)
    H_ref, tau_ref = DRIVERS["twolevel"](A, route(driver="twolevel"))
    H, tau = DRIVERS["twolevel"](A, route(driver="twolevel", twolevel=dict(block_t="kernel")))
    torch.testing.assert_close(H, H_ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(tau, tau_ref, atol=1e-6, rtol=1e-5)
    assert harness_check(A, H, tau) < 0.5


def test_a_gram_on_tensor_cores_needs_the_block_t_kernel():
    with pytest.raises(ValueError, match="twolevel.gram: got fp16x3 with twolevel.block_t merge"):
        route(driver="twolevel", twolevel=dict(gram="fp16x3"))
    route(driver="twolevel", twolevel=dict(gram="fp16x3", block_t="kernel"))


@pytest.mark.parametrize("knob,value", [("gram_split_rows", 32), ("gram_columns", 16)])
def test_a_gram_split_or_chunked_gives_the_whole_gram_s_factors(knob, value):
    """At n=70 (outer 32, inner panels of 16): gram_split_rows 32 takes the first block's 70 rows
    in three splits and the second's 38 in two; gram_columns 16 writes G in column chunks. Either
    way the factors are the whole, unsplit Gram's, to rounding."""
    A = special_matrices(70, batch=3)
    two = dict(block_t="kernel", gram="fp16x3")
    H_ref, tau_ref = DRIVERS["twolevel"](A, route(driver="twolevel", twolevel=two))
    H, tau = DRIVERS["twolevel"](A, route(driver="twolevel", twolevel={**two, knob: value}))
    torch.testing.assert_close(H, H_ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(tau, tau_ref, atol=1e-6, rtol=1e-5)
    assert harness_check(A, H, tau) < 0.5


def test_gram_splits_and_chunks_need_the_triton_gram():
    with pytest.raises(ValueError, match="twolevel.gram_split_rows: got 64 with twolevel.gram cublas"):
        route(driver="twolevel", twolevel=dict(block_t="kernel", gram_split_rows=64))
    with pytest.raises(ValueError, match="twolevel.gram_columns: got 32 with twolevel.gram cublas"):
        route(driver="twolevel", twolevel=dict(block_t="kernel", gram_columns=32))
    with pytest.raises(ValueError, match="twolevel.gram_split_rows: 0 \\(off\\) or a power of two in 32"):
        route(driver="twolevel", twolevel=dict(block_t="kernel", gram="fp16x3", gram_split_rows=16))


@pytest.mark.parametrize("far_tcontract,t_in_tf32", [("tf32", True), ("fp32", False), ("tf32x3", None),
                                                     ("fp16x3", None)])
def test_far_update_runs_its_t_product_in_its_own_precision(monkeypatch, far_tcontract, t_in_tf32):
    """tf32 does not exist on the CPU, so this checks the wiring: which cuBLAS products see
    allow_tf32, and that tf32x3 and fp16x3 take the T product off cuBLAS (t_in_tf32 None); the GPU
    tests check the gate."""
    from qrsub.kernels import blocked

    seen = []
    real_bmm = torch.bmm

    def recording_bmm(a, b, *args, **kwargs):
        seen.append((tuple(a.shape[1:]), torch.backends.cuda.matmul.allow_tf32))
        return real_bmm(a, b, *args, **kwargs)

    monkeypatch.setattr(blocked.torch, "bmm", recording_bmm)
    A = special_matrices(40, batch=2)
    Y = torch.randn(2, 40, 32, device=A.device)
    Tb = torch.randn(2, 32, 32, device=A.device)
    H = torch.empty_like(A)
    knobs = route(driver="twolevel", twolevel=dict(far_precision="tf32", far_tcontract=far_tcontract))
    callers_choice = torch.backends.cuda.matmul.allow_tf32
    blocked.far_update_cublas(A, H, Y, Tb, 0, 32, knobs)
    assert seen == [((32, 40), True)] + ([] if t_in_tf32 is None else [((32, 32), t_in_tf32)])
    assert torch.backends.cuda.matmul.allow_tf32 == callers_choice, "the caller's setting comes back"
    C = A[:, :, 32:].double()  # the CPU runs every product in fp32 (fp16x3 to about 22 bits): all agree
    expected = C - Y.double() @ (Tb.double().transpose(1, 2) @ (Y.double().transpose(1, 2) @ C))
    torch.testing.assert_close(H[:, :, 32:].double(), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("n,outer", [(40, 32), (70, 32), (64, 64)])
def test_strip_far_update_gives_the_cublas_result(n, outer):
    # The two far updates apply the same reflectors: fp32 throughout, they agree to rounding.
    # n = 70: two whole blocks with a far update, then a ragged last block of 6 columns.
    A = special_matrices(n, batch=3)
    H, tau = DRIVERS["twolevel"](A, route(driver="twolevel", panel=dict(width=16), twolevel=dict(outer=outer)))
    twolevel = dict(outer=outer, far_update="strip", block_t="kernel")
    H_strip, tau_strip = DRIVERS["twolevel"](A, route(driver="twolevel", panel=dict(width=16), twolevel=twolevel))
    torch.testing.assert_close(H_strip, H, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(tau_strip, tau, atol=1e-5, rtol=1e-4)
    assert harness_check(A, H_strip, tau_strip) < 0.5


@pytest.mark.parametrize("n,outer", [(70, 32), (64, 32)])
def test_a_direct_first_far_update_gives_the_copying_result(n, outer):
    """twolevel.first_far direct: the first block's C - Y W by strip.rank_update, from A into
    H (n = 70: a partial column tile and a ragged last block). fp32 throughout on the CPU."""
    A = special_matrices(n, batch=3)
    before = A.clone()
    knobs = dict(driver="twolevel", panel=dict(width=16), strip=dict(bm=16, bn=16))
    H, tau = DRIVERS["twolevel"](A, route(**knobs, twolevel=dict(outer=outer)))
    H_direct, tau_direct = DRIVERS["twolevel"](A, route(**knobs, twolevel=dict(outer=outer, first_far="direct")))
    assert torch.equal(A, before), "the direct update reads A and writes H only"
    torch.testing.assert_close(H_direct, H, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(tau_direct, tau, atol=1e-5, rtol=1e-4)
    assert harness_check(A, H_direct, tau_direct) < 0.5


@pytest.mark.parametrize("driver,n,knobs", [
    ("blocked", 1, dict(panel=dict(width=16), strip=dict(fuse_next=True), precision=FP16X3)),
    ("blocked", 70, dict(panel=dict(width=16), strip=dict(fuse_next=True), precision=FP16X3)),
    ("twolevel", 70, dict(panel=dict(width=16), strip=dict(bm=16, bn=16), twolevel=dict(outer=32, first_far="direct"))),
])
def test_rank_updates_split_over_rows_give_the_same_bits(driver, n, knobs):
    """strip.rank_rows: the fused driver's pending updates and the direct first far update split
    their rows over programs, each row on the tile it had: H and tau to the bit, on the special
    matrices' zero and rank-deficient columns, one panel (n 1) and ragged last panels (n 70)."""
    A = special_matrices(n, batch=2)
    whole = DRIVERS[driver](A, route(driver=driver, **knobs))
    split_knobs = {**knobs, "strip": {**knobs["strip"], "rank_rows": 16}}
    split = DRIVERS[driver](A, route(driver=driver, **split_knobs))
    assert torch.equal(whole[0], split[0]) and torch.equal(whole[1], split[1])
    assert harness_check(A, *split) < 0.5


def test_the_first_far_update_s_own_tiles_give_the_strip_tiles_result(monkeypatch):
    """twolevel.first_far_bm, _bn, _stages and _warps shape the direct first far update's launch
    alone (n = 70: a partial column tile at BN 32 too): the same factors as with the strip's
    tiles, and the launch took them, while the other strips kept the route's."""
    from qrsub.kernels import strip as strip_module

    A = special_matrices(70, batch=2)
    knobs = dict(driver="twolevel", panel=dict(width=16), strip=dict(bm=16, bn=16))
    two = dict(outer=32, first_far="direct")
    H, tau = DRIVERS["twolevel"](A, route(**knobs, twolevel=two))
    launched = []
    real = strip_module.rank_update_kernel

    class Recorded:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append((kwargs["BM"], kwargs["BN"], kwargs["NUM_STAGES"], kwargs["num_warps"]))
                return real[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(strip_module, "rank_update_kernel", Recorded())
    tiles = dict(first_far_bm=32, first_far_bn=32, first_far_stages=2, first_far_warps=4)
    H_tiled, tau_tiled = DRIVERS["twolevel"](A, route(**knobs, twolevel={**two, **tiles}))
    assert launched == [(32, 32, 2, 4)], "one first far update, on its own tiles"
    torch.testing.assert_close(H_tiled, H, atol=1e-5, rtol=1e-4)  # its rows summed in other tiles
    torch.testing.assert_close(tau_tiled, tau, atol=1e-5, rtol=1e-4)
    assert harness_check(A, H_tiled, tau_tiled) < 0.5


@pytest.mark.parametrize("driver,n", [("twolevel", 70), ("coop", 64)])
def test_zeros_written_by_the_gram_launch_give_the_same_bits(driver, n):
    """twolevel.zero_fill gram: no fill launch before each outer block; the Gram product masks
    V above the inner diagonals and writes the zeros the far update reads. The same H and tau,
    bit for bit, as with the fill (n = 70: a ragged last block, which needs no zeros)."""
    A = special_matrices(n, batch=2)
    knobs = dict(driver=driver, panel=dict(width=16, unroll=4), strip=dict(bm=16, bn=16),
                 coop=dict(programs=2, max_rows=32, exchange="spin"))
    two = dict(outer=32, block_t="kernel", gram="fp16x3", gram_split_rows=32)
    H, tau = DRIVERS[driver](A, route(**knobs, twolevel=two))
    H_gram, tau_gram = DRIVERS[driver](A, route(**knobs, twolevel={**two, "zero_fill": "gram"}))
    assert torch.equal(H_gram, H) and torch.equal(tau_gram, tau)


def test_the_four_launch_experiments_together_match_the_route_without_them():
    """The twentieth session's four launch knobs at once on the cooperative driver: the first far update on its own
    tiles, the Gram parts summed in block T, V's zeros from the Gram launch and the slot ring.
    Each is tested alone above; here they share one call's buffers and launches."""
    A = special_matrices(64, batch=2)
    knobs = dict(driver="coop", panel=dict(width=16, unroll=4), strip=dict(bm=16, bn=16))
    two = dict(outer=32, block_t="kernel", gram="fp16x3", gram_split_rows=32, first_far="direct")
    coop = dict(programs=2, max_rows=32, exchange="spin")
    H, tau = DRIVERS["coop"](A, route(**knobs, twolevel=two, coop=coop))
    together = dict(two, zero_fill="gram", gram_sum="block_t", first_far_bm=16, first_far_bn=32,
                    first_far_stages=2)
    H_all, tau_all = DRIVERS["coop"](A, route(**knobs, twolevel=together,
                                              coop=dict(coop, slot_reset="kernel")))
    torch.testing.assert_close(H_all, H, atol=1e-5, rtol=1e-4)  # the parts are summed in another order
    torch.testing.assert_close(tau_all, tau, atol=1e-5, rtol=1e-4)
    assert harness_check(A, H_all, tau_all) < 0.5


def test_zeros_from_the_gram_launch_need_the_triton_gram():
    with pytest.raises(ValueError, match="twolevel.zero_fill: got gram with twolevel.gram cublas;"):
        route(driver="twolevel", panel=dict(width=16), twolevel=dict(zero_fill="gram"))


def test_summing_gram_parts_in_block_t_needs_parts():
    with pytest.raises(ValueError, match="twolevel.gram_sum: got block_t with twolevel.gram_split_rows 0;"):
        route(driver="twolevel", panel=dict(width=16), twolevel=dict(block_t="kernel", gram="fp16x3",
                                                                     gram_sum="block_t"))


def test_first_far_tiles_need_the_direct_update():
    with pytest.raises(ValueError, match="twolevel.first_far_bn: got 64 with twolevel.first_far copy;"):
        route(driver="twolevel", panel=dict(width=16), twolevel=dict(first_far_bn=64))


def test_rounding_tf32_operands_first_gives_the_same_first_far_update():
    """first_far direct (operands rounded to tf32 inside the launch) and direct_rounded (Y and W
    rounded by launches before it) compute the same products; on the CPU the cuBLAS products
    are fp32, so both differ from the copying path by the rounding alone."""
    A = special_matrices(70, batch=2)
    knobs = dict(driver="twolevel", panel=dict(width=16), strip=dict(bm=16, bn=16))
    two = dict(outer=32, far_precision="tf32", far_tcontract="fp32")
    H_copy, _ = DRIVERS["twolevel"](A, route(**knobs, twolevel=two))
    H_in, _ = DRIVERS["twolevel"](A, route(**knobs, twolevel={**two, "first_far": "direct"}))
    H_pre, _ = DRIVERS["twolevel"](A, route(**knobs, twolevel={**two, "first_far": "direct_rounded"}))
    torch.testing.assert_close(H_pre, H_in, atol=1e-6, rtol=1e-5)
    assert not torch.equal(H_in, H_copy), "tf32 operands were rounded"
    torch.testing.assert_close(H_in, H_copy, atol=1e-2, rtol=1e-2)
    # One tf32 pass fails the gate at n = 70 (its error does not shrink with n): the GPU twin
    # runs both through the gate at n = 1100.


def test_a_cublas_far_update_refuses_a_split_precision():
    with pytest.raises(ValueError, match="twolevel.far_precision: got fp16x3 with twolevel.far_update cublas;"):
        route(driver="twolevel", twolevel=dict(far_precision="fp16x3"))
    route(driver="twolevel", twolevel=dict(far_update="strip", far_precision="fp16x3"))


def test_a_strip_far_update_has_no_direct_first_block():
    with pytest.raises(ValueError, match="twolevel.first_far: got direct with twolevel.far_update strip;"):
        route(driver="twolevel", twolevel=dict(far_update="strip", far_precision="tf32", first_far="direct"))


def test_far_strip_tiles_need_the_strip_far_update():
    with pytest.raises(ValueError, match="twolevel.far_bn: got 64 with twolevel.far_update cublas;"):
        route(driver="twolevel", twolevel=dict(far_bn=64))


def recorded_far_strips(monkeypatch, outer: int) -> list:
    """Every trailing_strip call of the strip far update (its T outer wide, not panel.width) as
    (StripKnobs, PrecisionKnobs), the calls going through as they were."""
    from qrsub.kernels import blocked

    seen, real = [], blocked.trailing_strip

    def recording(src, dst, V, T, *args, strip, precision, **kwargs):
        if T.shape[-1] == outer:
            seen.append((strip, precision))
        return real(src, dst, V, T, *args, strip=strip, precision=precision, **kwargs)

    monkeypatch.setattr(blocked, "trailing_strip", recording)
    return seen


@pytest.mark.parametrize("far_precision", [p for p in plan.FAR_PRECISIONS if p in CPU_MODELED_PRECISIONS])
def test_the_strip_far_update_runs_in_its_own_precision_and_tiles(monkeypatch, far_precision):
    """far_update strip: far_precision for V^T C and C - V W, far_tcontract for T^T W (fp32 with an
    fp32 far update), the far_ tiles in place of the route's strip tiles (far_split_rows 32 splits
    the first block's 70 rows: the two-launch path), the in-block strips on the route's own.
    n = 70: two far updates, the first from A (left as it was), a ragged last block. The CPU runs
    the products the interpreter models (tf32's GPU twin: 2l-farstrip-tf32)."""
    A = special_matrices(70, batch=2)
    before = A.clone()
    knobs = dict(driver="twolevel", panel=dict(width=16), strip=dict(bm=16, bn=16))
    H, tau = DRIVERS["twolevel"](A, route(**knobs, twolevel=dict(outer=32)))
    # an fp32 far update leaves far_tcontract at its default and runs T^T W in fp32 too
    tcontract = "fp32" if far_precision == "fp32" else "fp16x3"
    two = dict(outer=32, far_update="strip", far_precision=far_precision,
               far_tcontract="tf32" if far_precision == "fp32" else tcontract,
               far_bm=32, far_bn=32, far_stages=1, far_warps=2, far_split_rows=32)
    seen = recorded_far_strips(monkeypatch, 32)
    H_strip, tau_strip = DRIVERS["twolevel"](A, route(**knobs, twolevel=two))
    assert torch.equal(A, before), "the first far update reads A and writes H"
    assert len(seen) == 2
    for tiles, precision in seen:
        assert (tiles.bm, tiles.bn, tiles.num_stages, tiles.num_warps, tiles.split_rows) == (32, 32, 1, 2, 32)
        assert precision == plan.PrecisionKnobs(project=far_precision, tcontract=tcontract, apply=far_precision)
    torch.testing.assert_close(H_strip, H, atol=1e-4, rtol=1e-3)  # fp16x3: about 22 bits
    torch.testing.assert_close(tau_strip, tau, atol=1e-4, rtol=1e-3)
    assert harness_check(A, H_strip, tau_strip) < 0.5


def test_unset_far_strip_tiles_are_the_route_s_strip_tiles(monkeypatch):
    seen = recorded_far_strips(monkeypatch, 32)
    strip = dict(bm=16, bn=16, num_stages=2, num_warps=4, split_rows=64)
    DRIVERS["twolevel"](special_matrices(40, batch=1), route(driver="twolevel", panel=dict(width=16), strip=strip,
                                                             twolevel=dict(outer=32, far_update="strip")))
    assert [(s.bm, s.bn, s.num_stages, s.num_warps, s.split_rows) for s, _ in seen] == [(16, 16, 2, 4, 64)]
    assert seen[0][1] == plan.PrecisionKnobs(project="fp32", tcontract="fp32", apply="fp32")


def test_an_fp32_t_product_needs_a_tf32_far_update():
    with pytest.raises(ValueError, match="twolevel.far_tcontract: got fp32 with twolevel.far_precision fp32"):
        route(driver="twolevel", twolevel=dict(far_tcontract="fp32"))


def test_a_t_product_step_fits_in_the_outer_block():
    with pytest.raises(ValueError, match="twolevel.tproduct_bk: got 128 with twolevel.outer 64; allowed: at most outer"):
        route(driver="twolevel", twolevel=dict(outer=64, far_precision="tf32", far_tcontract="fp16x3", tproduct_bk=128))
    route(driver="twolevel", twolevel=dict(outer=64, far_precision="tf32", far_tcontract="fp16x3", tproduct_bk=64))
