"""A stand-in for the leaderboard service: a real HTTP server on 127.0.0.1.

It implements the endpoints of the service (docs/service.md) with its
status codes and JSON shapes, so the client is tested through real sockets:

- `POST /submission/{lb}/{gpu}/{mode}` checks the cli_id header, the
  leaderboard, GPU and mode, and the file as the service does (empty, over
  1,000,000 bytes, not UTF-8, wrong extension, "stream" anywhere, a conflicting
  `#!POPCORN leaderboard`), then answers 202.
- `GET /user/submissions/{id}` walks each job through queued -> running ->
  its scripted end (`JobScript`): done with runs, or failed / timed_out / hacked.
- list, delete, `/leaderboards`, `/gpus/{lb}`, and the profile stream.

Faults are scripted per request (`fault()`): an HTTP status with `detail`, a
dropped connection, a slow answer, a body that is not JSON, or a request that
is served (a submission accepted) whose answer is lost; `rate_limit()`
scripts 429s that name their retry time, as the service's do.

A job's benchmark means come from its script (`bench_means`, nanoseconds per
case), so submissions of different code can time differently: `script_for()`
gives every submission whose file name matches a pattern its script (the k-th
such submission the k-th script, the last one repeated), which is how tests
give sweep candidates their speeds, their noise and their failures.
"""
from __future__ import annotations

import email.parser
import email.policy
import io
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

import pytest

CLI_ID = "fake-cli-id-9f3c2b7e-TOPSECRET"
STREAM_DETAIL = ("Your code contains the word 'stream'. Work on other CUDA streams is not "
                 "allowed; remove every occurrence (comments included).")

TEST_SPECS = ["batch: 20; n: 32; cond: 1; seed: 53124", "batch: 40; n: 176; cond: 1; seed: 3321"]
BENCH_MEANS_NS = [40_000.0, 90_000.0]
PASS_MESSAGE = ("factor_rtol=7.6e-05; orth_rtol=0.00038; scaled_factor_residual=1.5; "
                "scaled_reconstruction_residual=1.2; scaled_triangular_residual=0.4; "
                "scaled_orthogonality_residual=3.0; batch=20; n=32")


@dataclass
class JobScript:
    """How a job progresses: polls spent queued and running, then how it ends."""

    queued_polls: int = 1
    running_polls: int = 1
    end: str = "done"            # done, failed, timed_out, hacked
    error: str = ""
    passed: bool = True
    bench_means: list | None = None   # benchmark means in ns per case (default BENCH_MEANS_NS)


@dataclass
class Job:
    id: int
    leaderboard: str
    gpu: str
    mode: str
    file_name: str
    code: str
    script: JobScript
    time: str
    polls: int = 0
    released: bool = False       # set by FakeService.release(): end on the next poll


@dataclass
class Fault:
    method: str
    path: re.Pattern
    kind: str                    # status, drop, slow, malformed, lost_answer
    times: int = 1
    status: int = 500
    detail: str = "Internal Server Error"
    headers: dict = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    body: bytes
    at: float = field(default_factory=time.monotonic)   # when it arrived


def test_report(passed: bool) -> dict:
    report = {"test-count": str(len(TEST_SPECS))}
    for i, spec in enumerate(TEST_SPECS):
        report[f"test.{i}.spec"] = spec
        report[f"test.{i}.status"] = "pass" if passed or i == 0 else "fail"
        key = "message" if passed or i == 0 else "error"
        report[f"test.{i}.{key}"] = PASS_MESSAGE if key == "message" else "H contains NaN or Inf"
    report["check"] = "pass" if passed else "fail"
    return report


def benchmark_report(means=None, passed: bool = True) -> dict:
    """The harness's benchmark report; when not PASSED, the last case fails its check
    (the harness reports the error instead of timings) and `check` is fail."""
    report = {"benchmark-count": str(len(TEST_SPECS))}
    for i, (spec, mean) in enumerate(zip(TEST_SPECS, means or BENCH_MEANS_NS)):
        report[f"benchmark.{i}.spec"] = spec
        if not passed and i == len(TEST_SPECS) - 1:
            report.update({f"benchmark.{i}.status": "fail", f"benchmark.{i}.error": "H contains NaN or Inf"})
            continue
        report.update({f"benchmark.{i}.runs": "100",
                       f"benchmark.{i}.mean": str(mean), f"benchmark.{i}.std": "500.0",
                       f"benchmark.{i}.err": "50.0", f"benchmark.{i}.best": str(mean * 0.98),
                       f"benchmark.{i}.worst": str(mean * 1.05)})
    report["check"] = "pass" if passed else "fail"
    return report


