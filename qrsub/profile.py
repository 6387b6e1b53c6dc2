"""`qrsub profile`'s engine: where a submission's GPU time goes, kernel group by kernel group.

Per benchmark case, on the GPU (`profile_case`): bench's HarnessTimer loads the
submission, makes the case's inputs with the harness's own generator, runs
`custom_kernel` once on each (compile, graph capture), checks the outputs with
the harness's checker and refuses a route that fell back to torch.geqrf. Then
`capture_calls` times N calls with CUDA events (the wall time, without the
profiler's own cost) and runs N more under torch.profiler with CUDA activity.

The rest is pure and runs anywhere: `device_events` reads the profiler's trace
(kernels, memcpys and memsets with their start and duration), `group_of` names
a kernel's group from GROUPS, and `summarize_case` divides everything by N:
time, launches and share per group, the raw rows per kernel name, the GPU's
busy time (the union of its activity) and the idle gap between that and the
wall time (launch overhead, graph replay, host work).

GROUPS is the one table of kernel names. Our Triton kernels are named exactly
(tests/test_profile.py checks that every @triton.jit function that kernels/
launches is in it, and that it names no other); library kernels by patterns
in their names. A name no group claims lands in `other`, listed by its raw name:
nothing is dropped.
"""
from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from qrsub import fallbacks
from qrsub.bench.engine import error_text
from qrsub.bench.report import case_label

OTHER = "other"
# The profiler trace's categories of GPU activity -> our kinds.
DEVICE_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


