"""`qrsub submissions`: list, show, wait for and delete one's leaderboard submissions.

The service is the source of truth for what it holds; the local ledger adds
what only we know (which variant a file came from) and keeps the record of
everything we sent, including rows that a crash left unfinished.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import click

from qrsub.submit.client import FAILED_JOB_STATES, ApiError, JobFailed, ServiceError, job_status
from qrsub.submit.ledger import LedgerError
from qrsub.submit.outcome import (console, follow, get_config, make_client, open_ledger, outcome_of,
                                  render_outcome, service_options, to_seconds)


@contextmanager
def _reported() -> Iterator[None]:
    """Service and ledger failures become one-line errors, not tracebacks."""
    try:
        yield
    except (ServiceError, LedgerError) as exc:
        raise click.ClickException(str(exc)) from None


@click.group("submissions", epilog="""\b
Examples:
  qrsub submissions list --leaderboard qr_v2 --limit 10
  qrsub submissions list --local          # the ledger: what this machine sent
  qrsub submissions list --sweep ID       # one `qrsub sweep --remote`'s candidates and scores
  qrsub submissions show 1234 --code
  qrsub submissions wait 1234             # resume after Ctrl-C or a crash
  qrsub submissions delete 1234""")
def submissions() -> None:
    """Your submissions on the leaderboard service, and the local ledger of them."""


@submissions.command("list")
@click.option("--leaderboard", "-l", help="Only this leaderboard.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=20, show_default=True,
              help="At most this many (newest first).")
@click.option("--local", is_flag=True, help="Read the local ledger instead of the service "
              "(no network, no credentials needed).")
@click.option("--sweep", "sweep_id", metavar="ID", help="One `qrsub sweep --remote`'s submissions, "
              "from the ledger: candidate, knobs, round, status, geomean and ratio to BASE.")
@service_options
def list_cmd(leaderboard: str | None, limit: int, local: bool, sweep_id: str | None,
             ledger_path: str | None, poll_interval: float, http_timeout: float) -> None:
    """List submissions, with the variant of each one the ledger knows.

    \b
    Examples:
      qrsub submissions list                     # the service's 20 newest
      qrsub submissions list -l qr_v2 -n 5
      qrsub submissions list --local             # the ledger: no network, no credentials
      qrsub submissions list --sweep champion-3f2a1c   # one remote sweep's candidates
    """
    from rich.table import Table

    ledger = open_ledger(ledger_path)
    if sweep_id:
        return _list_sweep(ledger, sweep_id)
    if local:
        with _reported():
            rows = ledger.rows(leaderboard=leaderboard, limit=limit)
        table = Table(title=f"ledger {ledger.path}", title_justify="left")
        for name in ("time", "id", "leaderboard", "gpu", "mode", "file", "variant", "status",
                     "score us"):
            table.add_column(name)
        for r in rows:
            table.add_row(r.created_at[:16].replace("T", " "), "-" if r.submission_id is None else str(r.submission_id),
                          r.leaderboard, r.gpu, r.mode, r.file_name, r.variant or "-", r.status,
                          _us(r.score))
        console().print(table)
        return
    config = get_config()
    with _reported(), make_client(config, poll_interval, http_timeout) as client:
        items = client.list_submissions(leaderboard, limit)
        ids = [i["id"] for i in items if isinstance(i.get("id"), int)]
        variants = ledger.variants(ids, config.api_url)
    table = Table(title_justify="left")
    for name in ("id", "leaderboard", "file", "time", "done", "scores us", "variant"):
        table.add_column(name)
    for item in items:
        scores = ", ".join(f"{r.get('gpu_type', '?')}: {_us(to_seconds(r.get('score')))}"
                           for r in item.get("runs") or [] if isinstance(r, dict))
        table.add_row(str(item.get("id")), str(item.get("leaderboard_name", "")),
                      str(item.get("file_name", "")), str(item.get("submission_time", "")),
                      "yes" if item.get("done") else "no", scores or "-",
                      variants.get(item.get("id"), "-"))
    console().print(table)


def _list_sweep(ledger, sweep_id: str) -> None:
    from qrsub.submit.sweep_remote import sweep_table

    with _reported():
        rows = ledger.sweep_rows(sweep_id) if ledger.path.exists() else []
        known = ledger.sweep_ids() if ledger.path.exists() and not rows else []
    if not rows:
        raise click.ClickException(f"the ledger {ledger.path} has no sweep {sweep_id!r}; "
                                   + (f"its sweeps: {', '.join(known)}" if known else "it holds no sweep"))
    console().print(sweep_table(rows))


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.3f}"


@submissions.command("show")
@click.argument("submission_id", type=int)
@click.option("--code", is_flag=True, help="Also print the submitted source.")
@service_options
def show(submission_id: int, code: bool, ledger_path: str | None, poll_interval: float,
         http_timeout: float) -> None:
    """Show one submission: its job, runs, per-case results and score.

    \b
    Examples:
      qrsub submissions show 1234
      qrsub submissions show 1234 --code         # and the file the service holds
    """
    config = get_config()
    with _reported(), make_client(config, poll_interval, http_timeout) as client:
        sub = client.show(submission_id)
        row = open_ledger(ledger_path).find(submission_id, config.api_url)
    con = console()
    con.print(f"submission {sub.get('id', submission_id)}: {sub.get('leaderboard_name', '?')}, "
              f"file {sub.get('file_name', '?')}, sent {sub.get('submission_time', '?')}"
              + (f", variant {row.variant}" if row and row.variant else ""))
    status = job_status(sub)
    failure = (JobFailed(status, str((sub.get("job") or {}).get("error") or ""), sub)
               if status in FAILED_JOB_STATES else None)
    if sub.get("done") or failure or sub.get("runs"):
        render_outcome(con, outcome_of(sub, row.mode if row else None, failure), submission_id)
    else:
        con.print(f"not done yet (job: {status or 'queued'}); follow it with "
                  f"`qrsub submissions wait {submission_id}`")
    if code:
        click.echo(sub.get("code") or "(the service returned no code)")


@submissions.command("wait")
@click.argument("submission_id", type=int)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the outcome to this JSON file.")
@service_options
@click.pass_context
def wait(ctx: click.Context, submission_id: int, json_path: Path | None,
         ledger_path: str | None, poll_interval: float, http_timeout: float) -> None:
    """Wait for a submission to finish, print its results and complete its ledger row.

    Use it after Ctrl-C, --no-wait or a crash during `qrsub submit`. Exit status
    as for `qrsub submit`.

    \b
    Examples:
      qrsub submissions wait 1234
      qrsub submissions wait 1234 --json out.json
    """
    config = get_config()
    ledger = open_ledger(ledger_path)
    with _reported():
        row = ledger.find(submission_id, config.api_url)
    if row is None:
        click.echo(f"(submission {submission_id} is not in the ledger {ledger.path}; "
                   f"waiting without recording)", err=True)
    extra = {"submission_id": submission_id, "api_url": config.api_url}
    if row is not None:
        extra.update(file_name=row.file_name, file_sha256=row.file_sha256, variant=row.variant,
                     knobs=row.knobs, leaderboard=row.leaderboard, gpu=row.gpu, mode=row.mode)
    with _reported(), make_client(config, poll_interval, http_timeout) as client:
        follow(ctx, client, ledger, row.row_id if row else None, submission_id,
               row.mode if row else None, json_path, extra)


@submissions.command("delete")
@click.argument("submission_id", type=int)
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@service_options
def delete(submission_id: int, force: bool, ledger_path: str | None, poll_interval: float,
           http_timeout: float) -> None:
    """Delete one of your submissions from the service (the ledger keeps its record).

    \b
    Examples:
      qrsub submissions delete 1234              # asks first
      qrsub submissions delete 1234 --force
    """
    config = get_config()
    if not force:
        click.confirm(f"Delete submission {submission_id} from the service? "
                      f"This cannot be undone", abort=True)
    with _reported(), make_client(config, poll_interval, http_timeout) as client:
        try:
            client.delete(submission_id)
        except ApiError as exc:
            raise click.ClickException(f"{exc}\n(only your own submissions can be deleted; "
                                       f"`qrsub submissions list` shows them)") from None
        open_ledger(ledger_path).mark_deleted(submission_id, config.api_url)
    click.echo(f"Deleted submission {submission_id}.")
