"""`qrsub sweep`: a knob grid over a base variant, timed against BASE (on the local GPUs,
or with --remote on the service's runners), ranked; the best written as a variant."""
from __future__ import annotations

import time
from pathlib import Path

import click

from qrsub import sweep as sw
from qrsub.harness import HarnessError, cases_for, load_task, select_cases
from qrsub.submit.outcome import service_options
from qrsub.variant import VariantError, parse_variant

LOCAL_ONLY = ("selector", "budget", "target", "workers")
REMOTE_ONLY = ("gpu", "max_submissions", "parallel", "repeat", "leaders", "force", "ledger_path")
FLAG_NAMES = {"selector": "--cases", "budget": "--budget", "target": "--target", "workers": "--workers",
              "gpu": "--gpu", "max_submissions": "--max-submissions", "parallel": "--parallel",
              "repeat": "--repeat", "leaders": "--leaders", "force": "--force", "ledger_path": "--ledger", "output": "-o/--output", "sets": "--set",
              "run_dir": "--run-dir", "dry_run": "--dry-run"}


@click.command("sweep", epilog="""\b
Examples:
  qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --dry-run
  qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --set mid.panel.num_warps=2,4
  qrsub sweep variants/champion.yaml --set small.precision.apply=fp16,tf32x3 --cases n=176,n=352
  qrsub sweep variants/champion.yaml --set large.strip.num_stages=3,4 -o variants/champion-s3.yaml
  qrsub sweep variants/champion.yaml --set mid.strip.bn=32,64 --workers 2   # 2 workers, even on 1 GPU
  qrsub sweep variants/champion-b200.yaml --set mid.strip.bn=32,64 --remote --dry-run   # the service's B200s
  qrsub sweep variants/champion-b200.yaml --set mid.strip.bn=32,64 --remote --max-submissions 10 --repeat 3
  qrsub sweep --remote --report champion-b200-1a2b3c4d5e --plot sweep.png   # again, from the ledger
  qrsub submissions list --sweep champion-b200-1a2b3c4d5e""")
@click.argument("base", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="ROUTE.KNOB=V1,V2",
              help="A knob of one route and the values to try; repeat for a grid (every combination).")
@click.option("--cases", "selector", metavar="SEL",
              help="Local: benchmark cases to time (as in `qrsub bench`): indices, ranges, filters like n=512. "
                   "Default: those BASE routes to a route the grid touches.")
@click.option("--budget", type=click.FloatRange(min=0.0), default=60.0, show_default=True, metavar="S",
              help="Local: timing budget per candidate in seconds (candidate and BASE together).")
@click.option("--target", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.01, show_default=True,
              metavar="FRAC", help="Local: stop a case once both medians' 95% intervals are within ±FRAC.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Local: worker processes. Default: one per visible GPU. More than the GPUs: they share them.")
@click.option("--remote", is_flag=True,
              help="Time on the service's runners: BASE and every candidate submitted in benchmark mode.")
@click.option("--gpu", metavar="NAME", help="Remote: the GPU to submit to (default: the variant's, e.g. B200).")
@click.option("--max-submissions", type=click.IntRange(min=0), metavar="N",
              help="Remote: send at most N submissions in this run (a rerun continues).")
@click.option("--parallel", type=click.IntRange(min=1), default=1, show_default=True, metavar="K",
              help="Remote: submissions in flight at once.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, metavar="R",
              help="Remote: submit BASE and the leading candidates R times in all, interleaved, to measure "
                   "the spread; a win inside it reads 'not distinguishable'.")
@click.option("--leaders", type=click.IntRange(min=1), default=2, show_default=True, metavar="K",
              help="Remote: how many of the best candidates --repeat submits again with BASE.")
@click.option("--force", is_flag=True,
              help="Remote: send despite lint warnings (never despite the service's own rules).")
@click.option("--report", "report_id", metavar="ID",
              help="Remote: print the ranking of sweep ID again from the ledger alone (no BASE, no network).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write `qrsub bench`'s plot: per-case ratio bars of the timed candidates, the geomean last.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the best candidate's variant. Default: BASE's folder, named after the winning knobs.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the grid's variants, builds, logs and results.json. Default: build/sweep/BASE-TIME.")
