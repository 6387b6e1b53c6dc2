"""PanelKnobs.broadcast shuffle: the panel held as column groups of 4 (panel_program_grouped).

On the interpreter the grouped program broadcasts column k by a sum over the groups (no
inline assembly there), so these tests check the grouped arithmetic against the plain
panel; the indexed shuffle itself has its GPU twin in test_gpu_kernels.py.
"""
import os

import pytest
import torch
from kernel_helpers import harness_check, route, sass_load_layouts, sass_loop_count, sass_loop_lines, special_matrices

from qrsub.kernels.blocked import qr_blocked
from qrsub.kernels.naive import larft, panel_ref
from qrsub.kernels.panel import householder_panel, panel_launch
from qrsub.kernels.plan import PanelKnobs



def factor(A, knobs, j=0, write_tv=True):
    """Panel columns [j, j+knobs.width) of A with these PanelKnobs: (H, tau, T, V), with H the
    whole matrix (only the panel's rows and columns written), tau the panel's, and T and V None
    where write_tv is False (a last panel); and the launch's constants (BL, BL2, GROUPED, SPLIT,
    T_BUILD...)."""
    batch, n, _ = A.shape
    width = knobs.width
    H, tau = A.clone(), torch.zeros(batch, n, device=A.device)
    T = torch.zeros(batch, width, width, device=A.device) if write_tv else None
    V = torch.zeros(batch, n, width, device=A.device) if write_tv else None
    constants = panel_launch(A, H, tau, T, V, j, width, knobs=knobs)[1]
    householder_panel(A, H, tau, T, V, j, width, knobs=knobs)
    return (H, tau[:, j:j + width], T, V), constants


def assert_same_factors(got, want, atol=1e-6, rtol=1e-5):
    for g, w in zip(got, want):
        if w is not None:
            torch.testing.assert_close(g, w, atol=atol, rtol=rtol)


@pytest.mark.parametrize("n,width,unroll", [(48, 16, 4), (32, 32, 4), (48, 16, 0)])
def test_grouped_panel_gives_the_plain_panels_factors(n, width, unroll):
    A = special_matrices(n, batch=5)  # random, zero column, all zeros, identity, rank deficient
    plain = factor(A, PanelKnobs(width=width, num_warps=1, unroll=unroll, broadcast="sum"))[0]
    grouped = factor(A, PanelKnobs(width=width, num_warps=1, unroll=unroll, broadcast="shuffle"))[0]
    assert_same_factors(grouped, plain)


def test_the_grouped_program_runs_only_where_its_layout_holds():
    A = torch.zeros(2, 48, 48)
    knobs = PanelKnobs(width=16, num_warps=1, broadcast="shuffle")

    def grouped(n, j, bw, warps=1):
        X = torch.zeros(2, n, n)
        k = PanelKnobs(width=16, num_warps=warps, broadcast="shuffle")
        return panel_launch(X, X, torch.zeros(2, n), None, None, j, bw, knobs=k)[1]["GROUPED"]

    assert grouped(48, 16, 16)
    assert not grouped(40, 16, 16), "rows not 16-byte aligned at n = 40"
    assert not grouped(48, 8, 16), "a panel starting at a column that is not a multiple of 16"
    assert not grouped(48, 32, 8), "a ragged last panel (bw < BB)"
    assert not grouped(48, 32, 16, warps=4), "16 rows x 16 columns on 4 warps: under 4 values a thread"
    assert grouped(48, 32, 16, warps=2)
    assert panel_launch(A, A, torch.zeros(2, 48), None, None, 0, 16, knobs=knobs)[1]["SHUFFLE"] is False, \
        "the interpreter has no inline assembly"


@pytest.mark.parametrize("n,width", [(48, 16), (37, 16)])
def test_blocked_qr_with_the_grouped_panel_passes_the_gate(n, width):
    A = special_matrices(n, batch=3)
    H, tau = qr_blocked(A, route(panel=dict(width=width, broadcast="shuffle", unroll=4)))
    H0, tau0 = qr_blocked(A, route(panel=dict(width=width, unroll=4)))
    torch.testing.assert_close(H, H0, atol=1e-5, rtol=1e-4)
    assert harness_check(A, H, tau) < 0.5


