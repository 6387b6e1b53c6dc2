"""`qrsub test --local`: the service's harness, run on this machine."""
from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from pathlib import Path

import click

from qrsub.cli import DEFAULT_SUBMISSION
from qrsub.localrun import CPU_MAX_N

HELP = f"""Run SUBMISSION (default {DEFAULT_SUBMISSION}) through the qr_v2 harness.

The harness files are laid beside the submission in a fresh directory and
`eval.py` runs exactly as on the service (POPCORN_FD report, POPCORN_SEED,
task.yml's timeouts). A variant .yaml is built first. Each case prints a line as
it ends (pass or fail, its mean in the timed modes, its wall time), and each
stage a table when it ends: a run stopped from outside has shown what it did.
--timeout (per stage) rather than an outer `timeout` keeps the stage's finished
cases in the table and the --json file.

Without a GPU the Triton kernels run on the CPU, through Triton's interpreter
(TRITON_INTERPRET=1). It runs the same kernels, checked by the same harness,
but it executes each program instance in Python: minutes where a GPU takes
milliseconds. So without a GPU only the cases with n <= --max-n run,
{CPU_MAX_N} by default: the 20x32 case, 1 to 2 minutes on a 2-core machine.
40x176 did not finish in 500 s there, and the larger cases need a GPU. A larger
--max-n needs a larger --timeout; a case the interpreter does not finish in
time is reported in those words, not as a wrong answer. The last line says how
many cases ran and how many need a GPU.

A route whose kernels failed at their first launch and fell back to
torch.geqrf passes the harness (geqrf is correct) but did not test the
variant: it is reported with its reason and fails the run, unless
--allow-fallback.

\b
Examples:
  qrsub test --local                               # {DEFAULT_SUBMISSION}
  qrsub test --local task/submission.py            # the starter (torch.geqrf)
  qrsub test --local variants/champion.yaml        # build, then test
  qrsub test --local --cases 0,3-5                 # some cases by index
  qrsub test --local --cases n=512,case=mixed      # filters, combinable
  qrsub test --local --mode benchmark --json out.json
  qrsub test --local --mode leaderboard --seed random
  qrsub test --local --mode benchmark --max-repeats 5    # quick CPU smoke run
  qrsub test --local --cases 1 --max-n 176 --timeout 1800   # 40x176 without a GPU: over 500 s
  qrsub test --local --harness task                # a harness folder (this one is the default)

The last line is PASS, FAIL, or without a GPU UNFINISHED: nothing failed, but
a case ran out of the interpreter's time, or a stage had no case small enough
to run. Exit status 0 only when every case that ran passed and no route fell
back (or --allow-fallback).
"""


def _parse_seed(value: str | None) -> int | None:
    if value is None:
        return None
    if value.strip().lower() == "random":
        return secrets.randbelow(2**31 - 1) + 1
    try:
        return int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r}: give an integer or `random`", param_hint="--seed")


def _submission_file(source: str) -> Path:
    """The file to run: a submission file as it is, a variant built into a temporary folder
    that goes when the command ends (nothing half-built stays behind)."""
    from qrsub.build import is_variant
    from qrsub.cli import build_or_fail

    out = None
    if is_variant(Path(source)):
        out = Path(tempfile.mkdtemp(prefix="qrsub-build-")) / "submission.py"
        click.get_current_context().call_on_close(lambda: shutil.rmtree(out.parent, ignore_errors=True))
    return build_or_fail(source, out).path


def _json_payload(run, submission: Path, passed: bool) -> dict:
    from qrsub.report import report_to_json
    return {
        "submission": str(submission),
        "mode": run.mode,
        "passed": passed,
        "harness_passed": run.passed,
        "cpu": run.cpu,
        "seed": run.seed,
        "compile": {"ok": run.compile.ok, "message": run.compile.message},
        "fallbacks": [{"route": f.route, "reason": f.reason} for f in run.fallbacks],
        "skipped": [{"stage": m, "index": i, "spec": s} for m, i, s in run.skipped],
        "coverage": [dict(vars(c), unselected=c.unselected) for c in run.coverage],
        "stages": [report_to_json(st.cases, st.mode, exit_code=st.exit_code,
                                  timed_out=st.timed_out, cpu_timings=run.cpu, wall_s=round(st.wall_s, 1),
                                  service_limit_s=st.service_limit_s)
                   for st in run.stages],
    }


