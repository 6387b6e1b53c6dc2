"""`qrsub bench`: compare candidates on the local GPU the way the leaderboard ranks them."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from qrsub.bench import engine, report
from qrsub.files import write_atomic


@click.command("bench")
@click.argument("candidates", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cases", "selector", metavar="SEL",
              help="Benchmark cases to run: indices and ranges (0,3,5-7) and/or filters (n=512, case=mixed). Default: all 12.")
@click.option("--budget", type=click.FloatRange(min=0.0), default=120.0, show_default=True, metavar="S",
              help="Timing budget in seconds, shared among the cases (warm-ups and compiles not counted).")
@click.option("--target", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.01, show_default=True, metavar="FRAC",
              help="Stop a case once every median's 95% interval is within ±FRAC of it.")
@click.option("--min-reps", type=click.IntRange(min=1), default=10, show_default=True, help="Repetitions before the interval rule may stop a case.")
@click.option("--max-reps", type=click.IntRange(min=1), default=1000, show_default=True, help="Cap on repetitions per case.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write every number (and the raw samples) to FILE as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a PNG: per-case ratio bars with 95% intervals, the geomean last.")
@click.option("--dry-run", is_flag=True, help="Print the plan (candidates, cases, stop rules) and exit; works without a GPU.")
def bench(candidates, selector, budget, target, min_reps, max_reps, json_path, plot_path, dry_run):
    """Time CANDIDATES against the first one on this machine's GPU.

    A candidate is a submission file (.py) or a variant (.yaml, built first).
    Each runs on the benchmark cases of task/task.yml exactly as the harness
    times them (same inputs, outputs checked before timing, L2 flushed, CUDA
    events), interleaved round by round in ABBA order so clock drift hits
    every candidate alike. A case stops once every median's 95% interval is
    tight (--target) or its share of --budget is spent on timing. --budget is
    timing time: warm-ups, where the first case compiles every candidate, are
    not charged to it, so the whole run takes longer than --budget.
    A median still too loose to read (a few cold rounds) is named
    after the tables, with the fix.

    Reported: per case each median with its 95% interval and the ratio to the
    first candidate; then the geometric mean ratio (the leaderboard's score)
    with its interval, and which differences are real rather than noise.

    \b
    Examples:
      qrsub bench variants/champion.yaml variants/geqrf.yaml
      qrsub bench build/submission.py task/submission.py --cases n=512 --budget 60
      qrsub bench variants/champion.yaml variants/champion-nograph.yaml --json out.json --plot out.png
      qrsub bench variants/champion.yaml variants/b200.yaml --dry-run   # the plan, no GPU needed
    """
    from qrsub.cli import benchmark_cases_or_fail

    stop = engine.StopRule(target=target, min_reps=min_reps, max_reps=max_reps)
    indices, specs = benchmark_cases_or_fail(selector)
    labels = candidate_labels(candidates)

    if dry_run:
        for line in report.describe_plan(labels, candidates, specs, indices, budget, stop):
            click.echo(line)
        _build(candidates, labels, None)   # every candidate resolves and builds; nothing is written
        return
    from qrsub.bench.timer import HarnessTimer, NoGPUError, device_name, require_gpu

    try:
        require_gpu()
    except NoGPUError as exc:
        raise click.ClickException(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="qrsub-bench-") as tmp:
        files = _build(candidates, labels, Path(tmp))
        runs = _run_with_progress(HarnessTimer(files), specs, len(files), stop, budget)
    summary = report.summarize(runs, labels, device=device_name(), sources=[str(c) for c in candidates],
                               budget_s=budget, target=target, case_indices=list(indices))
    report.render(summary)
    if json_path:
        write_atomic(json_path, json.dumps(summary, indent=1))
        click.echo(f"wrote {json_path}")
    if plot_path:
        report.plot(summary, plot_path)
        click.echo(f"wrote {plot_path}")
    refused = report.refusals(summary)
    if refused:
        raise click.ClickException("not every candidate was timed on every case:\n" + "\n".join(refused))


def candidate_labels(paths) -> list[str]:
    """File stems, made unique (`champion`, `champion#2`) when two collide."""
    labels: list[str] = []
    for p in paths:
        label, k = Path(p).stem, 2
        while label in labels:
            label, k = f"{Path(p).stem}#{k}", k + 1
        labels.append(label)
    return labels


def _build(candidates, labels, build_dir: Path | None) -> list[Path | None]:
    """Each candidate's submission file: a .py as it is, a variant built into BUILD_DIR
    (None: built in memory only, to check it)."""
    from qrsub.build import BuildError, build_submission

    try:
        return [build_submission(c, build_dir / f"{label.replace('#', '_')}.py" if build_dir else None).path
                for c, label in zip(candidates, labels)]
    except BuildError as exc:
        raise click.ClickException(str(exc)) from None


def _run_with_progress(timer, specs, n_cands, stop, budget):
    """Run the engine under a rich progress bar: one step per case, filled by its budget."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.1f}/{task.total:.0f} cases"),
               TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("bench", total=len(specs))

        def on_round(pos, rounds, elapsed, share):
            frac = min(0.99, elapsed / share) if share > 0 else 0.99
            progress.update(task, completed=pos + frac,
                            description=f"{report.case_label(specs[pos])}: round {rounds}")

        runs = engine.run_bench(timer, specs, n_cands, stop, budget, on_round=on_round)
        progress.update(task, completed=len(specs))
    return runs
