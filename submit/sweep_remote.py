"""`qrsub sweep --remote`: time a sweep's candidates on the service's own runners.

This is the executor of `qrsub sweep` (`qrsub.sweep.Executor`) that submits
instead of timing on a local GPU; the grid, the candidate variants, the ranking
and the variant writer are qrsub.sweep's.

1. prepare: build and lint BASE and every candidate, all of them before
   anything is sent. The sweep's id is a hash of what would be sent (the target
   and every file's sha256), so the same command names the same sweep.
2. round 1: BASE, then each candidate, in benchmark mode; one at a time unless
   --parallel K. With --repeat R, rounds 2..R submit BASE and the --leaders
   best candidates again, interleaved (the order alternates each round).
3. every submission is a ledger row carrying the sweep's id, the candidate,
   its knobs and its round, written before the upload. A rerun reads them
   first: a slot (candidate, round) whose row has an outcome is not sent again;
   a submitted one is followed; one whose upload got no answer is looked up in
   the service's list by its file name (unique to the slot) and adopted when
   there, sent again when not.
4. results: each finished row's per-case benchmark means (the run's `result`,
   kept in the ledger) become, per candidate, a summary against BASE
   (`qrsub.bench.report.summarize_repeats`): the interval is the range over the
   repeated submissions, and a win inside it is "not distinguishable".

A 429 is waited out for the time the service names (Retry-After, or its
detail), shown, and the same file sent again: a 429 means nothing was taken.
"""
from __future__ import annotations

import hashlib
import json
import queue
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import click

from qrsub import stats
from qrsub import sweep as sw
from qrsub.bench.report import spec_label, summarize_repeats
from qrsub.submit.client import ApiError, JobFailed, ServiceError, TransportError, WaitTimeout, retry_after_seconds
from qrsub.submit.config import ConfigError, load_api_url
from qrsub.submit.ledger import Ledger, Row
from qrsub.submit.outcome import get_config, make_client, outcome_of, record_outcome
from qrsub.submit.submit_cmd import Source, Target, lint_problems, load_source, report_problems, resolve_target

BASE = "BASE"                       # the base variant's name in the ledger and the tables
MODE = "benchmark"
RESULT_STATUSES = ("passed", "done", "check_failed", "failed", "timed_out", "hacked")
GOOD_STATUSES = ("passed", "done")
DEFAULT_429_WAIT = 60.0             # when a 429 names no time
MAX_429_WAITS = 20                  # per submission, then the sweep stops (rerun later)
LIST_LIMIT = 200                    # how far back the service's list is searched for an unanswered upload


# ---- what is sent --------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """BASE or one candidate: its name, the knobs the sweep set, the built file."""

    name: str
    knobs: dict
    source: Source


@dataclass(frozen=True)
class Slot:
    """One submission of the sweep: an entry in a round."""

    entry: Entry
    round: int

    @property
    def key(self) -> tuple[str, int]:
        return self.entry.name, self.round

    def label(self) -> str:
        return f"{self.entry.name} (round {self.round})"


@dataclass(frozen=True)
class Prepared:
    sweep_id: str
    target: Target
    entries: list[Entry]            # BASE first, then the grid's order

    def file_name(self, slot: Slot) -> str:
        """Unique to the slot, so an upload that got no answer can be found in the service's list."""
        stem = f"{Path(self.entries[0].source.file_name).stem}.{BASE}" if slot.entry.name == BASE else slot.entry.name
        return f"{stem}.r{slot.round}.{self.sweep_id.rsplit('-', 1)[-1]}.py"