@dataclass(frozen=True)
class KernelGroup:
    """A named group of GPU activities: our Triton kernels by exact name, or library kernels
    whose names match PATTERN (a regex, searched, case-insensitive)."""

    name: str
    what: str
    kernels: tuple[str, ...] = ()
    pattern: str = ""

    def __post_init__(self):
        if bool(self.kernels) == bool(self.pattern):
            raise ValueError(f"kernel group {self.name!r}: give its kernels by name or a pattern, not both or neither")

    def matches(self, name: str) -> bool:
        if self.kernels:
            return any(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", name) for k in self.kernels)
        return re.search(self.pattern, name, re.IGNORECASE) is not None

    @property
    def rule(self) -> str:
        """What the group matches, as a line of text."""
        return ", ".join(self.kernels) if self.kernels else f"/{self.pattern}/i"


# First match wins: our kernels, then the GEMMs from the most to the least specific name,
# then copies before elementwise (torch's copy kernels are elementwise kernels too).
GROUPS: tuple[KernelGroup, ...] = (
    KernelGroup("panel", "one program per matrix factors a panel (kernels/panel.py)",
                kernels=("householder_panel_kernel",)),
    KernelGroup("coop panel", "several programs per matrix factor a tall panel (kernels/coop.py)",
                kernels=("coop_panel_kernel",)),
    KernelGroup("TSQR panel", "each program factors its slice of a tall panel, a second launch combines "
                "them, a third writes its rows (kernels/tsqr.py, coop.exchange: tsqr)",
                kernels=("tsqr_local_kernel", "tsqr_combine_kernel", "tsqr_apply_kernel")),
    KernelGroup("warp QR", "one warp factors a whole matrix of n <= 32, a column a lane (kernels/warp.py, "
                "driver: warp)", kernels=("warp_qr_kernel",)),
    KernelGroup("strip", "the trailing update by a panel's reflectors (kernels/strip.py; fused_strip_kernel: "
                "strip.fuse_next's pass that also projects the next panel's)",
                kernels=("trailing_strip_kernel", "project_split_kernel", "apply_split_kernel",
                         "fused_strip_kernel")),
    KernelGroup("block T", "a two-level block's T in one launch (kernels/wy.py, twolevel.block_t: kernel)",
                kernels=("block_t_kernel",)),
    KernelGroup("Gram", "a two-level block's Y^T Y on tensor cores (kernels/wy.py, twolevel.gram)",
                kernels=("gram_kernel",)),
    KernelGroup("T product", "the far update's T^T W on tensor cores (kernels/tproduct.py, "
                "twolevel.far_tcontract: tf32x3 or fp16x3)", kernels=("t_product_kernel",)),
    KernelGroup("rank update", "C - Y W with W given (kernels/strip.py): the first block's far update from "
                "A into H (twolevel.first_far: direct, direct_rounded; its tf32 operands rounded by "
                "kernels/precision.py), or the next panel's columns before it is factored (strip.fuse_next)",
                kernels=("rank_update_kernel", "round_tf32_kernel")),
    KernelGroup("GEMM tf32", "cuBLAS/CUTLASS GEMMs on tensor cores in tf32 (the name says tf32, "
                "or CUTLASS's s1688gemm)", pattern=r"tf32|s1688gemm"),
    KernelGroup("GEMM fp32 SIMT", "cuBLAS GEMMs and GEMVs in fp32 on the CUDA cores (ffma, sgemm, simt, "
                "gemv in the name)", pattern=r"ffma|sgemm|simt|gemv|gemmSN|gemmk1"),
    KernelGroup("GEMM", "other cuBLAS/CUTLASS GEMMs, whose name does not say the precision (nvjet, xmma, "
                "cutlass, split-K reduce)", pattern=r"gemm|nvjet|xmma|cutlass|splitKreduce"),
    KernelGroup("copies", "device memcpys and memsets (clone, copy_) and torch's copy kernels "
                "(.contiguous, cat)", pattern=r"^memcpy|^memset|direct_copy_kernel|CatArrayBatchedCopy"),
    KernelGroup("elementwise", "torch's elementwise and fill kernels (zero_, arithmetic, where)",
                pattern=r"elementwise|\bfill"),
)


def group_of(name: str) -> str:
    """The group of a GPU activity named NAME: the first of GROUPS that matches, else OTHER."""
    return next((g.name for g in GROUPS if g.matches(name)), OTHER)


def groups_table() -> list[dict]:
    """GROUPS as JSON-ready rows, OTHER last (what --json and --dry-run show of the grouping)."""
    return [{"group": g.name, "matches": g.rule, "what": g.what} for g in GROUPS] + [
        {"group": OTHER, "matches": "anything else", "what": "every other GPU activity, by its raw name"}]


# ------------------------------------------------------------------ events

@dataclass(frozen=True)
class DeviceEvent:
    """One GPU activity of the trace: a kernel, a memcpy or a memset (times in µs)."""

    name: str
    kind: str
    start_us: float
    dur_us: float


def device_events(trace: dict) -> list[DeviceEvent]:
    """The GPU activities of a torch.profiler chrome trace (its other events are host-side)."""
    events = []
    for e in trace.get("traceEvents", []):
        kind = DEVICE_KINDS.get(e.get("cat"))
        if kind and e.get("ph") == "X":
            events.append(DeviceEvent(str(e["name"]), kind, float(e["ts"]), float(e.get("dur", 0.0))))
    return events


def busy_time(events: Sequence[DeviceEvent]) -> float:
    """µs during which the GPU ran at least one of EVENTS (overlapping activities count once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted((e.start_us, e.start_us + e.dur_us) for e in events):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def summarize_case(events: Sequence[DeviceEvent], calls: int, wall_us: float, profiled_wall_us: float) -> dict:
    """Every number of one case per call (EVENTS are those of CALLS calls; the wall times are
    already per call): kernel time and launches (every kernel, memcpy and memset), per group
    (with its share of the kernel time) and per kernel name, the GPU's busy time and the idle
    gap to the wall time."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, not {calls}")
    by_name: dict[str, dict] = {}
    for e in events:
        row = by_name.setdefault(e.name, {"name": e.name, "group": group_of(e.name), "kind": e.kind,
                                          "total_us": 0.0, "count": 0})
        row["total_us"] += e.dur_us
        row["count"] += 1
    kernels = sorted(({"name": r["name"], "group": r["group"], "kind": r["kind"],
                       "us": r["total_us"] / calls, "launches": r["count"] / calls,
                       "us_per_launch": r["total_us"] / r["count"]} for r in by_name.values()),
                     key=lambda r: (-r["us"], r["name"]))
    kernel_us = sum(r["us"] for r in kernels)
    groups: dict[str, dict] = {}
    for r in kernels:
        g = groups.setdefault(r["group"], {"group": r["group"], "us": 0.0, "launches": 0.0, "kernels": []})
        g["us"] += r["us"]
        g["launches"] += r["launches"]
        g["kernels"].append(r["name"])
    for g in groups.values():
        g["share_pct"] = 100.0 * g["us"] / kernel_us if kernel_us > 0 else 0.0
    busy_us = busy_time(events) / calls
    return {
        "calls": calls,
        "wall_us": wall_us,
        "profiled_wall_us": profiled_wall_us,
        "kernel_us": kernel_us,
        "busy_us": busy_us,
        "idle_us": wall_us - busy_us,
        "launches": len(events) / calls,
        "groups": sorted(groups.values(), key=lambda g: (-g["us"], g["group"])),
        "kernels": kernels,
    }


# ------------------------------------------------------------------ text

def fmt_us(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.1f}"


