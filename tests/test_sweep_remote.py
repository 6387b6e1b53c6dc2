"""`qrsub sweep --remote`, end to end against the local fake service (a real HTTP server).

The fake service gives each submission the benchmark means its script names
(`FakeService.script_for`, matched on the file name, which carries the
candidate's knobs), so the candidates of a grid time differently.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fake_service import BENCH_MEANS_NS, CLI_ID, FakeService, cli_env, service  # noqa: F401 (a fixture)

from qrsub import stats
from qrsub.bench.report import summarize_repeats
from qrsub.cli import main
from qrsub.submit.client import ApiError, retry_after_seconds
from qrsub.submit.ledger import SCHEMA_VERSION, Ledger

BASE = Path(__file__).resolve().parent.parent / "variants" / "champion-b200.yaml"
GRID_3X2 = ["--set", "mid.strip.bn=16,32,64", "--set", "mid.panel.num_warps=2,4"]
GRID_3 = ["--set", "mid.strip.bn=16,32,64"]
FAST = [m * 0.8 for m in BENCH_MEANS_NS]          # 20% faster than BASE on every case


@pytest.fixture
def env(service, tmp_path):
    return {**cli_env(service, tmp_path), "COLUMNS": "300"}   # table rows on one line each


@pytest.fixture
def ledger(env):
    return Ledger(env["QRSUB_LEDGER"])


def qrsub(env, *args):
    """Run a qrsub command; no output of any command may contain the cli_id."""
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    assert CLI_ID not in result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def remote(env, tmp_path, *args):
    return qrsub(env, "sweep", BASE, *args, "--remote", "--run-dir", tmp_path / "run",
                 "-o", tmp_path / "best.yaml")


def posted(service) -> list[str]:
    """The file name of every upload the service received, in order (429s included)."""
    return [re.search(rb'filename="([^"]+)"', s.body).group(1).decode() for s in service.requests("POST")]


def accepted(service) -> list[str]:
    return [job.file_name for job in sorted(service.jobs.values(), key=lambda j: j.id)]


def assert_no_secret(*paths):
    for path in paths:
        assert CLI_ID.encode() not in Path(path).read_bytes(), path


def sweep_id(output: str) -> str:
    return re.search(r"sweep(?: id:)? (champion-b200-[0-9a-f]{10})", output).group(1)


# ---- the whole loop ---------------------------------------------------------------------

def test_a_3x2_grid_end_to_end(service, env, ledger, tmp_path):
    service.script_for(r"bn-32_mid\.panel\.num_warps-4\.r", dict(bench_means=FAST))
    service.script_for(r"bn-64_mid\.panel\.num_warps-2\.r", dict(bench_means=[m * 1.1 for m in BENCH_MEANS_NS]))
    result = remote(env, tmp_path, *GRID_3X2)
    assert result.exit_code == 0, result.output
    out = result.output

    names = posted(service)
    assert len(names) == 7 and len(set(names)) == 7                     # BASE and 6 candidates, once each
    assert ".BASE.r1." in names[0]                                       # BASE first
    assert {s.path for s in service.requests("POST")} == {"/submission/qr_v2/B200/benchmark"}
    assert "building and linting BASE and 6 candidate(s)" in out

    # the ranking: the fast one first, the slow one last, the rest at 1
    table = out[out.index("qrsub sweep --remote"):out.index("per case")]
    rows = [line for line in table.splitlines() if re.match(r"│ \d ", line)]
    assert len(rows) == 6
    assert "0.8000" in rows[0] and "mid.strip.bn=32" in rows[0] and "mid.panel.num_warps=4" in rows[0]
    assert "1.1000" in rows[-1] and "mid.strip.bn=64" in rows[-1]
    assert "spread not measured" in rows[0]
    assert "BASE µs" in out and "0.800*" in out                           # the per-case table
    assert "BASE: submissions #" in out and "one submission: spread not measured" in out

    # the best, written as a variant that extends BASE
    best = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert (tmp_path / best["extends"]).resolve() == BASE.resolve()
    assert best["routes"] == [{"name": "mid", "strip": {"bn": 32}, "panel": {"num_warps": 4}}]
    assert "--repeat 3" in out                                           # its win is one against one

    # every submission is a ledger row with the sweep's id, the candidate and its knobs
    sid = sweep_id(out)
    rows = ledger.sweep_rows(sid)
    assert len(rows) == 7 and {r.status for r in rows} == {"passed"} and {r.sweep_round for r in rows} == {1}
    knobs = {r.sweep_candidate: r.sweep_point for r in rows}
    assert knobs["BASE"] == {}
    assert knobs["champion-b200.mid.strip.bn-32_mid.panel.num_warps-4"] == {"mid.strip.bn": 32,
                                                                            "mid.panel.num_warps": 4}
    assert all(r.mode == "benchmark" and r.variant and r.knobs["gpu"] == "B200" for r in rows)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["sweep_id"] == sid and len(results["results"]) == 6
    assert_no_secret(ledger.path, tmp_path / "run" / "results.json", tmp_path / "best.yaml")

    # rerunning the same command sends nothing: every candidate has its result
    again = remote(env, tmp_path, *GRID_3X2)
    assert again.exit_code == 0, again.output
    assert len(posted(service)) == 7 and "0 submission(s) sent by this command" in again.output
    assert sweep_id(again.output) == sid


def test_no_candidate_beats_base_writes_nothing(service, env, tmp_path):
    service.script_for(r"bn-", dict(bench_means=[m * 1.01 for m in BENCH_MEANS_NS]))
    result = remote(env, tmp_path, "--set", "mid.strip.bn=16,32")
    assert result.exit_code == 0, result.output
    assert "no variant written" in result.output and not (tmp_path / "best.yaml").exists()


def test_a_failed_run_is_reported_and_excluded(service, env, ledger, tmp_path):
    service.script_for(r"bn-16\.r", dict(bench_means=[m * 0.5 for m in BENCH_MEANS_NS], passed=False))
    service.script_for(r"bn-32\.r", dict(end="failed", error="runner says: CUDA error: illegal address"))
    service.script_for(r"bn-64\.r", dict(bench_means=FAST))
    result = remote(env, tmp_path, *GRID_3)
    assert result.exit_code == 0, result.output
    out = result.output
    table = out[out.index("qrsub sweep --remote"):out.index("per case")]
    assert table.count("not timed") == 2 and "illegal address" in table
    assert "service: #1002 check_failed: 40x176 dense c1: H contains NaN or Inf" in table
    best = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert best["routes"] == [{"name": "mid", "strip": {"bn": 64}}]    # bn=16 looked faster but failed
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    by_name = {r["name"]: r for r in data["results"]}
    assert by_name["champion-b200.mid.strip.bn-16"]["stage"] == "service"
    assert "summary" not in by_name["champion-b200.mid.strip.bn-32"]
    statuses = {r.sweep_candidate: r.status for r in ledger.sweep_rows(sweep_id(out))}
    assert statuses["champion-b200.mid.strip.bn-16"] == "check_failed"
    assert statuses["champion-b200.mid.strip.bn-32"] == "failed"
    # a run that failed has its outcome: the rerun does not send it again
    assert remote(env, tmp_path, *GRID_3).exit_code == 0 and len(posted(service)) == 4


def test_base_failing_leaves_nothing_to_rank(service, env, tmp_path):
    service.script_for(r"\.BASE\.", dict(passed=False))
    result = remote(env, tmp_path, "--set", "mid.strip.bn=16,32")
    assert result.exit_code == 0, result.output
    assert result.output.count("nothing to compare with") == 2 and not (tmp_path / "best.yaml").exists()


# ---- spending submissions carefully -------------------------------------------------------

def test_dry_run_needs_no_credentials_and_counts_the_submissions(service, env, tmp_path):
    bare = {**env, "POPCORN_API_URL": None, "POPCORN_CLI_ID": None}
    result = qrsub(bare, "sweep", BASE, *GRID_3X2, "--remote", "--dry-run")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "= 6 candidate(s)" in out and "mid.strip.bn=64 mid.panel.num_warps=2" in out
    assert "round 1: 7 submission(s): 0 with a result, 0 running" in out and "submissions to send: 7" in out
    assert "one at a time" in out
    capped = qrsub(bare, "sweep", BASE, *GRID_3X2, "--remote", "--dry-run", "--max-submissions", "3",
                   "--repeat", "3", "--parallel", "2")
    assert "up to 6 more" in capped.output and "submissions to send: up to 13, capped at 3" in capped.output
    assert "up to 2 at once" in capped.output
    assert not service.seen and not Path(env["QRSUB_LEDGER"]).exists()
    assert sweep_id(result.output) == sweep_id(capped.output)         # the same grid, the same sweep


def test_max_submissions_is_respected_and_a_rerun_continues(service, env, tmp_path):
    service.script_for(r"bn-64", dict(bench_means=FAST))
    first = remote(env, tmp_path, *GRID_3, "--max-submissions", "2")
    assert first.exit_code == 0, first.output
    assert len(posted(service)) == 2
    assert "--max-submissions 2 reached: 2 submission(s) not sent" in first.output
    assert first.output.count("unsent: rerun the same command") == 2           # in the ranking, not timed
    assert "no variant written" in first.output and not (tmp_path / "best.yaml").exists()
    dry = qrsub(env, "sweep", BASE, *GRID_3, "--remote", "--dry-run")
    assert "2 with a result, 0 running (followed, not sent again), 2 to send" in dry.output
    second = remote(env, tmp_path, *GRID_3, "--max-submissions", "2")
    assert second.exit_code == 0, second.output
    names = posted(service)
    assert len(names) == 4 and len(set(names)) == 4
    assert (tmp_path / "best.yaml").exists()
    zero = remote(env, tmp_path, *GRID_3, "--max-submissions", "0")
    assert zero.exit_code == 0 and len(posted(service)) == 4


def test_429s_are_waited_out_for_the_time_named(service, env, ledger, tmp_path):
    service.rate_limit(0.3, times=1)                  # Retry-After header
    service.rate_limit(0.2, times=1, header=False)    # only in the detail text
    result = remote(env, tmp_path, "--set", "mid.strip.bn=16,32")
    assert result.exit_code == 0, result.output
    assert "waiting 0.3 s as the service asks before sending BASE (round 1) again" in result.output
    assert "waiting 0.2 s as the service asks" in result.output
    seen = service.requests("POST")
    assert len(seen) == 5 and len(service.jobs) == 3                  # 2 refused, 3 taken
    assert seen[1].at - seen[0].at >= 0.3 and seen[2].at - seen[1].at >= 0.2
    assert len(set(accepted(service))) == 3
    rows = ledger.sweep_rows(sweep_id(result.output))
    assert [r.status for r in rows].count("rejected") == 2 and [r.status for r in rows].count("passed") == 3


def test_one_at_a_time_unless_parallel(service, env, tmp_path):
    service.script_for(r".", dict(queued_polls=3, running_polls=3))

    def overlapping() -> bool:
        """Whether some upload arrived before the job sent before it had finished."""
        polls = service.requests("GET", r"/user/submissions/\d+$")
        jobs = sorted(service.jobs)
        last_poll = {j: max(p.at for p in polls if p.path.endswith(f"/{j}")) for j in jobs}
        return any(post.at < last_poll[job] for post, job in zip(service.requests("POST")[1:], jobs))

    assert remote(env, tmp_path, "--set", "mid.strip.bn=16,32,64").exit_code == 0
    assert not overlapping()
    service.jobs.clear()
    service.seen.clear()
    result = qrsub(env, "sweep", BASE, "--set", "mid.strip.bn=16,32,64", "--set", "mid.panel.num_warps=2",
                   "--remote", "--parallel", "4", "--run-dir", tmp_path / "run2")
    assert result.exit_code == 0, result.output
    assert len(service.jobs) == 4 and overlapping()


def test_repeats_are_interleaved_and_a_win_within_the_spread_is_not_distinguishable(service, env, tmp_path):
    noisy = [dict(bench_means=[m * f for m in BENCH_MEANS_NS]) for f in (1.0, 1.03, 0.98)]
    service.script_for(r"\.BASE\.", *noisy)
    service.script_for(r"bn-16\.r", dict(bench_means=[m * 0.99 for m in BENCH_MEANS_NS]))   # 1%: noise
    service.script_for(r"bn-32\.r", dict(bench_means=FAST))                                  # 20%: real
    service.script_for(r"bn-64\.r", dict(bench_means=[m * 1.2 for m in BENCH_MEANS_NS]))
    result = remote(env, tmp_path, *GRID_3, "--repeat", "3", "--leaders", "2")
    assert result.exit_code == 0, result.output
    short = [re.sub(r"^champion-b200\.(mid\.strip\.)?|\.r\d\..*$", "", n) for n in posted(service)]
    assert short == ["BASE", "bn-16", "bn-32", "bn-64",                # round 1: everyone once
                     "BASE", "bn-32", "bn-16",                          # round 2: BASE and the two leaders
                     "bn-16", "bn-32", "BASE"]                          # round 3: the other way round
    out = result.output
    table = out[out.index("qrsub sweep --remote"):out.index("per case")]
    rows = [line for line in table.splitlines() if re.match(r"│ \d ", line)]
    assert "mid.strip.bn=32" in rows[0] and "faster" in rows[0] and "#" in rows[0]
    assert "mid.strip.bn=16" in rows[1] and "not distinguishable" in rows[1]
    assert "mid.strip.bn=64" in rows[2] and "spread not measured" in rows[2]
    assert re.search(r"BASE: submissions #\d+ #\d+ #\d+; geomean .* \(spread 5\.00% over 3\)", out)
    assert yaml.safe_load((tmp_path / "best.yaml").read_text())["routes"][0]["strip"] == {"bn": 32}
    again = remote(env, tmp_path, *GRID_3, "--repeat", "3", "--leaders", "2")
    assert again.exit_code == 0 and len(posted(service)) == 10        # nothing sent twice


def test_only_the_leaders_within_noise_writes_nothing(service, env, tmp_path):
    service.script_for(r"\.BASE\.", *[dict(bench_means=[m * f for m in BENCH_MEANS_NS]) for f in (1.0, 0.98)])
    service.script_for(r"bn-", dict(bench_means=[m * 0.99 for m in BENCH_MEANS_NS]))
    result = remote(env, tmp_path, "--set", "mid.strip.bn=16,32", "--repeat", "2")
    assert result.exit_code == 0, result.output
    assert "not distinguishable" in result.output and "no variant written" in result.output


# ---- resumable ----------------------------------------------------------------------------

def start_sweep(env: dict, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from qrsub.cli import main; main()", "sweep", str(BASE), *GRID_3, "--remote",
         "--run-dir", str(tmp_path / "run"), "-o", str(tmp_path / "best.yaml")],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_polls(service: FakeService, ledger: Ledger, proc: subprocess.Popen, pattern: str) -> int:
    """The id of the submission whose file matches PATTERN, once the sweep is polling it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        jobs = [j for j in service.jobs.values() if re.search(pattern, j.file_name)]
        if jobs and len(service.requests("GET", rf"/user/submissions/{jobs[0].id}$")) >= 2:
            return jobs[0].id
        time.sleep(0.05)
    raise AssertionError("the sweep never got to polling " + pattern)