@pytest.mark.parametrize("n,j,width,unroll,write_tv,tiles", [
    (80, 0, 16, 4, True, (64, 16)),    # 80 rows as 64 + 16
    (48, 0, 16, 0, True, (32, 16)),    # the run-time loop
    (80, 32, 32, 4, True, (32, 16)),   # 48 rows as 32 + 16, 32 columns
    (48, 0, 16, 4, False, (32, 16)),   # a last panel: no T or V stored
])
def test_grouped_panel_in_two_row_tiles_gives_the_plain_panels_factors(n, j, width, unroll, write_tv, tiles):
    """panel.row_tiles 2 on the grouped panel: each tile held as column groups, their sums added
    before each reflector; the factors are the summing panel's in one tile, on the special
    matrices (a zero column, a zero matrix, the identity, rank deficiency)."""
    A = special_matrices(n, batch=5)
    def tiles_of(broadcast, row_tiles):
        knobs = PanelKnobs(width=width, num_warps=1, unroll=unroll, broadcast=broadcast, row_tiles=row_tiles)
        factors, constants = factor(A, knobs, j, write_tv)
        return factors, (constants["BL"], constants["BL2"], constants["GROUPED"])

    grouped, launch = tiles_of("shuffle", 2)
    plain, plain_launch = tiles_of("sum", 1)
    assert launch == (*tiles, True) and plain_launch[1:] == (0, False)
    assert_same_factors(grouped, plain)


def test_two_row_tiles_leave_split_and_t_after_to_one_tile():
    """The split panel and t_build after hold the rows as one tile: with two, the grouped panel
    runs whole, T built in the loop."""
    X = torch.zeros(2, 96, 96)
    knobs = PanelKnobs(width=32, num_warps=1, unroll=4, broadcast="shuffle", row_tiles=2, split=2, t_build="after")
    constants = panel_launch(X, X, torch.zeros(2, 96), None, None, 0, 32, knobs=knobs)[1]
    assert (constants["BL"], constants["BL2"], constants["GROUPED"]) == (64, 32, True)
    assert not constants["SPLIT"] and constants["T_BUILD"] == "loop"


def test_each_row_tile_gets_the_layout_the_shuffle_needs():
    """The indexed shuffle is right only where each tile loads 4 columns a thread with a row's
    groups on consecutive lanes: compiled for sm_90 (the mid route's 384-row panel as 256 + 128,
    and 288 as 256 + 32), both tiles' loads get the one-tile panel's layout."""
    one_tile = sass_load_layouts("--grouped", "--approx")
    assert one_tile and "sizePerThread = [1, 4]" in one_tile[0]
    for second in ("128", "32"):
        assert sass_load_layouts("--grouped", "--approx", "--bl", "256", "--bl2", second) == one_tile * 2


def factor_split(A, j, width, split, write_tv=True):
    """Panel columns [j, j+width) of A (grouped, unroll 4, 2 warps), split in halves or whole."""
    knobs = PanelKnobs(width=width, num_warps=2, unroll=4, broadcast="shuffle", split=split)
    factors, constants = factor(A, knobs, j, write_tv)
    assert constants["SPLIT"] == (split == 2)
    return factors


