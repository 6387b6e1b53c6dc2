"""The kernels on a real GPU (marker `gpu`; skipped without one): compiled Triton, the
cooperative panel with several programs spinning on each other, the TSQR panel with many,
tensor-core precisions and CUDA graphs, at sizes the interpreter cannot reach."""
import pytest
import torch
from kernel_helpers import STRIP_TOLERANCE, harness_check, route, strip_error

from qrsub.kernels import plan, routing
from qrsub.kernels.coop import coop_panel
from qrsub.kernels.naive import panel_ref
from qrsub.kernels.plan import PanelKnobs
from qrsub.kernels.tsqr import tsqr_panel
from qrsub.kernels.routing import DRIVER_FUNCTIONS as DRIVERS

pytestmark = pytest.mark.gpu


def gpu_matrices(batch, n, seed=0, cond=2):
    g = torch.Generator("cuda").manual_seed(seed)
    A = torch.randn(batch, n, n, device="cuda", generator=g)
    A = A * torch.logspace(0, -cond, n, device="cuda")
    A[0, :, n // 3] = 0  # an exactly zero column: tau = 0 there
    return A.contiguous()


@pytest.mark.parametrize("unroll", [0, 4])
@pytest.mark.parametrize("exchange,broadcast,bw", [
    ("counter", "sum", 32), ("slots", "sum", 32), ("spin", "sum", 32), ("slots", "shuffle", 32),
    ("slots", "shuffle", 16), ("spin", "shuffle", 32), ("spin", "shuffle", 16)])  # shuffle: grouped slices
@pytest.mark.parametrize("programs", [2, 4, 8])
def test_cooperative_panel_with_several_programs(programs, exchange, broadcast, bw, unroll):
    n, j = 1536, 0
    A = gpu_matrices(2, n)
    dst = A.clone()
    tau = torch.zeros(2, n, device="cuda")
    T = torch.zeros(2, bw, bw, device="cuda")
    V = torch.zeros(2, n, bw, device="cuda")
    coop_panel(A, dst, tau, T, V, j, bw, programs=programs, exchange=exchange, broadcast=broadcast,
               knobs=PanelKnobs(num_warps=4, unroll=unroll))
    for i in range(2):
        P, tau_ref, T_ref, _ = panel_ref(A[i, :, :bw].double().cpu())
        torch.testing.assert_close(dst[i, :, :bw].double().cpu(), P, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(tau[i, :bw].double().cpu(), tau_ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(T[i].double().cpu(), T_ref, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("exchange,broadcast", [("spin", "shuffle"), ("slots", "sum")])
@pytest.mark.parametrize("programs", [2, 4, 8])
def test_kernel_cleared_slots_over_many_launches(programs, exchange, broadcast):
    """coop.slot_reset kernel and parity with programs that really wait on each other: 40 launches in a row
    on the same ring (panels of 16 at j = 0, 16, ..., each twice the ring's length and more, so
    that every slot is the one a launch skips several times), each against the host-filled
    slots' factors, the ring left with one written slot after each, the parity sets with only the
    last launch's set written."""
    from qrsub.kernels.coop import SLOT_SENTINEL, slot_ring

    n, bw, batch = 1600, 16, 2
    A = gpu_matrices(batch, n)
    knobs = PanelKnobs(num_warps=4, unroll=4)
    for launch in range(40):
        j = (launch % 8) * bw
        outs = {}
        for reset in plan.SLOT_RESETS:
            dst, tau = A.clone(), torch.zeros(batch, n, device="cuda")
            T, V = torch.zeros(batch, bw, bw, device="cuda"), torch.zeros(batch, n, bw, device="cuda")
            coop_panel(A, dst, tau, T, V, j, bw, programs=programs, exchange=exchange, broadcast=broadcast,
                       knobs=knobs, slot_reset=reset)
            outs[reset] = (dst, tau, T)
        for reset in ("kernel", "parity"):
            for got, want in zip(outs[reset], outs["host"]):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
        ring, _ = slot_ring(batch, bw, programs, A.device)
        written = (ring.view(torch.int32) != SLOT_SENTINEL.value).reshape(batch, bw + 1, -1).any(dim=2)
        assert written.sum(dim=1).tolist() == [1] * batch, f"launch {launch}: one written slot a matrix"
        sets, count = slot_ring(batch, bw, programs, A.device, "parity")
        written = (sets.view(torch.int32) != SLOT_SENTINEL.value).reshape(batch, 2, bw, -1).any(dim=3)
        own = int(count[0] - 1) % 2
        assert written[:, own].all() and not written[:, 1 - own].any(), f"launch {launch}: only its own set"


@pytest.mark.parametrize("broadcast,bw", [("sum", 32), ("shuffle", 16), ("shuffle", 32)])
@pytest.mark.parametrize("programs", [1, 2, 8, 32])
def test_tsqr_panel_with_several_programs(programs, broadcast, bw):
    """coop.exchange tsqr on the GPU (the interpreter runs it too, on small shapes: test_kernel_tsqr.py):
    the factors of a panel whose columns all have tails match the one-program panel's."""
    n, j = 1536, 16
    A = gpu_matrices(2, n)  # its zero column (n // 3) lies right of the panel
    dst = A.clone()
    tau = torch.zeros(2, n, device="cuda")
    T = torch.zeros(2, bw, bw, device="cuda")
    V = torch.zeros(2, n, bw, device="cuda")
    tsqr_panel(A, dst, tau, T, V, j, bw, programs=programs, broadcast=broadcast,
               knobs=PanelKnobs(num_warps=((512, 4), (None, 8)), unroll=4))
    for i in range(2):
        P, tau_ref, T_ref, _ = panel_ref(A[i, j:, j:j + bw].double().cpu())
        torch.testing.assert_close(dst[i, j:, j:j + bw].double().cpu(), P, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(tau[i, j:j + bw].double().cpu(), tau_ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(T[i].double().cpu(), T_ref, atol=1e-4, rtol=1e-3)


def case(name, driver, n, **knobs):
    """One route of test_drivers_pass_the_gate_on_gpu, named (gpu_plan.sh selects them by -k)."""
    return pytest.param(driver, n, knobs, id=name)


TALL16 = dict(width=16, num_warps=((None, 8),))  # the two-level routes' inner panels
SHUFFLE32 = dict(width=32, unroll=4, broadcast="shuffle")  # the champion's mid panel
FUSED = dict(bm=16, bn=128, fuse_next=True)  # the champion's mid strip
FAR_TF32 = dict(outer=128, far_precision="tf32")
SLOTS4 = dict(programs=4, max_rows=512, exchange="slots")


@pytest.mark.parametrize("driver,n,knobs", [
    case("blocked16", "blocked", 200, panel=dict(width=16), strip=dict(bm=32, bn=16)),
    case("blocked32-warps", "blocked", 520, panel=dict(width=32, num_warps=((256, 4), (None, 8))),
         strip=dict(bm=32, bn=64)),
    case("blocked16-rowtiles", "blocked", 352, panel=dict(width=16, row_tiles=2), strip=dict(bm=32, bn=32)),
    case("blocked32-rowtiles", "blocked", 520, panel=dict(width=32, row_tiles=2, unroll=4), strip=dict(bm=32, bn=64)),
    # the next panel's projection fused with this panel's update (strip.fuse_next)
    case("fused", "blocked", 520, panel=SHUFFLE32, strip=FUSED),
    case("fused16", "blocked", 200, panel=dict(width=16), strip=dict(bm=32, bn=32, fuse_next=True)),
    case("pending", "blocked", 520, panel=dict(SHUFFLE32, apply_pending=True), strip=FUSED),
    # the next panel's update in the fused strip's tail (strip.tail_update), ragged last panel
    case("tail", "blocked", 520, panel=SHUFFLE32, strip=dict(FUSED, tail_update=True)),
    # the panel in two halves (panel.split 2), with the fused strip as in the champion
    case("split", "blocked", 520, panel=dict(SHUFFLE32, split=2), strip=FUSED),
    # 64-column split panels and the fused pass at BB 64 (1.82x slower at 640x512, s13)
    case("w64", "blocked", 520, panel=dict(SHUFFLE32, width=64, split=2, num_warps=((256, 4), (None, 8))),
         strip=dict(bm=16, bn=64, num_warps=8, fuse_next=True)),
    # V stored as its fp16x3 parts (strip.v_parts)
    case("vparts", "blocked", 520, panel=SHUFFLE32, strip=dict(FUSED, v_parts=True)),
    case("w64-vparts", "blocked", 520, panel=dict(SHUFFLE32, width=64, split=2, num_warps=((256, 4), (None, 8))),
         strip=dict(bm=16, bn=64, num_warps=8, fuse_next=True, v_parts=True)),
    # the panel capped at 168 registers (it spills; champion-panelregs)
    case("panelregs", "blocked", 520, panel=dict(SHUFFLE32, max_registers=168), strip=dict(bm=16, bn=64)),
    # ... only on panels of at most 256 padded rows (no spill there: champion-shortregs)
    case("shortregs", "blocked", 520, panel=dict(SHUFFLE32, max_registers=((256, 168), (None, 0))), strip=FUSED),
    case("stripregs", "blocked", 520, panel=SHUFFLE32, strip=dict(FUSED, num_warps=4, max_registers=128)),
    # the reflectors' reciprocals by rcp.approx (panel.reciprocal approx, the champion's): the grouped
    # panel with the fused strip, the summing panel in two row tiles, the split panel, two-level
    case("rcp", "blocked", 520, panel=dict(SHUFFLE32, reciprocal="approx"), strip=FUSED),
    # the grouped panel's rows as two tiles (panel.row_tiles 2): 520 - 32k rows as 512, 256 + 256,
    # 256 + 128, ... down to 128 + 32 and 64 + 16, the indexed shuffle in each tile
    case("rowtiles-grouped", "blocked", 520, panel=dict(SHUFFLE32, row_tiles=2, reciprocal="approx"), strip=FUSED),
    # T built after the reflector loop from the Gram rows it stores (panel.t_build after)
    case("tafter", "blocked", 520, panel=dict(SHUFFLE32, reciprocal="approx", t_build="after"), strip=FUSED),
    case("tdoubling", "blocked", 520, panel=dict(SHUFFLE32, reciprocal="approx", t_build="doubling"), strip=FUSED),
    case("rcp-rowtiles", "blocked", 352, panel=dict(width=16, row_tiles=2, reciprocal="approx"),
         strip=dict(bm=32, bn=32)),
    case("rcp-split", "blocked", 520, panel=dict(SHUFFLE32, split=2, reciprocal="approx"), strip=FUSED),
    case("rcp-2l", "twolevel", 1100, panel=dict(TALL16, reciprocal="approx"), strip=dict(bm=64, bn=32),
         twolevel=FAR_TF32),
    case("rcp-coop", "coop", 2100, panel=dict(TALL16, unroll=4, reciprocal="approx"),
         strip=dict(bm=64, bn=32, split_rows=256), twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, exchange="spin", broadcast="shuffle")),
    case("rcp-tsqr", "coop", 2100, panel=dict(TALL16, unroll=4, reciprocal="approx"),
         strip=dict(bm=64, bn=32, split_rows=256), twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, programs=8, exchange="tsqr", broadcast="shuffle")),
    case("2l-farstrip", "twolevel", 520, panel=dict(width=16, row_tiles=2), strip=dict(bm=32, bn=64),
         twolevel=dict(outer=32, far_update="strip", block_t="kernel", gram="fp16x3")),
    # the far update as one strip launch (far_update strip) on its own tiles and precisions, the
    # first block from A: tf32 (rounded in the launch), and fp16x3 with split rows
    case("2l-farstrip-tf32", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_update="strip", far_tcontract="fp16x3", far_bm=32, far_bn=64, far_stages=3,
                       far_warps=8)),
    case("2l-farstrip-fp16x3", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(outer=128, far_update="strip", far_precision="fp16x3", far_tcontract="fp16x3", far_bm=32,
                       far_bn=64, far_warps=8, far_split_rows=512)),
    case("2l", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32), twolevel=FAR_TF32),
    case("2l-gram", "twolevel", 1100, panel=dict(TALL16, row_tiles=2), strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, block_t="kernel", gram="fp16x3")),
    # the Gram product in 64-column programs, the blocks block_t does not read skipped (the
    # champion's huge and giant routes, s13)
    case("gramcols", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, block_t="kernel", gram="fp16x3", gram_columns=64)),
    case("2l-fp32t", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_tcontract="fp32")),
    # the first far update's last product from A into H by one Triton launch, in tf32
    case("2l-direct", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", first_far="direct")),
    # ... on its own tiles (twolevel.first_far_bm, _bn, _stages, _warps): 3 programs an SM
    case("2l-direct-tiles", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", first_far="direct", first_far_bm=32, first_far_bn=64,
                       first_far_stages=2)),
    case("2l-rounded", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", first_far="direct_rounded")),
    case("2l-tf32x3t", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_tcontract="tf32x3")),
    # ... in fp16x3, on other tiles (twolevel.tproduct_bn, _bk, _warps)
    case("2l-fp16x3t", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_tcontract="fp16x3", tproduct_bn=128, tproduct_bk=64, tproduct_warps=8)),
    case("coop256", "coop", 1600, panel=dict(width=32, num_warps=((None, 8),)), strip=dict(bm=64, bn=32),
         twolevel=dict(outer=256), coop=dict(programs=4, max_rows=512)),
    case("coop-split", "coop", 2100, panel=TALL16, strip=dict(bm=64, bn=32, split_rows=256), twolevel=FAR_TF32,
         coop=SLOTS4),
    case("coop-blockt", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"), coop=SLOTS4),
    # the cooperative slices held as column groups (the champion's huge and giant routes, s14), spun exchange
    case("coop-grouped", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"), coop=dict(SLOTS4, broadcast="shuffle")),
    case("coop-spin", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, exchange="spin", broadcast="shuffle")),
    # the tall panels by TSQR (s15): 8 and 16 programs a matrix, more than could wait on each other
    case("coop-tsqr", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, programs=8, exchange="tsqr", broadcast="shuffle")),
    case("coop-tsqr16", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, programs=16, exchange="tsqr")),
    # the Gram product split over rows (the champion's huge and giant routes, s13)
    case("gramsplit", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel", gram="fp16x3", gram_split_rows=256),
         coop=SLOTS4),
    # the exchange's slots cleared by the cooperative launches themselves (coop.slot_reset kernel)
    case("coop-ring", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, exchange="spin", broadcast="shuffle", slot_reset="kernel")),
    # V's zeros above the inner diagonals written by the Gram launch (twolevel.zero_fill gram)
    case("zerofill", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel", gram="fp16x3", gram_split_rows=256,
                       zero_fill="gram"),
         coop=SLOTS4),
    case("2l-zerofill", "twolevel", 1100, panel=TALL16, strip=dict(bm=64, bn=32),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", first_far="direct", block_t="kernel", gram="fp16x3",
                       zero_fill="gram")),
    # ... its parts summed by block_t_kernel as it reads them (twolevel.gram_sum block_t)
    case("gramsum", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel", gram="fp16x3", gram_split_rows=256,
                       gram_sum="block_t"),
         coop=SLOTS4),
    # two sets of slots, each launch clearing the other's (coop.slot_reset parity), unrolled or not
    case("coop-parity", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, exchange="spin", broadcast="shuffle", slot_reset="parity")),
    case("coop-parity-loop", "coop", 2100, panel=dict(TALL16, unroll=0), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", block_t="kernel"),
         coop=dict(SLOTS4, exchange="slots", slot_reset="parity")),
    # the four launch knobs of s20 together: first far tiles, Gram sums in block T, zeros from
    # the Gram launch, the slot ring
    case("coop-four-launch-knobs", "coop", 2100, panel=dict(TALL16, unroll=4), strip=dict(bm=64, bn=32, split_rows=256),
         twolevel=dict(FAR_TF32, far_tcontract="fp32", first_far="direct", block_t="kernel", gram="fp16x3",
                       gram_split_rows=256, gram_sum="block_t", zero_fill="gram", first_far_bm=32,
                       first_far_bn=64, first_far_stages=2),
         coop=dict(SLOTS4, exchange="spin", broadcast="shuffle", slot_reset="kernel")),
])
@pytest.mark.parametrize("prec", ["fp16x3", "tf32x3"])
def test_drivers_pass_the_gate_on_gpu(driver, n, knobs, prec):
    if knobs.get("strip", {}).get("v_parts") and prec != "fp16x3":
        pytest.skip("strip.v_parts stores fp16x3's parts: the plan refuses it with other precisions")
    A = gpu_matrices(3, n)
    r = route(driver=driver, precision=dict(project=prec, tcontract="fp32", apply=prec), **knobs)
    H, tau = DRIVERS[driver](A, r)
    margin = harness_check(A, H, tau)
    assert margin < 0.5, f"factor residual at {margin:.2f} of the gate"


