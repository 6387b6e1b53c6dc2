"""`qrsub sweep`: expand a knob grid over a base variant, time each point against BASE, rank.

The flow for `qrsub sweep BASE.yaml --set mid.strip.bn=32,64 --set mid.panel.num_warps=2,4`:

1. grid: every combination of the `--set` values, each written as a small
   variant file that `extends` BASE and patches the routes it names;
2. time: an `Executor` times every candidate against BASE and hands back one
   result per candidate (a bench-shaped summary, or the stage and error that
   stopped it);
3. rank by the geometric-mean ratio (`rank`), show the table, the per-case
   ratios and the plot; write the best as a variant extending BASE (only when
   it is really faster than BASE): `run_sweep`.

The executor is the only part that differs between the two sweeps:

- `LocalExecutor` (`qrsub sweep`): each candidate must first pass the test
  cases of the routes it touches (a precision change: every test case, under
  the default seeds and POPCORN_SEED 1, 2 and 3), then it is timed against
  BASE with bench's method (ABBA rounds in one process, same GPU). Candidates
  run on the worker pool of `qrsub.pool`: one worker process per GPU with
  CUDA_VISIBLE_DEVICES set to that GPU, each logging to its own file, jobs
  handed out from one queue and results merged; `run_job` is what each worker
  runs. With one GPU there is one worker and candidates run serially;
  `--workers N` forces N workers (on one GPU they share it, which exercises
  the pool, not the timings).
- `qrsub.submit.sweep_remote.RemoteExecutor` (`qrsub sweep --remote`): every
  candidate and BASE is submitted in benchmark mode to the service's runners.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import yaml

from qrsub import stats
from qrsub.bench import engine, report
from qrsub.files import write_atomic
from qrsub.harness import cases_for, load_task
from qrsub.variant import ROUTE_KNOBS, load_variant, parse_variant

SEEDS_FOR_PRECISION = (None, 1, 2, 3)   # None: the cases' own seeds
DEFAULT_RUNNER = "qrsub.sweep:run_job"


class SweepError(ValueError):
    """A user error in a sweep's arguments; the message says what to fix."""


# ---------------------------------------------------------------------- grid

@dataclass(frozen=True)
class Axis:
    """One `--set ROUTE.KNOB=v1,v2`: a route name, the knob's YAML path, the values."""

    route: str
    path: tuple[str, ...]
    values: tuple

    @property
    def key(self) -> str:
        return ".".join((self.route, *self.path))

    @property
    def is_precision(self) -> bool:
        return self.path[0] == "precision" or self.path[0].startswith("prec")


Point = tuple[tuple[Axis, Any], ...]   # one grid point: (axis, value) per axis


def parse_value(text: str) -> Any:
    """A `--set` value: int, float, true/false, null, a YAML list, else a string.

    Words like `off` stay strings (YAML 1.1 would make them booleans; the
    variant loader does not, and neither do we).
    """
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", "~"):
        return None
    if text[:1] in "[{" or _is_number(text):
        return yaml.safe_load(text)
    return text


def _is_number(text: str) -> bool:
    try:
        float(text.replace("_", ""))
        return True
    except ValueError:
        return False


