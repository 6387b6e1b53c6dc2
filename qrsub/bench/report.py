"""What `qrsub bench` reports: the summary (JSON-ready), the tables, the plot, the dry-run plan."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from qrsub import stats
from qrsub.bench.engine import CaseRun, StopRule, round_order


def case_label(spec: dict) -> str:
    """Short name of a case, e.g. `640x512 mixed c2`."""
    return f"{spec['batch']}x{spec['n']} {spec.get('case', 'dense')} c{spec['cond']}"


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


def summarize_repeats(ref: Sequence[dict], cand: Sequence[dict], specs: dict, labels: Sequence[str], **meta) -> dict:
    """`summarize`'s shape for measurements that come one mean per case per run
    (the service's benchmark mode): REF and CAND hold one dict per submission,
    case key -> mean seconds; SPECS maps each case key to its spec, in case order.

    Per case, each side's median over its submissions, the range of them as the
    interval, and the ratio to REF as a `stats.range_ratio` with its
    `stats.range_verdict`. The geomean compares each submission's geometric mean
    over the cases every submission timed (the score it would have had), so its
    range is the spread of whole submissions.
    """
    cases = []
    for key, spec in specs.items():
        a = [m[key] for m in ref if key in m]
        b = [m[key] for m in cand if key in m]
        results = [_repeat_entry(labels[0], a), _repeat_entry(labels[1], b)]
        if a and b:
            r = stats.range_ratio(a, b)
            results[1].update(ratio=r.to_dict(), verdict=stats.range_verdict(r, len(a), len(b)))
        cases.append({"spec": spec, "label": spec_label(spec, key), "rounds": len(b), "results": results})
    common = [k for k in specs if all(k in m for m in (*ref, *cand))]
    scores = [[stats.geomean([m[k] for k in common]) for m in side] if common else [] for side in (ref, cand)]
    geomean = []
    for j, (side, score) in enumerate(zip((ref, cand), scores)):
        entry: dict = {"candidate": labels[j], "cases": len(common), "complete": len(common) == len(specs),
                       "runs": len(side)}
        if score:
            entry["geomean_us"] = stats.median(score) * 1e6
        geomean.append(entry)
    if all(scores):
        r = stats.range_ratio(*scores)
        geomean[1].update(ratio=r.to_dict(), verdict=stats.range_verdict(r, len(ref), len(cand)),
                          ratio_cases=len(common))
    return {**meta, "candidates": list(labels), "cases": cases, "geomean": geomean}


def _repeat_entry(label: str, values: Sequence[float]) -> dict:
    if not values:
        return {"candidate": label, "status": "skipped"}
    return {"candidate": label, "status": "ok", "reps": len(values), "median_us": stats.median(values) * 1e6,
            "lo_us": min(values) * 1e6, "hi_us": max(values) * 1e6, "samples_s": list(values)}


def spec_label(spec: dict, key: str) -> str:
    """case_label when the spec has the fields, else the service's own spec text."""
    return case_label(spec) if {"batch", "n", "cond"} <= set(spec) else key


# ------------------------------------------------------------------ rendering

def _fmt_us(x: float) -> str:
    return f"{x:,.1f}" if x >= 100 else f"{x:.2f}"


def _fmt_ratio(r: dict) -> str:
    return f"{r['value']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}]"


VERDICT_STYLE = {stats.FASTER: "green", stats.SLOWER: "red", stats.NOISE: "dim"}


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
            vstyle = VERDICT_STYLE.get(verdict, "")
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
        vstyle = VERDICT_STYLE.get(verdict, "")
        cases = f"{g['cases']}/{len(summary['cases'])}" + ("" if g["complete"] else " (incomplete)")
        gm.add_row(g["candidate"], _fmt_us(g["geomean_us"]) if "geomean_us" in g else "—", ratio,
                   f"[{vstyle}]{verdict}[/]" if vstyle else verdict, cases)
    console.print(gm)
    for line in verdict_lines(summary):
        console.print(line)
    for line in unsettled_lines(summary):
        console.print(f"[yellow]{line}[/]")


def refusals(summary: dict) -> list[str]:
    """One line per case a candidate was not timed on, with the reason (failed check, fallback, crash)."""
    return [f"  {res['candidate']} on {case['label']}: {res.get('error', 'not timed')}"
            for case in summary["cases"] for res in case["results"] if res["status"] != "ok"]


# A median whose 95% interval reaches further than this fraction of it from the median is not
# settled: the case ran out of its budget share after too few rounds to be read (or compared).
UNSETTLED = 0.10


def unsettled_lines(summary: dict) -> list[str]:
    """One warning per case and candidate whose median is not settled (UNSETTLED), naming the fix:
    the geomean and every ratio on that case carry its error."""
    lines = []
    indices = summary.get("case_indices") or range(len(summary["cases"]))
    for index, case in zip(indices, summary["cases"]):
        for res in case["results"]:
            if res["status"] != "ok":
                continue
            reach = max(res["hi_us"] - res["median_us"], res["median_us"] - res["lo_us"]) / res["median_us"]
            if reach > UNSETTLED:
                lines.append(f"warning: {case['label']}: {res['candidate']}'s median {_fmt_us(res['median_us'])} µs "
                             f"is not settled ({res['reps']} reps, its interval reaches {reach:.0%} from it); "
                             f"the geomean carries that error. Give the case more time: a larger --budget, "
                             f"or a run of its own (--cases {index}).")
    return lines


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
    """Per-case ratio bars with their intervals (95% unless SUMMARY's `interval` says
    otherwise), the geomean last (PNG)."""
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
    ax.set_title(f"qrsub bench: ratio to {labels[0]}, {summary.get('interval', '95% intervals')}")
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

def describe_plan(labels: Sequence[str], sources: Sequence[Path], specs: Sequence[dict], indices: Sequence[int],
                  budget: float, stop: StopRule) -> list[str]:
    """What a run would do, as lines of text (for --dry-run)."""
    from qrsub.bench.timer import device_name
    from qrsub.build import is_variant
    from qrsub.task.eval import input_count

    lines = [f"device: {device_name()}"]
    lines.append(f"candidates ({len(labels)}), ratios relative to the first:")
    for label, source in zip(labels, sources):
        how = "variant, built first" if is_variant(Path(source)) else "submission file"
        lines.append(f"  {label:<24} {source}  ({how})")
    lines.append(f"cases ({len(indices)}), {budget:g} s of timing shared among them "
                 f"(~{budget / max(1, len(indices)):.1f} s each, warm-ups not counted, unused time passes "
                 f"to later cases):")
    for i, spec in zip(indices, specs):
        count = input_count(spec["batch"], spec["n"])
        mib = count * spec["batch"] * spec["n"] ** 2 * 4 / 2 ** 20
        lines.append(f"  [{i:>2}] {case_label(spec):<22} seed {spec['seed']:<7} {count:>2} inputs/rep ({mib:,.0f} MiB)")
    order = " | ".join(" ".join(chr(65 + i) if i < 26 else str(i) for i in round_order(r, range(len(labels))))
                       for r in range(4))
    lines.append(f"per case: check every output, 1 warm-up repetition, then rounds {order} | ...")
    lines.append(f"stop when every median's 95% interval is within ±{stop.target:.1%} "
                 f"(>= {stop.min_reps} reps), or the case's budget is spent (>= {stop.floor_reps} reps), "
                 f"or {stop.max_reps} reps")
    return lines