@pytest.mark.parametrize("how", ["kill", "ctrl-c"])
def test_a_sweep_killed_in_the_middle_resumes_without_sending_anything_twice(service, env, ledger, tmp_path,
                                                                          how):
    service.script_for(r"bn-32\.r", dict(queued_polls=10**6, bench_means=FAST))   # held until released
    proc = start_sweep(env, tmp_path)
    try:
        held = wait_for_polls(service, ledger, proc, r"bn-32\.r")
        proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert CLI_ID not in out + err
    if how == "ctrl-c":
        assert proc.returncode == 130 and "rerun the same command to follow them" in out + err
    assert len(posted(service)) == 3                                  # BASE, bn-16, bn-32 (running)
    sid = sweep_id(out) if "sweep champion" in out else Ledger(ledger.path).sweep_ids()[0]
    states = {r.sweep_candidate: r.status for r in ledger.sweep_rows(sid)}
    assert states == {"BASE": "passed", "champion-b200.mid.strip.bn-16": "passed",
                      "champion-b200.mid.strip.bn-32": "submitted"}

    service.release(held)
    result = remote(env, tmp_path, *GRID_3)
    assert result.exit_code == 0, result.output
    names = posted(service)
    assert len(names) == 4 and len(set(names)) == 4                   # only bn-64 was sent now
    assert f"#{held} is still running; following it, not sending again" in result.output
    assert result.output.count("has its result") == 2
    assert yaml.safe_load((tmp_path / "best.yaml").read_text())["routes"][0]["strip"] == {"bn": 32}
    assert_no_secret(ledger.path)


