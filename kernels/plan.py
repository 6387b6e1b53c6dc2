"""The typed plan: every knob of a route, defined once, from YAML to launch.

A route sends the shapes it covers (n and batch ranges) to one driver with its
knobs, grouped as the variant files group them: `panel`, `strip`, `precision`,
`twolevel`, `coop`, `graph`. Each group is a frozen dataclass below; a knob's
field name is its YAML name, and the drivers read the same name
(`route.panel.num_warps` becomes the panel launch's `num_warps=`).

Each field's `metadata["allowed"]` is the one check of that knob and
`metadata["doc"]` its one description: `qrsub.variant` derives the variant
schema from them. `route_problems` holds the rules between knobs that the
kernels rely on; the loader reports them with file:line:col, and a Route that
breaks one cannot be constructed.

This module is pure Python (no torch, no Triton) and is inlined into the
submission like the kernel modules.
"""
from dataclasses import dataclass, field, fields

# The split precisions of a tensor-core product (kernels/precision.py computes them).
PRECISIONS = ("fp32", "tf32", "tf32x3", "fp16x3", "fp16x2lo", "fp16")
# Driver names; routing.py binds each to the function named qr_<name>.
DRIVERS = ("geqrf", "blocked", "twolevel", "coop", "warp")
# PanelKnobs.broadcast (panel.py): how column k of the panel reaches every lane of its row.
BROADCASTS = ("sum", "shuffle")
# PanelKnobs.reciprocal (panel.reflector): how a reflector forms 1 / (alpha - beta) and 1 / beta.
RECIPROCALS = ("div", "approx")
# PanelKnobs.t_build (panel.py, the grouped panel): T's recurrence inside the reflector loop, or
# after it from the Gram rows the loop stores, by the same recurrence or by doubling.
T_BUILDS = ("loop", "after", "doubling")
# PanelKnobs.sigma (warp.py, the warp driver alone): where a reflector's ||tail||^2 comes from.
SIGMAS = ("broadcast", "own")
# The warp driver (warp.py) holds a matrix's columns one a lane: its routes end at this n.
WARP_MAX_N = 32
# Drivers that read the panel, strip and precision knobs (geqrf reads none; warp the graph knobs
# and panel.reciprocal, sigma and row_chains alone).
PANEL_DRIVERS = ("blocked", "twolevel", "coop")
# Drivers built from inner panels inside outer blocks (they read `twolevel`).
TWO_LEVEL_DRIVERS = ("twolevel", "coop")
# How the cooperative panel's programs combine their rows: partial sums exchanged per reflector
# (coop.py), or each slice factored alone and the R factors combined once a panel (tsqr.py).
COOP_EXCHANGES = ("counter", "slots", "spin", "tsqr")
# The exchanges through sentinel slots (coop.py), which CoopKnobs.slot_reset applies to.
SLOT_EXCHANGES = ("slots", "spin")
# CoopKnobs.slot_reset (coop.py): the slots/spin exchange's words set back to the sentinel by a
# fill launch before each cooperative launch, or by the launches themselves (a ring of slots
# cleared in the reflector loop, or two sets, each cleared by the launch after the one using it).
SLOT_RESETS = ("host", "kernel", "parity")
# TwoLevelKnobs.block_t (wy.py): a block's T by torch products, or by one Triton launch.
BLOCK_T = ("merge", "kernel")
# TwoLevelKnobs.gram (wy.py): the block's Y^T Y through cuBLAS in fp32, or on tensor cores.
GRAM = ("cublas", "fp16x3", "tf32x3")
# Rows a step of the Triton Gram product's loop (wy.gram_kernel): TwoLevelKnobs.gram_split_rows
# is a multiple of it, so that every split is a whole number of steps.
GRAM_BM = 32
# TwoLevelKnobs.far_update (blocked.py): the columns right of a block through cuBLAS's three
# batched GEMMs, or through the fused strip kernel with BB = the outer block.
FAR_UPDATES = ("cublas", "strip")
# TwoLevelKnobs.far_precision: the far update's two large products. cuBLAS takes the first two;
# the strip far update takes any, as a dot_prec name (precision.py).
CUBLAS_FAR_PRECISIONS = ("fp32", "tf32")
FAR_PRECISIONS = CUBLAS_FAR_PRECISIONS + ("tf32x3", "fp16x3")
# TwoLevelKnobs.first_far (blocked.py): the first block's cuBLAS far update reads A and writes
# H, so torch first copies A's far columns into H (one strided copy); or the last of its three
# products, C - Y W, is one Triton launch that reads A and writes H (strip.rank_update), its
# tf32 operands rounded in the kernel (direct) or by a launch before it (direct_rounded).
FIRST_FAR = ("copy", "direct", "direct_rounded")
# TwoLevelKnobs.gram_sum (wy.py): with gram_split_rows, the splits' Gram parts summed by a torch
# launch of their own, or by block_t_kernel as it reads each block of G (one launch fewer a block).
GRAM_SUMS = ("launch", "block_t")
# TwoLevelKnobs.zero_fill (blocked.py, wy.py): V's rows above each inner panel's diagonal zeroed
# by a launch before each outer block, or by the Triton Gram product's launch.
ZERO_FILLS = ("launch", "gram")
# TwoLevelKnobs' tiles of the direct first far update, each the StripKnobs field it stands in for.
FIRST_FAR_TILE = {"first_far_bm": "bm", "first_far_bn": "bn", "first_far_stages": "num_stages",
                  "first_far_warps": "num_warps"}
