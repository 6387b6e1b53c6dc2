"""What `qrsub submit` and `qrsub submissions` share: reaching the service from a command,
following a submission to its outcome, and showing that outcome."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from qrsub.files import write_atomic
from qrsub.submit.client import ApiError, Client, JobFailed, TransportError, WaitTimeout, job_status, queued_jobs
from qrsub.submit.config import Config, ConfigError, load_config
from qrsub.submit.ledger import Ledger, resolve_path


# ---- shared plumbing for the commands that talk to the service --------------

def service_options(func: Callable) -> Callable:
    """--ledger, plus hidden knobs that tests use to poll fast."""
    func = click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False),
                        help="Ledger database (default: $QRSUB_LEDGER, else the user "
                             "data directory).")(func)
    func = click.option("--poll-interval", type=float, default=5.0, hidden=True,
                        envvar="QRSUB_POLL_INTERVAL")(func)
    func = click.option("--http-timeout", type=float, default=30.0, hidden=True,
                        envvar="QRSUB_HTTP_TIMEOUT")(func)
    return func


def get_config() -> Config:
    try:
        return load_config()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def open_ledger(ledger_path: str | None) -> Ledger:
    return Ledger(resolve_path(ledger_path))


def make_client(config: Config, poll_interval: float, http_timeout: float) -> Client:
    return Client(config.api_url, config.cli_id, poll_interval=poll_interval,
                  timeout=http_timeout, upload_timeout=max(http_timeout, 120.0))


def write_json(path: Path | None, data: dict) -> None:
    """Write DATA to PATH whole or not at all (a temporary file, then a rename)."""
    if path is None:
        return
    write_atomic(Path(path), json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def console():
    from qrsub.console import make_console

    con = make_console(highlight=False)
    return con


# ---- the outcome of a finished (or failed) job ------------------------------

@dataclass
class Outcome:
    status: str                      # passed, check_failed, done, failed, timed_out, hacked
    submission: dict
    score_s: float | None = None     # the service's score, seconds
    geomean_us: float | None = None  # score in us, or computed from benchmark cases
    error: str | None = None
    cases: list = field(default_factory=list)   # (run, [CaseResult]) per public run

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "done")

    def runs(self) -> list[dict]:
        return runs_of(self.submission)

    def to_json(self) -> dict:
        return {
            "status": self.status, "score": self.score_s, "geomean_us": self.geomean_us,
            "error": self.error,
            "runs": [{k: v for k, v in run.items() if k != "result"} for run in self.runs()],
            "cases": self.cases_json(),
        }

    def cases_json(self) -> list[dict]:
        return [{"mode": run.get("mode"), "secret": bool(run.get("secret")),
                 "runner": run.get("runner"), "cases": [c.to_dict() for c in cases]}
                for run, cases in self.cases]


def runs_of(submission: dict) -> list[dict]:
    return [r for r in submission.get("runs") or [] if isinstance(r, dict)]


def to_seconds(score: Any) -> float | None:
    """The service's score: a number or a numeric string, in seconds."""
    try:
        return None if score is None or score == "" else float(score)
    except (TypeError, ValueError):
        return None


def infer_mode(runs: list[dict]) -> str | None:
    modes = [r.get("mode") for r in runs]
    for mode in ("leaderboard", "benchmark", "profile", "test"):
        if mode in modes:
            return mode
    return None


def main_score(runs: list[dict], mode: str | None) -> float | None:
    """The score of the run that ranks: the submission's mode, public run first."""
    mode = mode or infer_mode(runs)
    candidates = sorted((r for r in runs if r.get("mode") == mode),
                        key=lambda r: bool(r.get("secret")))
    for run in candidates:
        score = to_seconds(run.get("score"))
        if score is not None:
            return score
    return None


def public_cases(runs: list[dict]) -> list[tuple[dict, list]]:
    """Per-case results of the public test and benchmark runs that carry a report."""
    from qrsub.report import cases_from_report, parse_report

    out = []
    for run in runs:
        result = run.get("result")
        if run.get("secret") or run.get("mode") not in ("test", "benchmark") or not result:
            continue
        report = parse_report(result) if isinstance(result, str) else result
        out.append((run, cases_from_report(report, run["mode"])))
    return out


def outcome_of(submission: dict, mode: str | None, failure: JobFailed | None = None) -> Outcome:
    from qrsub.report import geomean_us

    runs = runs_of(submission)
    cases = public_cases(runs)
    score = main_score(runs, mode)
    geomean = score * 1e6 if score is not None else None
    if geomean is None:
        bench = [cs for run, cs in cases if run.get("mode") == "benchmark"]
        geomean = geomean_us(bench[-1]) if bench else None
    if failure is not None:
        status, error = failure.status, failure.error
    elif not runs:
        status, error = "done", None
    elif all(r.get("passed") for r in runs):
        status, error = "passed", None
    else:
        failed = [r.get("mode", "?") for r in runs if not r.get("passed")]
        status, error = "check_failed", f"run(s) did not pass: {', '.join(failed)}"
    return Outcome(status=status, submission=submission, score_s=score, geomean_us=geomean, error=error, cases=cases)