def geomean_seconds() -> float:
    return math.exp(sum(math.log(m / 1e9) for m in BENCH_MEANS_NS) / len(BENCH_MEANS_NS))


def _run(mode: str, passed: bool, *, secret: bool = False, score=None, result=None) -> dict:
    now = datetime.now(timezone.utc).isoformat()
    run = {"start_time": now, "end_time": now, "mode": mode, "secret": secret,
           "runner": "B200", "score": score, "passed": passed}
    if result is not None:
        run["result"] = result
    return run


def runs_for(mode: str, passed: bool, means=None) -> list[dict]:
    """The runs the service reports for a finished job of MODE."""
    score = geomean_seconds()
    if mode == "test":
        return [_run("test", passed, result=test_report(passed))]
    if mode == "benchmark":
        return [_run("benchmark", passed, result=benchmark_report(means, passed))]
    if not passed:
        return [_run("test", False, result=test_report(False))]
    return [_run("test", True, result=test_report(True)),
            _run("benchmark", True, result=benchmark_report()),
            _run("leaderboard", True, score=f"{score:.9f}"),       # a string, as it may be
            _run("leaderboard", True, secret=True, score=score * 1.01)]


class FakeService:
    """Start with `with FakeService() as svc:`; `svc.url` is the base URL."""

    def __init__(self, cli_id: str = CLI_ID, leaderboards=("qr_v2",), gpus=("B200",)):
        self.cli_id = cli_id
        self.leaderboards = list(leaderboards)
        self.gpus = list(gpus)
        self.jobs: dict[int, Job] = {}
        self.scripts: list[JobScript] = []
        self.rules: list[list] = []          # [file-name pattern, [JobScript...], times matched]
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self._next_id = 1000
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None  # dropped clients are normal
        # A short poll keeps shutdown() (once per test) fast.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,),
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "FakeService":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- scripting ------------------------------------------------------

    def script(self, **kwargs) -> JobScript:
        """The next accepted submission follows this script (else the default one)."""
        script = JobScript(**kwargs)
        self.scripts.append(script)
        return script

    def script_for(self, pattern: str, *scripts: dict) -> None:
        """Submissions whose file name matches PATTERN follow SCRIPTS (JobScript fields):
        the k-th such submission the k-th, the last one for every later one. Scripts
        queued with script() come first."""
        self.rules.append([re.compile(pattern), [JobScript(**kw) for kw in scripts or ({},)], 0])

    def fault(self, method: str, path: str, kind: str, times: int = 1, **kwargs) -> None:
        self.faults.append(Fault(method, re.compile(path), kind, times, **kwargs))

    def rate_limit(self, seconds: float, times: int = 1, header: bool = True) -> None:
        """The next TIMES submissions get a 429 naming SECONDS, in Retry-After (HEADER) or
        only in the detail text, as the service words it."""
        self.fault("POST", "/submission/", "status", times, status=429,
                   detail=f"Rate limit exceeded: try again in {seconds:g} seconds",
                   headers={"Retry-After": f"{seconds:g}"} if header else {})

    def release(self, job_id: int) -> None:
        """Let a held job (one with huge poll counts) reach its end on the next poll."""
        with self.lock:
            self.jobs[job_id].released = True

    def requests(self, method: str | None = None, path: str = "") -> list[Seen]:
        return [s for s in self.seen if (method is None or s.method == method)
                and re.search(path, s.path)]

    # ---- state ------------------------------------------------------------

    def accept(self, leaderboard: str, gpu: str, mode: str, file_name: str, code: str) -> Job:
        with self.lock:
            self._next_id += 1
            script = self.scripts.pop(0) if self.scripts else self._rule_script(file_name)
            job = Job(self._next_id, leaderboard, gpu, mode, file_name, code, script,
                      datetime.now(timezone.utc).isoformat())
            self.jobs[job.id] = job
            return job

    def _rule_script(self, file_name: str) -> JobScript:
        for rule in self.rules:
            pattern, scripts, matched = rule
            if pattern.search(file_name):
                rule[2] += 1
                return scripts[min(matched, len(scripts) - 1)]
        return JobScript()

    def poll(self, job: Job) -> dict:
        with self.lock:
            job.polls += 1
            s = job.script
            if job.released or job.polls > s.queued_polls + s.running_polls:
                status = "succeeded" if s.end == "done" else s.end
            elif job.polls > s.queued_polls:
                status = "running"
            else:
                status = "pending"
            return self.submission_json(job, status)

    def submission_json(self, job: Job, status: str) -> dict:
        finished = status == "succeeded"
        return {
            "id": job.id, "leaderboard_id": 7, "leaderboard_name": job.leaderboard,
            "file_name": job.file_name, "user_id": "42", "submission_time": job.time,
            "done": finished, "code": job.code,
            "runs": runs_for(job.mode, job.script.passed, job.script.bench_means) if finished else [],
            "job": {"status": status, "error": job.script.error if status in
                    ("failed", "timed_out", "hacked") else None,
                    "last_heartbeat": datetime.now(timezone.utc).isoformat()},
            "runner_queue": ({"runner": "B200", "gpu": job.gpu, "queued_jobs": 2}
                             if status == "pending" else None),
        }

    def list_json(self, leaderboard: str | None, limit: int | None) -> list[dict]:
        jobs = [j for j in sorted(self.jobs.values(), key=lambda j: -j.id)
                if leaderboard is None or j.leaderboard == leaderboard]
        return [{"id": j.id, "leaderboard_name": j.leaderboard, "file_name": j.file_name,
                 "submission_time": j.time, "done": j.polls > 0,
                 "runs": [{"gpu_type": j.gpu, "score": geomean_seconds()}]}
                for j in jobs[:limit]]