# TwoLevelKnobs' tiles of the strip far update, each the StripKnobs field it stands in for.
FAR_STRIP_TILE = {"far_bm": "bm", "far_bn": "bn", "far_stages": "num_stages", "far_warps": "num_warps",
                  "far_split_rows": "split_rows"}
# TwoLevelKnobs.far_tcontract (blocked.py, tproduct.py): the far update's T product by cuBLAS in
# tf32 or fp32, or by tproduct.t_product_kernel on tensor cores in one of TRITON_TCONTRACTS.
TRITON_TCONTRACTS = ("tf32x3", "fp16x3")
FAR_TCONTRACTS = ("tf32", "fp32") + TRITON_TCONTRACTS
# CUDA graph policies (graphs.py). `concurrent` is opt-in and never a default: its batch
# groups run as concurrent branches of one graph, which is work on more than one hardware
# queue, and the service warns that such work may disqualify a submission (whatever the
# file spells). qrsub lint and qrsub submit flag every built file whose routes use it.
GRAPH_MODES = ("off", "capture", "inplace", "relocate", "concurrent")
# Why graph.mode concurrent refuses a driver; the others (blocked: Triton kernels only, each
# group's on its own buffers) may run as concurrent branches.
NEVER_GRAPHED = "a geqrf route is never graphed"
CONCURRENT_REFUSED = {
    "geqrf": NEVER_GRAPHED,
    "twolevel": "its cuBLAS products would share one workspace across the groups (torch keys it by "
                "the capturing queue, the same for every group), which concurrent branches would race on",
    "coop": "its panel programs spin until all of a matrix's programs run, which other branches filling "
            "the GPU could prevent forever",
    "warp": "it factors a call in one launch: there is nothing to overlap",
}
CONCURRENT_DRIVERS = tuple(d for d in DRIVERS if d not in CONCURRENT_REFUSED)
# graph.mode relocate moves every pointer into the input and the outputs by a table (relocate.py),
# which only Triton kernels can do: the drivers that launch nothing else on them.
CUBLAS_POINTERS = ("its far update multiplies slices of the input and the outputs through cuBLAS, whose "
                   "pointers a replay cannot move")
RELOCATE_REFUSED = {"geqrf": NEVER_GRAPHED, "twolevel": CUBLAS_POINTERS, "coop": CUBLAS_POINTERS}
RELOCATE_DRIVERS = tuple(d for d in DRIVERS if d not in RELOCATE_REFUSED)
# GraphKnobs.groups: more branches than the GPU has hardware work queues (32 at most) add
# launches without adding overlap. (K = 10 was best for the other submission, on a B200.)
MAX_GROUPS = 32
# tl.dot needs every dimension >= 16: the smallest panel width whose V and T feed it.
MIN_DOT_WIDTH = 16


# ---------------------------------------------------------------------------
# Allowed values: each check returns None when the value is fine, else what is allowed.


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Pow2:
    lo: int
    hi: int
    zero_is_off: bool = False

    def problem(self, value):
        allowed = [1 << k for k in range(self.hi.bit_length()) if self.lo <= 1 << k <= self.hi]
        if is_int(value) and (value in allowed or (self.zero_is_off and value == 0)):
            return None
        text = f"a power of two in {self.lo}..{self.hi} ({', '.join(map(str, allowed))})"
        return f"0 (off) or {text}" if self.zero_is_off else text


@dataclass(frozen=True)
class IntRange:
    lo: int
    hi: object = None

    def problem(self, value):
        if is_int(value) and value >= self.lo and (self.hi is None or value <= self.hi):
            return None
        return f"an integer in {self.lo}..{self.hi}" if self.hi is not None else f"an integer >= {self.lo}"


@dataclass(frozen=True)
class OneOf:
    choices: tuple

    def problem(self, value):
        return None if isinstance(value, str) and value in self.choices else "one of " + ", ".join(self.choices)


@dataclass(frozen=True)
class Flag:
    def problem(self, value):
        return None if isinstance(value, bool) else "true or false"


@dataclass(frozen=True)
class ByRows:
    """One value that EACH allows, or ((rows_max, value), ...) with rows_max ascending (None,
    meaning any height, only last): the first pair whose rows_max >= the padded panel height
    applies (panel.by_rows picks it)."""

    each: object

    def problem(self, value):
        one = self.each.problem(None)  # what one value may be, in words
        text = (f"{one}, or a list of [rows_max, value] pairs with rows_max ascending integers "
                f"(null, meaning any height, only last) and each value {one}")
        if self.each.problem(value) is None:
            return None
        if not isinstance(value, (list, tuple)) or not value:
            return text
        last = 0
        for i, pair in enumerate(value):
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and self.each.problem(pair[1]) is None):
                return text
            rows = pair[0]
            if rows is None and i != len(value) - 1:
                return text
            if rows is not None:
                if not is_int(rows) or rows <= last:
                    return text
                last = rows
        return None


def knob(default, allowed, doc: str):
    return field(default=default, metadata={"allowed": allowed, "doc": doc})


