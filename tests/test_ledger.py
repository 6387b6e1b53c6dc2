"""The local ledger: its three steps, its schema, and surviving an interrupted submit."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from fake_service import CLI_ID, FakeService, cli_env, write_submission

from qrsub.cli import main
from qrsub.submit.ledger import SCHEMA_VERSION, Ledger, LedgerError, resolve_path


def sending(ledger: Ledger, **overrides) -> int:
    fields = dict(file_name="submission.py", file_sha256="ab" * 32, leaderboard="qr_v2",
                  gpu="B200", mode="leaderboard", api_url="http://svc", variant="champion",
                  knobs={"routes": [{"n_min": 1}]})
    return ledger.record_sending(**{**fields, **overrides})


def test_a_row_goes_sending_submitted_final(tmp_path):
    ledger = Ledger(tmp_path / "deep" / "ledger.sqlite3")
    row_id = sending(ledger)
    assert ledger.get(row_id).status == "sending"
    ledger.mark_submitted(row_id, 1234)
    row = ledger.find(1234, "http://svc")
    assert (row.row_id, row.status) == (row_id, "submitted")
    ledger.mark_final(row_id, status="passed", score=6e-5, runs=[{"mode": "test"}],
                      cases=[{"mode": "test", "cases": []}])
    # A fresh Ledger object reads the same file: nothing lives only in memory.
    row = Ledger(ledger.path).get(row_id)
    assert (row.status, row.score, row.variant) == ("passed", 6e-5, "champion")
    assert row.knobs == {"routes": [{"n_min": 1}]}
    assert row.runs == [{"mode": "test"}] and row.cases[0]["mode"] == "test"
    assert row.created_at and row.updated_at >= row.created_at


def test_rows_listing_variants_and_deletion_keeps_the_record(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    a = sending(ledger)
    b = sending(ledger, leaderboard="other", variant=None)
    ledger.mark_submitted(a, 1)
    ledger.mark_submitted(b, 2)
    assert [r.row_id for r in ledger.rows()] == [b, a]
    assert [r.row_id for r in ledger.rows(leaderboard="QR_V2")] == [a]
    assert len(ledger.rows(limit=1)) == 1
    assert ledger.variants([1, 2, 3], "http://svc") == {1: "champion"}
    assert ledger.variants([1], "http://elsewhere") == {}
    ledger.mark_deleted(1, "http://svc")
    assert ledger.get(a).deleted_at is not None and ledger.get(a).status == "submitted"


def test_schema_version_is_recorded_and_a_newer_one_refused(tmp_path):
    path = tmp_path / "l.db"
    sending(Ledger(path))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION + 1,))
    with pytest.raises(LedgerError, match="newer"):
        Ledger(path).rows()


def test_a_file_that_is_not_sqlite_is_a_clear_error(tmp_path):
    path = tmp_path / "l.db"
    path.write_text("not a database, just text " * 100)
    with pytest.raises(LedgerError, match="--ledger"):
        Ledger(path).rows()


def test_path_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("QRSUB_LEDGER", str(tmp_path / "env.db"))
    assert resolve_path(tmp_path / "flag.db") == tmp_path / "flag.db"
    assert resolve_path(None) == tmp_path / "env.db"
    monkeypatch.delenv("QRSUB_LEDGER")
    assert resolve_path(None).name == "ledger.sqlite3"


# ---- an interrupted `qrsub submit`, completed by `qrsub submissions wait` ----------------

def start_submit(service: FakeService, tmp_path) -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, **cli_env(service, tmp_path)}
    path = write_submission(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from qrsub.cli import main; main()", "submit", str(path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, env


def wait_until_polling(service: FakeService, ledger: Ledger, proc: subprocess.Popen) -> int:
    """The job's id once the ledger says `submitted` and the service has seen polls."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        rows = ledger.rows() if ledger.path.exists() else []
        if rows and rows[0].status == "submitted":
            sid = rows[0].submission_id
            if len(service.requests("GET", rf"/user/submissions/{sid}$")) >= 2:
                return sid
        time.sleep(0.02)
    raise AssertionError("the submit never got to polling")


@pytest.mark.parametrize("how", ["kill", "ctrl-c"])
def test_interrupted_submit_leaves_a_row_that_wait_completes(tmp_path, how):
    with FakeService() as service:
        service.script(queued_polls=10**6)  # held until released
        ledger = Ledger(tmp_path / "ledger.sqlite3")
        proc, env = start_submit(service, tmp_path)
        try:
            sid = wait_until_polling(service, ledger, proc)
            proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGINT)
            out, err = proc.communicate(timeout=20)
        finally:
            proc.kill()
        if how == "ctrl-c":
            assert proc.returncode == 130
            assert f"qrsub submissions wait {sid}" in err
        assert CLI_ID not in out + err
        row = ledger.rows()[0]
        assert (row.submission_id, row.status, row.score) == (sid, "submitted", None)

        service.release(sid)
        result = CliRunner().invoke(main, ["submissions", "wait", str(sid)], env=env)
        assert result.exit_code == 0, result.output
        assert CLI_ID not in result.output
    row = ledger.get(row.row_id)
    assert row.status == "passed"
    assert row.score == pytest.approx(6e-5)
    assert {c["mode"] for c in row.cases} == {"test", "benchmark"}
    assert len(row.cases[0]["cases"]) == 2
    assert CLI_ID.encode() not in ledger.path.read_bytes()