def assert_warp_result(A, H, tau):
    """The warp driver's (H, tau) of A against the unblocked reference on the first and last
    matrices (gpu_matrices' first holds an exactly zero column: tau 0 there), and the gate."""
    for i in (0, A.shape[0] - 1):
        P, tau_ref, _, _ = panel_ref(A[i].double().cpu())
        torch.testing.assert_close(H[i].double().cpu(), P, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(tau[i].double().cpu(), tau_ref, atol=1e-5, rtol=1e-4)
    if A.shape[1] > 1:
        assert harness_check(A, H, tau) < 0.5


@pytest.mark.parametrize("reciprocal", plan.RECIPROCALS)
@pytest.mark.parametrize("graph", ["off", "inplace", "relocate", "capture"])
@pytest.mark.parametrize("batch,n", [(20, 32), (3, 1), (5, 7), (7, 31), (640, 32)])
def test_warp_driver_on_gpu(batch, n, graph, reciprocal):
    """The warp driver compiled, with its indexed shuffle (the interpreter sums over the lanes
    instead) and each panel.reciprocal (the interpreter divides), against the unblocked
    reference; eager and through each graph mode, twice over fresh inputs, so that replays run
    too."""
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**10)
    warp = route(f"warp-{graph}-{batch}-{n}-{reciprocal}", driver="warp", n_range=(1, plan.WARP_MAX_N),
                 graph=dict(mode=graph), panel=dict(reciprocal=reciprocal))
    inputs = [gpu_matrices(batch, n, seed=s, cond=1) for s in range(3)]
    for A in inputs + inputs:
        H, tau = routing.qr_routed(A, [warp], settings)
        assert_warp_result(A, H, tau)