# ---------------------------------------------------------------------------
# The knob groups, in the order of the variant files' sections.


@dataclass(frozen=True)
class PanelKnobs:
    width: int = knob(32, Pow2(1, 64), "panel width b: columns factored per panel launch")
    num_warps: object = knob(4, ByRows(Pow2(1, 32)), "panel num_warps, or [[rows_max, warps], ...]: the "
                                                     "first pair whose rows_max >= the padded panel height")
    row_tiles: int = knob(1, IntRange(1, 2), "the panel's rows in registers as 1 tile of the padded height, "
                                           "or 2 tiles (half of it plus the rest padded) when that holds fewer")
    unroll: int = knob(0, Pow2(1, 8, zero_is_off=True), "reflectors per iteration of the panel's loop, "
                                                        "unrolled at compile time over the padded width (so "
                                                        "the compiler folds most masks); 0: a run-time loop "
                                                        "over the panel's columns")
    broadcast: str = knob("sum", OneOf(BROADCASTS), "how column k reaches the lanes of its row each reflector: "
                                                  "sum (a reduction over the column groups) or shuffle (one "
                                                  "indexed shuffle: the panel held as column groups of 4, "
                                                  "where its rows are 16-byte aligned; GPU only)")
    split: int = knob(1, IntRange(1, 2), "1, or 2: the panel factored as two halves, the left half's block "
                                         "reflector applied to the right half on tensor cores (fp16x3) between "
                                         "them, so each reflector walks half the columns (broadcast shuffle "
                                         "panels of at least 32 columns; others whole)")
    apply_pending: bool = knob(False, Flag(), "with strip.fuse_next: the panel first applies the previous "
                                              "panel's update to its own columns (C - Y W, W from the fused "
                                              "pass), in place of a separate launch that writes them once more")
    reciprocal: str = knob("div", OneOf(RECIPROCALS), "how each reflector forms 1 / (alpha - beta) and 1 / beta, "
                                                    "on its chain of dependent instructions: div (fp32 division, "
                                                    "its range handling around the hardware reciprocal) or approx "
                                                    "(the hardware reciprocal alone, rcp.approx.ftz: 1 ulp; GPU "
                                                    "only, the interpreter divides); every driver's panels (geqrf, "
                                                    "with none, ignores it)")
    t_build: object = knob("loop", ByRows(OneOf(T_BUILDS)), "where the grouped panel (broadcast shuffle, one row tile, not "
                                                 "split) builds its block reflector's T: loop (column k of the "
                                                 "recurrence with reflector k, a product summed across lanes "
                                                 "inside the loop), after (the loop stores each reflector's "
                                                 "Gram row in T's place, and the same recurrence builds T from "
                                                 "them after the loop) or doubling (as after, but T is built in "
                                                 "log2(width) levels of two small products each, not a chain "
                                                 "of width steps), or [[rows_max, value], ...] by the padded "
                                                 "height; the other panels build it in the loop")
    sigma: str = knob("broadcast", OneOf(SIGMAS), "the warp driver's ||tail||^2 for reflector k (its other "
                                                 "panels have it from the reduction that forms the "
                                                 "projections): broadcast (each lane sums the squares of the "
                                                 "shuffled column k once its shuffles arrive) or own (each "
                                                 "lane sums its own column's tail as soon as the previous "
                                                 "reflector has updated it, lane k's sum reaching the others "
                                                 "by one shuffle, beside column k's shuffles)")
    row_chains: int = knob(4, Pow2(1, 8), "the warp driver's partial sums in each reduction over its rows "
                                          "(row r to sum r mod row_chains): chains of 32 / row_chains "
                                          "dependent additions")
    max_registers: object = knob(0, ByRows(IntRange(0, 255)), "registers per thread the panel may use "
                                                              "(ptxas maxnreg; it spills the rest), so that "
                                                              "more programs share an SM; 0: the compiler's "
                                                              "choice (up to 255); or [[rows_max, registers], "
                                                              "...] as num_warps")


@dataclass(frozen=True)
class StripKnobs:
    bm: int = knob(32, Pow2(16, 256), "trailing strip row tile BM")
    bn: int = knob(32, Pow2(16, 256), "trailing strip columns per program BN")
    num_stages: int = knob(3, IntRange(1, 6), "software-pipeline stages of the strip's row loops")
    num_warps: int = knob(2, Pow2(1, 16), "strip num_warps")
    split_rows: int = knob(0, Pow2(16, 8192, zero_is_off=True), "rows per program when a strip's rows are "
                                                               "split over programs (taller strips only); 0: off")
    rank_rows: int = knob(0, Pow2(16, 8192, zero_is_off=True), "rows per program of the rank update (rank_update: "
                                                              "the next panel's pending update with fuse_next, "
                                                              "the direct first far update); it needs no sum "
                                                              "over rows, so each row split is a program of "
                                                              "its own; 0: one program walks all the rows")
    halves: int = knob(1, IntRange(1, 2), "with fuse_next: 2 factors the batch as two halves, one half a step "
                                          "behind the other, so that each half's panel launch sits between the "
                                          "other half's strips; with settings.pdl a strip's programs start "
                                          "while the panel before it finishes")
    fuse_next: bool = knob(False, Flag(), "blocked driver: apply each panel's reflector and project the next "
                                          "panel's in one pass over the trailing columns (C read once a panel "
                                          "instead of twice; W waits in global memory between launches)")
    tail_update: bool = knob(False, Flag(), "with fuse_next: the fused pass's first column program, once its "
                                            "projection is done, also applies the new panel's update to the next "
                                            "panel's columns (in place of rank_update's launch, whose C it has "
                                            "just written and may still find in L2)")
    v_parts: bool = knob(False, Flag(), "with fuse_next and precision fp16x3 (project and apply): the panel "
                                        "stores V as its fp16x3 parts (both in one 32-bit word), which "
                                        "the fused pass and the rank update load as they are instead of "
                                        "splitting each V tile again (the same bits)")
    max_registers: int = knob(0, IntRange(0, 255), "with fuse_next: registers per thread the fused pass may use "
                                                   "(ptxas maxnreg; it spills the rest), so that more programs "
                                                   "share an SM where shared memory allows (num_stages); 0: the "
                                                   "compiler's choice")