def fmt_count(x: float) -> str:
    """A per-call count: whole when it is (every call launched the same), else one decimal."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def summary_line(case: dict) -> str:
    """One line for a profiled case: kernel time and launches, busy, wall and idle per call."""
    idle_pct = 100.0 * case["idle_us"] / case["wall_us"] if case["wall_us"] > 0 else 0.0
    return (f"[{case['index']}] {case['label']}, {case['calls']} call(s): kernels {fmt_us(case['kernel_us'])} µs/call in "
            f"{fmt_count(case['launches'])} launches; GPU busy {fmt_us(case['busy_us'])} µs; "
            f"wall {fmt_us(case['wall_us'])} µs/call ({fmt_us(case['profiled_wall_us'])} under the profiler); "
            f"idle {fmt_us(case['idle_us'])} µs ({idle_pct:.1f}% of wall: launch gaps, graph replay, host work)")


def describe_plan(source: Path, indices: Sequence[int], specs: Sequence[dict], calls: int) -> list[str]:
    """What a run would do, as lines of text (for --dry-run)."""
    from qrsub.bench.timer import device_name
    from qrsub.build import is_variant
    from qrsub.task.eval import input_count

    how = "variant, built first" if is_variant(Path(source)) else "submission file"
    lines = [f"device: {device_name()}", f"candidate: {source}  ({how})", f"cases ({len(indices)}):"]
    for i, spec in zip(indices, specs):
        lines.append(f"  [{i:>2}] {case_label(spec):<22} seed {spec['seed']:<7} "
                     f"{input_count(spec['batch'], spec['n']):>2} input(s)")
    lines += [
        "per case: custom_kernel once on each input (compile, graph capture), the harness's check "
        "(a failing case is reported, not profiled), a route that fell back to torch.geqrf refused;",
        f"then {calls} calls timed with CUDA events (the wall time), {calls} more under torch.profiler "
        f"(CUDA activity); every number is per call (divided by {calls})",
        "kernel groups (the first that matches a kernel's name):",
    ]
    lines += [f"  {row['group']:<15} {row['matches']}" for row in groups_table()]
    return lines


# ------------------------------------------------------------------ on the GPU

@dataclass
class Capture:
    """What one case's profiled calls left: their GPU activities and the wall times per call."""

    events: list[DeviceEvent] = field(default_factory=list)
    wall_us: float = 0.0            # CUDA events around the calls without the profiler, per call
    profiled_wall_us: float = 0.0   # the same around the profiled calls


def _timed_calls(kernel: Callable, inputs: Sequence) -> float:
    """µs per call of KERNEL on each of INPUTS: CUDA events around the calls, over their count."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    outputs = [kernel(x) for x in inputs]   # kept until the end, as the harness keeps them
    end.record()
    torch.cuda.synchronize()
    del outputs
    return start.elapsed_time(end) * 1000.0 / len(inputs)


# Untimed passes over the profiled inputs first: a graph.mode inplace route's first call on a
# tensor runs eagerly and its second captures, one-offs that the harness's ranked repetitions
# spread thin and that would otherwise be most of a small case's wall time here.
SETTLE_PASSES = 2


def settle(kernel: Callable, xs: Sequence) -> None:
    """SETTLE_PASSES untimed passes of KERNEL over XS, each pass's outputs kept until it ends."""
    for _ in range(SETTLE_PASSES):
        outputs = [kernel(x) for x in xs]
        del outputs


def capture_calls(kernel: Callable, inputs: Sequence, calls: int) -> Capture:
    """CALLS calls of KERNEL (on INPUTS in turn) timed, then CALLS more under torch.profiler,
    both after settle()."""
    from torch.profiler import ProfilerActivity, profile

    xs = [inputs[k % len(inputs)] for k in range(calls)]
    settle(kernel, xs)
    wall_us = _timed_calls(kernel, xs)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        profiled_wall_us = _timed_calls(kernel, xs)
    with tempfile.TemporaryDirectory(prefix="qrsub-profile-") as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return Capture(device_events(trace), wall_us, profiled_wall_us)


NO_EVENTS = ("the profiler recorded no GPU activity in {calls} call(s): torch.profiler's CUDA activity "
             "comes from CUPTI, which torch's CUDA build ships; see whether this machine's torch records "
             "any kernel: `with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) "
             "as p: torch.ones(8, device='cuda').add_(1)`, then `print(p.key_averages())`")


def profile_case(timer, index: int, spec: dict, calls: int) -> dict:
    """Case INDEX (SPEC) of the submission TIMER (a bench HarnessTimer of one candidate) loaded:
    checked, then profiled. A failing check, a crash or a fallback is the case's error."""
    entry = {"index": index, "label": case_label(spec), "spec": dict(spec)}
    problem = timer.prepare(spec, [0]).get(0)
    if problem:
        return {**entry, "status": "fail", "error": problem}
    module = timer.modules[0]
    try:
        cap = capture_calls(module.custom_kernel, timer.inputs[0], calls)
    except Exception as exc:  # the submission's own code failed mid-profile: this case only
        timer.finish(spec, [0])
        return {**entry, "status": "fail", "error": error_text(exc)}
    problem = timer.finish(spec, [0]).get(0)
    fell = fallbacks.in_module(module)
    if fell:
        problem = f"{'; '.join(map(str, fell))} (not profiled: its kernels would be torch.geqrf's)"
    elif not problem and not cap.events:
        problem = NO_EVENTS.format(calls=calls)
    if problem:
        return {**entry, "status": "fail", "error": problem}
    return {**entry, "status": "ok", **summarize_case(cap.events, calls, cap.wall_us, cap.profiled_wall_us)}