def _describe_skipped(skipped) -> str:
    return ", ".join(f"#{index} ({_shape(spec)})" for index, spec in skipped)


@click.command("test", help=HELP)
@click.argument("submission", default=DEFAULT_SUBMISSION, metavar="[SUBMISSION]")
@click.option("--local", "local", is_flag=True, help="Run the harness on this machine (required for now).")
@click.option("--mode", type=click.Choice(["test", "benchmark", "leaderboard", "profile"]),
              default="test", show_default=True,
              help="leaderboard = test, then benchmark, then leaderboard, stopping at the first failure.")
@click.option("--cases", "selector", metavar="SEL",
              help="Which cases: indices `0,3-5`, filters `n=512`, `case=mixed`; combinable.")
@click.option("--seed", "seed_text", metavar="N|random", help="Set POPCORN_SEED (as the service's secret run).")
@click.option("--harness", type=click.Path(exists=True, file_okay=False),
              help="Another copy of the harness files (task.py, utils.py, reference.py, eval.py[, task.yml]).")
@click.option("--timeout", type=float, metavar="S", help="Per-stage timeout in seconds (default: task.yml's).")
@click.option("--max-n", type=int, metavar="N",
              help=f"Largest n to run (default without a GPU: {CPU_MAX_N}; what the interpreter costs is above).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write the results as JSON.")
@click.option("--keep", is_flag=True, help="Keep the run directory and print its path.")
@click.option("--max-repeats", type=click.IntRange(min=1), metavar="N",
              help="Cap benchmark repetitions (local only; quick CPU smoke runs).")
@click.option("--allow-fallback", is_flag=True,
              help="Pass even when a route fell back to torch.geqrf (it is still reported).")
def test(submission, local, mode, selector, seed_text, harness, timeout, max_n, json_path, keep,
         max_repeats, allow_fallback):
    """The `qrsub test` command; its help is HELP."""
    from qrsub.console import make_console
    from rich.markup import escape

    from qrsub.files import write_atomic
    from qrsub.harness import HarnessError
    from qrsub.localrun import has_gpu, run_local, stage_time_note
    from qrsub.report import render_cases

    if not local:
        raise click.UsageError("remote testing is `qrsub submit --mode test`; "
                               "pass --local to run the harness here")
    seed = _parse_seed(seed_text)
    path = _submission_file(submission)
    console = make_console()
    cpu = not has_gpu()
    console.print(f"[bold]{mode}[/bold] {path}" + (f"  POPCORN_SEED={seed}" if seed is not None else ""))
    if cpu:
        console.print("[yellow]no GPU: running on the CPU, Triton kernels through its "
                      "interpreter (TRITON_INTERPRET=1); timings are CPU timings[/yellow]")
        if mode in ("benchmark", "leaderboard") and max_repeats is None:
            console.print("[yellow]the timed modes recheck every output after each repetition: "
                          "on the CPU that takes minutes; --max-repeats 5 makes it quick[/yellow]")

    def show_compile(result) -> None:
        if not result.ok:
            console.print("[yellow]compile pass failed (evaluation goes on, as on the service):"
                          f"[/yellow] {escape(result.message)}")

    def show_start(stage_mode, indices, skipped) -> None:
        line = f"{stage_mode}: running {len(indices)} case(s)"
        if skipped:
            line += f"; skipped (n > {max_n or CPU_MAX_N}): {_describe_skipped(skipped)}"
        console.print(line)

    def show_case(event) -> None:
        console.print(_case_line(event), highlight=False)

    def show_stage(stage) -> None:
        notes = ([stage.timeout_message] if stage.timed_out else []) + [stage_time_note(stage)]
        render_cases(stage.cases, stage.mode, console=console, cpu_timings=cpu,
                     title=f"qr_v2 {stage.mode} ({len(stage.cases)} cases)",
                     verdict_text="pass" if stage.passed else "unfinished" if _unfinished(stage) else "fail",
                     notes=notes)

    try:
        run = run_local(path, mode, cases=selector, seed=seed, harness=harness, timeout=timeout,
                        max_n=max_n, keep=keep, on_stage=show_stage, on_compile=show_compile,
                        on_stage_start=show_start, on_case=show_case, cpu=cpu, max_repeats=max_repeats)
    except HarnessError as exc:
        raise click.ClickException(str(exc)) from exc

    if keep:
        console.print(f"run directory: {run.run_dir}")
    passed = run.passed and (allow_fallback or not run.fallbacks)
    if json_path:
        write_atomic(Path(json_path), json.dumps(_json_payload(run, path, passed), indent=2))
    for fallback in run.fallbacks:
        color = "yellow" if allow_fallback else "red"
        console.print(f"[{color}]fallback:[/{color}] {escape(str(fallback))}")
    word, details = verdict(run, passed, allow_fallback)
    color = {"PASS": "green", "FAIL": "red"}.get(word, "yellow")
    console.print(f"[bold {color}]{word}[/bold {color}] ({escape(details)})")
    raise SystemExit(0 if passed else 1)