@pytest.mark.parametrize("sigma,chains", [("own", 4), ("own", 8), ("broadcast", 8), ("own", 2)])
@pytest.mark.parametrize("batch,n", [(20, 32), (3, 1), (5, 7), (7, 31)])
def test_warp_sigma_and_chains_on_gpu(batch, n, sigma, chains):
    """panel.sigma own (lane k's own sum shuffled: the interpreter sums over the lanes instead) and
    panel.row_chains, with the champion's reciprocal, against the unblocked reference."""
    warp = route(f"warp-{sigma}-{chains}-{batch}-{n}", driver="warp", n_range=(1, plan.WARP_MAX_N),
                 graph=dict(mode="off"), panel=dict(reciprocal="approx", sigma=sigma, row_chains=chains))
    A = gpu_matrices(batch, n, seed=1, cond=1)
    H, tau = routing.qr_routed(A, [warp], plan.Settings())
    assert_warp_result(A, H, tau)


@pytest.mark.parametrize("packed", [True, False])
def test_graph_replays_return_independent_outputs(packed):
    """The harness keeps several outputs alive: each replay's result must be its own tensor,
    cloned out in one copy (packed_outputs) or one copy each."""
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**9, clone_outputs=True, packed_outputs=packed)
    graphed = route("graph-test", panel=dict(width=16), strip=dict(bm=32, bn=16), graph=dict(mode="capture"))
    inputs = [gpu_matrices(4, 96, seed=s) for s in range(4)]
    outputs = [routing.qr_routed(A, [graphed], settings) for A in inputs]
    for A, (H, tau) in zip(inputs, outputs):
        harness_check(A, H, tau)
    assert outputs[1][0].data_ptr() != outputs[2][0].data_ptr()
    assert outputs[1][1].data_ptr() != outputs[2][1].data_ptr()