def _handler_for(service: FakeService):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        # ---- plumbing -----------------------------------------------------

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            service.seen.append(Seen(method, self.path, dict(self.headers), body))
            fault = self._take_fault(method)
            if fault is not None:
                if fault.kind == "drop":
                    self.close_connection = True
                    return  # no answer at all: the client sees the connection close
                if fault.kind == "lost_answer":   # served, but the answer never reaches the client
                    answer, self.wfile = self.wfile, io.BytesIO()
                    if self.headers.get("X-Popcorn-Cli-Id") == service.cli_id:
                        self._route(method, body)
                    self.wfile, self.close_connection = answer, True
                    return
                if fault.kind == "slow":
                    time.sleep(fault.delay)
                elif fault.kind == "malformed":
                    return self._send(200, b'{"id": 1, "done": tr', "application/json")
                elif fault.kind == "status":
                    detail = fault.detail.replace("{cli_id}", self.headers.get(
                        "X-Popcorn-Cli-Id", ""))
                    return self._json(fault.status, {"detail": detail}, fault.headers)
            if self.headers.get("X-Popcorn-Cli-Id") != service.cli_id:
                return self._json(401, {"detail": "Invalid or unauthorized X-Popcorn-Cli-Id"})
            self._route(method, body)

        def _take_fault(self, method: str) -> Fault | None:
            with service.lock:
                for fault in service.faults:
                    if fault.times > 0 and fault.method == method and fault.path.search(self.path):
                        fault.times -= 1
                        return fault
            return None

        def _send(self, status: int, data: bytes, ctype: str, headers: dict | None = None):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, value, headers: dict | None = None) -> None:
            self._send(status, json.dumps(value).encode(), "application/json", headers)

        # ---- endpoints ----------------------------------------------------

        def _route(self, method: str, body: bytes) -> None:
            url = urlparse(self.path)
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if method == "POST" and len(parts) == 4 and parts[0] == "submission":
                return self._submit(parts[1], parts[2], parts[3], body)
            if method == "POST" and len(parts) == 3:
                return self._profile_stream(parts[0], parts[1], parts[2], body)
            if parts[:2] == ["user", "submissions"]:
                if len(parts) == 2 and method == "GET":
                    limit = int(query["limit"]) if "limit" in query else None
                    return self._json(200, service.list_json(query.get("leaderboard"), limit))
                if len(parts) == 3 and parts[2].isdigit():
                    return self._one_submission(method, int(parts[2]))
            if method == "GET" and parts == ["leaderboards"]:
                return self._json(200, [{"name": n, "description": "batched QR", "task": {},
                                         "deadline": "2099-01-01T00:00:00",
                                         "gpus": service.gpus} for n in service.leaderboards])
            if method == "GET" and len(parts) == 2 and parts[0] == "gpus":
                if parts[1] not in service.leaderboards:
                    return self._json(404, {"detail": f"Leaderboard '{parts[1]}' not found"})
                return self._json(200, service.gpus)
            self._json(404, {"detail": "Not Found"})

        def _one_submission(self, method: str, job_id: int) -> None:
            job = service.jobs.get(job_id)
            if job is None:
                return self._json(404, {"detail": f"Submission {job_id} not found"})
            if method == "DELETE":
                with service.lock:
                    del service.jobs[job_id]
                return self._json(200, {"status": "ok", "submission_id": job_id})
            self._json(200, service.poll(job))

        def _checked_file(self, leaderboard: str, gpu: str, mode: str, body: bytes):
            """(file_name, code) or None after answering the refusal, as the service does."""
            if leaderboard not in service.leaderboards:
                return self._json(404, {"detail": f"Leaderboard '{leaderboard}' not found"})
            if gpu not in service.gpus:
                return self._json(400, {"detail": f"GPU {gpu} not available for "
                                                  f"{leaderboard}; choose one of {service.gpus}"})
            if mode not in ("test", "benchmark", "leaderboard", "profile"):
                return self._json(400, {"detail": f"Invalid submission mode '{mode}'"})
            name, data = _multipart_file(self.headers.get("Content-Type", ""), body)
            if name is None:
                return self._json(400, {"detail": "No file part named 'file'"})
            if not data:
                return self._json(400, {"detail": "Empty file"})
            if len(data) > 1_000_000:
                return self._json(413, {"detail": "File too large (limit 1000000 bytes)"})
            if not name.endswith((".py", ".cu", ".cuh", ".cpp")):
                return self._json(400, {"detail": f"Unsupported file type: {name}"})
            try:
                code = data.decode("utf-8")
            except UnicodeDecodeError:
                return self._json(400, {"detail": "File is not valid UTF-8"})
            if "stream" in code.lower():
                return self._json(400, {"detail": STREAM_DETAIL})
            directive = re.search(r"^#!POPCORN leaderboard (\S+)", code, re.M)
            if directive and directive.group(1) != leaderboard:
                return self._json(400, {"detail": f"Leaderboard name in file "
                                                  f"'{directive.group(1)}' does not match "
                                                  f"'{leaderboard}'"})
            return name, code

        def _submit(self, leaderboard: str, gpu: str, mode: str, body: bytes) -> None:
            checked = self._checked_file(leaderboard, gpu, mode, body)
            if checked is None:
                return
            job = service.accept(leaderboard, gpu, mode, *checked)
            self._json(202, {"details": {"id": job.id, "job_status_id": job.id * 10},
                             "runner_queue": {"runner": "B200", "gpu": gpu, "queued_jobs": 3},
                             "status": "accepted"})

        def _profile_stream(self, leaderboard: str, gpu: str, mode: str, body: bytes) -> None:
            checked = self._checked_file(leaderboard, gpu, mode, body)
            if checked is None:
                return
            job = service.accept(leaderboard, gpu, mode, *checked)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            events = [("status", "compiling"), ("status", "profiling on B200")]
            if job.script.end == "done":
                result = {"id": job.id, "runs": [_run("profile", True)]}
                events.append(("result", json.dumps(result)))
            else:
                events.append(("error", json.dumps({"detail": job.script.error,
                                                    "status_code": 500, "raw_error": ""})))
            for name, data in events:
                self.wfile.write(f": keep-alive\nevent: {name}\ndata: {data}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

    return Handler


def _multipart_file(content_type: str, body: bytes):
    """(filename, bytes) of the form part named `file`, or (None, None)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        return None, None
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "file":
            return part.get_filename(), part.get_payload(decode=True) or b""
    return None, None


# ---- helpers the test modules share ------------------------------------------

GOOD_SUBMISSION = """\
#!POPCORN leaderboard qr_v2
#!POPCORN gpu B200
# A minimal valid qr_v2 submission: torch.geqrf.
import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    return torch.geqrf(data)
"""


@pytest.fixture
def service():
    """A FakeService running for one test (import it into a test module to use it)."""
    with FakeService() as svc:
        yield svc


def write_submission(directory, text: str = GOOD_SUBMISSION, name: str = "submission.py"):
    from pathlib import Path

    path = Path(directory) / name
    path.write_text(text, encoding="utf-8")
    return path


def closed_url() -> str:
    """The URL of a port on 127.0.0.1 that nothing listens on: connecting is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def cli_env(service: FakeService, tmp_path) -> dict:
    """Environment for a qrsub command against SERVICE, with its own ledger and home."""
    return {"POPCORN_API_URL": service.url, "POPCORN_CLI_ID": service.cli_id,
            "QRSUB_LEDGER": str(tmp_path / "ledger.sqlite3"), "QRSUB_POLL_INTERVAL": "0.01",
            "QRSUB_HTTP_TIMEOUT": "2", "HOME": str(tmp_path / "home")}