@click.option("--dry-run", is_flag=True, help="Print the grid and what timing it would take; run and send nothing.")
@service_options
@click.pass_context
def sweep(ctx, base, sets, selector, budget, target, workers, remote, gpu, max_submissions, parallel, repeat,
          leaders, force, report_id, plot_path, output, run_dir, dry_run, ledger_path, poll_interval, http_timeout):
    """Try every combination of knob values over BASE and rank them by speed.

    Each grid point becomes a small variant that `extends` BASE and patches
    the routes it names. The table ranks them by geometric-mean time / BASE
    (the leaderboard's score ratio); a per-case table follows. The best is
    written as a variant extending BASE when it beats BASE.

    Locally, each candidate must first pass the test cases of the routes it
    touches (a precision change: every test case, with the default seeds and
    POPCORN_SEED 1, 2, 3); survivors are timed against BASE with `qrsub
    bench`'s method, each in one process on one GPU, with 95% intervals. With
    several GPUs there is one worker per GPU (CUDA_VISIBLE_DEVICES set for
    each) and candidates run in parallel; with one GPU, one after another.

    With --remote, BASE and every candidate are built and linted first (one
    failure refuses the whole sweep, before anything is sent), then submitted
    in benchmark mode, one at a time unless --parallel; a 429 is waited out
    for the time the service names. Every submission is a ledger row with the
    sweep's id and the candidate's knobs: rerunning the same command after
    Ctrl-C, a crash or a network fault sends only what has no result yet and
    follows what is still running. The service gives one mean per case per
    submission, so without --repeat the spread is not measured; with it the
    interval is the range over the repeats.
    """
    if report_id:
        return _report(ctx, report_id, plot_path, ledger_path)
    if base is None:
        raise click.UsageError("give BASE (a variant to sweep), or --remote --report ID")
    _refuse_flags(ctx, REMOTE_ONLY if not remote else LOCAL_ONLY, "--remote" if not remote else "a local sweep")
    stamp = time.strftime('%Y%m%d-%H%M%S')
    run_dir = run_dir or Path("build/sweep") / (f"{base.stem}-remote-{stamp}" if remote else f"{base.stem}-{stamp}")
    try:
        bench_cases = select_cases(cases_for(load_task(), "benchmark"), selector) if selector else None
        if bench_cases == []:
            raise click.BadParameter(f"{selector!r} selects no benchmark case", param_hint="--cases")
        plan = sw.plan_sweep(base, sets, run_dir, bench_cases)
    except (HarnessError, sw.SweepError, VariantError) as exc:   # each message says what to fix
        raise click.ClickException(str(exc)) from None
    problems = _invalid_points(plan)
    executor = (_remote_executor(gpu, repeat, leaders, parallel, max_submissions, ledger_path, poll_interval,
                                 http_timeout, force)
                if remote else _local_executor(workers, budget, target))
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
    raise click.ClickException("invalid grid points (nothing was run or sent):\n" +
                               "\n".join(f"  {name}: {message}" for name, message in problems))


def _refuse_flags(ctx: click.Context, names, where: str) -> None:
    """A flag of the other kind of sweep is an error, not silently ignored."""
    given = [FLAG_NAMES[n] for n in names if ctx.get_parameter_source(n) is not click.core.ParameterSource.DEFAULT]
    if given:
        raise click.UsageError(f"{', '.join(given)} do(es) not apply to {where}")


def _local_executor(workers, budget, target) -> sw.LocalExecutor:
    from qrsub import pool
    from qrsub.bench.engine import StopRule

    devices = pool.visible_devices()
    assigned = pool.assign_devices(workers or len(devices), devices) if devices else []
    return sw.LocalExecutor(assigned, budget, StopRule(target=target))


def _remote_executor(gpu, repeat, leaders, parallel, max_submissions, ledger_path, poll_interval, http_timeout,
                     force):
    from qrsub.submit.ledger import resolve_path
    from qrsub.submit.sweep_remote import RemoteExecutor

    return RemoteExecutor(gpu=gpu, repeat=repeat, leaders=leaders, parallel=parallel,
                          max_submissions=max_submissions, ledger_path=resolve_path(ledger_path),
                          poll_interval=poll_interval, http_timeout=http_timeout, force=force)


def _invalid_points(plan: sw.SweepPlan) -> list[tuple[str, str]]:
    """Grid points whose variant the schema rejects (e.g. a BN that is no power of two)."""
    bad = []
    for c in plan.candidates:
        try:
            parse_variant(sw.variant_text(plan.base, c.point, c.variant), c.variant)
        except VariantError as exc:
            bad.append((sw.point_label(c.point), str(exc)))
    return bad


def _report(ctx: click.Context, sweep_id: str, plot_path: Path | None, ledger_path: str | None) -> None:
    """`--remote --report ID`: the ranking of a remote sweep again, from the ledger alone."""
    from qrsub.console import make_console
    from qrsub.submit.ledger import LedgerError, Ledger, resolve_path
    from qrsub.submit.sweep_remote import base_line, remote_style, results_from_rows

    if not ctx.params["remote"]:
        raise click.UsageError("--report reads a remote sweep from the ledger: give --remote --report ID")
    others = [FLAG_NAMES[n] for n in (*LOCAL_ONLY, *REMOTE_ONLY, "output", "sets", "run_dir", "dry_run")
              if ctx.get_parameter_source(n) is not click.core.ParameterSource.DEFAULT]
    if ctx.params["base"] is not None or others:
        raise click.UsageError(f"--report takes only the sweep's id (and --plot, --ledger); "
                               f"drop {', '.join(['BASE'] * (ctx.params['base'] is not None) + others)}")
    path = resolve_path(ledger_path)
    try:
        ledger = Ledger(path)
        rows = ledger.sweep_rows(sweep_id) if path.exists() else []
        known = ledger.sweep_ids() if path.exists() and not rows else []
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from None
    if not rows:
        raise click.ClickException(f"the ledger {path} has no sweep {sweep_id!r}; "
                                   + (f"its sweeps: {', '.join(known)}" if known else "it holds no sweep"))
    results, labels, meta = results_from_rows(rows)
    console = make_console()
    console.print(f"sweep {sweep_id} on {meta['gpu']}, from the ledger {path}")
    try:
        sw.show_results(sw.rank(results), labels, console, style=remote_style(meta["gpu"]), plot=plot_path)
    except sw.SweepError as exc:
        raise click.ClickException(str(exc)) from None
    console.print(base_line(meta))
