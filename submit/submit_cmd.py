"""`qrsub submit`: check a submission, send it to the leaderboard, follow it to its score.

The steps, each a function below: load the file (building it first when given a
variant), lint it (the service's hard rules cannot be forced past), settle the
leaderboard and GPU against the file's `#!POPCORN` directives, record a ledger
row, POST, then poll with a live display and print the runs, the per-case
tables and the geometric-mean score. `follow` and the rendering helpers are
shared with `qrsub submissions wait/show`.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from qrsub.files import write_atomic
from qrsub.rules import header_directives
from qrsub.submit.client import (CLI_ID_HEADER, MODES, Accepted, ApiError, Client,
                                 JobFailed, ServiceError, TransportError, WaitTimeout,
                                 job_status, queued_jobs, submission_path)
from qrsub.submit.config import HIDDEN, Config, ConfigError, load_config
from qrsub.submit.ledger import Ledger, LedgerError, resolve_path

DEFAULT_FILE = Path("build/submission.py")
DEFAULT_LEADERBOARD = "qr_v2"
DEFAULT_GPU = "B200"
VARIANT_SUFFIXES = (".yaml", ".yml")


# ---- the file to send -------------------------------------------------------

@dataclass
class Source:
    path: Path
    file_name: str          # the name the service sees
    content: bytes
    variant: str | None = None
    knobs: Any = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    @property
    def text(self) -> str:
        # Bad bytes survive as escapes: lint reports them, the directives still read.
        return self.content.decode("utf-8", errors="surrogateescape")


def load_source(path: Path) -> Source:
    """The bytes to send: the file itself, or the submission built from a variant."""
    if not path.exists():
        hint = ("build one with `qrsub build VARIANT.yaml`, or " if path == DEFAULT_FILE
                else "")
        raise click.ClickException(f"{path} does not exist: {hint}name the file or "
                                   f"variant to submit, e.g. `qrsub submit variants/champion.yaml`")
    if path.suffix.lower() in VARIANT_SUFFIXES:
        return _source_from_variant(path)
    source = Source(path=path, file_name=path.name, content=path.read_bytes())
    source.variant = built_from(source.text)
    return source


def built_from(text: str) -> str | None:
    """The variant named in a `qrsub build` header (`# variant: NAME (...)`), if any."""
    for line in text.split("\n"):
        if not line.startswith("#"):
            return None  # provenance lives in the top comment block only
        if line.startswith("# variant: "):
            words = line[len("# variant: "):].split()
            return words[0] if words else None
    return None


def _source_from_variant(path: Path) -> Source:
    try:
        from qrsub.build import build_variant
        from qrsub.variant import load_variant
    except ModuleNotFoundError as exc:
        raise click.ClickException(f"{path} is a variant, but this qrsub cannot build "
                                   f"({exc}); submit a built .py file instead") from None
    try:
        variant = load_variant(path)
        text = build_variant(variant)
    except Exception as exc:  # VariantError / BuildError name the file, line and fix
        raise click.ClickException(f"building {path} failed:\n{exc}") from None
    return Source(path=path, file_name=f"{variant.name}.py", content=text.encode("utf-8"),
                  variant=variant.name, knobs=variant_knobs(variant))


def variant_knobs(variant: Any) -> dict:
    """What the ledger keeps of a resolved variant: enough to rebuild or compare it."""
    return {"leaderboard": variant.leaderboard, "gpu": variant.gpu,
            "parents": [str(p) for p in variant.parents],
            "routes": [dict(r) for r in variant.routes], "settings": dict(variant.settings)}


# ---- lint: the service's rules, checked before anything is sent ------------

def lint_problems(source: Source, leaderboard: str | None, gpu: str | None) -> list:
    """qrsub.lint's problems, less 'directive missing' when the flags supply what is missing."""
    from qrsub.lint import lint_bytes

    problems = lint_bytes(source.content, source.file_name)
    present = header_directives(source.text)
    given = {"leaderboard": leaderboard, "gpu": gpu}
    if all(given[key] for key in given if key not in present):
        problems = [p for p in problems if p.rule != "directive-missing"]
    return problems


def report_problems(source: Source, problems: list, force: bool) -> None:
    """Print PROBLEMS; refuse on hard ones always, on the others unless --force."""
    for p in problems:
        kind = "error" if p.hard else "warning"
        click.echo(f"{source.path}:{p.line}: {kind} [{p.rule}] {p.message}", err=True)
    hard = [p for p in problems if p.hard]
    soft = [p for p in problems if not p.hard]
    if hard:
        raise click.ClickException(f"not sent: {len(hard)} problem(s) the service would "
                                   f"refuse (--force cannot override these); fix them first")
    if soft and not force:
        raise click.ClickException(f"not sent: {len(soft)} lint warning(s); fix them, or "
                                   f"pass --force to submit anyway")


# ---- leaderboard and GPU ----------------------------------------------------