@dataclass(frozen=True)
class PrecisionKnobs:
    # tf32x3 by default: fp32 accuracy with fp32's exponent range (fp16 splits are faster,
    # but whether their range suffices is for the accuracy gate to decide per shape).
    project: str = knob("tf32x3", OneOf(PRECISIONS), "precision of the projection V^T C")
    tcontract: str = knob("tf32x3", OneOf(PRECISIONS), "precision of the T contraction T^T (V^T C)")
    apply: str = knob("tf32x3", OneOf(PRECISIONS), "precision of the update V (T^T V^T C)")


@dataclass(frozen=True)
class TwoLevelKnobs:
    outer: int = knob(128, Pow2(32, 512), "two-level outer block O (a multiple of panel.width)")
    # fp32 by default: tf32 in the far update was measured safe only at n >= 1024.
    far_precision: str = knob("fp32", OneOf(FAR_PRECISIONS), "precision of the far update's two large "
                                                             "products: fp32 or tf32 (cuBLAS, or the strip), "
                                                             "tf32x3 or fp16x3 (far_update strip only)")
    far_tcontract: str = knob("tf32", OneOf(FAR_TCONTRACTS), "with far_precision other than fp32, the precision "
                                                             "of the far update's small T product: tf32 or fp32 "
                                                             "(the margin, at about 6% of its flops) by "
                                                             "cuBLAS, or tf32x3 or fp16x3 by a Triton kernel "
                                                             "(with far_update strip: inside the strip's launch)")
    # The Triton T product's tiles (tproduct.t_product_kernel): T^T W is OB x OB by OB x ncols, a
    # program per tproduct_bn columns of a matrix, its OB rows in one accumulator.
    tproduct_bn: int = knob(64, Pow2(16, 256), "with far_tcontract tf32x3 or fp16x3: columns of T^T W a "
                                               "program of the T product writes")
    tproduct_bk: int = knob(32, Pow2(16, 128), "with far_tcontract tf32x3 or fp16x3: rows of T (and of W) a "
                                               "step of the T product's inner loop takes")
    tproduct_warps: int = knob(4, Pow2(1, 16), "with far_tcontract tf32x3 or fp16x3: warps a program of the "
                                               "T product")
    first_far: str = knob("copy", OneOf(FIRST_FAR), "with far_update cublas, the first block's last product "
                                                  "(read from A, written to H): copy (A's far columns copied "
                                                  "into H, then cuBLAS in place), direct (one Triton launch, "
                                                  "C - Y W from A into H, in far_precision; tf32 operands "
                                                  "rounded in it) or direct_rounded (Y and W rounded to tf32 "
                                                  "by a launch before it)")
    # The direct first far update's tiles (strip.rank_update with BB = outer): the strip's own
    # (bm 64, bn 32, 4 stages) take 144 KB of shared memory at BB 128, one program an SM, and
    # each program re-reads all of Y for its BN columns. 0: the route's strip knob.
    first_far_bm: int = knob(0, Pow2(16, 256, zero_is_off=True), "with first_far direct or direct_rounded: rows a "
                                                                 "step of its launch (0: strip.bm)")
    first_far_bn: int = knob(0, Pow2(16, 256, zero_is_off=True), "with first_far direct or direct_rounded: columns "
                                                                 "a program of its launch (0: strip.bn)")
    first_far_stages: int = knob(0, IntRange(0, 6), "with first_far direct or direct_rounded: pipeline stages of "
                                                    "its launch's row loop (0: strip.num_stages)")
    first_far_warps: int = knob(0, Pow2(1, 16, zero_is_off=True), "with first_far direct or direct_rounded: warps "
                                                                  "a program of its launch (0: strip.num_warps)")
    far_update: str = knob("cublas", OneOf(FAR_UPDATES), "the far update: cublas (three batched GEMMs, "
                                                         "far_precision) or strip (one launch of the fused strip "
                                                         "kernel with BB = outer: C read from A or H and written "
                                                         "once, far_precision and far_tcontract its products, "
                                                         "the far_ tiles its tiles)")
    # The strip far update's tiles (strip.trailing_strip with BB = outer): the in-block strips' are
    # shaped for BB = panel.width, and each program re-reads all of Y for its BN columns, so a
    # wider BN reads Y fewer times. 0: the route's strip knob.
    far_bm: int = knob(0, Pow2(16, 256, zero_is_off=True), "with far_update strip: rows a step of its row loops "
                                                           "(0: strip.bm)")
    far_bn: int = knob(0, Pow2(16, 256, zero_is_off=True), "with far_update strip: columns a program (0: strip.bn)")
    far_stages: int = knob(0, IntRange(0, 6), "with far_update strip: pipeline stages of its row loops "
                                              "(0: strip.num_stages)")
    far_warps: int = knob(0, Pow2(1, 16, zero_is_off=True), "with far_update strip: warps a program "
                                                            "(0: strip.num_warps)")
    far_split_rows: int = knob(0, Pow2(16, 8192, zero_is_off=True), "with far_update strip: rows a program "
                                                                    "projects when the block's rows are split "
                                                                    "over programs (0: strip.split_rows; a "
                                                                    "value above n: no split)")
    block_t: str = knob("merge", OneOf(BLOCK_T), "how a block's T is built from its inner T: merge (torch "
                                                 "products, ~4 launches per inner panel) or kernel (one launch)")
    gram: str = knob("cublas", OneOf(GRAM), "the block's Gram product Y^T Y for block_t: kernel: cuBLAS in "
                                           "fp32, or a Triton kernel on tensor cores in fp16x3 or tf32x3")
    gram_split_rows: int = knob(0, Pow2(GRAM_BM, 8192, zero_is_off=True), "with gram fp16x3 or tf32x3: rows of Y a "
                                                                     "program of the Gram product walks, when "
                                                                     "a block is taller (partial products, "
                                                                     "summed by a second launch: for batches "
                                                                     "that leave SMs idle); 0: one program a "
                                                                     "row strip of G walks all the rows")
    gram_sum: str = knob("launch", OneOf(GRAM_SUMS), "with gram_split_rows: who sums the splits' parts of the "
                                                    "Gram product: launch (torch, a launch of its own) or block_t "
                                                    "(block_t_kernel, as it reads each block of G it needs)")
    zero_fill: str = knob("launch", OneOf(ZERO_FILLS), "V's rows above each inner panel's diagonal, which the "
                                                       "block T and the far update read as zeros: launch (a fill "
                                                       "before each outer block) or gram (with gram fp16x3 or "
                                                       "tf32x3: the Gram product's launch writes them and masks "
                                                       "them in its own loads; no launch)")
    gram_columns: int = knob(0, Pow2(16, 512, zero_is_off=True), "with gram fp16x3 or tf32x3: columns of G a "
                                                                  "program of the Gram product writes, only "
                                                                  "those right of its rows' diagonal block "
                                                                  "(the blocks block_t reads: about 60% of "
                                                                  "the products at outer 128 and 64 "
                                                                  "columns); 0: every column, one program a "
                                                                  "row strip")