def prepare(plan: sw.SweepPlan, gpu: str | None, force: bool = False,
            say: Callable[[str], None] = lambda text: None) -> Prepared:
    """Build and lint BASE and every candidate (their variant files must exist); raise
    SweepError naming each one that fails, before anything is sent. FORCE: lint
    warnings do not refuse (the service's own rules always do)."""
    named = [(BASE, plan.base, {})] + [(c.name, c.variant, sw.point_knobs(c.point)) for c in plan.candidates]
    entries, failures, targets = [], [], set()
    say(f"building and linting BASE and {len(plan.candidates)} candidate(s)...")
    for name, path, knobs in named:
        try:
            source = load_source(path)
            report_problems(source, lint_problems(source, None, gpu), force)
            target = resolve_target(source.text, None, gpu)
        except click.ClickException as exc:   # build_or_fail, report_problems, resolve_target: each says what to fix
            failures.append(f"  {name}: {exc.message}")
            continue
        targets.add((target.leaderboard, target.gpu))
        entries.append(Entry(name, knobs, source))
    if failures:
        raise sw.SweepError(f"{len(failures)} of {len(named)} file(s) cannot be sent (nothing was sent):\n"
                            + "\n".join(failures))
    if len(targets) != 1:
        raise sw.SweepError(f"the candidates name different targets {sorted(targets)}; give --gpu")
    (leaderboard, gpu_name), = targets
    target = Target(leaderboard, gpu_name, origin="the files' directives" if gpu is None else "--gpu")
    return Prepared(sweep_id_of(plan.base, target, entries), target, entries)


def sweep_id_of(base: Path, target: Target, entries: Sequence[Entry]) -> str:
    """BASE's stem and a hash of the target and every file sent: the same command, the same id."""
    what = {"leaderboard": target.leaderboard.lower(), "gpu": target.gpu, "mode": MODE,
            "files": [[e.name, e.source.sha256] for e in entries]}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()
    return f"{base.stem}-{digest[:10]}"


def first_round(prepared: Prepared) -> list[Slot]:
    return [Slot(e, 1) for e in prepared.entries]


def repeat_rounds(prepared: Prepared, leaders: Sequence[str], repeat: int) -> list[Slot]:
    """Rounds 2..REPEAT: BASE and the leaders, the order reversed every other round."""
    by_name = {e.name: e for e in prepared.entries}
    names = [BASE, *leaders]
    return [Slot(by_name[n], r) for r in range(2, repeat + 1) for n in (names if r % 2 == 0 else names[::-1])]


def leaders_of(results: Sequence[dict], k: int) -> list[str]:
    """The K best candidates timed cleanly on every case."""
    clean = [r for r in sw.rank(results) if (g := sw.geomean_of(r)) and g["complete"] and not sw.summary_failures(r)]
    return [r["name"] for r in clean[:k]]


# ---- what the ledger says --------------------------------------------------------------

def latest_rows(rows: Sequence[Row]) -> dict[tuple[str, int], Row]:
    """The newest row of each slot (candidate, round)."""
    out: dict[tuple[str, int], Row] = {}
    for row in rows:
        out[(row.sweep_candidate, row.sweep_round)] = row
    return out


def state_of(row: Row | None) -> str:
    """done (an outcome), running (a submission id, no outcome), unanswered (an upload
    without an answer: it may have arrived), or unsent (nothing the service took)."""
    if row is None:
        return "unsent"
    if row.status in RESULT_STATUSES:
        return "done"
    if row.status == "submitted":
        return "running"
    if row.status in ("sending", "unconfirmed"):
        return "unanswered"
    return "unsent"   # rejected (a 429 or a refusal), lost


def means_of(row: Row) -> tuple[dict, dict] | str:
    """(case key -> mean seconds, case key -> spec) of a finished row's benchmark run,
    or why it has none (the first failing case's error when the report names one)."""
    runs = [r for r in row.cases or [] if r.get("mode") == MODE]
    cases = runs[-1].get("cases") or [] if runs else []
    means, specs = {}, {}
    for case in cases:
        key = case.get("spec_text") or f"case {case.get('index')}"
        if case.get("status") != "pass" or not case.get("mean_ns"):
            return f"{row.status}: {spec_label(case.get('spec') or {}, key)}: {case.get('error') or 'not timed'}"
        means[key], specs[key] = case["mean_ns"] * 1e-9, case.get("spec") or {}
    if row.status not in GOOD_STATUSES:
        return f"{row.status}: {row.error or 'the service gave no reason'}"
    if not means:
        return "the run has no benchmark result"
    return means, specs