def split_values(text: str) -> list[str]:
    """Split on commas outside brackets: `2,4,[[128,2],[null,4]]` is three values."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def parse_set(text: str, routes: Sequence[str] | None = None) -> Axis:
    """`mid.strip.bn=16,32` -> Axis("mid", ("strip", "bn"), (16, 32)).

    ROUTES (the base's route names) resolve names that contain dots and give
    a "did you mean" when the route does not exist.
    """
    if "=" not in text:
        raise SweepError(f"--set {text!r}: expected ROUTE.KNOB=v1,v2,... (e.g. mid.strip.bn=16,32)")
    lhs, rhs = text.split("=", 1)
    route, path = _split_key(lhs.strip(), routes)
    raw = split_values(rhs)
    if not rhs.strip() or any(v == "" for v in raw):
        raise SweepError(f"--set {text!r}: empty value; give one or more values separated by commas")
    values = tuple(parse_value(v) for v in raw)
    if len(set(map(repr, values))) != len(values):
        raise SweepError(f"--set {text!r}: a value is repeated")
    return Axis(route, path, values)


def _split_key(lhs: str, routes: Sequence[str] | None) -> tuple[str, tuple[str, ...]]:
    if routes:
        matches = [r for r in routes if lhs.startswith(r + ".")]
        if not matches:
            import difflib

            head = lhs.split(".", 1)[0]
            close = difflib.get_close_matches(head, routes, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise SweepError(f"--set {lhs}: BASE has no route '{head}'{hint} (routes: {', '.join(routes)})")
        route = max(matches, key=len)
        rest = lhs[len(route) + 1:]
    else:
        route, _, rest = lhs.partition(".")
    if not route or not rest:
        raise SweepError(f"--set {lhs}: expected ROUTE.KNOB, e.g. mid.strip.bn or small.panel.num_warps")
    return route, tuple(rest.split("."))


def check_knob(axis: Axis) -> None:
    """Reject a knob path the variant schema does not have (with the knobs it does)."""
    known = {k.path: k for k in ROUTE_KNOBS}
    if axis.path not in known:
        import difflib

        dotted = [k.dotted for k in ROUTE_KNOBS]
        close = difflib.get_close_matches(".".join(axis.path), dotted, n=1)
        hint = f"did you mean {axis.route}.{close[0]}? " if close else ""
        raise SweepError(f"--set {axis.key}: no knob {'.'.join(axis.path)}; {hint}knobs: {', '.join(dotted)}")


def expand_grid(axes: Sequence[Axis]) -> list[Point]:
    """Every combination of the axes' values, the first axis varying slowest."""
    keys = [a.key for a in axes]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise SweepError(f"--set given twice for {', '.join(sorted(dup))}; put all values in one --set")
    return [tuple(zip(axes, combo)) for combo in itertools.product(*(a.values for a in axes))]


def point_patch(point: Point) -> list[dict]:
    """The routes section of a grid point's variant: one patch per route, by name."""
    routes: dict[str, dict] = {}
    for axis, value in point:
        node = routes.setdefault(axis.route, {"name": axis.route})
        for key in axis.path[:-1]:
            node = node.setdefault(key, {})
        node[axis.path[-1]] = value
    return list(routes.values())


def point_knobs(point: Point) -> dict[str, Any]:
    """The knobs a grid point sets, as `{"mid.strip.bn": 32, ...}` (what the ledger keeps)."""
    return {a.key: v for a, v in point}


def knobs_label(knobs: dict[str, Any]) -> str:
    """Human form: `mid.strip.bn=32 mid.panel.num_warps=4`."""
    return " ".join(f"{key}={_compact(v)}" for key, v in knobs.items())


def point_label(point: Point) -> str:
    return knobs_label(point_knobs(point))


def point_slug(point: Point) -> str:
    """File-name form: `mid.strip.bn-32_mid.panel.num_warps-4`."""
    text = "_".join(f"{a.key}-{_compact(v)}" for a, v in point)
    return "".join(c if c.isalnum() or c in "._-" else "" for c in text.replace(",", "-"))


def _compact(v: Any) -> str:
    return json.dumps(v, separators=(",", ":")) if isinstance(v, (list, dict)) else str(v).lower() if isinstance(v, bool) else str(v)


def touched_routes(point: Point) -> list[str]:
    return list(dict.fromkeys(a.route for a, _ in point))


def touches_precision(point: Point) -> bool:
    return any(a.is_precision for a, _ in point)


def variant_text(base: Path, point: Point, out_path: Path, description: str | None = None) -> str:
    """A variant file for POINT that extends BASE (path relative to OUT_PATH's folder)."""
    rel = os.path.relpath(Path(base).resolve(), Path(out_path).resolve().parent)
    doc = {
        "extends": rel,
        "description": description or f"sweep of {Path(base).stem}: {point_label(point)}",
        "routes": point_patch(point),
    }
    header = f"# Written by `qrsub sweep`: {Path(base).name} with {point_label(point)}.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


# --------------------------------------------------------------------- gating

@dataclass
class GatePlan:
    """Which test cases (indices into task.yml's `tests`) and seeds a candidate must pass."""

    cases: list[int]
    seeds: list[int | None]
    why: str


def gate_plan(point: Point, tests: Sequence[dict], base_variant) -> GatePlan:
    """All tests and four seeds for a precision change; else the tests the touched routes serve.

    Routes are those BASE takes for each test shape (the sweep changes knobs,
    never the shape ranges). When no test case lands on a touched route,
    every test case is run: never fewer than needed.
    """
    everything = list(range(len(tests)))
    if touches_precision(point):
        return GatePlan(everything, list(SEEDS_FOR_PRECISION), "precision change: every test, seeds default,1,2,3")
    routes = set(touched_routes(point))
    mine = [i for i, t in enumerate(tests) if _route_name(base_variant, t) in routes]
    if not mine:
        return GatePlan(everything, [None], f"no test lands on {', '.join(sorted(routes))}: every test")
    return GatePlan(mine, [None], f"tests routed to {', '.join(sorted(routes))}")


def _route_name(variant, spec: dict) -> str | None:
    try:
        return variant.route_for(n=spec["n"], batch=spec["batch"]).name
    except LookupError:
        return None


def run_gate(submission: Path, plan: GatePlan, log: Callable[[str], None] = print) -> tuple[bool, str]:
    """Run the gate's test cases; (passed, message of the first failure or a summary)."""
    for seed in plan.seeds:
        ok, message = _harness_gate(submission, plan.cases, seed, log)
        if not ok:
            where = "default seeds" if seed is None else f"POPCORN_SEED={seed}"
            return False, f"{where}: {message}"
    return True, f"{len(plan.cases)} test(s) x {len(plan.seeds)} seed(s) passed"


def _harness_gate(submission, indices, seed, log) -> tuple[bool, str]:
    """The harness's own test mode (eval.py in a subprocess) through qrsub.localrun:
    a kernel that crashes or corrupts CUDA state takes down the harness's process,
    not the worker that times the other candidates."""
    from qrsub.localrun import run_local

    run = run_local(str(submission), mode="test", cases=",".join(map(str, indices)), seed=seed)
    for stage in run.stages:
        for c in stage.cases:
            log(f"  test {c.index} {c.spec_text}: {c.status}")
    return local_verdict(run)


def local_verdict(run) -> tuple[bool, str]:
    """(passed, why) of a localrun.LocalRun in test mode; a route that fell back to torch.geqrf fails it."""
    if run.fallbacks:
        return False, "; ".join(map(str, run.fallbacks))
    if run.passed:
        return True, ""
    if not run.stages:
        return False, f"compile pass: {run.compile.message or 'no stage ran'}"
    stage = run.stages[0]
    for c in stage.cases:
        if not c.passed:
            return False, f"test {c.index} ({c.spec_text}): {c.error or c.message or c.status}"
    if stage.timed_out:
        return False, f"timed out after {stage.timeout_s:g} s"
    tail = stage.output_tail.strip().splitlines()
    return False, f"harness exit {stage.exit_code}: {tail[-1] if tail else 'no output'}"


# ----------------------------------------------------------------------- jobs

@dataclass
class Candidate:
    name: str
    point: Point
    variant: Path
    gate: GatePlan

    def job(self, base: Path, bench_cases: list[int], budget: float, stop: engine.StopRule,
            build_dir: Path) -> dict:
        """What a worker needs, as JSON: the files, the gate, the bench settings."""
        return {"name": self.name, "variant": str(self.variant.resolve()), "base": str(Path(base).resolve()),
                "build_dir": str(Path(build_dir).resolve()),
                "gate": {"cases": self.gate.cases, "seeds": self.gate.seeds},
                "bench": {"cases": bench_cases, "budget": budget, "target": stop.target,
                          "min_reps": stop.min_reps, "max_reps": stop.max_reps}}


_BUILT: dict[str, Path] = {}   # per worker: variant path -> built submission (BASE is built once)


def _build(variant: str, build_dir: Path) -> Path:
    if variant not in _BUILT:
        from qrsub.build import build_submission

        _BUILT[variant] = build_submission(variant, build_dir / f"{Path(variant).stem}.py").path
    return _BUILT[variant]


def run_job(job: dict, log: Callable[[str], None]) -> dict:
    """The worker's job: build, gate, then time the candidate against BASE on this GPU."""
    from qrsub.bench.timer import HarnessTimer, device_name
    from qrsub.build import BuildError

    build_dir = Path(job["build_dir"])
    result: dict[str, Any] = {"name": job["name"], "device": device_name()}
    try:
        base_sub, cand_sub = _build(job["base"], build_dir), _build(job["variant"], build_dir)
    except BuildError as exc:
        return {**result, "stage": "build", "error": str(exc)}
    log(f"gate {job['name']}: tests {job['gate']['cases']} seeds {job['gate']['seeds']}")
    ok, message = run_gate(cand_sub, GatePlan(job["gate"]["cases"], job["gate"]["seeds"], ""), log)
    result["gate"] = {"ok": ok, "message": message}
    if not ok:
        return {**result, "stage": "gate", "error": message}
    cfg = job["bench"]
    cases = cases_for(load_task(), "benchmark")
    specs = [cases[i] for i in cfg["cases"]]
    stop = engine.StopRule(target=cfg["target"], min_reps=cfg["min_reps"], max_reps=cfg["max_reps"])
    timer = HarnessTimer([base_sub, cand_sub], tag="sweep")
    hook = lambda pos, r, e, share: r % 20 == 0 and log(f"  {report.case_label(specs[pos])}: round {r}, {e:.1f}s")
    runs = engine.run_bench(timer, specs, 2, stop, cfg["budget"], on_round=hook)
    summary = report.summarize(runs, ["BASE", job["name"]], device=device_name(), case_indices=cfg["cases"])
    return {**result, "stage": "bench", "summary": summary}


# -------------------------------------------------------------------- ranking

def geomean_of(result: dict) -> dict | None:
    """The candidate's geomean entry (ratio to BASE), when it was timed."""
    summary = result.get("summary")
    if not summary:
        return None
    g = summary["geomean"][1]
    return g if "ratio" in g else None


def rank(results: Sequence[dict]) -> list[dict]:
    """Best first: candidates timed on every case by geomean ratio, then those
    that failed a case during timing, then those never timed (by name)."""
    def key(r: dict) -> tuple:
        g = geomean_of(r)
        if g is None:
            return (2, 0.0, str(r.get("name")))
        clean = g["complete"] and not summary_failures(r)
        return (0 if clean else 1, g["ratio"]["value"], str(r.get("name")))

    return sorted(results, key=key)


def summary_failures(result: dict) -> list[str]:
    """Cases where the candidate failed the check during timing."""
    summary = result.get("summary") or {}
    return [f"{c['label']}: {res['error']}" for c in summary.get("cases", []) for res in c["results"][1:]
            if res["status"] == "fail"]


def best_of(ranked: Sequence[dict]) -> dict | None:
    """The top candidate if it beats BASE on every case's geomean, else None: really
    faster (its interval below 1), or, when the spread was not measured (one
    submission each, `qrsub sweep --remote` without --repeat), its ratio below 1."""
    if not ranked:
        return None
    top = ranked[0]
    g = geomean_of(top)
    if not g or not g["complete"] or summary_failures(top):
        return None
    if g["verdict"] == stats.FASTER or (g["verdict"] == stats.UNMEASURED and g["ratio"]["value"] < 1.0):
        return top
    return None


@dataclass(frozen=True)
class TableStyle:
    """The words of the ranking table that depend on how candidates were timed."""

    title: str = "qrsub sweep: geomean time / BASE (below 1 is faster), 95% intervals"
    interval: str = "95%"
    where: str = "gpu (worker)"
    plot_note: str = "95% intervals"


def render_ranking(ranked: Sequence[dict], labels: dict[str, str], console=None, total_cases: int | None = 12,
                   style: TableStyle = TableStyle()) -> None:
    """The ranked table: geomean ratio to BASE over the timed cases with its interval,
    the implied score ratio over all TOTAL_CASES (None: the timed ones are all),
    the verdict, where it ran."""
    from qrsub.console import make_console
    from rich.markup import escape
    from rich.table import Table

    console = console or make_console()
    table = Table(title=escape(style.title))
    for col in ("#", "candidate", "knobs", f"ratio [{style.interval}]", "score ratio", "verdict",
                "real per-case wins/losses", style.where):
        table.add_column(escape(col))
    for pos, r in enumerate(ranked, 1):
        g = geomean_of(r)
        where = r.get("where", "")
        if g is None:
            table.add_row("-", r["name"], labels.get(r["name"], ""), "[red]not timed[/]", "",
                          f"{r.get('stage', '')}: {str(r.get('error', ''))[:70]}", "", where)
            continue
        cases = r["summary"]["cases"]
        verdicts = [c["results"][1].get("verdict") for c in cases]
        wins, losses = verdicts.count(stats.FASTER), verdicts.count(stats.SLOWER)
        fails = summary_failures(r)
        verdict = g["verdict"] + (f" [red]({len(fails)} case(s) failed)[/]" if fails else "")
        ratio = g["ratio"]
        score = score_ratio(g, len(cases), total_cases or len(cases))
        table.add_row(str(pos), r["name"], labels.get(r["name"], ""),
                      f"{ratio['value']:.4f} [{ratio['lo']:.4f}, {ratio['hi']:.4f}]", f"{score['value']:.4f}", verdict,
                      f"{wins}/{losses} of {len(cases)}", where)
    console.print(table)


def render_per_case(ranked: Sequence[dict], labels: dict[str, str], console=None) -> None:
    """Per case, each timed candidate's time / BASE (colored by its verdict as in `qrsub
    bench`: green really faster, red really slower), BASE's own time on top and the best of each case marked with *; candidates
    named by their knobs (LABELS) where known."""
    from qrsub.console import make_console
    from rich.table import Table

    timed = [r for r in ranked if geomean_of(r)]
    if not timed:
        return
    console = console or make_console()
    cases = [c["label"] for c in timed[0]["summary"]["cases"]]
    cells = {r["name"]: {c["label"]: c["results"][1] for c in r["summary"]["cases"]} for r in timed}
    best = {}
    for label in cases:
        ratios = [(cells[r["name"]][label]["ratio"]["value"], r["name"]) for r in timed
                  if "ratio" in cells[r["name"]].get(label, {})]
        best[label] = min(ratios)[1] if ratios else None
    table = Table(title="per case: time / BASE (* the best of the case)")
    table.add_column("candidate")
    for label in cases:
        table.add_column(label, justify="right")
    base = {c["label"]: c["results"][0] for c in timed[0]["summary"]["cases"]}
    table.add_row("BASE µs", *(f"{base[k]['median_us']:,.1f}" if "median_us" in base.get(k, {}) else "-"
                               for k in cases))
    for r in timed:
        row = []
        for label in cases:
            res = cells[r["name"]].get(label, {})
            if "ratio" not in res:
                row.append("[red]fail[/]" if res.get("status") == "fail" else "-")
                continue
            text = f"{res['ratio']['value']:.3f}" + ("*" if best[label] == r["name"] else "")
            color = report.VERDICT_STYLE.get(res.get("verdict"))
            row.append(f"[{color}]{text}[/]" if color else text)
        table.add_row(labels.get(r["name"]) or r["name"], *row)
    console.print(table)


def merged_summary(ranked: Sequence[dict]) -> dict:
    """The timed candidates' summaries as one of `qrsub bench`'s, BASE first, for its plot."""
    timed = [r for r in ranked if geomean_of(r)]
    if not timed:
        raise SweepError("no candidate was timed: nothing to plot")
    first = timed[0]["summary"]
    cases = []
    for case in first["cases"]:
        results = [case["results"][0]]
        for r in timed:
            mine = next((c for c in r["summary"]["cases"] if c["label"] == case["label"]), None)
            results.append({**(mine["results"][1] if mine else {"status": "skipped"}), "candidate": r["name"]})
        cases.append({**case, "results": results})
    geomean = [first["geomean"][0]] + [{**r["summary"]["geomean"][1], "candidate": r["name"]} for r in timed]
    return {"candidates": ["BASE"] + [r["name"] for r in timed], "cases": cases, "geomean": geomean}


def show_results(ranked: Sequence[dict], labels: dict[str, str], console, *, style: TableStyle = TableStyle(),
                 total_cases: int | None = None, plot: Path | None = None) -> None:
    """The ranking table, the per-case table and, given PLOT, `qrsub bench`'s plot of the timed candidates."""
    render_ranking(ranked, labels, console, total_cases, style)
    render_per_case(ranked, labels, console)
    if plot is not None:
        if not any(geomean_of(r) for r in ranked):
            console.print(f"no candidate was timed: no plot written to {plot}")
            return
        report.plot({**merged_summary(ranked), "interval": style.plot_note}, plot)
        console.print(f"wrote {plot}")


# ---------------------------------------------------------------- the sweep

@dataclass
class SweepPlan:
    base: Path
    axes: list[Axis]
    candidates: list[Candidate]
    run_dir: Path
    bench_cases: list[int]


def plan_sweep(base: Path, sets: Sequence[str], run_dir: Path, bench_cases: list[int] | None) -> SweepPlan:
    """Parse --set, expand the grid, name each point and plan its gate (writes nothing).

    BENCH_CASES None: the benchmark cases BASE routes to any touched route
    (the others run the same code in BASE and candidate, and only add noise);
    every case when there is none.
    """
    base_variant = load_variant(base)
    route_names = [r.name for r in base_variant.routes]
    axes = [parse_set(s, route_names) for s in sets]
    if not axes:
        raise SweepError("nothing to sweep: give at least one --set ROUTE.KNOB=v1,v2")
    for axis in axes:
        check_knob(axis)
    tests = cases_for(load_task(), "test")
    cands = []
    for point in expand_grid(axes):
        name = f"{base.stem}.{point_slug(point)}"
        cands.append(Candidate(name, point, run_dir / "variants" / f"{name}.yaml",
                               gate_plan(point, tests, base_variant)))
    if bench_cases is None:
        bench_cases = affected_cases(cases_for(load_task(), "benchmark"), {a.route for a in axes}, base_variant)
    return SweepPlan(base, axes, cands, run_dir, bench_cases)


def affected_cases(cases: Sequence[dict], routes: set[str], base_variant) -> list[int]:
    """Indices of CASES that BASE routes to one of ROUTES (all of them when none)."""
    mine = [i for i, c in enumerate(cases) if _route_name(base_variant, c) in routes]
    return mine or list(range(len(cases)))


def score_ratio(g: dict, timed: int, total: int) -> dict:
    """The leaderboard score ratio implied by a geomean ratio over TIMED of TOTAL cases,
    the untimed cases running the same code in both (ratio 1)."""
    p = timed / total
    return {k: g["ratio"][k] ** p for k in ("value", "lo", "hi")}


def emit_variants(plan: SweepPlan) -> None:
    """Write every grid point's variant file, validating it first."""
    for c in plan.candidates:
        text = variant_text(plan.base, c.point, c.variant)
        parse_variant(text, c.variant)
        write_atomic(c.variant, text)


def describe_grid(plan: SweepPlan, per_candidate: Callable[[Candidate], list[str]] = lambda c: []) -> list[str]:
    """The --dry-run text every sweep starts with: BASE, the grid, each candidate (and
    PER_CANDIDATE's lines under it)."""
    lines = [f"base: {plan.base}", f"grid: {' x '.join(f'{a.key} ({len(a.values)})' for a in plan.axes)} "
             f"= {len(plan.candidates)} candidate(s)"]
    for k, c in enumerate(plan.candidates):
        lines.append(f"  [{k:>2}] {point_label(c.point)}")
        lines += [f"       {line}" for line in per_candidate(c)]
    return lines


def best_variant_text(plan: SweepPlan, best: dict, out: Path) -> str:
    cand = next(c for c in plan.candidates if c.name == best["name"])
    g = geomean_of(best)
    desc = (f"sweep best over {plan.base.stem}: {point_label(cand.point)} "
            f"(geomean x{g['ratio']['value']:.4f} on {best.get('device', 'GPU')})")
    return variant_text(plan.base, cand.point, out, description=desc)


def write_best(plan: SweepPlan, ranked: Sequence[dict], output: Path | None, console) -> Path | None:
    """Write the best candidate (`best_of`) as a variant extending BASE; None when none beats BASE."""
    best = best_of(ranked)
    if best is None:
        console.print(f"no candidate is really faster than {plan.base.name} on the geomean: no variant written")
        return None
    cand = next(c for c in plan.candidates if c.name == best["name"])
    out = output or plan.base.parent / f"{plan.base.stem}.{point_slug(cand.point)}.yaml"
    text = best_variant_text(plan, best, out)
    parse_variant(text, out)
    existed = out.exists()
    write_atomic(out, text)
    console.print(f"best: {point_label(cand.point)} -> {'replaced' if existed else 'wrote'} {out}")
    if geomean_of(best)["verdict"] == stats.UNMEASURED:
        console.print("  its win is one submission against one: the spread was not measured; "
                      "rerun the same command with --repeat 3 to tell it from noise")
    return out


# ------------------------------------------------------------------ executors

@dataclass
class Timing:
    """What an executor hands back: one result per candidate (`rank`'s input: a
    bench-shaped `summary`, or the `stage` and `error` that stopped it), whether
    every candidate was timed as planned, notes for the user, and what goes
    into results.json besides the results."""

    results: list[dict]
    complete: bool = True
    notes: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    total_cases: int | None = None      # the leaderboard's cases, when only some were timed
    error: str | None = None            # why the executor stopped early (the sweep fails after showing what it has)


class Executor(Protocol):
    """How a sweep times its candidates against BASE: the one part in which
    `qrsub sweep` (LocalExecutor) and `qrsub sweep --remote`
    (qrsub.submit.sweep_remote.RemoteExecutor) differ."""

    style: TableStyle

    def describe(self, plan: SweepPlan) -> list[str]:
        """The --dry-run lines: the grid (`describe_grid`) and what timing it would take."""

    def check(self, plan: SweepPlan) -> None:
        """Raise (SweepError, or a click error) when it cannot run here; before anything is written."""

    def run(self, plan: SweepPlan, console) -> Timing:
        """Time every candidate of PLAN against BASE; raise SweepError before running
        anything when it cannot."""


def run_sweep(plan: SweepPlan, executor: Executor, *, output: Path | None = None, plot: Path | None = None,
              console=None) -> Timing:
    """Emit the grid's variants, time them with EXECUTOR, then rank, show, record
    (PLAN.run_dir/results.json) and write the best as a variant extending BASE."""
    from qrsub.console import make_console

    console = console or make_console()
    executor.check(plan)
    emit_variants(plan)
    timing = executor.run(plan, console)
    ranked = rank(timing.results)
    labels = {c.name: point_label(c.point) for c in plan.candidates}
    show_results(ranked, labels, console, style=executor.style, total_cases=timing.total_cases, plot=plot)
    results = plan.run_dir / "results.json"
    write_atomic(results, json.dumps({"base": str(plan.base), **timing.meta, "results": ranked}, indent=1))
    for note in timing.notes:
        console.print(note)
    console.print(f"results in {results}")
    if timing.complete:
        write_best(plan, ranked, output, console)
    else:
        console.print("not every candidate has been timed yet: no variant written")
    if timing.error:
        raise SweepError(timing.error)
    return timing


class LocalExecutor:
    """Candidates gated and timed against BASE on this machine's GPUs, one worker per device."""

    style = TableStyle()

    def __init__(self, devices: Sequence[str], budget: float, stop: engine.StopRule, runner: str = DEFAULT_RUNNER):
        self.devices = list(devices)
        self.budget = budget
        self.stop = stop
        self.runner = runner

    def describe(self, plan: SweepPlan) -> list[str]:
        """The grid with each candidate's gate, where the workers run, what is timed, the files."""
        def gate(c: Candidate) -> list[str]:
            return [f"gate: {len(c.gate.cases)} test(s) {c.gate.cases} x seeds "
                    f"{['default' if s is None else s for s in c.gate.seeds]} ({c.gate.why})"]

        lines = describe_grid(plan, gate)
        workers = (", ".join(f"worker {i} -> CUDA_VISIBLE_DEVICES={d}" for i, d in enumerate(self.devices))
                   or "none (no GPU here)")
        lines.append(f"workers: {workers}")
        cases = cases_for(load_task(), "benchmark")
        labels = ", ".join(report.case_label(cases[i]) for i in plan.bench_cases)
        lines.append(f"each survivor: timed against BASE on benchmark cases {plan.bench_cases} ({labels}), "
                     f"budget {self.budget:g} s, ABBA rounds in the worker's process")
        lines.append(f"files: {plan.run_dir}/variants/*.yaml, {plan.run_dir}/logs/worker-*.log, "
                     f"{plan.run_dir}/results.json")
        return lines

    def check(self, plan: SweepPlan) -> None:
        if not self.devices:
            from qrsub.bench.timer import no_gpu_message

            raise SweepError(no_gpu_message("qrsub sweep"))

    def run(self, plan: SweepPlan, console) -> Timing:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from qrsub import pool

        jobs = [c.job(plan.base, plan.bench_cases, self.budget, self.stop, plan.run_dir / "build")
                for c in plan.candidates]
        console.print(f"sweep: {len(jobs)} candidate(s) on {len(self.devices)} worker(s) "
                      f"(CUDA_VISIBLE_DEVICES {', '.join(self.devices)}); logs in {plan.run_dir / 'logs'}")
        start = time.monotonic()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task("candidates", total=len(jobs))

            def on_result(r: dict) -> None:
                g = geomean_of(r)
                what = f"x{g['ratio']['value']:.4f} ({g['verdict']})" if g else f"{r.get('stage')}: {r.get('error')}"
                progress.console.print(f"  {r['name']} on GPU {r['cuda_visible_devices']}: {what}")
                progress.advance(task)

            results = pool.run_pool(jobs, self.devices, plan.run_dir / "logs", runner=self.runner,
                                    on_result=on_result)
        wall = time.monotonic() - start
        for r in results:
            r["where"] = f"{r.get('cuda_visible_devices', '?')} ({r.get('worker', '?')})"
        return Timing(results, meta={"devices": self.devices, "wall_s": wall},
                      notes=[f"wall time {wall:.1f} s on {len(self.devices)} worker(s)"],
                      total_cases=len(cases_for(load_task(), "benchmark")))
