"""`qrsub sweep`: a knob grid over a base variant, gated, timed against BASE, ranked."""
from __future__ import annotations

import time
from pathlib import Path

import click

from qrsub import sweep as sw
from qrsub.harness import HarnessError, cases_for, load_task, select_cases
from qrsub.variant import VariantError, parse_variant


@click.command("sweep", epilog="""\b
Examples:
  qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --dry-run
  qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --set mid.panel.num_warps=2,4
  qrsub sweep variants/champion.yaml --set small.precision.apply=fp16,tf32x3 --cases n=176,n=352
  qrsub sweep variants/champion.yaml --set large.strip.num_stages=3,4 -o variants/champion-s3.yaml
  qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --workers 2   # 2 workers, even on 1 GPU""")
@click.argument("base", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="ROUTE.KNOB=V1,V2",
              help="A knob of one route and the values to try; repeat for a grid (every combination).")
@click.option("--cases", "selector", metavar="SEL",
              help="Benchmark cases to time (as in `qrsub bench`): indices, ranges, filters like n=512. "
                   "Default: those BASE routes to a route the grid touches.")
@click.option("--budget", type=click.FloatRange(min=0.0), default=60.0, show_default=True, metavar="S",
              help="Timing budget per candidate in seconds (candidate and BASE together).")
@click.option("--target", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.01, show_default=True,
              metavar="FRAC", help="Stop a case once both medians' 95% intervals are within ±FRAC.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Worker processes. Default: one per visible GPU. More than the GPUs: they share them.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write `qrsub bench`'s plot: per-case ratio bars of the timed candidates, the geomean last.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the best candidate's variant. Default: BASE's folder, named after the winning knobs.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the grid's variants, builds, logs and results.json. Default: build/sweep/BASE-TIME.")
@click.option("--dry-run", is_flag=True, help="Print the grid, each candidate's gate and the workers; run nothing.")
def sweep(base, sets, selector, budget, target, workers, plot_path, output, run_dir, dry_run):
    """Try every combination of knob values over BASE and rank them by speed.

    Each grid point becomes a small variant that `extends` BASE and patches
    the routes it names. The table ranks them by geometric-mean time / BASE
    (the leaderboard's score ratio); a per-case table follows. The best is
    written as a variant extending BASE when it beats BASE.

    Each candidate must first pass the test cases of the routes it touches (a
    precision change: every test case, with the default seeds and POPCORN_SEED
    1, 2, 3); survivors are timed against BASE with `qrsub bench`'s method,
    each in one process on one GPU, with 95% intervals. With several GPUs
    there is one worker per GPU (CUDA_VISIBLE_DEVICES set for each) and
    candidates run in parallel; with one GPU, one after another.
    """
    run_dir = run_dir or Path("build/sweep") / f"{base.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        bench_cases = select_cases(cases_for(load_task(), "benchmark"), selector) if selector else None
        if bench_cases == []:
            raise click.BadParameter(f"{selector!r} selects no benchmark case", param_hint="--cases")
        plan = sw.plan_sweep(base, sets, run_dir, bench_cases)
    except (HarnessError, sw.SweepError, VariantError) as exc:   # each message says what to fix
        raise click.ClickException(str(exc)) from None
    problems = _invalid_points(plan)
    executor = _local_executor(workers, budget, target)
    try:
        if dry_run:
            for line in sw.describe_grid(plan) if problems else executor.describe(plan):
                click.echo(line)
            if not problems:
                return
        elif not problems:
            sw.run_sweep(plan, executor, output=output, plot=plot_path)
            return
    except sw.SweepError as exc:
        raise click.ClickException(str(exc)) from None
    raise click.ClickException("invalid grid points (nothing was run):\n" +
                               "\n".join(f"  {name}: {message}" for name, message in problems))


def _local_executor(workers, budget, target) -> sw.LocalExecutor:
    from qrsub import pool
    from qrsub.bench.engine import StopRule

    devices = pool.visible_devices()
    assigned = pool.assign_devices(workers or len(devices), devices) if devices else []
    return sw.LocalExecutor(assigned, budget, StopRule(target=target))


def _invalid_points(plan: sw.SweepPlan) -> list[tuple[str, str]]:
    """Grid points whose variant the schema rejects (e.g. a BN that is no power of two)."""
    bad = []
    for c in plan.candidates:
        try:
            parse_variant(sw.variant_text(plan.base, c.point, c.variant), c.variant)
        except VariantError as exc:
            bad.append((sw.point_label(c.point), str(exc)))
    return bad