def results_from_rows(rows: Sequence[Row], names: Sequence[str] = ()) -> tuple[list[dict], dict[str, str], dict]:
    """One sweep's ledger rows as the sweep's results (one per candidate, `rank`'s input:
    NAMES first, in their order, with those the ledger has no row of as not sent), their
    knob labels, and what the ledger says of BASE (`base_runs` in the meta)."""
    latest = latest_rows(rows)
    order = list(dict.fromkeys([*names, *(r.sweep_candidate for r in rows if r.sweep_candidate != BASE)]))
    labels = {r.sweep_candidate: sw.knobs_label(r.sweep_point or {}) for r in rows}
    by_name: dict[str, list[Row]] = {}
    for (name, _), row in sorted(latest.items(), key=lambda kv: kv[0][1]):
        by_name.setdefault(name, []).append(row)
    gpu = rows[0].gpu if rows else "?"
    base_rows = [r for r in by_name.get(BASE, []) if state_of(r) == "done"]
    base = [m for m in map(means_of, base_rows) if not isinstance(m, str)]
    base_errors = [f"#{r.submission_id} {m}" for r in base_rows if isinstance(m := means_of(r), str)]
    meta = {"gpu": gpu, "base_runs": {"submissions": [r.submission_id for r in by_name.get(BASE, [])],
                                      "errors": base_errors}}
    results = []
    for name in order:
        mine = by_name.get(name, [])
        done = [r for r in mine if state_of(r) == "done"]
        result = {"name": name, "where": " ".join(f"#{r.submission_id}" for r in mine if r.submission_id) or "-",
                  "device": f"{gpu} (the service's runners)"}
        failed = [f"#{r.submission_id} {m}" for r in done if isinstance(m := means_of(r), str)]
        if failed:
            results.append({**result, "stage": "service", "error": "; ".join(failed)})
        elif not done:
            states = ", ".join(sorted({state_of(r) for r in mine})) or "unsent"
            results.append({**result, "stage": "no result", "error": f"{states}: rerun the same command"})
        elif not base:
            why = "; ".join(base_errors) or "BASE has no result yet"
            results.append({**result, "stage": "BASE", "error": f"nothing to compare with: {why}"})
        else:
            cand = [means_of(r)[0] for r in done]
            summary = summarize_repeats([m for m, _ in base], cand, base[0][1], [BASE, name], device=gpu)
            results.append({**result, "stage": MODE, "summary": summary})
    if base:
        scores = [stats.geomean(list(m.values())) * 1e6 for m, _ in base]
        meta["base_runs"]["geomean_us"] = scores
    return results, labels, meta


def base_line(meta: dict) -> str:
    """One line on BASE: its submissions, each one's geomean and their spread."""
    base = meta["base_runs"]
    ids = " ".join(f"#{i}" for i in base["submissions"] if i) or "none"
    scores = base.get("geomean_us") or []
    if not scores:
        return f"BASE: submissions {ids}; no benchmark result" + (f" ({'; '.join(base['errors'])})" if base["errors"] else "")
    spread = (max(scores) - min(scores)) / stats.median(scores)
    what = f"spread {spread:.2%} over {len(scores)}" if len(scores) > 1 else "one submission: spread not measured"
    return (f"BASE: submissions {ids}; geomean {', '.join(f'{s:,.2f}' for s in scores)} µs ({what}); "
            f"a ratio whose range contains 1 is {stats.INDISTINGUISHABLE!r}")


