"""The timing engine behind `qrsub bench` (and the timing half of `qrsub sweep`).

Two variants a few percent apart cannot be told apart by timing one, then the
other: a GPU's clock drifts by more than that over a minute. So candidates are
timed in one process, round by round, each round in alternating order
(A B, B A, A B, ...): whatever drifts hits every candidate alike, and the
ratio of two candidates within one round cancels it.

Each timing is the harness's (../shared/docs/harness.md, benchmark mode):
the case's `count` inputs (seed += 42 each), every output checked once before
any timing, then per repetition: synchronize, flush L2 with a 256 MiB write,
CUDA event, `custom_kernel` on every input of the list, event, synchronize,
duration = elapsed / count. (The harness rechecks the outputs after every
repetition; we recheck the last repetition's only, so the budget goes to
timing.) Repetitions go on until every candidate's 95%
interval of the median is tight (half-width < `target` of the median) or the
case's share of the time budget is spent.

The engine (`run_case`, `run_bench`) only sees a `Timer`, so its round-robin
and stop rules are tested on the CPU with a fake timer and a fake clock;
`HarnessTimer` is the real one (CUDA only).
"""
from __future__ import annotations

import importlib.util
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

from qrsub import stats
from qrsub.harness import cases_for, harness_on_path, load_task
from qrsub.task.eval import input_count

L2_FLUSH_BYTES = 256 * 1024 * 1024

NO_GPU_MESSAGE = (
    "qrsub bench needs a CUDA GPU: without one the kernels run through the CPU "
    "or Triton's interpreter, and those timings say nothing about GPU speed.\n"
    "Run it on a machine with a GPU, or add --dry-run to see the plan here."
)


class NoGPUError(RuntimeError):
    """Raised instead of timing on a machine without CUDA."""


# --------------------------------------------------------------------- cases

def load_cases(kind: str = "benchmarks") -> list[dict]:
    """The `benchmarks` (or `tests`) list of task.yml, in its order."""
    return cases_for(load_task(), "test" if kind == "tests" else "benchmark")


def case_label(spec: dict) -> str:
    """Short name of a case, e.g. `640x512 mixed c2`."""
    return f"{spec['batch']}x{spec['n']} {spec.get('case', 'dense')} c{spec['cond']}"


# ---------------------------------------------------------------- candidates

@dataclass
class Candidate:
    label: str
    source: Path          # what the user named: a .py submission or a variant .yaml
    submission: Path      # the file that is loaded and timed

    @property
    def is_variant(self) -> bool:
        return self.source.suffix in (".yaml", ".yml")


def candidate_labels(paths: Sequence[Path]) -> list[str]:
    """File stems, made unique (`champion`, `champion#2`) when two collide."""
    labels: list[str] = []
    for p in paths:
        label, k = p.stem, 2
        while label in labels:
            label, k = f"{p.stem}#{k}", k + 1
        labels.append(label)
    return labels


def resolve_candidates(paths: Sequence[str | Path], build_dir: Path | None, build: bool = True) -> list[Candidate]:
    """Candidates from files: `.py` is timed as is, a variant is built into BUILD_DIR.

    With build=False (dry runs) variants are only named, not built.
    """
    paths = [_find(Path(p)) for p in paths]
    for p in paths:
        if p.suffix not in (".py", ".yaml", ".yml"):
            raise ValueError(f"{p}: a candidate is a submission (.py) or a variant (.yaml)")
    out = []
    for label, p in zip(candidate_labels(paths), paths):
        sub = p
        if p.suffix != ".py" and build:
            from qrsub.build import build_variant

            sub = Path(build_dir) / f"{label.replace('#', '_')}.py"
            try:
                sub.write_text(build_variant(str(p)))
            except Exception as exc:   # VariantError / BuildError: their text names file, line and fix
                raise ValueError(f"{p}: cannot build this variant:\n{exc}") from None
        out.append(Candidate(label, p, sub))
    return out


def _find(path: Path) -> Path:
    """A file as given, else a bare variant name (`champion` -> variants/champion.yaml)."""
    if path.is_file():
        return path
    try:
        from qrsub.variant import find_variant

        return find_variant(path)
    except Exception:
        raise FileNotFoundError(f"{path}: no such file or variant") from None