@pytest.mark.parametrize("arrived", [True, False], ids=["arrived", "never-arrived"])
def test_an_upload_without_an_answer_is_looked_up_before_sending_again(service, env, ledger, tmp_path, arrived):
    assert remote(env, tmp_path, *GRID_3, "--max-submissions", "1").exit_code == 0    # BASE alone
    # The next upload (bn-16) gets no answer: the service took it, or never received it.
    service.fault("POST", "/submission/", "lost_answer" if arrived else "drop")
    first = remote(env, tmp_path, *GRID_3)
    assert first.exit_code == 1 and "got no answer" in first.output
    assert "not every candidate has been timed yet" in first.output
    assert len(service.jobs) == (2 if arrived else 1)
    (row,) = [r for r in ledger.sweep_rows(sweep_id(first.output)) if r.sweep_candidate.endswith("bn-16")]
    assert row.status == "unconfirmed" and row.submission_id is None

    result = remote(env, tmp_path, *GRID_3)
    assert result.exit_code == 0, result.output
    if arrived:
        assert "its unanswered upload is submission 1002 on the service; following it" in result.output
    else:
        assert "never reached the service; sending it again" in result.output
    files = accepted(service)
    assert len(files) == 4 and len(set(files)) == 4                  # the service took each slot once


# ---- refusals before anything is sent -------------------------------------------------------