def sweep_table(rows: Sequence[Row]):
    """`qrsub submissions list --sweep ID`: one line per submission of the sweep, with its score."""
    from rich.markup import escape
    from rich.table import Table

    latest = latest_rows(rows)
    base = [m for r in latest.values() if r.sweep_candidate == BASE and not isinstance(m := means_of(r), str)
            and state_of(r) == "done"]
    base_us = stats.median([stats.geomean(list(m.values())) for m, _ in base]) * 1e6 if base else None
    first = rows[0]
    variant = next((r.variant for r in rows if r.sweep_candidate == BASE), None) or "?"
    table = Table(title=f"sweep {first.sweep_id}: {first.leaderboard} on {first.gpu}, {first.mode} mode "
                        f"(BASE: {variant})", title_justify="left")
    for name in ("candidate", "knobs", "round", "id", "status", "geomean us", "/ BASE", "sent", "error"):
        table.add_column(name, justify="right" if name in ("round", "geomean us", "/ BASE") else "left")
    for (name, rnd), row in latest.items():
        m = means_of(row) if state_of(row) == "done" else None
        score = stats.geomean(list(m[0].values())) * 1e6 if isinstance(m, tuple) else None
        table.add_row(name, sw.knobs_label(row.sweep_point or {}) or "-", str(rnd),
                      "-" if row.submission_id is None else str(row.submission_id), row.status,
                      "-" if score is None else f"{score:,.3f}",
                      "-" if score is None or base_us is None else f"{score / base_us:.4f}",
                      row.created_at[:16].replace("T", " "), escape((row.error or "")[:60]))
    return table


# ---- the executor ----------------------------------------------------------------------

def remote_style(gpu: str) -> sw.TableStyle:
    """The ranking table's words for a sweep timed by submissions."""
    return sw.TableStyle(title=f"qrsub sweep --remote: geomean time / BASE on {gpu} (below 1 is faster), "
                               "[min, max] over repeated submissions",
                         interval="min, max", where="submissions", plot_note="[min, max] over repeated submissions")


