"""The local record of everything we submitted: a small SQLite database.

A row is written before the upload (status `sending`), given its submission id
after the service's 202 (`submitted`), and completed with the outcome when the
job ends. So a crash or Ctrl-C at any point leaves a row that says how far it
got, and `qrsub submissions wait ID` can finish it. A row that never got its 202
ends `not_sent` (nothing reached the service: no connection, or a GPU the
leaderboard does not offer), `rejected` (the service refused the upload) or
`unconfirmed` (the upload began, its answer was lost). Each step is one
transaction; rows are never deleted (deleting a submission on the service only
stamps `deleted_at`).

The path comes from `--ledger`, else `QRSUB_LEDGER`, else
`<user data dir>/qrsub/ledger.sqlite3`. The schema carries a version number so
that a later qrsub can migrate an older file instead of misreading it: each
version's changes are in `_MIGRATIONS`, applied in order when an older file is
opened.

A submission sent by `qrsub sweep --remote` also carries its sweep: the sweep's
id, the candidate's name (`BASE` for the base variant), its grid point (the
knobs the sweep set, JSON) and its round (1, then 2.. for `--repeat`).
"""
from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

LEDGER_ENV = "QRSUB_LEDGER"
SCHEMA_VERSION = 2

# Statuses that a later `wait` may still change.
OPEN_STATUSES = ("sending", "submitted")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    row_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at    TEXT NOT NULL,     -- UTC, ISO 8601
    updated_at    TEXT NOT NULL,
    api_url       TEXT,              -- which service (ids are per service)
    file_name     TEXT NOT NULL,
    file_sha256   TEXT NOT NULL,
    variant       TEXT,              -- set when the file was built from a variant
    knobs         TEXT,              -- the variant's resolved knobs, JSON
    leaderboard   TEXT NOT NULL,
    gpu           TEXT NOT NULL,
    mode          TEXT NOT NULL,
    submission_id INTEGER,           -- from the service's 202
    status        TEXT NOT NULL,     -- sending, submitted, rejected, done, failed, ...
    score         REAL,              -- seconds, as the service ranks
    runs          TEXT,              -- the service's runs, JSON
    cases         TEXT,              -- per-case results per public run, JSON
    error         TEXT,
    deleted_at    TEXT,
    sweep_id        TEXT,            -- version 2: set for `qrsub sweep --remote` submissions
    sweep_candidate TEXT,
    sweep_point     TEXT,            -- the knobs the sweep set, JSON
    sweep_round     INTEGER
);
CREATE INDEX IF NOT EXISTS submissions_by_id ON submissions (submission_id);
"""

# version -> the statements that bring a file of the version before it up to it.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: ("ALTER TABLE submissions ADD COLUMN sweep_id TEXT",
        "ALTER TABLE submissions ADD COLUMN sweep_candidate TEXT",
        "ALTER TABLE submissions ADD COLUMN sweep_point TEXT",
        "ALTER TABLE submissions ADD COLUMN sweep_round INTEGER"),
}
# Indexes on columns a migration may add: created once the columns exist.
_INDEXES = ("CREATE INDEX IF NOT EXISTS submissions_by_sweep ON submissions (sweep_id)",)

_COLUMNS = ("row_id", "created_at", "updated_at", "api_url", "file_name", "file_sha256",
            "variant", "knobs", "leaderboard", "gpu", "mode", "submission_id", "status",
            "score", "runs", "cases", "error", "deleted_at",
            "sweep_id", "sweep_candidate", "sweep_point", "sweep_round")
_JSON_COLUMNS = ("knobs", "runs", "cases", "sweep_point")


class LedgerError(Exception):
    """The ledger file cannot be used (unreadable, or from a newer qrsub)."""


@dataclass
class Row:
    row_id: int
    created_at: str
    updated_at: str
    api_url: str | None
    file_name: str
    file_sha256: str
    variant: str | None
    knobs: Any
    leaderboard: str
    gpu: str
    mode: str
    submission_id: int | None
    status: str
    score: float | None
    runs: Any
    cases: Any
    error: str | None
    deleted_at: str | None
    sweep_id: str | None = None
    sweep_candidate: str | None = None
    sweep_point: Any = None
    sweep_round: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _COLUMNS}


def default_path() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("qrsub", appauthor=False)) / "ledger.sqlite3"


def resolve_path(explicit: str | os.PathLike | None = None) -> Path:
    """--ledger, else $QRSUB_LEDGER, else the user data directory."""
    if explicit:
        return Path(explicit)
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV])
    return default_path()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """The ledger at PATH; created (with its directory) on first use."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._ready = False

    # ---- connection ------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10.0)
        except (OSError, sqlite3.Error) as exc:
            raise LedgerError(f"cannot open the ledger {self.path}: {exc}; "
                              f"pass --ledger PATH or set {LEDGER_ENV}") from None
        conn.row_factory = sqlite3.Row
        if not self._ready:
            self._migrate(conn)
            self._ready = True
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        try:
            with conn:
                conn.executescript(_SCHEMA)
                found = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
                if found is None:
                    conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
                elif found > SCHEMA_VERSION:
                    raise LedgerError(
                        f"the ledger {self.path} has schema version {found}, newer than this "
                        f"qrsub understands ({SCHEMA_VERSION}); upgrade qrsub or use --ledger")
                for version in range((found or SCHEMA_VERSION) + 1, SCHEMA_VERSION + 1):
                    for statement in _MIGRATIONS[version]:
                        conn.execute(statement)
                    conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
                for statement in _INDEXES:
                    conn.execute(statement)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"the ledger {self.path} is not a usable SQLite database "
                              f"({exc}); move it aside or pass --ledger PATH") from None

    def _write(self, sql: str, params: tuple) -> int:
        with closing(self._connect()) as conn, conn:  # one transaction
            return conn.execute(sql, params).lastrowid

    def _query(self, sql: str, params: tuple = ()) -> list[Row]:
        with closing(self._connect()) as conn:
            return [_row(r) for r in conn.execute(sql, params).fetchall()]

    # ---- the three steps of a submission ---------------------------------

    def record_sending(self, *, file_name: str, file_sha256: str, leaderboard: str,
                       gpu: str, mode: str, api_url: str | None = None,
                       variant: str | None = None, knobs: Any = None,
                       sweep_id: str | None = None, sweep_candidate: str | None = None,
                       sweep_point: Any = None, sweep_round: int | None = None) -> int:
        """Before the upload: returns the new row's id."""
        now = _now()
        return self._write(
            "INSERT INTO submissions (created_at, updated_at, api_url, file_name, "
            "file_sha256, variant, knobs, leaderboard, gpu, mode, status, sweep_id, "
            "sweep_candidate, sweep_point, sweep_round) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'sending', ?, ?, ?, ?)",
            (now, now, api_url, file_name, file_sha256, variant, _dump(knobs),
             leaderboard, gpu, mode, sweep_id, sweep_candidate, _dump(sweep_point), sweep_round))

    def mark_submitted(self, row_id: int, submission_id: int) -> None:
        """After the 202."""
        self._write("UPDATE submissions SET submission_id = ?, status = 'submitted', "
                    "updated_at = ? WHERE row_id = ?", (submission_id, _now(), row_id))

    def mark_final(self, row_id: int, *, status: str, score: float | None = None,
                   runs: Any = None, cases: Any = None, error: str | None = None) -> None:
        """The outcome: a finished job, a rejection, or a failed job."""
        self._write("UPDATE submissions SET status = ?, score = ?, runs = ?, cases = ?, "
                    "error = ?, updated_at = ? WHERE row_id = ?",
                    (status, score, _dump(runs), _dump(cases), error, _now(), row_id))

    def mark_deleted(self, submission_id: int, api_url: str | None = None) -> None:
        row = self.find(submission_id, api_url)
        if row is not None:
            self._write("UPDATE submissions SET deleted_at = ?, updated_at = ? "
                        "WHERE row_id = ?", (_now(), _now(), row.row_id))

    # ---- reading ---------------------------------------------------------

    def get(self, row_id: int) -> Row | None:
        rows = self._query("SELECT * FROM submissions WHERE row_id = ?", (row_id,))
        return rows[0] if rows else None

    def find(self, submission_id: int, api_url: str | None = None) -> Row | None:
        """The latest row for SUBMISSION_ID (on API_URL's service, when the row says)."""
        rows = self._query(
            "SELECT * FROM submissions WHERE submission_id = ? "
            "AND (? IS NULL OR api_url IS NULL OR api_url = ?) ORDER BY row_id DESC LIMIT 1",
            (submission_id, api_url, api_url))
        return rows[0] if rows else None

    def rows(self, *, leaderboard: str | None = None, limit: int | None = None) -> list[Row]:
        """Newest first."""
        return self._query(
            "SELECT * FROM submissions WHERE (? IS NULL OR lower(leaderboard) = lower(?)) "
            "ORDER BY row_id DESC LIMIT ?",
            (leaderboard, leaderboard, -1 if limit is None else limit))

    def sweep_rows(self, sweep_id: str, api_url: str | None = None) -> list[Row]:
        """Every row of one sweep (on API_URL's service, when given), oldest first."""
        return self._query(
            "SELECT * FROM submissions WHERE sweep_id = ? "
            "AND (? IS NULL OR api_url IS NULL OR api_url = ?) ORDER BY row_id",
            (sweep_id, api_url, api_url))

    def sweep_ids(self) -> list[str]:
        """The sweeps the ledger knows, newest first."""
        with closing(self._connect()) as conn:
            return [r[0] for r in conn.execute(
                "SELECT sweep_id FROM submissions WHERE sweep_id IS NOT NULL "
                "GROUP BY sweep_id ORDER BY MAX(row_id) DESC").fetchall()]

    def variants(self, submission_ids: list[int], api_url: str | None = None) -> dict[int, str]:
        """submission id -> variant name, for the ids the ledger knows with a variant."""
        if not submission_ids:
            return {}
        marks = ",".join("?" * len(submission_ids))
        rows = self._query(
            f"SELECT * FROM submissions WHERE submission_id IN ({marks}) AND variant IS NOT NULL "
            "AND (? IS NULL OR api_url IS NULL OR api_url = ?) ORDER BY row_id",
            (*submission_ids, api_url, api_url))
        return {row.submission_id: row.variant for row in rows}  # the latest row wins


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _row(record: sqlite3.Row) -> Row:
    values = {name: record[name] for name in _COLUMNS}
    for name in _JSON_COLUMNS:
        if values[name] is not None:
            values[name] = json.loads(values[name])
    return Row(**values)
