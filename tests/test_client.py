"""The HTTP client and its configuration, against a real local HTTP server."""
from __future__ import annotations

import pickle

import pytest
from fake_service import CLI_ID, GOOD_SUBMISSION, STREAM_DETAIL, FakeService, closed_url

from qrsub.submit.client import (ApiError, Client, JobFailed, NotSent, TransportError, WaitTimeout,
                                 submission_path)
from qrsub.submit.config import CliId, ConfigError, load_config

CODE = GOOD_SUBMISSION.encode()
POLL = r"/user/submissions/\d+$"


@pytest.fixture
def service():
    with FakeService() as svc:
        yield svc


@pytest.fixture
def client(service):
    with Client(service.url, CliId(CLI_ID), poll_interval=0.005, timeout=1.0,
                max_backoff=0.05) as c:
        yield c


def submit(client, mode="leaderboard", content=CODE, name="submission.py"):
    return client.submit("qr_v2", "B200", mode, name, content)


# ---- configuration ------------------------------------------------------------

def test_config_reads_popcorn_yaml_and_env_overrides(tmp_path):
    config_file = tmp_path / ".popcorn.yaml"
    config_file.write_text("cli_id: from-file-id\n")
    env = {"POPCORN_API_URL": "https://svc.example/"}
    config = load_config(env, config_file)
    assert config.api_url == "https://svc.example"
    assert config.cli_id.reveal() == "from-file-id"
    env["POPCORN_CLI_ID"] = "from-env-id"
    assert load_config(env, config_file).cli_id.reveal() == "from-env-id"


def test_config_missing_pieces_say_how_to_set_them(tmp_path):
    with pytest.raises(ConfigError, match="POPCORN_API_URL"):
        load_config({}, tmp_path / "none.yaml")
    with pytest.raises(ConfigError, match="popcorn register"):
        load_config({"POPCORN_API_URL": "http://x"}, tmp_path / "none.yaml")


def test_config_broken_yaml_does_not_echo_the_secret(tmp_path):
    bad = tmp_path / ".popcorn.yaml"
    bad.write_text(f"cli_id: [{CLI_ID}\n")
    with pytest.raises(ConfigError) as err:
        load_config({"POPCORN_API_URL": "http://x"}, bad)
    assert CLI_ID not in str(err.value)


def test_cli_id_hides_itself():
    secret = CliId(CLI_ID)
    for shown in (str(secret), repr(secret), f"{secret}", repr([secret]),
                  repr(load_config({"POPCORN_API_URL": "http://x", "POPCORN_CLI_ID": CLI_ID}))):
        assert CLI_ID not in shown
    with pytest.raises(TypeError):
        pickle.dumps(secret)


# ---- submitting and polling ---------------------------------------------------------

def test_submit_sends_multipart_with_header_and_lowercase_path(service, client):
    accepted = client.submit("QR_V2", "B200", "TEST", "submission.py", CODE)
    assert accepted.submission_id in service.jobs
    assert accepted.runner_queue == {"runner": "B200", "gpu": "B200", "queued_jobs": 3}
    (post,) = service.requests("POST")
    assert post.path == "/submission/qr_v2/B200/test"
    assert post.headers["X-Popcorn-Cli-Id"] == CLI_ID
    assert b'name="file"; filename="submission.py"' in post.body
    assert service.jobs[accepted.submission_id].code == GOOD_SUBMISSION


def test_submission_path_quotes_and_lowercases():
    assert submission_path("QR_v2", "B200", "Leaderboard") == "/submission/qr_v2/B200/leaderboard"


def test_wait_walks_queued_running_done(service, client):
    service.script(queued_polls=2, running_polls=2)
    sid = submit(client).submission_id
    seen = []
    final = client.wait(sid, on_update=lambda sub, err: seen.append(sub["job"]["status"]))
    assert final["done"] is True
    assert seen == ["pending", "pending", "running", "running", "succeeded"]
    assert [(r["mode"], r["secret"]) for r in final["runs"]] == [
        ("test", False), ("benchmark", False), ("leaderboard", False), ("leaderboard", True)]


