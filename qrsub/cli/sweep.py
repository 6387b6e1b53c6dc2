"""`qrsub sweep`: a knob grid over a base variant, gated, timed against BASE, ranked."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from qrsub import pool
from qrsub import sweep as sw
from qrsub.bench.engine import StopRule
from qrsub.files import write_atomic
from qrsub.harness import HarnessError, cases_for, load_task, select_cases
from qrsub.variant import VariantError, parse_variant


@click.command("sweep")
@click.argument("base", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="ROUTE.KNOB=V1,V2",
              help="A knob of one route and the values to try; repeat for a grid (every combination).")
@click.option("--cases", "selector", metavar="SEL",
              help="Benchmark cases to time (as in `qrsub bench`): indices, ranges, filters like n=512. "
                   "Default: those BASE routes to a route the grid touches.")
@click.option("--budget", type=click.FloatRange(min=0.0), default=60.0, show_default=True, metavar="S",
              help="Timing budget per candidate in seconds (candidate and BASE together).")
@click.option("--target", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.01, show_default=True, metavar="FRAC",
              help="Stop a case once both medians' 95% intervals are within ±FRAC.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Worker processes. Default: one per visible GPU. More than the GPUs: they share them.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the best candidate's variant. Default: BASE's folder, named after the winning knobs.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the grid's variants, builds, worker logs and results.json. Default: build/sweep/BASE-TIME.")
@click.option("--dry-run", is_flag=True, help="Print the grid, each candidate's gate and the workers; run nothing.")
def sweep(base, sets, selector, budget, target, workers, output, run_dir, dry_run):
    """Try every combination of knob values over BASE and rank them by speed.

    Each grid point becomes a small variant that `extends` BASE and patches
    the routes it names. Before any timing, each must pass the test cases of
    the routes it touches (a precision change: every test case, with the
    default seeds and POPCORN_SEED 1, 2, 3). Survivors are timed against
    BASE with `qrsub bench`'s method, each in one process on one GPU. The
    table ranks them by geometric-mean time / BASE (the leaderboard's score
    ratio) with 95% intervals; the best is written as a variant extending
    BASE when it is really faster.

    With several GPUs there is one worker per GPU (CUDA_VISIBLE_DEVICES set
    for each) and candidates run in parallel; with one GPU, one after another.

    \b
    Examples:
      qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --dry-run
      qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --set mid.panel.num_warps=2,4
      qrsub sweep variants/champion.yaml --set small.precision.apply=fp16,tf32x3 --cases n=176,n=352
      qrsub sweep variants/champion.yaml --set large.strip.num_stages=3,4 -o variants/champion-s3.yaml
      qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --workers 2   # 2 workers, even on 1 GPU
    """
    run_dir = run_dir or Path("build/sweep") / f"{base.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        bench_cases = select_cases(cases_for(load_task(), "benchmark"), selector) if selector else None
        if bench_cases == []:
            raise click.BadParameter(f"{selector!r} selects no benchmark case", param_hint="--cases")
        plan = sw.plan_sweep(base, sets, run_dir, bench_cases)
    except (HarnessError, sw.SweepError, VariantError) as exc:   # each message says what to fix
        raise click.ClickException(str(exc)) from None
    devices = pool.visible_devices()
    problems = _invalid_points(plan)

    if dry_run:
        n = workers or max(1, len(devices))
        assigned = pool.assign_devices(n, devices) if devices else []
        for line in sw.describe(plan, assigned, budget):
            click.echo(line)
        for name, message in problems:
            click.echo(f"invalid: {name}: {message}", err=True)
        if problems:
            raise SystemExit(1)
        return

    if problems:
        raise click.ClickException("invalid grid points (nothing was run):\n" +
                                   "\n".join(f"  {name}: {message}" for name, message in problems))
    if not devices:
        from qrsub.bench.timer import no_gpu_message

        raise click.ClickException(no_gpu_message("qrsub sweep"))
    assigned = pool.assign_devices(workers or len(devices), devices)
    _run(plan, assigned, budget, target, output)


def _invalid_points(plan: sw.SweepPlan) -> list[tuple[str, str]]:
    """Grid points whose variant the schema rejects (e.g. a BN that is no power of two)."""
    bad = []
    for c in plan.candidates:
        try:
            parse_variant(sw.variant_text(plan.base, c.point, c.variant), c.variant)
        except VariantError as exc:
            bad.append((sw.point_label(c.point), str(exc)))
    return bad


def _run(plan: sw.SweepPlan, devices: list[str], budget: float, target: float, output: Path | None) -> None:
    from qrsub.console import make_console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = make_console()
    sw.emit_variants(plan)
    stop = StopRule(target=target)
    jobs = [c.job(plan.base, plan.bench_cases, budget, stop, plan.run_dir / "build") for c in plan.candidates]
    console.print(f"sweep: {len(jobs)} candidate(s) on {len(devices)} worker(s) "
                  f"(CUDA_VISIBLE_DEVICES {', '.join(devices)}); logs in {plan.run_dir / 'logs'}")
    start = time.monotonic()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("candidates", total=len(jobs))

        def on_result(r: dict) -> None:
            g = sw.geomean_of(r)
            what = f"x{g['ratio']['value']:.4f} ({g['verdict']})" if g else f"{r.get('stage')}: {r.get('error')}"
            progress.console.print(f"  {r['name']} on GPU {r['cuda_visible_devices']}: {what}")
            progress.advance(task)

        results = pool.run_pool(jobs, devices, plan.run_dir / "logs", runner=sw.DEFAULT_RUNNER, on_result=on_result)
    wall = time.monotonic() - start
    ranked = sw.rank(results)
    labels = {c.name: sw.point_label(c.point) for c in plan.candidates}
    sw.render_ranking(ranked, labels, console, total_cases=len(cases_for(load_task(), "benchmark")))
    write_atomic(plan.run_dir / "results.json", json.dumps(
        {"base": str(plan.base), "devices": devices, "wall_s": wall, "results": ranked}, indent=1))
    console.print(f"wall time {wall:.1f} s on {len(devices)} worker(s); results in {plan.run_dir / 'results.json'}")
    _write_best(plan, ranked, output, console)


def _write_best(plan: sw.SweepPlan, ranked: list[dict], output: Path | None, console) -> None:
    best = sw.best_of(ranked)
    if best is None:
        console.print(f"no candidate is really faster than {plan.base.name} on the geomean: no variant written")
        return
    cand = next(c for c in plan.candidates if c.name == best["name"])
    out = output or plan.base.parent / f"{plan.base.stem}.{sw.point_slug(cand.point)}.yaml"
    text = sw.best_variant_text(plan, best, out)
    parse_variant(text, out)
    existed = out.exists()
    write_atomic(out, text)
    console.print(f"best: {sw.point_label(cand.point)} -> {'replaced' if existed else 'wrote'} {out}")