@dataclass
class Target:
    leaderboard: str
    gpu: str
    origin: str  # where the pair came from, for the user


def resolve_target(text: str, leaderboard: str | None, gpu: str | None) -> Target:
    """Flags and directives must agree, as the service requires; directives fill gaps."""
    directives = header_directives(text)
    file_lb = directives.get("leaderboard", [None])[0]
    file_gpus = directives.get("gpu", [])
    if leaderboard and file_lb and leaderboard.lower() != file_lb.lower():
        raise click.ClickException(
            f"--leaderboard {leaderboard} conflicts with the file's `#!POPCORN leaderboard "
            f"{file_lb}`; the service refuses that: drop the flag or fix the directive")
    if gpu and file_gpus and gpu.lower() not in (g.lower() for g in file_gpus):
        raise click.ClickException(
            f"--gpu {gpu} conflicts with the file's `#!POPCORN gpu {' '.join(file_gpus)}`; "
            f"drop the flag or fix the directive")
    if not gpu and len(file_gpus) > 1:
        raise click.ClickException(f"the file names several GPUs ({', '.join(file_gpus)}); "
                                   f"pick one with --gpu")
    from_file, from_flags = bool(file_lb or file_gpus), bool(leaderboard or gpu)
    origin = {(True, True): "flags agree with the file",
              (True, False): "from the file's directives",
              (False, True): "from the command line",
              (False, False): "defaults"}[(from_file, from_flags)]
    return Target(leaderboard=leaderboard or file_lb or DEFAULT_LEADERBOARD,
                  gpu=gpu or (file_gpus[0] if file_gpus else DEFAULT_GPU), origin=origin)


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


# ---- the command ---------------------------------------------------------------

def _request_lines(config: Config, source: Source, target: Target, mode: str) -> list[str]:
    """The request as it would go out, the cli_id hidden."""
    url = config.api_url + submission_path(target.leaderboard, target.gpu, mode)
    return [f"POST {url}",
            f"  {CLI_ID_HEADER}: {HIDDEN}",
            f"  multipart part 'file': {source.file_name} ({len(source.content):,} bytes, "
            f"sha256 {source.sha256})",
            f"leaderboard {target.leaderboard}, gpu {target.gpu} ({target.origin}), mode {mode}"]


def _base_record(config: Config, source: Source, target: Target, mode: str) -> dict:
    return {"api_url": config.api_url, "file": str(source.path), "file_name": source.file_name,
            "file_sha256": source.sha256, "variant": source.variant, "knobs": source.knobs,
            "leaderboard": target.leaderboard, "gpu": target.gpu, "mode": mode}