@pytest.mark.parametrize("end", ["failed", "timed_out", "hacked"])
def test_wait_ends_on_failed_jobs_with_the_services_error(service, client, end):
    service.script(end=end, error=f"the job {end}: see the runner log")
    sid = submit(client).submission_id
    with pytest.raises(JobFailed) as err:
        client.wait(sid)
    assert err.value.status == end
    assert err.value.error == f"the job {end}: see the runner log"
    assert err.value.submission["id"] == sid


def test_wait_rides_out_transient_failures(service, client):
    sid = submit(client).submission_id
    service.fault("GET", POLL, "drop", times=2)
    service.fault("GET", POLL, "malformed")
    service.fault("GET", POLL, "status", status=500, detail="Internal Server Error")
    service.fault("GET", POLL, "status", status=429, detail="slow down",
                  headers={"Retry-After": "0.01"})
    service.fault("GET", POLL, "slow", delay=1.5)  # longer than the client's 1 s timeout
    errors = []
    final = client.wait(sid, on_update=lambda sub, err: err and errors.append(err))
    assert final["done"]
    assert len(errors) == 6
    assert all(isinstance(e, (TransportError, ApiError)) for e in errors)


def test_wait_gives_up_after_too_many_failures(service, client):
    sid = submit(client).submission_id
    client.max_transient_failures = 3
    service.fault("GET", POLL, "drop", times=10)
    with pytest.raises(TransportError, match="may still be running"):
        client.wait(sid)


def test_wait_stops_at_the_time_limit(service, client):
    service.script(queued_polls=10**6)
    sid = submit(client).submission_id
    client.max_wait = 0.05
    with pytest.raises(WaitTimeout, match=str(sid)):
        client.wait(sid)


def test_wait_on_unknown_id_is_an_api_error(client):
    with pytest.raises(ApiError) as err:
        client.wait(424242)
    assert err.value.status_code == 404 and "not found" in err.value.detail


# ---- the service's refusals ------------------------------------------------------------

def test_stream_word_is_refused_by_the_service(service, client):
    with pytest.raises(ApiError) as err:
        submit(client, content=b"# our CUDA Stream\nx = 1\n")
    assert err.value.status_code == 400 and err.value.detail == STREAM_DETAIL
    assert not service.jobs


@pytest.mark.parametrize("content,name,status,detail", [
    (b"", "submission.py", 400, "Empty file"),
    (b"x" * 1_000_001, "submission.py", 413, "File too large"),
    (b"x = '\xff'\n", "submission.py", 400, "UTF-8"),
    (b"x = 1\n", "submission.txt", 400, "Unsupported file type"),
])
def test_bad_files_are_refused_with_detail(client, content, name, status, detail):
    with pytest.raises(ApiError) as err:
        submit(client, content=content, name=name)
    assert err.value.status_code == status and detail in err.value.detail


def test_gpu_not_offered_is_refused(client):
    with pytest.raises(ApiError, match="GPU H100 not available"):
        client.submit("qr_v2", "H100", "test", "submission.py", CODE)


def test_rate_limit_says_when_to_retry(service, client):
    service.fault("POST", "/submission/", "status", status=429,
                  detail="Rate limit exceeded: try again in 42 seconds",
                  headers={"Retry-After": "42"})
    with pytest.raises(ApiError) as err:
        submit(client)
    assert "try again in 42 seconds" in str(err.value)
    assert "retry after 42 s" in str(err.value)
    assert len(service.requests("POST")) == 1  # a refused upload is not resent


def test_server_error_on_upload_is_not_retried(service, client):
    service.fault("POST", "/submission/", "status", status=500, detail="runner pool exploded")
    with pytest.raises(ApiError, match="HTTP 500.*runner pool exploded"):
        submit(client)
    assert len(service.requests("POST")) == 1  # a retry could submit twice