@dataclass(frozen=True)
class CoopKnobs:
    programs: int = knob(8, Pow2(1, 64), "programs per matrix in the cooperative panel")
    exchange: str = knob("counter", OneOf(COOP_EXCHANGES), "how the programs combine their rows: partial sums "
                                                          "per reflector through an atomic counter barrier, "
                                                          "sentinel slots polled by the whole program, or "
                                                          "sentinel slots each thread spins on alone (spin: no "
                                                          "barrier while it waits); or tsqr: each program "
                                                          "factors its rows alone, further launches combine the "
                                                          "R factors and rebuild the reflectors (no waiting: "
                                                          "programs need not fit the GPU at once)")
    broadcast: str = knob("sum", OneOf(BROADCASTS), "the cooperative panel's panel.broadcast: sum, or shuffle "
                                                  "(the panel held as column groups of 4, where its rows are "
                                                  "16-byte aligned; with exchange slots, spin or tsqr; GPU only)")
    max_rows: int = knob(1024, IntRange(1), "panels up to this height use the one-program panel")
    slot_reset: str = knob("host", OneOf(SLOT_RESETS), "with exchange slots or spin, who sets the exchange's "
                                                      "words back to the sentinel: host (a fill launch before "
                                                      "each cooperative launch) or kernel (each launch clears "
                                                      "a reflector's slot once every program has read it, in a "
                                                      "ring of panel.width + 1 slots: no fill launch) or "
                                                      "parity (two sets of slots, launches alternating; each "
                                                      "clears the other set at its start: no fill launch)")


