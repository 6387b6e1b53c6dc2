"""`qrsub submit` and `qrsub submissions`, end to end against a real local HTTP server."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_service import (CLI_ID, GOOD_SUBMISSION, STREAM_DETAIL, FakeService, cli_env, closed_url,
                          write_submission)

from qrsub.cli import main
from qrsub.submit.client import Client
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
    assert [r.path for r in service.requests("GET")] == ["/gpus/qr_v2"]  # asked, never polled


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
    assert "X-Popcorn-Cli-Id: your cli_id" in result.output
    assert not service.seen
    assert not Path(env["QRSUB_LEDGER"]).exists()
    data = json.loads(out_json.read_text())
    assert data["status"] == "dry_run" and CLI_ID not in out_json.read_text()


def test_dry_run_needs_no_credentials(service, env, sub_file):
    # No URL, no cli_id, and a ~/.popcorn.yaml that would be an error to read.
    home = Path(env["HOME"])
    home.mkdir(parents=True)
    (home / ".popcorn.yaml").write_text("cli_id: [not yaml\n")
    bare = {**env, "POPCORN_API_URL": None, "POPCORN_CLI_ID": None}
    result = qrsub(bare, "submit", sub_file, "--dry-run", "--mode", "benchmark")
    assert result.exit_code == 0, result.output
    size = len(GOOD_SUBMISSION.encode())
    for shown in ("POST $POPCORN_API_URL/submission/qr_v2/B200/benchmark", "POPCORN_API_URL is not set",
                  f"submission.py ({size:,} bytes", "leaderboard qr_v2, gpu B200 (from the file's directives), "
                  "mode benchmark", "endpoint path /submission/qr_v2/B200/benchmark"):
        assert shown in result.output
    assert not service.seen and not Path(env["QRSUB_LEDGER"]).exists()
    sent = qrsub(bare, "submit", sub_file)  # the same without --dry-run needs them
    assert sent.exit_code == 1 and "POPCORN_API_URL is not set" in sent.output


def test_dry_run_still_lints(service, env, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION + "# a stream\n")
    result = qrsub({**env, "POPCORN_API_URL": None, "POPCORN_CLI_ID": None}, "submit", path, "--dry-run")
    assert result.exit_code == 1 and "[stream]" in result.output and "POST" not in result.output


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


def test_a_gpu_the_leaderboard_is_not_known_to_offer_is_a_lint_warning(service, env, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION.replace("gpu B200", "gpu H200"))
    result = qrsub(env, "submit", path)
    assert result.exit_code == 1
    assert f"{path}:2: warning [gpu] qr_v2 runs on B200 only, so the service refuses H200" in result.output
    assert not service.seen


def test_the_h200_champion_is_warned_with_the_built_files_line(service, env):
    result = qrsub(env, "submit", VARIANTS / "champion.yaml", "--mode", "test")
    assert result.exit_code == 1 and not service.seen
    assert f"{VARIANTS / 'champion.yaml'} -> champion.py:2: warning [gpu] qr_v2 runs on B200 only" in result.output


def concurrent_b200(tmp_path: Path) -> Path:
    """champion-b200 (lint-clean) with concurrent groups on the mid route, as champion-concurrent has them."""
    path = tmp_path / "concurrent-b200.yaml"
    path.write_text(f"extends: {VARIANTS / 'champion-b200.yaml'}\nroutes:\n"
                    "  - {name: mid, graph: {mode: concurrent, groups: 10}}\n")
    return path


@pytest.mark.parametrize("flags", [(), ("--force",)], ids=["plain", "force"])
def test_concurrent_graphs_are_not_sent_without_accepting_the_risk(service, env, ledger, tmp_path, flags):
    result = qrsub(env, "submit", concurrent_b200(tmp_path), "--mode", "test", *flags)
    assert result.exit_code == 1 and not service.seen and not ledger.path.exists()
    assert "warning [concurrent-graph] route 'mid' uses graph.mode concurrent" in result.output
    assert "pass --accept-concurrency-risk to send it knowingly (--force does not)" in result.output


def test_accepting_the_concurrency_risk_sends_and_says_what_it_risks(service, env, ledger, tmp_path):
    from qrsub.rules import CONCURRENCY_RISK

    result = qrsub(env, "submit", concurrent_b200(tmp_path), "--mode", "test", "--no-wait",
                   "--accept-concurrency-risk")
    assert result.exit_code == 0, result.output
    assert f"sending with the risk accepted (--accept-concurrency-risk): {CONCURRENCY_RISK}" in result.output
    [post] = posts(service)
    assert post.path == "/submission/qr_v2/B200/test"  # the fake service refuses the word: none was sent
    row = ledger.rows()[0]
    [mid_graph] = [r["graph"] for r in row.knobs["routes"] if r["name"] == "mid"]
    assert (mid_graph["mode"], mid_graph["groups"]) == ("concurrent", 10), "the ledger keeps the risky knobs"


def test_accepting_the_risk_does_not_silence_other_warnings(service, env, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION + "import numpy\n")
    result = qrsub(env, "submit", path, "--accept-concurrency-risk")
    assert result.exit_code == 1 and "--force" in result.output and not service.seen


def test_a_gpu_the_service_does_not_offer_is_refused_before_the_upload(service, env, ledger, tmp_path):
    path = write_submission(tmp_path, GOOD_SUBMISSION.replace("gpu B200", "gpu H200"))
    result = qrsub(env, "submit", path, "--force", "--json", tmp_path / "o.json")
    assert result.exit_code == 1
    assert "not sent: qr_v2 does not offer H200; the service offers B200: pick one with --gpu" in result.output
    assert [r.path for r in service.seen] == ["/gpus/qr_v2"]  # asked, never uploaded
    assert ledger.rows()[0].status == "not_sent" and "does not offer H200" in ledger.rows()[0].error
    assert json.loads((tmp_path / "o.json").read_text())["status"] == "not_sent"


def test_the_services_list_of_gpus_decides(env, ledger, tmp_path):
    with FakeService(gpus=("B200", "H200")) as svc:  # the service offers more than rules.py knows
        path = write_submission(tmp_path, GOOD_SUBMISSION.replace("gpu B200", "gpu H200"))
        result = qrsub({**env, "POPCORN_API_URL": svc.url}, "submit", path, "--force", "--no-wait")
        assert result.exit_code == 0, result.output
        assert [r.path for r in svc.requests("POST")] == ["/submission/qr_v2/H200/leaderboard"]
    with FakeService(gpus=("MI300X",)) as svc:  # and less
        result = qrsub({**env, "POPCORN_API_URL": svc.url}, "submit", write_submission(tmp_path))
        assert result.exit_code == 1 and "does not offer B200; the service offers MI300X" in result.output
        assert not svc.requests("POST")


def test_a_refused_connection_is_not_sent(env, ledger, sub_file, tmp_path):
    url = closed_url()
    result = qrsub({**env, "POPCORN_API_URL": url}, "submit", sub_file, "--json", tmp_path / "o.json")
    assert result.exit_code == 1
    assert f"not sent: could not ask the service which GPUs qr_v2 offers: no connection to {url}" in result.output
    assert "qrsub submissions list" not in result.output  # nothing to look for there
    row = ledger.rows()[0]
    assert row.status == "not_sent" and "nothing was sent" in row.error
    assert json.loads((tmp_path / "o.json").read_text())["status"] == "not_sent"


@pytest.mark.parametrize("mode", ["leaderboard", "profile"])
def test_an_upload_whose_connection_fails_before_it_began_is_not_sent(env, ledger, sub_file, monkeypatch,
                                                                      mode):
    monkeypatch.setattr(Client, "gpus", lambda self, leaderboard: ["B200"])  # the service answered that
    url = closed_url()  # then went away
    result = qrsub({**env, "POPCORN_API_URL": url}, "submit", sub_file, "--mode", mode)
    assert result.exit_code == 1
    assert f"not sent: no connection to {url} (ConnectError" in result.output
    assert "sending again cannot make a duplicate" in result.output
    assert "qrsub submissions list" not in result.output
    assert ledger.rows()[0].status == "not_sent"


def test_ctrl_c_before_the_upload_is_not_sent(service, env, ledger, sub_file, monkeypatch):
    def interrupted(self, leaderboard):
        raise KeyboardInterrupt
    monkeypatch.setattr(Client, "gpus", interrupted)
    result = qrsub(env, "submit", sub_file)
    assert result.exit_code == 130 and not posts(service)
    assert (ledger.rows()[0].status, ledger.rows()[0].error) == ("not_sent", "interrupted before the upload")


def test_a_failed_tls_handshake_is_not_sent(service, env, ledger, sub_file):
    https = service.url.replace("http://", "https://")  # the fake service speaks plain HTTP
    result = qrsub({**env, "POPCORN_API_URL": https}, "submit", sub_file)
    assert result.exit_code == 1 and "not sent: " in result.output and "ConnectError" in result.output
    assert ledger.rows()[0].status == "not_sent"


def test_a_lost_upload_answer_is_unconfirmed(service, env, ledger, sub_file):
    service.fault("POST", "/submission/", "drop")  # reads the whole upload, then hangs up
    result = qrsub(env, "submit", sub_file)
    assert result.exit_code == 1 and "not sent" not in result.output
    assert "The upload began, so the service may have received it: check `qrsub submissions list` " \
           "before sending again." in " ".join(result.output.split())
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