@dataclass
class RemoteExecutor:
    """Times every candidate and BASE by benchmark-mode submissions (see the module's text)."""

    gpu: str | None                  # None: the GPU the files' directives name
    repeat: int                      # rounds for BASE and the leaders
    leaders: int
    parallel: int                    # submissions in flight at once
    max_submissions: int | None      # sent by one run
    ledger_path: Path
    poll_interval: float
    http_timeout: float
    force: bool = False              # send despite lint warnings
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self.ledger_path = Path(self.ledger_path)
        self.style = remote_style(self.gpu or "the GPU the files name")

    def check(self, plan: sw.SweepPlan) -> None:
        """Before anything is written: the service's address and the user's id are set."""
        get_config()

    # -- --dry-run

    def describe(self, plan: sw.SweepPlan) -> list[str]:
        """The grid, the sweep's id, how many submissions it would send (the ledger's rows of
        it counted), and the schedule. Needs no credentials; writes nothing."""
        with tempfile.TemporaryDirectory(prefix="qrsub-sweep-") as tmp:
            scratch = replace(plan, candidates=[replace(c, variant=Path(tmp) / c.variant.name)
                                                for c in plan.candidates])
            sw.emit_variants(scratch)
            prepared = prepare(scratch, self.gpu, self.force, lambda text: click.echo(text, err=True))
        rows = self._existing_rows(prepared.sweep_id)
        latest = latest_rows(rows)
        first = first_round(prepared)
        states = [state_of(latest.get(s.key)) for s in first]
        to_send = states.count("unsent") + states.count("unanswered")
        t = prepared.target
        lines = sw.describe_grid(plan)
        lines.append(f"sweep id: {prepared.sweep_id} (rerun the same command to resume it; "
                     f"`qrsub sweep --remote --report {prepared.sweep_id}` shows it)")
        lines.append(f"each of BASE and the {len(plan.candidates)} candidate(s): built and linted (all pass), sent to "
                     f"{t.leaderboard} on {t.gpu} in {MODE} mode; a run that fails the service's check is excluded")
        lines.append(f"round 1: {len(first)} submission(s): {states.count('done')} with a result, "
                     f"{states.count('running')} running (followed, not sent again), {to_send} to send"
                     + (f" ({states.count('unanswered')} of them first looked up in the service's list)"
                        if states.count("unanswered") else ""))
        more = 0
        if self.repeat > 1:
            k = min(self.leaders, len(plan.candidates))
            planned = (self.repeat - 1) * (1 + k)
            done = sum(1 for (name, rnd), row in latest.items() if rnd > 1 and state_of(row) != "unsent")
            more = max(0, planned - done)
            lines.append(f"rounds 2-{self.repeat}: BASE and the {k} leading candidate(s) again, interleaved: "
                         f"up to {more} more submission(s)")
        total = to_send + more
        capped = self.max_submissions is not None and self.max_submissions < total
        lines.append(f"submissions to send: {'up to ' if more else ''}{total}"
                     + (f", capped at {self.max_submissions} by --max-submissions" if capped else ""))
        lines.append(("one at a time" if self.parallel == 1 else f"up to {self.parallel} at once")
                     + "; a 429 is waited out for the time the service names")
        lines.append(f"ledger: {self.ledger_path}")
        return lines

    def _existing_rows(self, sweep_id: str) -> list[Row]:
        """The ledger's rows of SWEEP_ID without creating a ledger (a dry run writes nothing)."""
        if not self.ledger_path.exists():
            return []
        try:
            api_url = load_api_url()
        except ConfigError:
            api_url = None
        return Ledger(self.ledger_path).sweep_rows(sweep_id, api_url)

    # -- the run

    def run(self, plan: sw.SweepPlan, console) -> sw.Timing:
        prepared = prepare(plan, self.gpu, self.force, console.print)
        config = get_config()
        ledger = Ledger(self.ledger_path)
        rows = ledger.sweep_rows(prepared.sweep_id, config.api_url)   # opens (and migrates) it before any thread
        t = prepared.target
        self.style = remote_style(t.gpu)
        console.print(f"sweep {prepared.sweep_id}: BASE and {len(plan.candidates)} candidate(s) on {t.leaderboard} "
                      f"{t.gpu}, {MODE} mode; ledger {ledger.path}"
                      + (f"; {len(rows)} row(s) of it already there" if rows else ""))
        session = _Session(prepared, config, ledger, console, self)
        try:
            session.run_slots(first_round(prepared), "round 1")
            if self.repeat > 1 and session.stopped is None and not session.pending:
                results, _, _ = results_from_rows(ledger.sweep_rows(prepared.sweep_id, config.api_url))
                leaders = leaders_of(results, self.leaders)
                if leaders:
                    console.print(f"rounds 2-{self.repeat}: BASE and {', '.join(leaders)} again, interleaved")
                    session.run_slots(repeat_rounds(prepared, leaders, self.repeat), f"rounds 2-{self.repeat}")
        except KeyboardInterrupt:
            console.print(f"\nInterrupted. Submissions already sent keep running on the service; rerun the same "
                          f"command to follow them (nothing is sent twice), or `qrsub submissions list --sweep "
                          f"{prepared.sweep_id}`.")
            raise click.exceptions.Exit(130) from None
        results, _, meta = results_from_rows(ledger.sweep_rows(prepared.sweep_id, config.api_url),
                                             [c.name for c in plan.candidates])
        notes = [base_line(meta)]
        if session.capped:
            notes.append(f"--max-submissions {self.max_submissions} reached: {len(session.capped)} submission(s) "
                         f"not sent ({', '.join(s.label() for s in session.capped)}); rerun the same command "
                         "(with a higher cap) to send them")
        if session.pending:
            notes.append(f"{len(session.pending)} submission(s) without an outcome yet "
                         f"({', '.join(session.pending)}); rerun the same command to follow them")
        notes.append(f"sweep {prepared.sweep_id}: {session.sent} submission(s) sent by this command; "
                     f"`qrsub submissions list --sweep {prepared.sweep_id}` lists them")
        return sw.Timing(results, complete=not (session.capped or session.pending or session.stopped),
                         notes=notes, error=session.stopped,
                         meta={"sweep_id": prepared.sweep_id, "leaderboard": t.leaderboard, "gpu": t.gpu, **meta})