def test_one_candidate_failing_lint_refuses_the_whole_sweep(service, env, tmp_path, monkeypatch):
    from qrsub.lint import Problem
    from qrsub.submit import sweep_remote

    real = sweep_remote.lint_problems

    def lint(source, leaderboard, gpu):
        extra = [Problem(3, "import", "imports numpy, which the runners lack", False)] if "bn-64" in \
            source.file_name else []
        return real(source, leaderboard, gpu) + extra

    monkeypatch.setattr(sweep_remote, "lint_problems", lint)
    result = remote(env, tmp_path, *GRID_3)
    assert result.exit_code == 1
    assert "warning [import] imports numpy" in result.output and "pass --force" in result.output
    assert "1 of 4 file(s) cannot be sent (nothing was sent)" in result.output and "bn-64" in result.output
    assert not service.seen and not Path(env["QRSUB_LEDGER"]).exists()


def test_a_gpu_the_variant_does_not_name_is_refused(service, env, tmp_path):
    result = remote(env, tmp_path, *GRID_3, "--gpu", "H100")
    assert result.exit_code == 1 and "conflicts with the file's `#!POPCORN gpu B200`" in result.output
    assert not service.seen


def test_missing_credentials_stop_before_anything_is_written(service, env, tmp_path):
    result = remote({**env, "POPCORN_CLI_ID": None}, tmp_path, *GRID_3)
    assert result.exit_code == 1 and "popcorn register" in result.output
    assert not service.seen and not (tmp_path / "run").exists()