def verdict(run, passed: bool, allow_fallback: bool) -> tuple[str, str]:
    """The last line's word (PASS, FAIL or UNFINISHED) and its details: how much of each stage
    ran, and why it did not pass. UNFINISHED: nothing failed, but without a GPU a case ran out of
    the interpreter's time, or a stage had no case small enough to run."""
    parts = [_coverage_text(c, run.cpu) for c in run.coverage]
    fell_back = bool(run.fallbacks) and not allow_fallback
    if fell_back:
        parts.append(f"{len(run.fallbacks)} route(s) fell back to torch.geqrf")
    cut = [(stage, case) for stage in run.stages for case in stage.cut_off]
    if cut:
        stage, case = cut[0]
        parts.append(f"case {case.index} ({_shape(case.spec)}) {stage.timeout_message}")
    if passed:
        return "PASS", "; ".join(parts)
    unfinished = not fell_back and all(s.passed or _unfinished(s) for s in run.stages)
    return ("UNFINISHED" if unfinished else "FAIL"), "; ".join(parts)


def _unfinished(stage) -> bool:
    """Without a GPU: the stage did not pass only because the interpreter ran out of time."""
    cut = stage.cut_off
    return stage.cpu and bool(cut) and all(c.passed or c in cut for c in stage.cases)


def _coverage_text(coverage, cpu: bool) -> str:
    text = f"{coverage.stage}: {coverage.ran} of {coverage.total} cases"
    if coverage.over_max_n:
        text += f", {coverage.over_max_n} " + ("need a GPU" if cpu else "over --max-n")
    if coverage.unselected:
        text += f", {coverage.unselected} not selected"
    return text


def _case_line(event) -> str:
    """One finished case, printed as the stage runs: `  benchmark 4 60x1024: pass, mean 3,693.5 us
    over 22 runs (4.1 s)`."""
    from rich.markup import escape

    head = f"  {event.mode} {event.index} {_shape(event.spec)}"
    if not event.passed:
        return f"{head}: [red]fail[/red] ({event.seconds:.1f} s): {escape(event.fields.get('error', ''))}"
    if "mean" in event.fields:
        mean_us = float(event.fields["mean"]) / 1000
        return f"{head}: pass, mean {mean_us:,.1f} us over {event.fields.get('runs', '?')} runs ({event.seconds:.1f} s)"
    return f"{head}: pass ({event.seconds:.1f} s)"


def _shape(spec: dict) -> str:
    return f"{spec['batch']}x{spec['n']}"