def test_dropped_upload_is_a_transport_error_not_a_retry(service, client):
    service.fault("POST", "/submission/", "drop")  # the server reads the whole upload, then hangs up
    with pytest.raises(TransportError) as err:
        submit(client)
    assert not isinstance(err.value, NotSent)  # it began: the service may have it
    assert len(service.requests("POST")) == 1


def test_wrong_identity_is_refused_and_echoed_secrets_are_scrubbed(service):
    with Client(service.url, CliId("not-the-right-id"), poll_interval=0.005) as bad:
        with pytest.raises(ApiError, match="401.*X-Popcorn-Cli-Id"):
            bad.leaderboards()
    service.fault("GET", "/leaderboards", "status", status=403, detail="who is {cli_id}?")
    with Client(service.url, CliId(CLI_ID)) as c, pytest.raises(ApiError) as err:
        c.leaderboards()
    assert CLI_ID not in str(err.value) and "<hidden>" in str(err.value)


def test_a_refused_connection_is_not_sent():
    url = closed_url()
    with Client(url, CliId(CLI_ID), poll_interval=0.001, timeout=0.5) as c:
        with pytest.raises(NotSent, match=f"no connection to {url} \\(ConnectError: .*\\); nothing was sent"):
            submit(c)
        with pytest.raises(NotSent):
            c.gpus("qr_v2")
        with pytest.raises(NotSent):
            c.submit_streaming("qr_v2", "B200", "profile", "submission.py", CODE)


def test_a_refused_read_fails_fast_instead_of_backing_off():
    slept = []
    with Client(closed_url(), CliId(CLI_ID), poll_interval=5.0, sleep=slept.append) as c:
        with pytest.raises(NotSent):
            c.gpus("qr_v2")
    assert slept == [1.0, 1.0]  # two quick reconnects, not 10 + 20 + 40 s of backoff


def test_a_failed_tls_handshake_is_not_sent(service):
    # https to a server that speaks plain HTTP: the handshake fails before the request is written.
    with Client(service.url.replace("http://", "https://"), CliId(CLI_ID), poll_interval=0.001,
                timeout=2.0) as c:
        with pytest.raises(NotSent, match="ConnectError"):
            submit(c)
    assert not service.requests("POST")


# ---- the other endpoints ---------------------------------------------------------------

def test_list_show_delete_leaderboards_gpus(service, client):
    first = submit(client).submission_id
    second = submit(client, mode="test").submission_id
    listed = client.list_submissions("qr_v2", limit=1)
    assert [s["id"] for s in listed] == [second]
    assert service.requests("GET", r"/user/submissions\?")[-1].path.endswith(
        "leaderboard=qr_v2&limit=1")
    assert client.show(first)["file_name"] == "submission.py"
    client.delete(first)
    assert first not in service.jobs
    assert [lb["name"] for lb in client.leaderboards()] == ["qr_v2"]
    assert client.gpus("QR_V2") == ["B200"]


def test_reads_are_retried(service, client):
    service.fault("GET", "/leaderboards", "drop")
    service.fault("GET", "/leaderboards", "malformed")
    assert client.leaderboards()[0]["name"] == "qr_v2"


def test_profile_mode_streams_status_then_result(service, client):
    messages = []
    result = client.submit_streaming("qr_v2", "B200", "profile", "submission.py", CODE,
                                     on_status=messages.append)
    assert messages == ["compiling", "profiling on B200"]
    assert result["runs"][0]["mode"] == "profile"
    assert service.requests("POST")[0].path == "/qr_v2/B200/profile"


def test_profile_stream_error_event(service, client):
    service.script(end="failed", error="profiler crashed")
    with pytest.raises(ApiError, match="profiler crashed"):
        client.submit_streaming("qr_v2", "B200", "profile", "submission.py", CODE)
