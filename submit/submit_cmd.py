"""`qrsub submit`: check a submission, send it to the leaderboard, follow it to its score.

The steps, each a function below: load the file (qrsub's one build, for a
variant), lint it (the service's hard rules cannot be forced past; concurrent
graph branches pass only with --accept-concurrency-risk, not --force), settle the
leaderboard and GPU against the file's `#!POPCORN` directives (a dry run stops
here: it reads no credentials and talks to no one), record a ledger row, ask
the service which GPUs the leaderboard offers, POST, then follow it
(qrsub.submit.outcome, shared with `qrsub submissions`): poll with a live
display and print the runs, the per-case tables and the geometric-mean score.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from qrsub.cli import DEFAULT_SUBMISSION
from qrsub.rules import (ACCEPT_CONCURRENCY_FLAG, CONCURRENCY_RISK, CONCURRENT_RULE, LEADERBOARD_GPUS,
                         gpu_not_offered, header_directives, parse_directives)
from qrsub.submit.client import (CLI_ID_HEADER, MODES, Accepted, ApiError, Client, NotSent, ServiceError,
                                 submission_path)
from qrsub.submit.config import CLI_ID_ENV, URL_ENV, ConfigError, load_api_url
from qrsub.submit.ledger import Ledger, LedgerError
from qrsub.submit.outcome import (console, follow, get_config, make_client, open_ledger, outcome_of,
                                  render_outcome, service_options, write_json)

DEFAULT_FILE = Path(DEFAULT_SUBMISSION)
DEFAULT_LEADERBOARD = "qr_v2"
DEFAULT_GPU = LEADERBOARD_GPUS[DEFAULT_LEADERBOARD][0]


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

    @property
    def shown(self) -> str:
        """How lint lines name it: a built variant's line numbers are the built file's."""
        return f"{self.path} -> {self.file_name}" if self.knobs is not None else str(self.path)


def load_source(path: Path) -> Source:
    """The bytes to send: the file itself, or the submission built from a variant."""
    from qrsub.cli import build_or_fail

    built = build_or_fail(path)
    name = f"{built.variant.name}.py" if built.variant else path.name
    knobs = variant_knobs(built.variant) if built.variant else None
    return Source(path=path, file_name=name, content=built.content, variant=built.variant_name, knobs=knobs)


def variant_knobs(variant: Any) -> dict:
    """What the ledger keeps of a resolved variant: enough to rebuild or compare it."""
    return {"leaderboard": variant.leaderboard, "gpu": variant.gpu,
            "parents": [str(p) for p in variant.parents],
            "routes": [dataclasses.asdict(r) for r in variant.routes],
            "settings": dataclasses.asdict(variant.settings)}


# ---- lint: the service's rules, checked before anything is sent ------------

def lint_problems(source: Source, leaderboard: str | None, gpu: str | None,
                  where: "Target | None" = None) -> list:
    """qrsub.lint's problems, less 'directive missing' when the flags supply what is missing.
    Given WHERE, its `gpu` check is of the GPU this goes to, not of every GPU the file lists."""
    from qrsub.lint import Problem, lint_bytes

    problems = lint_bytes(source.content, source.file_name)
    present = header_directives(source.text)
    given = {"leaderboard": leaderboard, "gpu": gpu}
    if all(given[key] for key in given if key not in present):
        problems = [p for p in problems if p.rule != "directive-missing"]
    if where is not None:
        problems = [p for p in problems if p.rule != "gpu"]
        why = gpu_not_offered(where.leaderboard, where.gpu)
        if why:
            line = next((d.line for d in parse_directives(source.text) if d.in_header and d.key == "gpu"), 1)
            problems.append(Problem(line, "gpu", why, False))
    return problems


def report_problems(source: Source, problems: list, force: bool, accept_risk: bool = False) -> None:
    """Print PROBLEMS; refuse on hard ones always, on concurrent graph branches unless ACCEPT_RISK
    (--force does not cover them), on the others unless --force. An accepted risk is printed."""
    for p in problems:
        kind = "error" if p.hard else "warning"
        click.echo(f"{source.shown}:{p.line}: {kind} [{p.rule}] {p.message}", err=True)
    hard = [p for p in problems if p.hard]
    risky = [p for p in problems if p.rule == CONCURRENT_RULE]
    soft = [p for p in problems if not p.hard and p.rule != CONCURRENT_RULE]
    if hard:
        raise click.ClickException(f"not sent: {len(hard)} problem(s) the service would "
                                   f"refuse (--force cannot override these); fix them first")
    if risky and not accept_risk:
        raise click.ClickException(f"not sent: it runs concurrent graph branches [{CONCURRENT_RULE}], which "
                                   f"the service warns may disqualify it; pass {ACCEPT_CONCURRENCY_FLAG} to "
                                   f"send it knowingly (--force does not)")
    if soft and not force:
        raise click.ClickException(f"not sent: {len(soft)} lint warning(s); fix them, or "
                                   f"pass --force to submit anyway")
    if risky:
        click.echo(f"{source.shown}: sending with the risk accepted ({ACCEPT_CONCURRENCY_FLAG}): "
                   f"{CONCURRENCY_RISK}", err=True)


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


# ---- the command ---------------------------------------------------------------

def _dry_run(source: Source, where: Target, mode: str, json_path: Path | None) -> None:
    """Show the request that would go out, and stop: no credentials read, nothing sent."""
    try:
        api_url = load_api_url()
        base, unset = api_url, ""
    except ConfigError:
        api_url, base = None, f"${URL_ENV}"
        unset = f"  ({URL_ENV} is not set: set it before sending; docs/service.md says where it comes from)"
    path = submission_path(where.leaderboard, where.gpu, mode)
    click.echo("dry run: nothing sent, no credentials read. The request would be:")
    click.echo("\n".join([
        f"POST {base}{path}{unset}",
        f"  {CLI_ID_HEADER}: your cli_id (from ${CLI_ID_ENV} or ~/.popcorn.yaml; not read in a dry run)",
        f"  multipart part 'file': {source.file_name} ({len(source.content):,} bytes, sha256 {source.sha256})",
        f"leaderboard {where.leaderboard}, gpu {where.gpu} ({where.origin}), mode {mode}",
        f"endpoint path {path}"]))
    write_json(json_path, {**_base_record(api_url, source, where, mode), "status": "dry_run"})


def _base_record(api_url: str | None, source: Source, target: Target, mode: str) -> dict:
    return {"api_url": api_url, "file": str(source.path), "file_name": source.file_name,
            "file_sha256": source.sha256, "variant": source.variant, "knobs": source.knobs,
            "leaderboard": target.leaderboard, "gpu": target.gpu, "mode": mode}


@click.command("submit", epilog="""\b
Examples:
  qrsub submit                                  # build/submission.py, leaderboard mode
  qrsub submit variants/champion-b200.yaml --mode test
  qrsub submit task/submission.py -l qr_v2 -g B200 -m benchmark --json out.json
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
@click.option("--dry-run", is_flag=True, help="Lint, settle leaderboard and GPU, print the request "
              "and stop: needs no credentials, sends nothing.")