@click.command("submit", epilog="""\b
Examples:
  qrsub submit                                  # build/submission.py, leaderboard mode
  qrsub submit variants/champion.yaml --mode test
  qrsub submit my.py --gpu B200 --mode benchmark --json out.json
  qrsub submit --dry-run                        # check and show the request; send nothing
  qrsub submit --no-wait && qrsub submissions wait ID

\b
Setup (as for the official `popcorn` CLI):
  export POPCORN_API_URL=https://...            # the service's address
  popcorn register github                       # writes cli_id to ~/.popcorn.yaml
  (or export POPCORN_CLI_ID=...)

Exit status: 0 when every run passed; 1 on a local refusal, a service
rejection, or a job that failed, timed out, was flagged, or did not pass;
130 when interrupted (the job keeps running: `qrsub submissions wait ID`).""")
@click.argument("target", required=False, metavar="[FILE|VARIANT.yaml]",
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--leaderboard", "-l", help="Leaderboard (default: the file's "
              "`#!POPCORN leaderboard`, else qr_v2).")
@click.option("--gpu", "-g", help="GPU type (default: the file's `#!POPCORN gpu`, else B200).")
@click.option("--mode", "-m", type=click.Choice(MODES, case_sensitive=False),
              default="leaderboard", show_default=True,
              help="test: correctness only; benchmark: timed, unranked; leaderboard: "
                   "ranked; profile: one profiled case.")
@click.option("--no-wait", is_flag=True, help="Return once the service accepts the file.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the outcome to this JSON file.")
@click.option("--dry-run", is_flag=True, help="Do everything up to the request, print it, "
              "send nothing.")
@click.option("--force", is_flag=True, help="Submit despite lint warnings (never despite "
              "the service's own rules).")
@service_options
@click.pass_context
def submit(ctx: click.Context, target: Path | None, leaderboard: str | None, gpu: str | None,
           mode: str, no_wait: bool, json_path: Path | None, dry_run: bool, force: bool,
           ledger_path: str | None, poll_interval: float, http_timeout: float) -> None:
    """Send a submission (FILE, or a VARIANT.yaml built first) to the leaderboard.

    Lint runs first; the leaderboard and GPU come from the file's `#!POPCORN`
    directives unless given (a flag that contradicts a directive is an error).
    Every submission is recorded in the local ledger (`qrsub submissions list
    --local`). Ctrl-C while waiting leaves the job running.
    """
    mode = mode.lower()
    source = load_source(target or DEFAULT_FILE)
    report_problems(source, lint_problems(source, leaderboard, gpu), force)
    where = resolve_target(source.text, leaderboard, gpu)
    config = get_config()
    record = _base_record(config, source, where, mode)
    if dry_run:
        click.echo("dry run: nothing sent. The request would be:")
        click.echo("\n".join(_request_lines(config, source, where, mode)))
        write_json(json_path, {**record, "status": "dry_run"})
        return
    ledger = open_ledger(ledger_path)
    try:
        row_id = ledger.record_sending(
            file_name=source.file_name, file_sha256=source.sha256, leaderboard=where.leaderboard,
            gpu=where.gpu, mode=mode, api_url=config.api_url, variant=source.variant,
            knobs=source.knobs)
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from None
    with make_client(config, poll_interval, http_timeout) as client:
        if mode == "profile":
            return _profile(ctx, client, ledger, row_id, source, where, json_path, record)
        accepted = _send(client, ledger, row_id, source, where, mode, json_path, record)
        record["submission_id"] = accepted.submission_id
        _announce(accepted, where, mode)
        if no_wait:
            write_json(json_path, {**record, "status": "submitted"})
            click.echo(f"Not waiting. Follow it with: qrsub submissions wait "
                       f"{accepted.submission_id}")
            return
        follow(ctx, client, ledger, row_id, accepted.submission_id, mode,
               json_path, record)


def _send(client: Client, ledger: Ledger, row_id: int, source: Source, where: Target,
          mode: str, json_path: Path | None, record: dict) -> Accepted:
    """The POST; a refusal or a lost answer is recorded, then reported."""
    try:
        accepted = client.submit(where.leaderboard, where.gpu, mode, source.file_name,
                                 source.content)
    except ServiceError as exc:
        raise _refused(ledger, row_id, exc, json_path, record) from None
    except KeyboardInterrupt:
        ledger.mark_final(row_id, status="unconfirmed", error="interrupted during the upload")
        click.echo("\nInterrupted during the upload: the service may have received it; "
                   "check `qrsub submissions list` before sending again.", err=True)
        raise click.exceptions.Exit(130) from None
    ledger.mark_submitted(row_id, accepted.submission_id)
    return accepted


def _refused(ledger: Ledger, row_id: int, exc: ServiceError, json_path: Path | None,
             record: dict) -> click.ClickException:
    """Record a POST that got no 202, and the error to show for it."""
    # Without a 202 we cannot know whether an upload that lost its answer arrived.
    status = "rejected" if isinstance(exc, ApiError) else "unconfirmed"
    hint = ("" if status == "rejected" else "\nThe service may have received it: check "
            "`qrsub submissions list` before sending again.")
    ledger.mark_final(row_id, status=status, error=str(exc))
    write_json(json_path, {**record, "status": status, "error": str(exc)})
    return click.ClickException(f"{exc}{hint}")


def _announce(accepted: Accepted, where: Target, mode: str) -> None:
    queue = accepted.runner_queue if isinstance(accepted.runner_queue, dict) else None
    line = (f"Submitted: id {accepted.submission_id}, {where.leaderboard} on {where.gpu}, "
            f"{mode} mode.")
    if queue:
        line += (f" Queue: {queue.get('queued_jobs', '?')} job(s) ahead on runner "
                 f"{queue.get('runner', '?')} ({queue.get('gpu', where.gpu)}).")
    click.echo(line)


def _profile(ctx: click.Context, client: Client, ledger: Ledger, row_id: int, source: Source,
             where: Target, json_path: Path | None, record: dict) -> None:
    """Profile mode: the service streams progress and a result instead of an id to poll."""
    try:
        result = client.submit_streaming(where.leaderboard, where.gpu, "profile",
                                         source.file_name, source.content,
                                         on_status=lambda msg: click.echo(f"  {msg}"))
    except ServiceError as exc:
        raise _refused(ledger, row_id, exc, json_path, record) from None
    submission = result if isinstance(result, dict) else {"result": result}
    outcome = outcome_of(submission, "profile")
    sid = submission.get("id") if isinstance(submission.get("id"), int) else None
    if sid is not None:
        ledger.mark_submitted(row_id, sid)
    ledger.mark_final(row_id, status=outcome.status, score=outcome.score_s,
                      runs=outcome.to_json()["runs"], cases=outcome.cases_json(),
                      error=outcome.error)
    render_outcome(console(), outcome, sid)
    if not outcome.runs():
        click.echo(json.dumps(result, indent=2, default=str))
    write_json(json_path, {**record, "submission_id": sid, **outcome.to_json(),
                           "result": result})
    if not outcome.ok:
        ctx.exit(1)