@pytest.mark.parametrize("args,message", [
    (["--remote", "--budget", "10"], "--budget do(es) not apply to a local sweep"),
    (["--repeat", "3"], "--repeat do(es) not apply to --remote"),
    (["--remote", "--report", "x"], "--report takes only the sweep's id"),
])
def test_flags_of_the_other_sweep_are_refused(env, args, message):
    result = qrsub(env, "sweep", BASE, *GRID_3, *args)
    assert result.exit_code == 2 and message in result.output


# ---- from the ledger alone ------------------------------------------------------------------

def test_report_and_list_read_the_ledger_alone(service, env, ledger, tmp_path):
    service.script_for(r"bn-32\.r", dict(bench_means=FAST))
    service.script_for(r"bn-64\.r", dict(end="timed_out", error="over the time limit"))
    first = remote(env, tmp_path, *GRID_3)
    sid = sweep_id(first.output)
    before = len(service.seen)
    bare = {**env, "POPCORN_API_URL": None, "POPCORN_CLI_ID": None}

    report = qrsub(bare, "sweep", "--remote", "--report", sid, "--plot", tmp_path / "sweep.png")
    assert report.exit_code == 0, report.output
    ranking = lambda out: out[out.index("qrsub sweep --remote"):out.index("per case")]  # noqa: E731
    assert ranking(report.output) == ranking(first.output)
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    listed = qrsub(bare, "submissions", "list", "--sweep", sid)
    assert listed.exit_code == 0, listed.output
    lines = {line.split("│")[1].strip(): line for line in listed.output.splitlines() if line.startswith("│")}
    assert "60.000" in lines["BASE"] and "1.0000" in lines["BASE"]
    assert "48.000" in lines["champion-b200.mid.strip.bn-32"] and "0.8000" in lines["champion-b200.mid.strip.bn-32"]
    assert "timed_out" in lines["champion-b200.mid.strip.bn-64"]
    assert "mid.strip.bn=32" in lines["champion-b200.mid.strip.bn-32"]
    assert len(service.seen) == before                                 # neither touched the service

    unknown = qrsub(bare, "sweep", "--remote", "--report", "nope")
    assert unknown.exit_code == 1 and f"its sweeps: {sid}" in unknown.output
    assert qrsub(bare, "submissions", "list", "--sweep", "nope").exit_code == 1