@pytest.mark.parametrize("prec", ["tf32", "tf32x3"])
def test_strip_tf32_family_on_gpu(prec):
    """The GPU twin of test_kernel_strip.py for the precisions the interpreter runs as fp32."""
    err, *_ = strip_error(prec, 40, 0, 16)
    assert err < STRIP_TOLERANCE[prec], f"{prec}: relative error {err:.2e}"


def test_tf32_is_really_reduced_and_tf32x3_really_recovers():
    one_pass, *_ = strip_error("tf32", 40, 0, 16)
    split, *_ = strip_error("tf32x3", 40, 0, 16)
    assert one_pass > 1e-5 and split < one_pass / 10


@pytest.mark.parametrize("split_rows", [0, 256])
@pytest.mark.parametrize("gram", ["fp16x3", "tf32x3"])
def test_gram_kernel_on_gpu(gram, split_rows):
    """The Gram product on tensor cores at a two-level block's size (the interpreter runs
    tf32x3 as plain fp32: only here is it tested), whole and split over rows
    (twolevel.gram_split_rows: four splits, the last partly inside Y)."""
    from qrsub.kernels.wy import gram_product
    g = torch.Generator("cuda").manual_seed(5)
    Y = torch.randn(3, 1000, 128, device="cuda", generator=g).tril(-1) * 0.1
    Y += torch.eye(1000, 128, device="cuda")
    G = gram_product(Y, 16, gram, split_rows)
    ref = Y.double().transpose(1, 2) @ Y.double()
    assert float((G.double() - ref).abs().max() / ref.abs().max()) < 1e-5