@dataclass(frozen=True)
class GraphKnobs:
    mode: str = knob("capture", OneOf(GRAPH_MODES), "CUDA graph policy: capture (a graph per shape, the input "
                                                    "copied in, the outputs cloned out as settings.clone_outputs "
                                                    "says), inplace (a graph per input tensor, which reads it where "
                                                    "it lies and returns its own buffers: no copies; an output stays "
                                                    "as returned until the next call on the same tensor), "
                                                    "relocate (a graph per shape, captured on its first call, "
                                                    "whose kernels read the input where it lies and write fresh "
                                                    "outputs through a table of offsets: no copies; drivers "
                                                    f"{' and '.join(RELOCATE_DRIVERS)} only), off, or "
                                                    "concurrent (opt-in, a disqualification risk that qrsub "
                                                    "lint and submit flag): the batch split into graph.groups "
                                                    "groups, each its own graph, run as concurrent branches "
                                                    "of one graph; it graphs inputs over "
                                                    "settings.graph_max_numel too")
    groups: int = knob(0, IntRange(0, MAX_GROUPS), f"with mode concurrent, the batch groups (2..{MAX_GROUPS}, "
                                                   "contiguous and as even as possible; no more than the "
                                                   "batch); 0 with the other modes")
    head: int = knob(0, IntRange(0, 256), "modes capture, inplace and relocate: the call's first HEAD capture "
                                          "points (the driver's panels and strips in launch order) in a graph "
                                          "of their own, replayed before the rest, so that its kernels run "
                                          "while the host still launches the larger rest; 0: one graph")


def graph_problems(driver: str, graph: GraphKnobs) -> list:
    """[(knob path, message)] for graph.mode and graph.groups together (route_problems reports them)."""
    if value_problems(graph):
        return []
    if graph.mode == "relocate" and driver not in RELOCATE_DRIVERS:
        return [(("graph", "mode"), f"got relocate with driver {driver}; allowed: relocate with driver "
                 f"{' or '.join(RELOCATE_DRIVERS)} ({RELOCATE_REFUSED[driver]})")]
    if graph.head and graph.mode in ("off", "concurrent"):
        return [(("graph", "head"), f"got {graph.head} with graph.mode {graph.mode}; allowed: 0, or a head "
                 "with graph.mode capture, inplace or relocate (the modes that capture one graph a call)")]
    if graph.mode != "concurrent":
        return [(("graph", "groups"), f"got {graph.groups} with graph.mode {graph.mode}; allowed: 0 (groups "
                 "split the batch in mode concurrent only)")] if graph.groups else []
    if graph.groups < 2:
        return [(("graph", "mode"), f"got concurrent with graph.groups {graph.groups}; allowed: concurrent "
                 f"with graph.groups 2..{MAX_GROUPS} (the batch groups that run as concurrent branches)")]
    if driver not in CONCURRENT_DRIVERS:
        return [(("graph", "mode"), f"got concurrent with driver {driver}; allowed: concurrent with driver "
                 f"{' or '.join(CONCURRENT_DRIVERS)} ({CONCURRENT_REFUSED[driver]})")]
    return []


@dataclass(frozen=True)
class Settings:
    """Knobs of the whole submission (the variant's `settings:`)."""

    graph_min_numel: int = knob(5000, IntRange(0), "graphs only for inputs with at least this many elements")
    graph_max_numel: int = knob(100_000_000, IntRange(0), "graphs only for inputs with at most this many elements")
    clone_outputs: bool = knob(True, Flag(), "clone outputs out of a graph.mode capture route's buffers "
                                             "(the harness keeps several alive)")
    packed_outputs: bool = knob(True, Flag(), "clone H and tau out of a graph.mode capture route's buffers in "
                                              "one copy (the drivers put them in one buffer): a launch less a "
                                              "call; false: one copy each")
    pdl: bool = knob(False, Flag(), "launch the Triton kernels with programmatic dependent launch (Hopper and "
                                    "later; one queue): each kernel's programs are placed while the one before "
                                    "it finishes, and wait for it before they touch memory")


# Section name -> its knob group; the order of the variant files.
SECTIONS = {"panel": PanelKnobs, "strip": StripKnobs, "precision": PrecisionKnobs,
            "twolevel": TwoLevelKnobs, "coop": CoopKnobs, "graph": GraphKnobs}
DRIVER_DOC = ("geqrf (torch), blocked (single-level), twolevel, coop (cooperative two-level), warp (the whole "
              f"QR in one warp a matrix, a column a lane: n <= {WARP_MAX_N}; it reads only the graph knobs and "
              "panel.reciprocal, sigma and row_chains)")


def value_problems(group) -> list:
    """[(field name, allowed text)] for the knobs of one group whose value is not allowed."""
    out = []
    for f in fields(group):
        problem = f.metadata["allowed"].problem(getattr(group, f.name))
        if problem:
            out.append((f.name, problem))
    return out