# ---- the pieces -----------------------------------------------------------------------------

def test_ledger_version_1_is_migrated_with_its_rows(tmp_path):
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:     # the version 1 schema, as qrsub 0.1 wrote it
        conn.executescript("""
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            INSERT INTO schema_version VALUES (1);
            CREATE TABLE submissions (row_id INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL, api_url TEXT, file_name TEXT NOT NULL, file_sha256 TEXT NOT NULL,
                variant TEXT, knobs TEXT, leaderboard TEXT NOT NULL, gpu TEXT NOT NULL, mode TEXT NOT NULL,
                submission_id INTEGER, status TEXT NOT NULL, score REAL, runs TEXT, cases TEXT, error TEXT,
                deleted_at TEXT);
            INSERT INTO submissions (created_at, updated_at, file_name, file_sha256, leaderboard, gpu, mode,
                submission_id, status, score) VALUES ('t', 't', 'old.py', 'ab', 'qr_v2', 'B200', 'test', 7,
                'passed', 0.5);
        """)
    ledger = Ledger(path)
    (old,) = ledger.rows()
    assert (old.file_name, old.submission_id, old.score, old.sweep_id) == ("old.py", 7, 0.5, None)
    row_id = ledger.record_sending(file_name="n.py", file_sha256="cd", leaderboard="qr_v2", gpu="B200",
                                   mode="benchmark", sweep_id="s-1", sweep_candidate="BASE", sweep_point={},
                                   sweep_round=1)
    assert ledger.sweep_rows("s-1")[0].row_id == row_id and ledger.sweep_ids() == ["s-1"]
    with sqlite3.connect(path) as conn:
        assert max(v for (v,) in conn.execute("SELECT version FROM schema_version")) == SCHEMA_VERSION == 2
    assert Ledger(path).get(row_id).sweep_point == {}                  # a second open migrates nothing