def test_inplace_graphs_read_the_input_where_it_lies():
    """graph.mode inplace: no copy in or out, so a replay must see the input as it is now, and
    each input tensor must keep outputs of its own."""
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**9, clone_outputs=False)
    graphed = route("inplace-test", panel=dict(width=16), strip=dict(bm=32, bn=16), graph=dict(mode="inplace"))
    routes = [graphed]  # one list, as a submission's: its third calls replay by InputGraphs.replay
    inputs = [gpu_matrices(4, 96, seed=s) for s in range(2)]
    for _ in range(3):  # eager, capture and replay, replay
        outputs = [routing.qr_routed(A, routes, settings) for A in inputs]
    assert all(routing._INPUT_GRAPHS.replay(A, routes) is out for A, out in zip(inputs, outputs))
    for A, (H, tau) in zip(inputs, outputs):
        harness_check(A, H, tau)
    assert outputs[0][0].data_ptr() != outputs[1][0].data_ptr()
    inputs[0].copy_(gpu_matrices(4, 96, seed=7))  # refilled in place
    H, tau = routing.qr_routed(inputs[0], routes, settings)
    H_ref, tau_ref = DRIVERS["blocked"](inputs[0], graphed)
    torch.testing.assert_close(H, H_ref) and torch.testing.assert_close(tau, tau_ref)


def test_inplace_graphs_keep_the_outputs_of_clones_at_one_address():
    """The harness checks a case by calling on clones, each freed before the next (which the
    caching allocator puts at the same address), and checks every output at the end."""
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**9, clone_outputs=False)
    graphed = route("inplace-test", panel=dict(width=16), strip=dict(bm=32, bn=16), graph=dict(mode="inplace"))
    routes = [graphed]
    inputs = [gpu_matrices(4, 96, seed=s) for s in range(4)]
    for _ in range(2):
        outputs = [routing.qr_routed(A.clone(), routes, settings) for A in inputs]
        for A, (H, tau) in zip(inputs, outputs):
            assert harness_check(A, H, tau) < 0.5


@pytest.mark.parametrize("strip", [dict(bm=16, bn=64, fuse_next=True), dict(bm=32, bn=16),
                                   dict(bm=32, bn=16, split_rows=64)])