def route_problems(driver: str, sections: dict, n_range: tuple = (1, None)) -> list:
    """[(knob path, message)] for rules between a route's knobs (and its n range) that the drivers
    rely on.

    `sections` maps section name -> knob group. Only values valid on their own are compared.
    """
    out = []
    if OneOf(DRIVERS).problem(driver):
        return out
    if driver == "warp" and (n_range[1] is None or n_range[1] > WARP_MAX_N):
        out.append((("n",), f"got n {n_range[0]}..{'' if n_range[1] is None else n_range[1]} with driver warp; "
                    f"allowed: a range that ends at {WARP_MAX_N} or below (a column a lane of one warp)"))
    out += graph_problems(driver, sections["graph"])
    panel, strip = sections["panel"], sections["strip"]
    for name in ("split_rows", "rank_rows"):
        if not value_problems(strip) and 0 < getattr(strip, name) < strip.bm:
            out.append((("strip", name), f"got {getattr(strip, name)}; allowed: 0 or at least strip.bm "
                        f"({strip.bm}): each split is a whole number of row tiles"))
    if not value_problems(strip) and strip.fuse_next and (driver != "blocked" or strip.split_rows):
        out.append((("strip", "fuse_next"), f"got true with driver {driver} and strip.split_rows "
                    f"{strip.split_rows}; allowed: true with driver blocked and split_rows 0 (the fused "
                    "pass carries whole columns of one blocked QR from panel to panel)"))
    if not value_problems(strip) and strip.halves == 2 and not strip.fuse_next:
        out.append((("strip", "halves"), "got 2 with strip.fuse_next false; allowed: 2 with strip.fuse_next "
                    "true (the halves interleave the fused driver's launches)"))
    if not value_problems(panel) and not value_problems(strip) and panel.apply_pending and not strip.fuse_next:
        out.append((("panel", "apply_pending"), "got true with strip.fuse_next false; allowed: true with "
                    "strip.fuse_next true (the pending update is the fused pass's)"))
    if not value_problems(strip) and strip.max_registers and not strip.fuse_next:
        out.append((("strip", "max_registers"), f"got {strip.max_registers} with strip.fuse_next false; allowed: "
                    "0, or a cap with strip.fuse_next true (only the fused pass takes it)"))
    if not value_problems(strip) and strip.tail_update and not strip.fuse_next:
        out.append((("strip", "tail_update"), "got true with strip.fuse_next false; allowed: true with "
                    "strip.fuse_next true (the tail follows the fused pass's projection)"))
    if (not value_problems(panel) and not value_problems(strip) and strip.tail_update
            and panel.apply_pending):
        out.append((("strip", "tail_update"), "got true with panel.apply_pending true; allowed: one of them "
                    "(each applies the next panel's pending update: together they would apply it twice)"))
    precision = sections["precision"]
    if not value_problems(strip) and strip.v_parts and not strip.fuse_next:
        out.append((("strip", "v_parts"), "got true with strip.fuse_next false; allowed: true with "
                    "strip.fuse_next true (the fused driver's panels, pass and rank update read the parts)"))
    elif not value_problems(strip) and strip.v_parts and (panel.apply_pending or strip.tail_update):
        out.append((("strip", "v_parts"), "got true with panel.apply_pending or strip.tail_update; allowed: "
                    "true with both false (their products take V in fp32)"))
    elif (not value_problems(strip) and not value_problems(precision) and strip.v_parts
          and (precision.project, precision.apply) != ("fp16x3", "fp16x3")):
        out.append((("strip", "v_parts"), f"got true with precision.project {precision.project} and "
                    f"precision.apply {precision.apply}; allowed: true with both fp16x3 (the parts are "
                    "fp16x3's)"))
    coop = sections["coop"]
    if not value_problems(coop) and coop.broadcast == "shuffle" and coop.exchange == "counter":
        out.append((("coop", "broadcast"), "got shuffle with coop.exchange counter; allowed: shuffle with "
                    "exchange slots, spin or tsqr, or sum"))
    if not value_problems(coop) and coop.slot_reset != "host" and coop.exchange not in SLOT_EXCHANGES:
        out.append((("coop", "slot_reset"), f"got {coop.slot_reset} with coop.exchange {coop.exchange}; allowed: "
                    f"{coop.slot_reset} with exchange slots or spin (the sentinel slots it clears), or host"))
    if (not value_problems(coop) and coop.slot_reset == "kernel" and not value_problems(panel)
            and panel.unroll == 0):
        out.append((("coop", "slot_reset"), "got kernel with panel.unroll 0; allowed: kernel with panel.unroll "
                    "1-8 (every launch then walks all panel.width slots of the ring), or host"))
    twolevel = sections["twolevel"]
    width_ok = not any(name == "width" for name, _ in value_problems(panel))
    outer_ok = not any(name == "outer" for name, _ in value_problems(twolevel))
    if driver not in TWO_LEVEL_DRIVERS:
        return out
    if twolevel.far_tcontract != "tf32" and twolevel.far_precision == "fp32" and not value_problems(twolevel):
        out.append((("twolevel", "far_tcontract"), f"got {twolevel.far_tcontract} with twolevel.far_precision "
                    f"{twolevel.far_precision}; allowed: tf32 (the default), or {' or '.join(FAR_TCONTRACTS[1:])} "
                    "with another far_precision (an fp32 far update is fp32 throughout)"))
    if (twolevel.far_tcontract in TRITON_TCONTRACTS and not value_problems(twolevel)
            and twolevel.tproduct_bk > twolevel.outer):
        out.append((("twolevel", "tproduct_bk"), f"got {twolevel.tproduct_bk} with twolevel.outer {twolevel.outer}; "
                    "allowed: at most outer (a step takes tproduct_bk of T's outer rows)"))
    if (twolevel.far_update == "cublas" and twolevel.far_precision not in CUBLAS_FAR_PRECISIONS
            and not value_problems(twolevel)):
        out.append((("twolevel", "far_precision"), f"got {twolevel.far_precision} with twolevel.far_update "
                    f"cublas; allowed: {' or '.join(CUBLAS_FAR_PRECISIONS)}, or far_update strip (a Triton "
                    "launch, which takes any of " + ", ".join(FAR_PRECISIONS) + ")"))
    if twolevel.far_update == "strip" and twolevel.first_far != "copy" and not value_problems(twolevel):
        out.append((("twolevel", "first_far"), f"got {twolevel.first_far} with twolevel.far_update strip; allowed: "
                    "copy (the default): the strip far update reads A and writes H in its own launch"))
    for name in FAR_STRIP_TILE:
        if getattr(twolevel, name) and twolevel.far_update != "strip" and not value_problems(twolevel):
            out.append((("twolevel", name), f"got {getattr(twolevel, name)} with twolevel.far_update "
                        f"{twolevel.far_update}; allowed: 0, or a value with far_update strip (it shapes that launch)"))
    if twolevel.gram != "cublas" and twolevel.block_t != "kernel" and not value_problems(twolevel):
        out.append((("twolevel", "gram"), f"got {twolevel.gram} with twolevel.block_t {twolevel.block_t}; "
                    "allowed: cublas, or block_t kernel (the torch merge takes cuBLAS's product)"))
    if twolevel.zero_fill == "gram" and twolevel.gram == "cublas" and not value_problems(twolevel):
        out.append((("twolevel", "zero_fill"), "got gram with twolevel.gram cublas; allowed: launch, or gram with "
                    "gram fp16x3 or tf32x3 (the Triton Gram product writes the zeros)"))
    if twolevel.gram_sum != "launch" and not twolevel.gram_split_rows and not value_problems(twolevel):
        out.append((("twolevel", "gram_sum"), f"got {twolevel.gram_sum} with twolevel.gram_split_rows 0; allowed: "
                    "launch, or block_t with gram_split_rows set (there are no parts to sum otherwise)"))
    for name in FIRST_FAR_TILE:
        if getattr(twolevel, name) and twolevel.first_far == "copy" and not value_problems(twolevel):
            out.append((("twolevel", name), f"got {getattr(twolevel, name)} with twolevel.first_far copy; allowed: "
                        "0, or a value with first_far direct or direct_rounded (it shapes that launch)"))
    if (not value_problems(twolevel) and not value_problems(strip) and twolevel.first_far != "copy"
            and 0 < strip.rank_rows < twolevel.first_far_bm):
        out.append((("strip", "rank_rows"), f"got {strip.rank_rows} with twolevel.first_far_bm "
                    f"{twolevel.first_far_bm}; allowed: 0 or at least first_far_bm (the direct first far "
                    "update is a rank update on those row tiles)"))
    for name in ("gram_split_rows", "gram_columns"):
        if getattr(twolevel, name) and twolevel.gram == "cublas" and not value_problems(twolevel):
            out.append((("twolevel", name), f"got {getattr(twolevel, name)} with twolevel.gram cublas; allowed: 0, "
                        "or a value with gram fp16x3 or tf32x3 (it shapes the Triton Gram's programs)"))
    if width_ok and panel.width < MIN_DOT_WIDTH:
        out.append((("panel", "width"), f"got {panel.width} with driver {driver}; allowed: at least "
                    f"{MIN_DOT_WIDTH} (the inner panels' V and T feed tensor-core products)"))
    elif width_ok and outer_ok and twolevel.outer % panel.width:
        out.append((("twolevel", "outer"), f"panel.width {panel.width} does not divide twolevel.outer "
                    f"{twolevel.outer}; allowed: an outer block that is a multiple of panel.width "
                    "(inner panels tile the outer block)"))
    return out