def load_submission(path: Path, module_name: str):
    """Import a submission file under MODULE_NAME, with the harness's `task` importable."""
    harness_on_path()
    # a dotted or dashed name would read as a submodule; Triton and dataclasses look modules up by name
    module_name = re.sub(r"\W", "_", module_name)
    stamp = (str(Path(path).resolve()), Path(path).stat().st_mtime_ns)
    loaded = sys.modules.get(module_name)
    if loaded is not None and getattr(loaded, "_qrsub_loaded_from", None) == stamp:
        return loaded   # e.g. BASE in a sweep worker: one module, its caches kept across jobs
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    module = importlib.util.module_from_spec(spec)
    module._qrsub_loaded_from = stamp
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "custom_kernel", None)):
        raise AttributeError(f"{path}: defines no custom_kernel(data)")
    return module


# -------------------------------------------------------------------- engine

class Timer(Protocol):
    """What the engine needs from whatever runs the kernels."""

    def prepare(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        """Set the case up for the ACTIVE candidates; return {candidate: error} for those failing the check."""

    def time(self, cand: int) -> float:
        """One repetition of candidate CAND: seconds per call."""

    def finish(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        """Recheck the last outputs and free the case; return {candidate: error}."""


@dataclass(frozen=True)
class StopRule:
    """When a case has been timed enough.

    tight: every candidate has >= min_reps samples and its median's 95%
    interval has a half-width under `target` of the median.
    budget: the case's time is spent (after at least floor_reps rounds, as the
    harness takes at least 3). max-reps: a cap, so a noisy case ends.
    """

    target: float = 0.01
    min_reps: int = 10
    floor_reps: int = 3
    max_reps: int = 1000

    def reason(self, samples: dict[int, list[float]], elapsed: float, budget: float) -> str | None:
        reps = min((len(s) for s in samples.values()), default=0)
        if not samples:
            return "no candidate"
        if reps >= self.max_reps:
            return "max-reps"
        if reps >= self.min_reps and all(
                stats.median_interval(s).rel_half_width < self.target for s in samples.values()):
            return "tight"
        if reps >= self.floor_reps and elapsed >= budget:
            return "budget"
        return None


def round_order(r: int, active: Sequence[int]) -> list[int]:
    """Candidates of round R: in order on even rounds, reversed on odd (ABBA...)."""
    return list(active) if r % 2 == 0 else list(reversed(active))


@dataclass
class CaseRun:
    spec: dict
    samples: dict[int, list[float]] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    rounds: int = 0
    elapsed: float = 0.0
    reason: str = ""


# on_round(case position, rounds so far, seconds spent on the case, the case's budget)
RoundHook = Callable[[int, int, float, float], None]


def run_case(timer: Timer, spec: dict, n_cands: int, stop: StopRule, budget: float,
             clock: Callable[[], float] = time.monotonic,
             on_round: Callable[[int, float], None] | None = None) -> CaseRun:
    """Time one case: check, then rounds in ABBA order until STOP says enough."""
    run = CaseRun(spec)
    start = clock()
    run.failures.update(timer.prepare(spec, list(range(n_cands))))
    active = [i for i in range(n_cands) if i not in run.failures]
    run.samples = {i: [] for i in active}
    while active:
        for i in round_order(run.rounds, active):
            try:
                run.samples[i].append(timer.time(i))
                run.order.append(i)
            except Exception as exc:  # a kernel that dies mid-timing fails this case only
                run.failures[i] = error_text(exc)
        active = [i for i in active if i not in run.failures]
        # a candidate that failed mid-case loses its samples: ratios need whole rounds
        run.samples = {i: run.samples[i] for i in active}
        run.rounds += 1
        run.elapsed = clock() - start
        if on_round:
            on_round(run.rounds, run.elapsed)
        run.reason = stop.reason(run.samples, run.elapsed, budget) or ""
        if run.reason:
            break
    run.failures.update(timer.finish(spec, active))
    for i in run.failures:
        run.samples.pop(i, None)
    run.elapsed = clock() - start
    run.reason = run.reason or "no candidate"
    return run


def run_bench(timer: Timer, specs: Sequence[dict], n_cands: int, stop: StopRule, budget: float,
              clock: Callable[[], float] = time.monotonic, on_round: RoundHook | None = None) -> list[CaseRun]:
    """Time every case in turn; a case's budget is what is left, shared among the cases left.

    So a case that gets tight early hands its unused time to the ones after it.
    """
    start = clock()
    runs = []
    for pos, spec in enumerate(specs):
        left = budget - (clock() - start)
        share = max(0.0, left) / (len(specs) - pos)
        hook = (lambda r, e, pos=pos, share=share: on_round(pos, r, e, share)) if on_round else None
        runs.append(run_case(timer, spec, n_cands, stop, share, clock, hook))
    return runs


def error_text(exc: BaseException) -> str:
    """The exception's last line, with the submission's file:line when there is one."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


# ----------------------------------------------------------------- the GPU

def require_gpu() -> None:
    """Refuse to time without CUDA (see NO_GPU_MESSAGE)."""
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError(NO_GPU_MESSAGE)


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "none (CPU only)"


class HarnessTimer:
    """Times submissions on the GPU exactly as the harness's benchmark mode does."""

    def __init__(self, submissions: Sequence[Path], tag: str = "bench", allow_cpu: bool = False):
        """ALLOW_CPU is for tests of this class only: wall-clock timings, no meaning."""
        import torch

        if not allow_cpu:
            require_gpu()
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.kernels = []
        self.load_errors: dict[int, str] = {}
        for i, path in enumerate(submissions):
            try:
                module = load_submission(Path(path), f"_qrsub_{tag}_{i}_{Path(path).stem}")
                self.kernels.append(module.custom_kernel)
            except Exception as exc:  # reported per case as a failure, never timed
                self.kernels.append(None)
                self.load_errors[i] = f"import failed: {error_text(exc)}"
        harness_on_path()
        reference = importlib.import_module("reference")  # the harness's own generator and checker
        self.generate_input = reference.generate_input
        self.check = reference.check_implementation
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda" if self.cuda else "cpu")
        self.inputs: dict[int, list] = {}
        self.outputs: dict[int, list] = {}

    def prepare(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        count = input_count(spec["batch"], spec["n"])
        seed, base = spec["seed"], []
        for _ in range(count):
            seed += 42   # the harness bumps the seed before each input
            base.append(self.generate_input(spec["batch"], spec["n"], spec["cond"], seed, spec.get("case", "dense")))
        failures = {}
        for i in active:
            if i in self.load_errors:
                failures[i] = self.load_errors[i]
                continue
            # each candidate gets its own inputs: one that writes into them cannot skew another
            self.inputs[i] = [x.clone() for x in base]
            try:
                outs = [self.kernels[i](x.clone()) for x in self.inputs[i]]
                self._sync()
                problem = self._check(self.inputs[i], outs)
                if problem is None:
                    self.time(i)   # warm-up repetition, discarded (compiles, fills caches)
                    problem = self._check(self.inputs[i], self.outputs[i])
            except Exception as exc:
                problem = error_text(exc)
            if problem:
                failures[i] = problem
                self._drop(i)
        return failures

    def time(self, cand: int) -> float:
        kernel, inputs = self.kernels[cand], self.inputs[cand]
        if not self.cuda:   # tests only (allow_cpu)
            self.flush.zero_()
            t0 = time.perf_counter()
            self.outputs[cand] = [kernel(x) for x in inputs]
            return (time.perf_counter() - t0) / len(inputs)
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        self._sync()
        self.flush.zero_()          # L2 flush between the sync and the start event, as the harness
        start.record()
        outs = [kernel(x) for x in inputs]
        end.record()
        self._sync()
        self.outputs[cand] = outs
        return start.elapsed_time(end) / 1000.0 / len(inputs)

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def finish(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        """Recheck the last repetition's outputs (the harness rechecks every one)."""
        failures = {}
        for i in active:
            if i in self.outputs:
                problem = self._check(self.inputs[i], self.outputs[i])
                if problem:
                    failures[i] = f"recheck after timing: {problem}"
        for i in list(self.inputs):
            self._drop(i)
        return failures

    def _check(self, inputs, outputs) -> str | None:
        for k, (x, out) in enumerate(zip(inputs, outputs)):
            ok, message = self.check(x, out)
            if not ok:
                return f"input {k}: {message}"
        return None

    def _drop(self, i: int) -> None:
        self.inputs.pop(i, None)
        self.outputs.pop(i, None)


# ------------------------------------------------------------------- summary

def summarize(runs: Sequence[CaseRun], labels: Sequence[str], **meta) -> dict:
    """The JSON-ready result: per case and candidate the median, interval and
    ratio to the first candidate; per candidate the geomean ratio."""
    cases = [_case_summary(run, labels) for run in runs]
    return {
        **meta,
        "candidates": list(labels),
        "cases": cases,
        "geomean": [_geomean_summary(runs, labels, j) for j in range(len(labels))],
    }


def _case_summary(run: CaseRun, labels: Sequence[str]) -> dict:
    results = []
    ref = run.samples.get(0)
    for j, label in enumerate(labels):
        entry: dict = {"candidate": label}
        if j in run.failures:
            entry.update(status="fail", error=run.failures[j])
        elif j in run.samples and run.samples[j]:
            med = stats.median_interval(run.samples[j])
            entry.update(status="ok", reps=len(run.samples[j]), median_us=med.value * 1e6,
                         lo_us=med.lo * 1e6, hi_us=med.hi * 1e6, level=med.level,
                         samples_s=list(run.samples[j]))
            if j > 0 and ref:
                r = stats.ratio(ref, run.samples[j])
                entry.update(ratio=r.to_dict(), verdict=stats.verdict(r))
        else:
            entry.update(status="skipped")
        results.append(entry)
    return {"spec": run.spec, "label": case_label(run.spec), "rounds": run.rounds,
            "elapsed_s": run.elapsed, "stop": run.reason, "results": results}


def _geomean_summary(runs: Sequence[CaseRun], labels: Sequence[str], j: int) -> dict:
    """Geomean of candidate J's medians, and of its ratios to candidate 0, over
    the cases where both were timed; `complete` says whether that is every case
    (a candidate failing a case would fail on the leaderboard too)."""
    timed = [run for run in runs if run.samples.get(j)]
    both = [run for run in timed if run.samples.get(0)]
    entry: dict = {"candidate": labels[j], "cases": len(timed), "complete": len(timed) == len(runs)}
    if timed:
        entry["geomean_us"] = stats.geomean([stats.median(run.samples[j]) for run in timed]) * 1e6
    if j > 0 and both:
        r = stats.geomean_ratio([(run.samples[0], run.samples[j]) for run in both])
        entry.update(ratio=r.to_dict(), verdict=stats.verdict(r), ratio_cases=len(both))
    return entry


# ------------------------------------------------------------------ rendering

def _fmt_us(x: float) -> str:
    return f"{x:,.1f}" if x >= 100 else f"{x:.2f}"


def _fmt_ratio(r: dict) -> str:
    return f"{r['value']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}]"


_VERDICT_STYLE = {stats.FASTER: "green", stats.SLOWER: "red", stats.NOISE: "dim"}


def render(summary: dict, console=None) -> None:
    """Print the per-case table, then the geomean table (rich)."""
    from qrsub.console import make_console
    from rich.table import Table

    console = console or make_console()
    labels = summary["candidates"]
    table = Table(title=f"qrsub bench: times per call in µs, ratio = candidate / {labels[0]}")
    for col in ("case", "candidate", "median µs", "95% interval µs", "ratio [95%]", "verdict", "reps", "stop"):
        table.add_column(col, justify="right" if col in ("median µs", "reps") else "left")
    for case in summary["cases"]:
        for k, res in enumerate(case["results"]):
            first = (case["label"], ) if k == 0 else ("", )
            stop = case["stop"] if k == 0 else ""
            if res["status"] != "ok":
                msg = res.get("error", "not timed")
                table.add_row(*first, res["candidate"], "[red]FAIL[/]", msg[:80], "", "", "", stop)
                continue
            ratio = _fmt_ratio(res["ratio"]) if "ratio" in res else ("—" if k == 0 else "")
            verdict = res.get("verdict", "")
            vstyle = _VERDICT_STYLE.get(verdict, "")
            table.add_row(*first, res["candidate"], _fmt_us(res["median_us"]),
                          f"[{_fmt_us(res['lo_us'])}, {_fmt_us(res['hi_us'])}]", ratio,
                          f"[{vstyle}]{verdict}[/]" if vstyle else verdict, str(res["reps"]), stop)
        table.add_section()
    console.print(table)

    gm = Table(title="geometric mean over cases (the leaderboard's score)")
    for col in ("candidate", "geomean µs", f"ratio to {labels[0]} [95%]", "verdict", "cases"):
        gm.add_column(col)
    for g in summary["geomean"]:
        ratio = _fmt_ratio(g["ratio"]) if "ratio" in g else "—"
        verdict = g.get("verdict", "")
        vstyle = _VERDICT_STYLE.get(verdict, "")
        cases = f"{g['cases']}/{len(summary['cases'])}" + ("" if g["complete"] else " (incomplete)")
        gm.add_row(g["candidate"], _fmt_us(g["geomean_us"]) if "geomean_us" in g else "—", ratio,
                   f"[{vstyle}]{verdict}[/]" if vstyle else verdict, cases)
    console.print(gm)
    for line in verdict_lines(summary):
        console.print(line)


def verdict_lines(summary: dict) -> list[str]:
    """One sentence per candidate after the first: is it really faster or slower?"""
    ref = summary["candidates"][0]
    lines = []
    for g in summary["geomean"][1:]:
        if "ratio" not in g:
            lines.append(f"{g['candidate']}: no case timed alongside {ref}")
            continue
        pct = (g["ratio"]["value"] - 1) * 100
        real = [c["label"] for c in summary["cases"] for r in c["results"]
                if r["candidate"] == g["candidate"] and r.get("verdict") in (stats.FASTER, stats.SLOWER)]
        what = {stats.FASTER: "really faster than", stats.SLOWER: "really slower than",
                stats.NOISE: "within noise of"}[g["verdict"]]
        tail = f"; real per-case differences: {', '.join(real)}" if real else "; no per-case difference is real"
        note = "" if g["complete"] else " (not every case timed)"
        lines.append(f"{g['candidate']} is {what} {ref}: geomean {pct:+.2f}%{note}{tail}")
    return lines


def plot(summary: dict, path: str | Path) -> None:
    """Per-case ratio bars with their 95% intervals, the geomean last (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = summary["candidates"]
    others = labels[1:] or labels[:1]
    xlabels = [c["label"] for c in summary["cases"]] + ["geomean"]
    width = 0.8 / len(others)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(xlabels) * max(1, len(others)) ** 0.5), 4.5))
    for k, name in enumerate(others):
        vals, lows, highs = [], [], []
        for case in summary["cases"]:
            res = next((r for r in case["results"] if r["candidate"] == name), {})
            _append_ratio(res.get("ratio"), vals, lows, highs)
        g = next((g for g in summary["geomean"] if g["candidate"] == name), {})
        _append_ratio(g.get("ratio"), vals, lows, highs)
        xs = [i + (k - (len(others) - 1) / 2) * width for i in range(len(xlabels))]
        ax.bar(xs, [v - 1 for v in vals], width, bottom=1, yerr=[lows, highs], capsize=3, label=name)
        for x, v in zip(xs, vals):
            if math.isnan(v):   # failed or not timed: say so where the bar would be
                ax.annotate("fail", (x, 1.0), ha="center", va="bottom", fontsize=7, color="red", rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8)
    lo, hi = ax.get_ylim()
    pad = 0.1 * max(hi - lo, 0.01)
    ax.set_ylim(min(lo, 1.0) - pad, max(hi, 1.0) + pad)
    ax.axvline(len(xlabels) - 1.5, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xlim(-0.6, len(xlabels) - 0.4)
    ax.set_xticks(range(len(xlabels)))
    ax.set_xticklabels(xlabels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(f"time / {labels[0]}  (below 1 is faster)")
    ax.set_title(f"qrsub bench: ratio to {labels[0]}, 95% intervals")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), format="png", dpi=120)
    plt.close(fig)


def _append_ratio(r: dict | None, vals: list, lows: list, highs: list) -> None:
    """A bar for ratio R; a failed or untimed entry is drawn as nothing (NaN)."""
    if r is None:
        vals.append(math.nan), lows.append(0.0), highs.append(0.0)
        return
    vals.append(r["value"]), lows.append(r["value"] - r["lo"]), highs.append(r["hi"] - r["value"])


# ------------------------------------------------------------------- planning

def describe_plan(candidates: Sequence[Candidate], specs: Sequence[dict], indices: Sequence[int],
                  budget: float, stop: StopRule) -> list[str]:
    """What a run would do, as lines of text (for --dry-run)."""
    lines = [f"device: {device_name()}"]
    lines.append(f"candidates ({len(candidates)}), ratios relative to the first:")
    for c in candidates:
        how = "variant, built first" if c.is_variant else "submission file"
        lines.append(f"  {c.label:<24} {c.source}  ({how})")
    lines.append(f"cases ({len(indices)}), budget {budget:g} s shared among them "
                 f"(~{budget / max(1, len(indices)):.1f} s each, unused time passes to later cases):")
    for i, spec in zip(indices, specs):
        count = input_count(spec["batch"], spec["n"])
        mib = count * spec["batch"] * spec["n"] ** 2 * 4 / 2 ** 20
        lines.append(f"  [{i:>2}] {case_label(spec):<22} seed {spec['seed']:<7} {count:>2} inputs/rep ({mib:,.0f} MiB)")
    order = " | ".join(" ".join(chr(65 + i) if i < 26 else str(i) for i in round_order(r, range(len(candidates))))
                       for r in range(4))
    lines.append(f"per case: check every output, 1 warm-up repetition, then rounds {order} | ...")
    lines.append(f"stop when every median's 95% interval is within ±{stop.target:.1%} "
                 f"(>= {stop.min_reps} reps), or the case's budget is spent (>= {stop.floor_reps} reps), "
                 f"or {stop.max_reps} reps")
    return lines