def test_relocated_graphs_replay_any_input_into_fresh_outputs(strip):
    """graph.mode relocate: captured on the first call, then replayed on other tensors (freed,
    new, refilled in place, clones); each replay must give the eager call's factors of the
    tensor it was given, in outputs of its own, which later calls leave alone."""
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**9)
    # Graphs are kept by route name and shape: a name per strip, or one test's graph replays in the next
    name = "relocate-test-" + "-".join(f"{k}{v}" for k, v in strip.items())
    graphed = route(name, panel=dict(width=32, num_warps=4), strip=strip, graph=dict(mode="relocate"))
    routing.qr_routed(gpu_matrices(4, 200, seed=9), [graphed], settings)  # eager, then captured (freed after)
    inputs = [gpu_matrices(4, 200, seed=s) for s in range(3)]
    calls = inputs + [inputs[0].clone()]
    outputs = [routing.qr_routed(A, [graphed], settings) for A in calls]
    expected = [DRIVERS["blocked"](A, graphed) for A in calls]
    inputs[1].copy_(gpu_matrices(4, 200, seed=7))  # refilled in place: the next replay reads it as it is now
    outputs.append(routing.qr_routed(inputs[1], [graphed], settings))
    expected.append(DRIVERS["blocked"](inputs[1], graphed))
    for (H, tau), (H_ref, tau_ref) in zip(outputs, expected):
        torch.testing.assert_close(H, H_ref, rtol=0, atol=0)
        torch.testing.assert_close(tau, tau_ref, rtol=0, atol=0)
    assert len({H.data_ptr() for H, _ in outputs}) == len(outputs)
    key = (name, (4, 200, 200), torch.device("cuda:0"))
    assert key in routing._RELOCATED_GRAPHS.graphs, "the route ran through its graph"


@pytest.mark.parametrize("mode", ["capture", "inplace", "relocate"])
@pytest.mark.parametrize("driver,n,head", [("blocked", 200, 1), ("blocked", 200, 3), ("twolevel", 1100, 4)])
def test_a_graph_with_a_head_replays_the_bits_of_one_graph(mode, driver, n, head):
    """graph.head: the call captured as two graphs (the first capture points, then the rest),
    replayed in order. Same bits as the eager driver, call after call, on fresh inputs."""
    from qrsub.kernels.capture import SplitGraph

    if mode == "relocate" and driver != "blocked":
        pytest.skip("relocate is for the blocked driver only")
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**10)
    knobs = (dict(panel=dict(width=32, unroll=4, broadcast="shuffle"), strip=dict(bm=16, bn=128, fuse_next=True))
             if driver == "blocked" else
             dict(panel=dict(width=16, num_warps=((None, 8),)), strip=dict(bm=64, bn=32),
                  twolevel=dict(outer=128, far_precision="tf32", block_t="kernel", gram="fp16x3", first_far="direct")))
    graphed = route(f"head-{mode}-{driver}-{head}", driver=driver, graph=dict(mode=mode, head=head), **knobs)
    inputs = [gpu_matrices(3, n, seed=s) for s in range(3)]
    for A in inputs + inputs + inputs:
        H, tau = routing.qr_routed(A, [graphed], settings)
        H_ref, tau_ref = DRIVERS[driver](A, graphed)
        torch.testing.assert_close(H, H_ref, rtol=0, atol=0)
        torch.testing.assert_close(tau, tau_ref, rtol=0, atol=0)
    stores = {"capture": routing._GRAPHS.graphs, "relocate": routing._RELOCATED_GRAPHS.graphs}
    if mode in stores:
        graph = stores[mode][(graphed.name, (3, n, n), torch.device("cuda:0"))][0]
        assert isinstance(graph, SplitGraph) and len(graph.parts) == 2


@pytest.mark.parametrize("graph", ["off", "relocate"])
@pytest.mark.parametrize("n", [512, 520])
def test_tail_update_gives_the_rank_update_s_bits_on_gpu(n, graph):
    """strip.tail_update: the next panel's update in the strip's tail instead of rank_update's
    launch, after a barrier inside the program that wrote its C'. The same products on the same
    rows: the same bits where every panel is 32 wide (n 512); at 520 the last panel is 8 wide and
    rank_update's 16-column tile against the tail's 32 may round differently. Several calls on
    fresh inputs, eager and replayed, so that a missing barrier has chances to show."""
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**10)
    knobs = dict(panel=dict(width=32, unroll=4, broadcast="shuffle"),
                 strip=dict(bm=16, bn=128, num_stages=4, num_warps=4, fuse_next=True))
    launched = route(f"tail-off-{n}-{graph}", graph=dict(mode=graph), **knobs)
    knobs["strip"]["tail_update"] = True
    tailed = route(f"tail-on-{n}-{graph}", graph=dict(mode=graph), **knobs)
    inputs = [gpu_matrices(16, n, seed=s) for s in range(3)]
    for A in inputs + inputs:
        (H0, tau0), (H1, tau1) = (routing.qr_routed(A, [r], settings) for r in (launched, tailed))
        tol = 0 if n % 32 == 0 else 1e-5
        torch.testing.assert_close(H1, H0, rtol=tol, atol=tol)
        torch.testing.assert_close(tau1, tau0, rtol=tol, atol=tol)
        assert harness_check(A, H1, tau1) < 0.5