@dataclass(frozen=True)
class Route:
    """Shapes n in n_range and batch in batch_range (inclusive; None = unbounded) go to `driver`."""

    name: str
    n_range: tuple = (1, None)
    batch_range: tuple = (1, None)
    driver: str = knob("blocked", OneOf(DRIVERS), DRIVER_DOC)
    panel: PanelKnobs = PanelKnobs()
    strip: StripKnobs = StripKnobs()
    precision: PrecisionKnobs = PrecisionKnobs()
    twolevel: TwoLevelKnobs = TwoLevelKnobs()
    coop: CoopKnobs = CoopKnobs()
    graph: GraphKnobs = GraphKnobs()

    def __post_init__(self):
        problems = [f"{section}.{name}: {allowed}" for section in SECTIONS
                    for name, allowed in value_problems(getattr(self, section))]
        problems += [f"{'.'.join(path)}: {message}"
                     for path, message in route_problems(self.driver, self.sections(), self.n_range)]
        if OneOf(DRIVERS).problem(self.driver):
            problems.append(f"driver: {OneOf(DRIVERS).problem(self.driver)}")
        if problems:
            raise ValueError(f"route {self.name!r}: " + "; ".join(problems))

    def sections(self) -> dict:
        return {section: getattr(self, section) for section in SECTIONS}

    def covers(self, n: int, batch: int) -> bool:
        return in_range(n, self.n_range) and in_range(batch, self.batch_range)

    def knob_items(self) -> list:
        """[(YAML name, value)] of the route's ranges and knobs, in the variant files' order."""
        items = [("n", self.n_range), ("batch", self.batch_range), ("driver", self.driver)]
        for section, group in self.sections().items():
            items += [(f"{section}.{f.name}", getattr(group, f.name)) for f in fields(group)]
        return items


def in_range(value: int, bounds: tuple) -> bool:
    lo, hi = bounds
    return lo <= value and (hi is None or value <= hi)