@pytest.mark.parametrize("header,detail,seconds", [
    ("30", "", 30.0),
    ("0.25", "", 0.25),
    (None, "Rate limit exceeded: try again in 12 seconds", 12.0),
    (None, "Too many submissions; retry in 2 minutes", 120.0),
    (None, "Rate limit exceeded", None),
    ("Wed, 21 Oct 2015 07:28:30 GMT", "", 10.0),
])
def test_the_wait_a_429_names(header, detail, seconds):
    from email.utils import parsedate_to_datetime

    now = parsedate_to_datetime("Wed, 21 Oct 2015 07:28:20 GMT").timestamp()
    assert retry_after_seconds(ApiError(429, detail, header), now=lambda: now) == seconds


def test_range_ratio_and_its_verdicts():
    r = stats.range_ratio([100, 104, 98], [90, 91])
    assert r.value == pytest.approx(90.5 / 100) and (r.lo, r.hi) == (pytest.approx(90 / 104), pytest.approx(91 / 98))
    assert stats.range_verdict(r, 3, 2) == stats.FASTER
    assert stats.range_verdict(stats.range_ratio([100, 104], [101, 99]), 2, 2) == stats.INDISTINGUISHABLE
    assert stats.range_verdict(stats.range_ratio([100, 101], [110, 111]), 2, 2) == stats.SLOWER
    assert stats.range_verdict(stats.range_ratio([100], [50]), 1, 1) == stats.UNMEASURED


def test_summarize_repeats_compares_whole_submissions():
    specs = {"a": {"batch": 2, "n": 8, "cond": 1}, "b": {"batch": 4, "n": 16, "cond": 2}}
    base = [{"a": 1.0, "b": 4.0}, {"a": 1.1, "b": 4.4}]
    cand = [{"a": 0.5, "b": 2.0}]
    s = summarize_repeats(base, cand, specs, ["BASE", "c"])
    g = s["geomean"][1]
    base_scores = [2.0, math.sqrt(1.1 * 4.4)]
    assert g["ratio"]["value"] == pytest.approx(1.0 / stats.median(base_scores))
    assert g["ratio"]["hi"] == pytest.approx(1.0 / 2.0) and g["verdict"] == stats.UNMEASURED
    assert [c["label"] for c in s["cases"]] == ["2x8 dense c1", "4x16 dense c2"]
    assert s["cases"][0]["results"][0]["reps"] == 2 and g["complete"]
    partial = summarize_repeats(base, [{"a": 0.5}], specs, ["BASE", "c"])
    assert not partial["geomean"][1]["complete"] and partial["cases"][1]["results"][1]["status"] == "skipped"


def test_a_sweep_never_sends_concurrent_graph_branches_even_forced(service, env, tmp_path):
    base = tmp_path / "concurrent.yaml"
    base.write_text(f"extends: {BASE}\nroutes:\n  - {{name: mid, graph: {{mode: concurrent, groups: 10}}}}\n")
    result = qrsub(env, "sweep", base, *GRID_3, "--remote", "--force", "--run-dir", tmp_path / "run",
                   "-o", tmp_path / "best.yaml")
    assert result.exit_code == 1
    assert "warning [concurrent-graph] route 'mid' uses graph.mode concurrent" in result.output
    assert "4 of 4 file(s) cannot be sent (nothing was sent)" in result.output
    assert not service.seen and not Path(env["QRSUB_LEDGER"]).exists()