@pytest.mark.parametrize("graph", ["off", "relocate"])
@pytest.mark.parametrize("batch,n,stages", [(3, 520, 2), (3, 512, 4), (16, 512, 4), (640, 512, 4)])
def test_v_parts_give_the_bits_of_fp32_v_on_gpu(batch, n, stages, graph):
    """strip.v_parts at the champion's mid tiles: the panel stores V's fp16x3 parts, the fused
    pass and the rank update unpack them, where the fp32 route splits each V tile again. The
    same products, and on the CPU the same bits; on the H200 (thirteenth session, 3x520) up to
    1.2e-4 apart, where the fp32 route's split feeds the tensor cores from registers. So: every
    entry finite (the fp16 tiles stored before broke the panel's shuffle into NaN at n = 512),
    close to the fp32 route, and inside the harness's gate with room. Eager and relocated."""
    settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**10)
    knobs = dict(panel=dict(width=32, num_warps=4, unroll=4, broadcast="shuffle"),
                 strip=dict(bm=16, bn=128, num_stages=stages, num_warps=4, fuse_next=True),
                 precision=dict(project="fp16x3", tcontract="fp32", apply="fp16x3"))
    plain = route(f"vparts-off-{batch}-{n}-{stages}-{graph}", graph=dict(mode=graph), **knobs)
    knobs["strip"]["v_parts"] = True
    parts = route(f"vparts-on-{batch}-{n}-{stages}-{graph}", graph=dict(mode=graph), **knobs)
    for A in [gpu_matrices(batch, n, seed=s) for s in range(2)]:
        (H0, tau0), (H1, tau1) = (routing.qr_routed(A, [r], settings) for r in (plain, parts))
        bad = (~torch.isfinite(H1)).nonzero()
        assert len(bad) == 0, f"{len(bad)} entries of H not finite, the first at {bad[:4].tolist()}"
        torch.testing.assert_close(H1, H0, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(tau1, tau0, rtol=1e-3, atol=1e-3)
        assert harness_check(A, H1, tau1) < 0.5


@pytest.mark.parametrize("graph", ["off", "relocate", "capture"])
@pytest.mark.parametrize("driver,batch,n,knobs", [
    ("blocked", 16, 520, dict(panel=dict(width=32, unroll=4, broadcast="shuffle"),
                              strip=dict(bm=16, bn=128, num_warps=4, fuse_next=True))),
    # the halves, whose strips start beside the other half's panel and wait at their end
    ("blocked", 17, 520, dict(panel=dict(width=32, unroll=4, broadcast="shuffle"),
                              strip=dict(bm=16, bn=128, num_warps=4, fuse_next=True, halves=2))),
    ("twolevel", 3, 1100, dict(panel=dict(width=16, num_warps=((None, 8),)), strip=dict(bm=64, bn=32),
                               twolevel=dict(outer=128, far_precision="tf32", block_t="kernel", gram="fp16x3",
                                             first_far="direct"))),
    ("coop", 2, 2100, dict(panel=dict(width=16, unroll=4, num_warps=((None, 8),)),
                           strip=dict(bm=64, bn=32, split_rows=256),
                           twolevel=dict(outer=128, far_precision="tf32", block_t="kernel", gram="fp16x3"),
                           coop=dict(programs=2, max_rows=1024, exchange="slots"))),
])
def test_programmatic_dependent_launch_changes_no_bit(driver, batch, n, knobs, graph):
    """settings.pdl: each kernel waits for the one before it before touching memory, so the
    factors are the same bits as without, eager or in a graph (a missing wait would race).
    Several calls each, on fresh inputs, so that a race has chances to show."""
    if graph == "relocate" and driver != "blocked":
        pytest.skip("relocate is for the blocked driver only")
    name = f"pdl-{driver}-{graph}-{knobs['strip'].get('halves', 1)}"
    graphed = route(name, driver=driver, graph=dict(mode=graph), **knobs)
    inputs = [gpu_matrices(batch, n, seed=s) for s in range(3)]
    results = {}
    for pdl in (False, True):
        settings = plan.Settings(graph_min_numel=0, graph_max_numel=10**10, pdl=pdl)
        results[pdl] = [routing.qr_routed(A, [graphed], settings) for A in inputs + inputs]
    for (H0, tau0), (H1, tau1) in zip(results[False], results[True]):
        torch.testing.assert_close(H1, H0, rtol=0, atol=0)
        torch.testing.assert_close(tau1, tau0, rtol=0, atol=0)


def gpu_panel_factors(A, knobs):
    """The first panel of A (knobs.width columns) on the GPU: its columns of H, tau, T, V and
    the launch's constants (what panel_launch chose for it)."""
    from qrsub.kernels.panel import householder_panel, panel_launch

    batch, n, _ = A.shape
    width = knobs.width
    H, tau = torch.zeros_like(A), torch.zeros(batch, n, device="cuda")
    T, V = torch.zeros(batch, width, width, device="cuda"), torch.zeros(batch, n, width, device="cuda")
    householder_panel(A, H, tau, T, V, 0, width, knobs=knobs)
    constants = panel_launch(A, A, tau, T, V, 0, width, knobs=knobs)[1]
    return H[:, :, :width], tau[:, :width], T, V, constants


@pytest.mark.parametrize("n,width,warps", [(512, 32, 4), (1024, 16, 8), (176, 16, 4), (32, 32, 2), (64, 16, 4),
                                           # panels of 128 values a thread (fewer warps)
                                           (32, 32, 1), (176, 16, 1), (128, 32, 1), (1024, 16, 4)])
def test_grouped_panel_shuffle_on_gpu(n, width, warps):
    """PanelKnobs.broadcast shuffle: the indexed shuffle assumes the layout Triton gives the
    grouped panel (4 columns a thread, a row's groups on consecutive lanes); this checks it
    on the machine at the shapes the routes use, against the summing panel."""
    A = gpu_matrices(3, n)
    outs = {broadcast: gpu_panel_factors(A, PanelKnobs(width=width, num_warps=warps, unroll=4, broadcast=broadcast))
            for broadcast in ("sum", "shuffle")}
    assert outs["shuffle"][-1]["SHUFFLE"], "the shuffle ran"
    for got, want in zip(outs["shuffle"][:-1], outs["sum"][:-1]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("n,width,warps", [(512, 32, 4), (256, 32, 2), (128, 32, 1), (176, 16, 4)])
def test_t_built_after_the_loop_on_gpu(n, width, warps):
    """panel.t_build after and doubling, compiled (their barriers order the Gram rows' stores before the loads
    that build T, which the interpreter's one thread never tests): the in-loop T's factors."""
    A = gpu_matrices(3, n)
    outs = {t_build: gpu_panel_factors(A, PanelKnobs(width=width, num_warps=warps, unroll=4, broadcast="shuffle",
                                                     reciprocal="approx", t_build=t_build))
            for t_build in plan.T_BUILDS}
    for t_build in ("after", "doubling"):
        assert outs[t_build][-1]["T_BUILD"] == t_build, f"T was built {t_build}"
        for got, want in zip(outs[t_build][:-1], outs["loop"][:-1]):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_triton_tf32_rounds_like_cublas():
    """strip.rank_update in tf32 (dot_prec rounds its operands to tf32 first) against cuBLAS's
    tf32 baddbmm on the same C - Y W: no larger error against float64, where truncating
    inputs, as tl.dot's tf32 does alone, gave the far update a larger residual."""
    from qrsub.kernels.blocked import matmul_tf32
    from qrsub.kernels.strip import rank_update

    g = torch.Generator(device="cuda").manual_seed(3)
    batch, n, K, col0 = 4, 512, 128, 128
    A = torch.randn(batch, n, n, device="cuda", generator=g)
    V = torch.randn(batch, n, K, device="cuda", generator=g) / K ** 0.5
    W = torch.randn(batch, K, n - col0, device="cuda", generator=g)
    exact = A[:, :, col0:].double() - V.double() @ W.double()
    H = torch.zeros_like(A)
    rank_update(A, H, V, W, 0, col0, strip=plan.StripKnobs(bm=64, bn=32, num_stages=3, num_warps=4),
                precision="tf32", v_row_off=0)
    with matmul_tf32(True):
        cublas = torch.baddbmm(A[:, :, col0:], V, W, alpha=-1.0)
    triton_err = (H[:, :, col0:].double() - exact).norm() / exact.norm()
    cublas_err = (cublas.double() - exact).norm() / exact.norm()
    assert triton_err < 1.25 * cublas_err, f"Triton tf32 {triton_err:.3e} against cuBLAS tf32 {cublas_err:.3e}"
    assert triton_err > 1e-6, "a tf32 product is not fp32-exact: the tf32 path really ran"


@pytest.mark.parametrize("precision,bm,rank_rows", [("fp16x3", 16, 128), ("tf32", 64, 256)])
def test_rank_update_s_row_splits_give_the_same_bits_on_gpu(precision, bm, rank_rows):
    """strip.rank_rows on compiled code and tensor cores (the CPU test's twin): the mid route's
    pending update (fp16x3, bm 16) and the first far update (tf32, bm 64), split over rows,
    to the one-program update's bits; 480 rows leave a partial last split."""
    from qrsub.kernels.strip import rank_update

    g = torch.Generator(device="cuda").manual_seed(4)
    batch, n, K, row0, col0 = 8, 512, 32, 32, 64
    A = torch.randn(batch, n, n, device="cuda", generator=g)
    V = torch.randn(batch, n, K, device="cuda", generator=g) / K ** 0.5
    W = torch.randn(batch, K, n - col0, device="cuda", generator=g)
    outs = []
    for rows in (0, rank_rows):
        H = torch.zeros_like(A)
        rank_update(A, H, V, W, row0, col0, precision=precision, v_row_off=row0,
                    strip=plan.StripKnobs(bm=bm, bn=32, num_stages=3, num_warps=4, rank_rows=rows))
        outs.append(H)
    assert torch.equal(outs[0], outs[1])
    assert outs[0][:, row0:, col0:].abs().sum() > 0 and not outs[0][:, :row0].any()