@pytest.mark.parametrize("n,j,width,write_tv", [(48, 0, 32, True), (64, 16, 32, True), (48, 16, 32, False)])
def test_a_split_panel_gives_the_whole_panels_factors(n, j, width, write_tv):
    """panel.split 2: the left half's reflectors, their block reflector applied to the right half
    in fp16x3, the right half's reflectors, T merged: the whole panel's factors, tau, T and V to
    fp16x3's accuracy, and no other column written. write_tv False: a last panel (no T, no V).
    The special matrices hold a zero column, a zero matrix, the identity, rank deficiency."""
    A = special_matrices(n, batch=5)
    whole = factor_split(A, j, width, 1, write_tv)
    split = factor_split(A, j, width, 2, write_tv)
    H, H0 = split[0], whole[0]
    torch.testing.assert_close(H[:, j:, j:j + width], H0[:, j:, j:j + width], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(split[1], whole[1], atol=2e-5, rtol=1e-4)
    if write_tv:
        torch.testing.assert_close(split[2], whole[2], atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(split[3], whole[3], atol=2e-5, rtol=1e-4)
    outside = torch.ones_like(A, dtype=torch.bool)
    outside[:, j:, j:j + width] = False
    assert torch.equal(H[outside], A[outside]), "only the panel's rows and columns are written"


def test_a_split_needs_halves_that_feed_tensor_cores_and_keep_the_shuffles_layout():
    """A 16-column panel cannot split into 8-column halves (tl.dot takes 16 at least), and a
    32 x 32 panel on 8 warps holds 4 values a thread whole but 2 a half: both stay whole."""
    X = torch.zeros(2, 64, 64)

    def split(width, warps, j=0):
        knobs = PanelKnobs(width=width, num_warps=warps, unroll=4, broadcast="shuffle", split=2)
        return panel_launch(X, X, torch.zeros(2, 64), None, None, j, width, knobs=knobs)[1]["SPLIT"]

    assert not split(16, 1)
    assert split(32, 4, j=32)
    assert not split(32, 8, j=32)


def test_a_64_column_split_panel_gives_the_reference_factors():
    """Width 64 (1.82x slower at 640x512 on the H200, s13): halves of 32, against the float64
    reference panel (the whole grouped panel at 64 columns takes minutes on the interpreter)."""
    A = special_matrices(80, batch=5)
    j, width = 16, 64
    H, tau, T, V = factor_split(A, j, width, 2)
    for i in range(A.shape[0]):
        P, tau_ref, T_ref, V_ref = panel_ref(A[i, j:, j:j + width].double())
        torch.testing.assert_close(H[i, j:, j:j + width].double(), P, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(tau[i].double(), tau_ref, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(T[i].double(), T_ref, atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(V[i, j:].double(), V_ref, atol=1e-4, rtol=1e-3)


SLOW = pytest.mark.skipif(not os.environ.get("QRSUB_SLOW"), reason="4 minutes on the interpreter: QRSUB_SLOW=1 "
                          "runs it; the GPU twin (test_drivers_pass_the_gate_on_gpu, w64) runs it at n = 520")


@pytest.mark.parametrize("n,width,bn", [(64, 32, 16), pytest.param(144, 64, 64, marks=SLOW)])
def test_blocked_qr_with_a_split_panel_passes_the_gate(n, width, bn):
    """The fused driver on split panels, against 32-wide whole panels. Width 64 (the knobs of the dropped champion-w64):
    panels of 64, 64 and 16 columns, the fused pass and the rank update at BB 64."""
    A = special_matrices(n, batch=2)
    H, tau = qr_blocked(A, route(panel=dict(width=width, broadcast="shuffle", unroll=4, split=2),
                                 strip=dict(fuse_next=True, bn=bn)))
    H0, tau0 = qr_blocked(A, route(panel=dict(width=32, broadcast="shuffle", unroll=4)))
    torch.testing.assert_close(H, H0, atol=1e-4, rtol=1e-3)
    assert harness_check(A, H, tau) < 0.5


@pytest.mark.parametrize("split", [False, True])
def test_the_grouped_panel_keeps_the_shuffle_s_layout_when_it_stores_v_parts(split):
    """The indexed shuffle (group_broadcast) needs the panel tile loaded 4 columns a thread. The
    interpreter cannot see layouts, so this compiles the panel for sm_90 (tools/sass_loop.py,
    Triton's compiler, no GPU) and reads its loads' layouts. Storing V's parts as fp16 tiles gave
    the load 8 columns a thread, and the H200 NaN (thirteenth session); packed in 32-bit words
    they keep the plain panel's layout."""
    def layouts(*flags):
        return sass_load_layouts("--grouped", *(["--split"] if split else []), *flags)

    plain, parts = layouts(), layouts("--v-parts")
    assert plain and "sizePerThread = [1, 4]" in plain[0]
    assert parts == plain


def test_the_b200_compile_gives_the_grouped_panel_the_same_layouts():
    """The indexed shuffle is right only in the layout the compile checks above read for sm_90.
    champion-b200.yaml sums instead, since no B200 has run the shuffle; this compiles the mid
    route's panel (512 x 32, 4 warps, unroll 4, approx) for sm_100 too and finds the same load
    layout and the same layouts under each inline assembly op (GPU-free evidence, not a run)."""
    for flag in ("--load-layouts", "--asm-layouts"):
        hopper = sass_loop_lines("--grouped", "--approx", flag)
        assert hopper and sass_loop_lines("--grouped", "--approx", "--arch", "100", flag) == hopper


def test_the_approximate_reciprocal_keeps_the_layout_and_shortens_the_loop():
    """panel.reciprocal approx on the mid route's grouped panel (512 x 32, 4 warps, unroll 4),
    compiled for sm_90 (the interpreter divides either way; the GPU twins rcp* run it): the
    load keeps the layout the shuffle needs, and the loop of 4 reflectors loses fp32
    division's range handling, two divisions a reflector (Triton 3.6: 2,011 instructions
    against 2,071)."""
    assert sass_loop_lines("--grouped", "--load-layouts", "--approx") == sass_loop_lines("--grouped", "--load-layouts")
    divided, approximated = sass_loop_count("loop", "--grouped"), sass_loop_count("loop", "--grouped", "--approx")
    assert approximated <= divided - 8 * 4, f"{approximated} instructions a loop against {divided}"


def factor_t_built(A, width, t_build, write_tv=True, unroll=4):
    """Panel columns [0, width) of A on the grouped panel (2 warps) with T built as t_build."""
    knobs = PanelKnobs(width=width, num_warps=2, unroll=unroll, broadcast="shuffle", t_build=t_build)
    factors, constants = factor(A, knobs, 0, write_tv)
    assert constants["T_BUILD"] == t_build
    return factors


@pytest.mark.parametrize("t_build", ["after", "doubling"])
@pytest.mark.parametrize("n,width,unroll,write_tv", [(48, 16, 4, True), (64, 32, 4, True), (48, 16, 0, True),
                                                     (48, 16, 4, False), (80, 16, 4, True)])
def test_t_built_after_the_loop_is_the_loops_t(n, width, unroll, write_tv, t_build):
    """panel.t_build after and doubling: the loop stores each reflector's Gram row in T's place
    and T is formed from them after it; H, tau, T and V as the in-loop recurrence gives them, on
    the special matrices (a zero column, a zero matrix, the identity, rank deficiency). write_tv
    False: a last panel, where nothing is stored in T's place. n 80: rows padded to 128."""
    A = special_matrices(n, batch=5)
    after = factor_t_built(A, width, t_build, write_tv, unroll)
    assert_same_factors(after, factor_t_built(A, width, "loop", write_tv, unroll))


def test_t_by_doubling_is_the_compact_wy_factor():
    """t_build doubling's T against naive.larft's from the panel's own V and tau, and against
    the product of the reflectors themselves: I - V T V^T = H_1 ... H_k."""
    A = special_matrices(64, batch=5)
    H, tau, T, V = factor_t_built(A, 32, "doubling")
    for i in range(A.shape[0]):
        v, t = V[i, :, :32].double(), T[i].double()
        q = torch.eye(64, dtype=torch.float64)
        for k in range(32):
            q = q @ (torch.eye(64, dtype=torch.float64) - tau[i, k].double() * torch.outer(v[:, k], v[:, k]))
        torch.testing.assert_close(t, larft(v, tau[i].double()), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.eye(64, dtype=torch.float64) - v @ t @ v.T, q, atol=2e-6, rtol=0)
        assert torch.equal(t, t.triu())


def test_t_after_applies_only_to_the_whole_grouped_panel():
    """The split panel merges its halves' T and the summing panel has no Gram rows to store:
    t_build after leaves both as they are."""
    X = torch.zeros(2, 64, 64)

    def t_build(broadcast, split=1):
        knobs = PanelKnobs(width=32, num_warps=4, unroll=4, broadcast=broadcast, split=split, t_build="after")
        return panel_launch(X, X, torch.zeros(2, 64), None, None, 32, 32, knobs=knobs)[1]["T_BUILD"]

    assert t_build("shuffle") == "after"
    assert t_build("shuffle", split=2) == "loop"
    assert t_build("sum") == "loop"


@pytest.mark.parametrize("t_build", ["after", "doubling"])
def test_blocked_qr_with_t_built_after_passes_the_gate(t_build):
    A = special_matrices(64, batch=3)
    H, tau = qr_blocked(A, route(panel=dict(width=16, broadcast="shuffle", unroll=4, t_build=t_build)))
    H0, tau0 = qr_blocked(A, route(panel=dict(width=16, broadcast="shuffle", unroll=4)))
    torch.testing.assert_close(H, H0, atol=1e-5, rtol=1e-4)  # T's sums run in another order
    assert harness_check(A, H, tau) < 0.5


def test_t_build_by_the_panels_height():
    """panel.t_build as [[rows_max, value], ...]: each panel takes the value of its padded height
    (512 rows after, 256 and fewer loop), as num_warps does."""
    X = torch.zeros(2, 512, 512)
    knobs = PanelKnobs(width=32, num_warps=((128, 1), (None, 4)), unroll=4, broadcast="shuffle",
                       t_build=((256, "loop"), (None, "after")))
    built = {512 - j: panel_launch(X, X, torch.zeros(2, 512), None, None, j, 32, knobs=knobs)[1]["T_BUILD"]
             for j in (0, 224, 256, 384)}
    assert built == {512: "after", 288: "after", 256: "loop", 128: "loop"}