def render_outcome(con, outcome: Outcome, submission_id: int | None) -> None:
    """Runs, per-case tables, the geomean line, then the verdict."""
    from rich.markup import escape

    from qrsub.report import render_cases

    runs = outcome.runs()
    if runs:
        con.print(runs_table(runs, submission_id))
    for run, cases in outcome.cases:
        render_cases(cases, run["mode"], console=con,
                     title=f"{run['mode']} run on {run.get('runner') or '?'}")
    if outcome.geomean_us is not None:
        seconds = outcome.geomean_us / 1e6
        con.print(f"geomean score: {outcome.geomean_us:,.3f} us ({seconds:.9g} s)")
    color = "green" if outcome.ok else "red"
    con.print(f"status: [bold {color}]{outcome.status}[/bold {color}]")
    if outcome.error:
        con.print(f"[red]{escape(outcome.error)}[/red]")


def runs_table(runs: list[dict], submission_id: int | None):
    from rich.table import Table

    table = Table(title=f"submission {submission_id}" if submission_id is not None else None,
                  title_justify="left")
    for name in ("mode", "secret", "runner", "passed", "score"):
        table.add_column(name, justify="right" if name == "score" else "left")
    for run in runs:
        score = to_seconds(run.get("score"))
        table.add_row(str(run.get("mode", "?")), "yes" if run.get("secret") else "no",
                      str(run.get("runner") or "-"),
                      "[green]yes[/green]" if run.get("passed") else "[red]no[/red]",
                      "-" if score is None else f"{score * 1e6:,.3f} us")
    return table


# ---- following a job ---------------------------------------------------------

class ProgressDisplay:
    """A spinner line on a terminal; one line per change elsewhere (logs, CI)."""

    def __init__(self, con, submission_id: int) -> None:
        self.con = con
        self.submission_id = submission_id
        self.started = time.monotonic()
        self._status = None
        self._last = ""

    def __enter__(self) -> "ProgressDisplay":
        if self.con.is_terminal:
            self._status = self.con.status(self._text("waiting for the service"))
            self._status.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.stop()

    def _text(self, what: str) -> str:
        from rich.markup import escape  # the service's words are not our markup

        elapsed = int(time.monotonic() - self.started)
        return (f"submission {self.submission_id}: {escape(what)} "
                f"({elapsed // 60}:{elapsed % 60:02d})")

    def update(self, sub: dict | None, error: Exception | None) -> None:
        if error is not None:
            what = f"retrying after: {error}"
        else:
            what = job_status(sub) or "queued"
            ahead = queued_jobs(sub)
            if ahead:
                what += f", {ahead} job(s) in the runner's queue"
            done = len(sub.get("runs") or [])
            if done:
                what += f", {done} run(s) finished"
        if self._status is not None:
            self._status.update(self._text(what))
        elif what != self._last:
            self.con.print(self._text(what))
        self._last = what


def follow(ctx: click.Context, client: Client, ledger: Ledger, row_id: int | None,
           submission_id: int, mode: str | None, json_path: Path | None,
           extra: dict) -> None:
    """Wait for SUBMISSION_ID, record and print the outcome; exit 1 unless it passed."""
    con = console()
    try:
        with ProgressDisplay(con, submission_id) as progress:
            sub = client.wait(submission_id, on_update=progress.update)
        outcome = outcome_of(sub, mode)
    except JobFailed as exc:
        outcome = outcome_of(exc.submission, mode, failure=exc)
    except KeyboardInterrupt:
        write_json(json_path, {**extra, "status": "submitted"})
        click.echo(f"\nStopped waiting; submission {submission_id} is still running on the "
                   f"service.\nResume with: qrsub submissions wait {submission_id}", err=True)
        ctx.exit(130)
    except (WaitTimeout, TransportError, ApiError) as exc:
        # Only a refusal that will not change (404, 401, ...) makes resuming pointless.
        final = isinstance(exc, ApiError) and not exc.transient
        hint = "" if final else f"\nResume with: qrsub submissions wait {submission_id}"
        write_json(json_path, {**extra, "status": "submitted", "error": str(exc)})
        raise click.ClickException(f"{exc}{hint}") from None
    if row_id is not None:
        ledger.mark_final(row_id, status=outcome.status, score=outcome.score_s,
                          runs=outcome.to_json()["runs"], cases=outcome.cases_json(),
                          error=outcome.error)
    render_outcome(con, outcome, submission_id)
    write_json(json_path, {**extra, **outcome.to_json()})
    if not outcome.ok:
        ctx.exit(1)


def record_outcome(ledger: Ledger, row_id: int, outcome: Outcome) -> None:
    """Complete a ledger row with OUTCOME: status, score, runs, per-case results, error."""
    ledger.mark_final(row_id, status=outcome.status, score=outcome.score_s,
                      runs=outcome.to_json()["runs"], cases=outcome.cases_json(), error=outcome.error)