@click.option("--force", is_flag=True, help="Submit despite lint warnings (never despite "
              "the service's own rules, nor despite concurrent graph branches).")
@click.option(ACCEPT_CONCURRENCY_FLAG, "accept_risk", is_flag=True,
              help="Send a file whose graph branches run concurrently (graph.mode concurrent: "
                   "lint's concurrent-graph), which the service warns may disqualify; "
                   "the risk is printed.")
@service_options
@click.pass_context
def submit(ctx: click.Context, target: Path | None, leaderboard: str | None, gpu: str | None,
           mode: str, no_wait: bool, json_path: Path | None, dry_run: bool, force: bool,
           accept_risk: bool, ledger_path: str | None, poll_interval: float, http_timeout: float) -> None:
    """Send a submission (FILE, or a VARIANT.yaml built first) to the leaderboard.

    Lint runs first; the leaderboard and GPU come from the file's `#!POPCORN`
    directives unless given (a flag that contradicts a directive is an error).
    Every submission is recorded in the local ledger (`qrsub submissions list
    --local`). Ctrl-C while waiting leaves the job running.
    """
    mode = mode.lower()
    source = load_source(target or DEFAULT_FILE)
    where = resolve_target(source.text, leaderboard, gpu)
    report_problems(source, lint_problems(source, leaderboard, gpu, where), force, accept_risk)
    if dry_run:
        return _dry_run(source, where, mode, json_path)
    config = get_config()
    record = _base_record(config.api_url, source, where, mode)
    ledger = open_ledger(ledger_path)
    try:
        row_id = ledger.record_sending(
            file_name=source.file_name, file_sha256=source.sha256, leaderboard=where.leaderboard,
            gpu=where.gpu, mode=mode, api_url=config.api_url, variant=source.variant,
            knobs=source.knobs)
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from None
    with make_client(config, poll_interval, http_timeout) as client:
        _require_offered(client, ledger, row_id, where, json_path, record)
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


def _require_offered(client: Client, ledger: Ledger, row_id: int, where: Target,
                     json_path: Path | None, record: dict) -> None:
    """Ask the service which GPUs the leaderboard offers; refuse, before uploading, one it does not."""
    try:
        offered = [str(g) for g in client.gpus(where.leaderboard)]
    except ServiceError as exc:
        raise _not_sent(ledger, row_id, f"could not ask the service which GPUs {where.leaderboard} "
                        f"offers: {exc}", json_path, record) from None
    except KeyboardInterrupt:
        ledger.mark_final(row_id, status="not_sent", error="interrupted before the upload")
        raise click.exceptions.Exit(130) from None
    if where.gpu not in offered:
        raise _not_sent(ledger, row_id, f"{where.leaderboard} does not offer {where.gpu}; the service "
                        f"offers {', '.join(offered) or 'no GPU'}: pick one with --gpu (and in the "
                        f"file's `#!POPCORN gpu`)", json_path, record)


def _not_sent(ledger: Ledger, row_id: int, error: str, json_path: Path | None,
              record: dict) -> click.ClickException:
    """Record that nothing was uploaded, and the error to show for it."""
    ledger.mark_final(row_id, status="not_sent", error=error)
    write_json(json_path, {**record, "status": "not_sent", "error": error})
    return click.ClickException(f"not sent: {error}")


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
    if isinstance(exc, NotSent):  # the connection failed before the upload began
        return _not_sent(ledger, row_id, f"{exc}; sending again cannot make a duplicate", json_path, record)
    # Once the upload began, an answer that never came leaves us not knowing whether it arrived.
    status = "rejected" if isinstance(exc, ApiError) else "unconfirmed"
    hint = ("" if status == "rejected" else "\nThe upload began, so the service may have received it: "
            "check `qrsub submissions list` before sending again.")
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