class _Session:
    """Sends and follows slots with up to `parallel` in flight, recording each in the ledger."""

    def __init__(self, prepared: Prepared, config, ledger: Ledger, console, ex: RemoteExecutor):
        self.prepared = prepared
        self.config = config
        self.ledger = ledger
        self.console = console
        self.ex = ex
        self.lock = threading.Lock()
        self.sent = 0
        self.capped: list[Slot] = []
        self.pending: list[str] = []     # slots sent or followed whose outcome is not known yet
        self.stopped: str | None = None  # why nothing more is sent (a refusal, no answer, a bug)

    def say(self, text: str) -> None:
        from rich.markup import escape

        self.console.print(escape(text))

    def stop(self, why: str) -> None:
        with self.lock:
            self.stopped = self.stopped or why
        self.say(f"  stopping: {why}")

    def run_slots(self, slots: Sequence[Slot], what: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        todo: queue.Queue = queue.Queue()
        for slot in slots:
            todo.put(slot)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=self.console) as progress:
            task = progress.add_task(what, total=len(slots))
            threads = [threading.Thread(target=self._drain, args=(todo, progress, task), daemon=True)
                       for _ in range(min(self.ex.parallel, len(slots)))]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):   # join with a timeout: Ctrl-C still reaches us
                for t in threads:
                    t.join(0.1)

    def _drain(self, todo: queue.Queue, progress, task) -> None:
        from qrsub.bench.engine import error_text

        with make_client(self.config, self.ex.poll_interval, self.ex.http_timeout) as client:
            while self.stopped is None:
                try:
                    slot = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    self._one(slot, client, lambda text: progress.update(task, description=text))
                except Exception as exc:  # a bug here must stop the sweep loudly, not end a thread quietly
                    self.stop(f"{slot.label()}: {error_text(exc)}")
                progress.advance(task)

    def _latest(self, slot: Slot) -> Row | None:
        return latest_rows(self.ledger.sweep_rows(self.prepared.sweep_id, self.config.api_url)).get(slot.key)

    def _one(self, slot: Slot, client, status: Callable[[str], None]) -> None:
        row = self._latest(slot)
        state = state_of(row)
        if state == "done":
            self.say(f"  {slot.label()}: #{row.submission_id} has its result ({row.status}); not sent again")
            return
        if state == "unanswered":
            sid = self._look_up(row, client)
            if sid is None and self.stopped is None:
                self.ledger.mark_final(row.row_id, status="lost", error="the upload got no answer and the service "
                                       "does not list it: sent again")
                self.say(f"  {slot.label()}: its last upload never reached the service; sending it again")
                state = "unsent"
            elif sid is not None:
                self.ledger.mark_submitted(row.row_id, sid)
                self.say(f"  {slot.label()}: its unanswered upload is submission {sid} on the service; following it")
                row, state = self.ledger.get(row.row_id), "running"
            else:
                return
        if state == "running":
            self.say(f"  {slot.label()}: #{row.submission_id} is still running; following it, not sending again")
            return self._follow(slot, row.row_id, row.submission_id, client, status)
        sent = self._send(slot, client, status)
        if sent is not None:
            self._follow(slot, *sent, client, status)

    def _look_up(self, row: Row, client) -> int | None:
        """The service's id of ROW's upload when its list has the file and no ledger row claims it."""
        try:
            items = client.list_submissions(row.leaderboard, LIST_LIMIT)
        except ServiceError as exc:
            self.stop(f"cannot tell whether {row.file_name} reached the service ({exc}); nothing more sent")
            return None
        claimed = {r.submission_id for r in self.ledger.rows() if r.submission_id is not None}
        found = [i["id"] for i in items if i.get("file_name") == row.file_name and isinstance(i.get("id"), int)
                 and i["id"] not in claimed]
        return min(found) if found else None

    def _reserve(self) -> bool:
        with self.lock:
            if self.ex.max_submissions is not None and self.sent >= self.ex.max_submissions:
                return False
            self.sent += 1
            return True

    def _send(self, slot: Slot, client, status: Callable[[str], None]) -> tuple[int, int] | None:
        """POST the slot's file (waiting out 429s): (row id, submission id), or None when not sent."""
        if not self._reserve():
            with self.lock:
                self.capped.append(slot)
            return None
        e, t = slot.entry, self.prepared.target
        file_name = self.prepared.file_name(slot)
        for waits in range(MAX_429_WAITS + 1):
            if self.stopped is not None:
                return None
            row_id = self.ledger.record_sending(
                file_name=file_name, file_sha256=e.source.sha256, leaderboard=t.leaderboard, gpu=t.gpu, mode=MODE,
                api_url=self.config.api_url, variant=e.source.variant, knobs=e.source.knobs,
                sweep_id=self.prepared.sweep_id, sweep_candidate=e.name, sweep_point=e.knobs, sweep_round=slot.round)
            status(f"sending {slot.label()}")
            try:
                accepted = client.submit(t.leaderboard, t.gpu, MODE, file_name, e.source.content)
            except ApiError as exc:
                self.ledger.mark_final(row_id, status="rejected", error=str(exc))
                if exc.status_code != 429 or waits == MAX_429_WAITS:
                    with self.lock:
                        self.sent -= 1          # the service took nothing
                    self.stop(f"the service refused {slot.label()}: {exc}")
                    return None
                named = retry_after_seconds(exc)
                wait = DEFAULT_429_WAIT if named is None else named
                self.say(f"  rate limited (HTTP 429: {exc.detail}): waiting {wait:g} s "
                         f"{'as the service asks' if named is not None else '(the service named no time)'} "
                         f"before sending {slot.label()} again")
                status(f"rate limited: waiting {wait:g} s")
                self.ex.sleep(wait)
                continue
            except TransportError as exc:
                self.ledger.mark_final(row_id, status="unconfirmed", error=str(exc))
                self.stop(f"the upload of {slot.label()} got no answer ({exc}); a rerun looks for it in the "
                          "service's list before sending it again")
                return None
            self.ledger.mark_submitted(row_id, accepted.submission_id)
            self.say(f"  {slot.label()}: sent as submission {accepted.submission_id}")
            return row_id, accepted.submission_id
        return None

    def _follow(self, slot: Slot, row_id: int, sid: int, client, status: Callable[[str], None]) -> None:
        from qrsub.submit.client import job_status

        def update(sub, error):
            status(f"{slot.label()} #{sid}: " + (f"retrying after: {error}" if error else job_status(sub) or "queued"))

        try:
            outcome = outcome_of(client.wait(sid, on_update=update), MODE)
        except JobFailed as exc:
            outcome = outcome_of(exc.submission, MODE, failure=exc)
        except ApiError as exc:
            if exc.transient:
                return self._unfinished(slot, sid, exc)
            self.ledger.mark_final(row_id, status="lost", error=str(exc))
            self.say(f"  {slot.label()}: submission {sid} cannot be read ({exc}); a rerun sends it again")
            return
        except (WaitTimeout, TransportError) as exc:
            return self._unfinished(slot, sid, exc)
        record_outcome(self.ledger, row_id, outcome)
        score = f", geomean {outcome.geomean_us:,.3f} µs" if outcome.geomean_us else ""
        self.say(f"  {slot.label()}: submission {sid} {outcome.status}{score}"
                 + (f": {outcome.error}" if outcome.error else ""))

    def _unfinished(self, slot: Slot, sid: int, exc: Exception) -> None:
        with self.lock:
            self.pending.append(f"#{sid}")
        self.say(f"  {slot.label()}: submission {sid} has no outcome yet ({exc}); a rerun follows it")
