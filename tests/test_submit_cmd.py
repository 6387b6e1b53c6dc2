"""`qrsub submit` and `qrsub submissions`, end to end against a real local HTTP server."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_service import (CLI_ID, GOOD_SUBMISSION, STREAM_DETAIL, FakeService, cli_env,
                          write_submission)

from qrsub.cli import main
from qrsub.submit.ledger import Ledger

VARIANTS = Path(__file__).resolve().parent.parent / "variants"


@pytest.fixture
def service():
    with FakeService() as svc:
        yield svc


@pytest.fixture
def env(service, tmp_path):
    return cli_env(service, tmp_path)


@pytest.fixture
def ledger(env):
    return Ledger(env["QRSUB_LEDGER"])


@pytest.fixture
def sub_file(tmp_path):
    return write_submission(tmp_path)


def qrsub(env, *args, input=None):
    """Run a qrsub command; no output of any command may contain the cli_id."""
    result = CliRunner().invoke(main, [str(a) for a in args], env=env, input=input)
    assert CLI_ID not in result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def posts(service):
    return service.requests("POST")


# ---- a submission, start to finish ------------------------------------------------------

def test_leaderboard_submission_prints_runs_cases_and_score(service, env, ledger, sub_file,
                                                            tmp_path):
    out_json = tmp_path / "out.json"
    result = qrsub(env, "submit", sub_file, "--json", out_json)
    assert result.exit_code == 0, result.output
    assert [p.path for p in posts(service)] == ["/submission/qr_v2/B200/leaderboard"]
    out = result.output
    assert "Queue: 3 job(s) ahead" in out
    for heading in ("mode", "secret", "runner", "passed", "score"):
        assert heading in out
    assert "test run on B200" in out and "benchmark run on B200" in out
    assert "20x32 cond=1 dense" in out  # the per-case table
    assert "geomean score: 60.000 us" in out.splitlines()[-2]
    row = ledger.rows()[0]
    assert (row.status, row.mode, row.leaderboard, row.gpu) == ("passed", "leaderboard",
                                                                "qr_v2", "B200")
    assert row.score == pytest.approx(6e-5)
    assert row.file_name == "submission.py" and len(row.file_sha256) == 64
    data = json.loads(out_json.read_text())
    assert data["submission_id"] == row.submission_id
    assert data["status"] == "passed" and data["geomean_us"] == pytest.approx(60.0)
    assert [c["mode"] for c in data["cases"]] == ["test", "benchmark"]
    assert CLI_ID not in out_json.read_text()


def test_test_mode_prints_the_per_case_table(service, env, sub_file):
    result = qrsub(env, "submit", sub_file, "--mode", "TEST")
    assert result.exit_code == 0, result.output
    assert posts(service)[0].path == "/submission/qr_v2/B200/test"
    assert "40x176 cond=1 dense" in result.output and "verdict: pass" in result.output


def test_benchmark_mode_computes_the_geomean_from_the_cases(env, sub_file):
    result = qrsub(env, "submit", sub_file, "-m", "benchmark")
    assert result.exit_code == 0, result.output
    assert "geomean score: 60.000 us" in result.output


def test_no_wait_returns_after_the_202(service, env, ledger, sub_file):
    result = qrsub(env, "submit", sub_file, "--no-wait")
    assert result.exit_code == 0, result.output
    sid = ledger.rows()[0].submission_id
    assert f"qrsub submissions wait {sid}" in result.output
    assert ledger.rows()[0].status == "submitted"
    assert not service.requests("GET")


def test_profile_mode_uses_the_stream(service, env, ledger, sub_file):
    result = qrsub(env, "submit", sub_file, "--mode", "profile")
    assert result.exit_code == 0, result.output
    assert "profiling on B200" in result.output
    assert posts(service)[0].path == "/qr_v2/B200/profile"
    assert ledger.rows()[0].status == "passed"


@pytest.mark.parametrize("end", ["failed", "timed_out", "hacked"])
def test_failed_jobs_exit_nonzero_with_the_services_error(service, env, ledger, sub_file, end):
    service.script(end=end, error=f"runner says: {end}!")
    result = qrsub(env, "submit", sub_file)
    assert result.exit_code == 1
    assert f"runner says: {end}!" in result.output
    row = ledger.rows()[0]
    assert (row.status, row.error) == (end, f"runner says: {end}!")


def test_a_run_that_does_not_pass_exits_nonzero(service, env, ledger, sub_file):
    service.script(passed=False)
    result = qrsub(env, "submit", sub_file)
    assert result.exit_code == 1
    assert "H contains NaN or Inf" in result.output
    assert ledger.rows()[0].status == "check_failed"


def test_transient_poll_failures_do_not_stop_the_wait(service, env, sub_file):
    service.fault("GET", r"/user/submissions/\d+", "drop", times=2)
    service.fault("GET", r"/user/submissions/\d+", "malformed")
    service.fault("GET", r"/user/submissions/\d+", "status", status=502, detail="bad gateway")
    result = qrsub(env, "submit", sub_file)
    assert result.exit_code == 0, result.output
    assert "retrying after" in result.output


# ---- refusals: local, then the service's ------------------------------------------------

def test_dry_run_sends_nothing_and_hides_the_secret(service, env, sub_file, tmp_path):
    out_json = tmp_path / "dry.json"
    result = qrsub(env, "submit", sub_file, "--dry-run", "--mode", "test", "--json", out_json)
    assert result.exit_code == 0, result.output
    assert f"POST {service.url}/submission/qr_v2/B200/test" in result.output
    assert "X-Popcorn-Cli-Id: <hidden>" in result.output
    assert not service.seen
    assert not Path(env["QRSUB_LEDGER"]).exists()
    data = json.loads(out_json.read_text())
    assert data["status"] == "dry_run" and CLI_ID not in out_json.read_text()


def test_directives_supply_the_defaults(service, env, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION.replace(
        "#!POPCORN gpu B200", "#!POPCORN gpus H100 B200"))
    result = qrsub(env, "submit", path, "--gpu", "B200", "--no-wait")
    assert result.exit_code == 0, result.output
    assert posts(service)[0].path == "/submission/qr_v2/B200/leaderboard"


@pytest.mark.parametrize("args,text,message", [
    (["--leaderboard", "other_lb"], GOOD_SUBMISSION, "conflicts with the file's `#!POPCORN leaderboard qr_v2`"),
    (["--gpu", "H100"], GOOD_SUBMISSION, "conflicts with the file's `#!POPCORN gpu B200`"),
    ([], GOOD_SUBMISSION.replace("gpu B200", "gpu B200 H100"), "pick one with --gpu"),
])
def test_flags_that_conflict_with_directives_are_refused(service, env, tmp_path, args, text,
                                                         message):
    path = write_submission(tmp_path, text)
    result = qrsub(env, "submit", path, *args)
    assert result.exit_code == 1
    assert message in result.output
    assert not service.seen


def test_no_directives_needs_the_flags(service, env, tmp_path):
    bare = "\n".join(line for line in GOOD_SUBMISSION.splitlines() if "POPCORN" not in line)
    path = write_submission(tmp_path, bare + "\n")
    refused = qrsub(env, "submit", path)
    assert refused.exit_code == 1 and "directive-missing" in refused.output
    result = qrsub(env, "submit", path, "--leaderboard", "qr_v2", "--gpu", "B200", "--no-wait")
    assert result.exit_code == 0, result.output
    assert len(posts(service)) == 1


@pytest.mark.parametrize("content,rule", [
    ((GOOD_SUBMISSION + "# no side stream here\n").encode(), "stream"),
    (GOOD_SUBMISSION.encode() + b"# caf\xe9\n", "utf8"),
    (b"", "empty"),
    (GOOD_SUBMISSION.encode() + b"#" * 1_000_000, "size"),
], ids=["stream", "utf8", "empty", "size"])
def test_hard_rules_refuse_locally_even_with_force(service, env, ledger, tmp_path, content,
                                                   rule):
    path = tmp_path / "submission.py"
    path.write_bytes(content)
    result = qrsub(env, "submit", path, "--force")
    assert result.exit_code == 1
    assert f"[{rule}]" in result.output and "--force cannot override" in result.output
    assert not service.seen
    assert not ledger.path.exists()


def test_soft_lint_warnings_refuse_unless_forced(service, env, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION + "import numpy\n")
    refused = qrsub(env, "submit", path)
    assert refused.exit_code == 1 and "--force" in refused.output and not service.seen
    forced = qrsub(env, "submit", path, "--force", "--no-wait")
    assert forced.exit_code == 0, forced.output
    assert len(posts(service)) == 1


def test_a_service_rejection_is_shown_and_recorded(service, env, ledger, tmp_path):
    # Lint keeps "stream" from ever reaching the service, so script the service's answer.
    service.fault("POST", "/submission/", "status", status=400, detail=STREAM_DETAIL)
    result = qrsub(env, "submit", write_submission(tmp_path))
    assert result.exit_code == 1 and STREAM_DETAIL in result.output
    assert ledger.rows()[0].status == "rejected"


def test_rate_limit_is_shown_with_when_to_retry(service, env, ledger, sub_file, tmp_path):
    service.fault("POST", "/submission/", "status", status=429,
                  detail="Rate limit exceeded: try again in 60 seconds",
                  headers={"Retry-After": "60"})
    out_json = tmp_path / "o.json"
    result = qrsub(env, "submit", sub_file, "--json", out_json)
    assert result.exit_code == 1
    assert "try again in 60 seconds" in result.output and "retry after 60 s" in result.output
    row = ledger.rows()[0]
    assert row.status == "rejected" and "429" in row.error
    assert json.loads(out_json.read_text())["status"] == "rejected"


def test_gpu_not_offered_is_the_services_rejection(service, env, ledger, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION.replace("gpu B200", "gpu H100"))
    result = qrsub(env, "submit", path)
    assert result.exit_code == 1 and "GPU H100 not available" in result.output
    assert ledger.rows()[0].status == "rejected"


def test_a_lost_upload_answer_is_unconfirmed(service, env, ledger, sub_file):
    service.fault("POST", "/submission/", "drop")
    result = qrsub(env, "submit", sub_file)
    assert result.exit_code == 1 and "qrsub submissions list" in result.output
    assert ledger.rows()[0].status == "unconfirmed"


def test_missing_configuration_says_how_to_set_it(service, env, sub_file):
    no_url = qrsub({**env, "POPCORN_API_URL": None}, "submit", sub_file)
    assert no_url.exit_code == 1 and "export POPCORN_API_URL" in no_url.output
    no_id = qrsub({**env, "POPCORN_CLI_ID": None}, "submit", sub_file)
    assert no_id.exit_code == 1 and "popcorn register" in no_id.output
    assert not service.seen


def test_cli_id_from_popcorn_yaml(service, env, sub_file, tmp_path):
    home = Path(env["HOME"])
    home.mkdir(parents=True)
    (home / ".popcorn.yaml").write_text(f"cli_id: {CLI_ID}\n")
    result = qrsub({**env, "POPCORN_CLI_ID": None}, "submit", sub_file, "--no-wait")
    assert result.exit_code == 0, result.output
    assert posts(service)[0].headers["X-Popcorn-Cli-Id"] == CLI_ID


def test_missing_file_says_what_to_do(env, tmp_path):
    result = CliRunner().invoke(main, ["submit"], env=env)  # build/submission.py, from cwd
    assert result.exit_code == 1 and "qrsub build" in result.output


def test_a_variant_is_built_then_sent_with_its_knobs(service, env, ledger):
    result = qrsub(env, "submit", VARIANTS / "geqrf.yaml", "--mode", "test")
    assert result.exit_code == 0, result.output
    row = ledger.rows()[0]
    assert (row.variant, row.file_name) == ("geqrf", "geqrf.py")
    assert row.knobs["routes"][0]["driver"] == "geqrf"
    assert service.jobs[row.submission_id].code.startswith("#!POPCORN leaderboard qr_v2")


def test_a_built_file_records_its_variant(service, env, ledger, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION.replace(
        "# A minimal", "# variant: champion (the best)\n# A minimal"))
    assert qrsub(env, "submit", path, "--no-wait").exit_code == 0
    assert ledger.rows()[0].variant == "champion"


# ---- qrsub submissions ------------------------------------------------------------------

def test_list_shows_the_ledgers_variant_beside_server_ids(service, env, ledger, sub_file):
    qrsub(env, "submit", sub_file, "--no-wait")
    qrsub(env, "submit", sub_file, "--no-wait")
    first, second = sorted(service.jobs)
    row_id = ledger.record_sending(file_name="champion.py", file_sha256="0" * 64,
                                   leaderboard="qr_v2", gpu="B200", mode="leaderboard",
                                   api_url=service.url, variant="champion")
    ledger.mark_submitted(row_id, second)
    result = qrsub(env, "submissions", "list", "--leaderboard", "qr_v2", "--limit", "5")
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.output.splitlines()
             if line.startswith("│")}
    assert "champion" in lines[str(second)] and "champion" not in lines[str(first)]
    assert service.requests("GET", "/user/submissions")[-1].path.endswith(
        "?leaderboard=qr_v2&limit=5")


def test_list_local_needs_no_service(env, ledger, sub_file):
    qrsub(env, "submit", sub_file, "--no-wait")
    result = qrsub({**env, "POPCORN_API_URL": None, "POPCORN_CLI_ID": None},
                   "submissions", "list", "--local")
    assert result.exit_code == 0, result.output
    assert "submission.py" in result.output and "submitted" in result.output


def test_show_with_code(service, env, sub_file):
    qrsub(env, "submit", sub_file, "--no-wait")
    (sid,) = service.jobs
    result = qrsub(env, "submissions", "show", sid, "--code")
    assert result.exit_code == 0, result.output
    assert "not done yet" in result.output and "torch.geqrf(data)" in result.output
    qrsub(env, "submissions", "wait", sid)
    done = qrsub(env, "submissions", "show", sid)
    assert "status: passed" in done.output and "geomean score: 60.000 us" in done.output
    assert "torch.geqrf(data)" not in done.output


def test_wait_for_an_id_the_ledger_does_not_know(service, env, sub_file):
    qrsub(env, "submit", sub_file, "--no-wait", "--ledger", Path(env["HOME"]) / "other.db")
    (sid,) = service.jobs
    result = qrsub(env, "submissions", "wait", sid)
    assert result.exit_code == 0, result.output
    assert "not in the ledger" in result.output and "status: passed" in result.output


def test_wait_completes_a_no_wait_row(service, env, ledger, sub_file, tmp_path):
    qrsub(env, "submit", sub_file, "--no-wait")
    sid = ledger.rows()[0].submission_id
    out_json = tmp_path / "w.json"
    result = qrsub(env, "submissions", "wait", sid, "--json", out_json)
    assert result.exit_code == 0, result.output
    assert ledger.rows()[0].status == "passed"
    assert json.loads(out_json.read_text())["mode"] == "leaderboard"


def test_delete_asks_first(service, env, ledger, sub_file):
    qrsub(env, "submit", sub_file, "--no-wait")
    (sid,) = service.jobs
    declined = qrsub(env, "submissions", "delete", sid, input="n\n")
    assert declined.exit_code == 1 and sid in service.jobs
    assert not service.requests("DELETE")
    accepted = qrsub(env, "submissions", "delete", sid, input="y\n")
    assert accepted.exit_code == 0 and sid not in service.jobs
    assert ledger.rows()[0].deleted_at is not None


def test_delete_forced_and_unknown(service, env, sub_file):
    qrsub(env, "submit", sub_file, "--no-wait")
    (sid,) = service.jobs
    assert qrsub(env, "submissions", "delete", sid, "--force").exit_code == 0
    again = qrsub(env, "submissions", "delete", sid, "--force")
    assert again.exit_code == 1 and "not found" in again.output


def test_the_secret_is_nowhere_on_disk(service, env, ledger, sub_file, tmp_path):
    service.script(end="failed", error="boom")
    qrsub(env, "submit", sub_file, "--json", tmp_path / "a.json")
    qrsub(env, "submit", sub_file, "--dry-run", "--json", tmp_path / "b.json")
    for path in [ledger.path, tmp_path / "a.json", tmp_path / "b.json"]:
        assert CLI_ID.encode() not in path.read_bytes()
