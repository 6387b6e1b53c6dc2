"""The leaderboard service's HTTP API (see docs/service.md), and nothing else.

One `Client` per command. It knows the endpoints, turns the service's answers
into Python values, and tells failures apart:

- `ApiError`: the service answered with a non-2xx status; `detail` is its
  `{"detail": ...}` text, meant for the user as is.
- `TransportError`: no usable answer (unreachable, timed out, connection
  dropped, malformed JSON), after the retries that are safe. Its subclass
  `NotSent`: the connection failed before any byte of the request went out
  (refused, DNS failure, TLS failure, connect timeout), so the service cannot
  have received it; any other TransportError of an upload may have reached it.
- `JobFailed`: the job ended `failed`, `timed_out` or `hacked`; `error` is the
  service's own text.
- `WaitTimeout`: the job did not finish within the wait limit (it may still).

Retries: a connection that never opened is retried at once, twice, for any
request; then reads (GET) are retried with backoff on the other transient
failures, while the submission POST is not retried at all, because a retried
upload that the service did receive would be a second, duplicate submission.

The cli_id goes into one header and is scrubbed from any text the service
echoes back, so no exception raised here can carry it.
"""
from __future__ import annotations

import email.utils
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import quote

import httpx

from qrsub.submit.config import HIDDEN, CliId

MODES = ("test", "benchmark", "leaderboard", "profile")
FAILED_JOB_STATES = ("failed", "timed_out", "hacked")
CLI_ID_HEADER = "X-Popcorn-Cli-Id"


class ServiceError(Exception):
    """Anything that went wrong talking to the service."""


class ApiError(ServiceError):
    """A non-2xx answer; `detail` is the service's explanation."""

    def __init__(self, status_code: int, detail: str, retry_after: str | None = None):
        self.status_code = status_code
        self.detail = detail
        self.retry_after = retry_after
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"the service refused (HTTP {self.status_code}): {self.detail}"
        if self.status_code == 429:
            when = (f"retry after {self.retry_after} s" if self.retry_after
                    else "wait and retry; the message above says when")
            text += f"\nrate limited: {when}."
        return text

    @property
    def transient(self) -> bool:
        return self.status_code == 429 or self.status_code >= 500


class TransportError(ServiceError):
    """No usable answer: unreachable, timed out, dropped, or not JSON."""


class NotSent(TransportError):
    """The connection failed before the request began: nothing reached the service."""


# The failures that come before any byte of a request is written: no connection
# (refused, DNS, TLS handshake: httpx maps them all to ConnectError), none in time,
# none free in the pool.
NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class WaitTimeout(ServiceError):
    """The job was still running when the wait limit ran out."""


class JobFailed(ServiceError):
    """The job ended failed / timed_out / hacked; `error` is the service's text."""

    def __init__(self, status: str, error: str, submission: dict):
        self.status = status
        self.error = error
        self.submission = submission
        super().__init__(f"the job ended {status}: {error or '(the service gave no reason)'}")


@dataclass
class Accepted:
    """The service's 202 for a submission."""

    submission_id: int
    job_status_id: Any = None
    runner_queue: dict | None = None
    raw: dict = field(default_factory=dict)


def job_status(submission: dict) -> str | None:
    job = submission.get("job") or {}
    return job.get("status") if isinstance(job, dict) else None


def queued_jobs(submission_or_accept: dict) -> int | None:
    queue = submission_or_accept.get("runner_queue") or {}
    value = queue.get("queued_jobs") if isinstance(queue, dict) else None
    return value if isinstance(value, int) else None


class Client:
    """Talks to one service as one user. Use as a context manager."""

    def __init__(self, api_url: str, cli_id: CliId, *, timeout: float = 30.0,
                 upload_timeout: float = 120.0, poll_interval: float = 5.0,
                 max_wait: float = 3600.0, max_backoff: float = 60.0,
                 max_transient_failures: int = 20, read_retries: int = 3,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api_url = api_url.rstrip("/")
        self._cli_id = cli_id
        self.timeout = timeout
        self.upload_timeout = upload_timeout
        self.poll_interval = poll_interval
        self.max_wait = max_wait
        self.max_backoff = max_backoff
        self.max_transient_failures = max_transient_failures
        self.read_retries = read_retries
        self._sleep = sleep
        self._clock = clock
        self._http = httpx.Client(base_url=self.api_url, timeout=timeout,
                                  headers={CLI_ID_HEADER: cli_id.reveal(),
                                           "User-Agent": "qrsub"})

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ---- endpoints -------------------------------------------------------

    def submit(self, leaderboard: str, gpu: str, mode: str, file_name: str,
               content: bytes) -> Accepted:
        """POST the file; returns the 202's submission id and queue."""
        path = submission_path(leaderboard, gpu, mode)
        files = {"file": (file_name, content, "application/octet-stream")}
        answer = self._once("POST", path, files=files, timeout=self.upload_timeout,
                            retry_connect=True)
        return _accepted(answer)

    def submission(self, submission_id: int) -> dict:
        """One poll of GET /user/submissions/{id}: no retries."""
        return self._expect(dict, self._once("GET", f"/user/submissions/{int(submission_id)}"))

    def show(self, submission_id: int) -> dict:
        """GET /user/submissions/{id}, retried on transient failures."""
        return self._expect(dict, self._read(f"/user/submissions/{int(submission_id)}"))

    def list_submissions(self, leaderboard: str | None = None,
                         limit: int | None = None) -> list[dict]:
        params = {k: v for k, v in (("leaderboard", leaderboard), ("limit", limit))
                  if v is not None}
        return self._expect(list, self._read("/user/submissions", params=params))

    def delete(self, submission_id: int) -> Any:
        return self._once("DELETE", f"/user/submissions/{int(submission_id)}",
                          retry_connect=True)

    def leaderboards(self) -> list[dict]:
        return self._expect(list, self._read("/leaderboards"))

    def gpus(self, leaderboard: str) -> list[str]:
        return self._expect(list, self._read(f"/gpus/{quote(leaderboard.lower(), safe='')}"))

    # ---- waiting ---------------------------------------------------------

    def wait(self, submission_id: int,
             on_update: Callable[[dict | None, Exception | None], None] | None = None,
             ) -> dict:
        """Poll until `done`; raise JobFailed / WaitTimeout / TransportError / ApiError.

        ON_UPDATE(submission, None) after each answer, (None, error) after each
        transient failure, so a display can show progress and retries.
        """
        deadline = self._clock() + self.max_wait
        failures = 0
        while True:
            try:
                sub = self.submission(submission_id)
            except ServiceError as exc:
                if not _transient(exc):
                    raise
                failures += 1
                if failures > self.max_transient_failures:
                    raise TransportError(
                        f"gave up after {failures} failed polls of submission "
                        f"{submission_id} (last: {exc}); it may still be running") from exc
                if on_update:
                    on_update(None, exc)
                delay = self._backoff(failures, exc)
            else:
                failures = 0
                if on_update:
                    on_update(sub, None)
                status = job_status(sub)
                if status in FAILED_JOB_STATES:
                    raise JobFailed(status, self._scrub(str((sub.get("job") or {}).get("error") or "")), sub)
                if sub.get("done"):
                    return sub
                delay = self.poll_interval
            if self._clock() + delay > deadline:
                raise WaitTimeout(f"submission {submission_id} was not done after "
                                  f"{self.max_wait:.0f} s; it may still be running")
            self._sleep(delay)

    def _backoff(self, failures: int, exc: Exception) -> float:
        if isinstance(exc, ApiError) and exc.retry_after:
            try:
                return min(float(exc.retry_after), self.max_backoff)
            except ValueError:
                pass  # an HTTP date: fall back to our own schedule
        return min(self.poll_interval * 2 ** failures, self.max_backoff)

    # ---- profile mode: the service streams server-sent events ------------

    def submit_streaming(self, leaderboard: str, gpu: str, mode: str, file_name: str,
                         content: bytes,
                         on_status: Callable[[str], None] | None = None) -> Any:
        """POST to the streaming endpoint; returns the `result` event's JSON."""
        path = (f"/{quote(leaderboard.lower(), safe='')}/{quote(gpu, safe='')}"
                f"/{mode.lower()}")
        files = {"file": (file_name, content, "application/octet-stream")}
        timeout = httpx.Timeout(self.timeout, read=self.max_wait)
        try:
            with self._http.stream("POST", path, files=files, timeout=timeout) as response:
                if response.status_code >= 300:
                    response.read()
                    raise self._api_error(response)
                for event, data in _sse_events(response.iter_lines()):
                    if event == "status" and on_status:
                        on_status(self._scrub(data))
                    elif event == "error":
                        raise self._stream_error(data)
                    elif event == "result":
                        return self._parse_json(data)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        raise TransportError("the service closed the stream without a result")

    def _stream_error(self, data: str) -> ApiError:
        try:
            body = json.loads(data)
        except ValueError:
            body = {"detail": data}
        if not isinstance(body, dict):
            body = {"detail": data}
        detail = body.get("detail") or body.get("raw_error") or data
        return ApiError(int(body.get("status_code") or 500), self._scrub(_detail_text(detail)))

    # ---- plumbing --------------------------------------------------------

    def _read(self, path: str, params: dict | None = None) -> Any:
        """A GET retried with backoff on transient failures (a refused connection, quickly:
        a wrong address should not cost a minute of backoff)."""
        for attempt in range(self.read_retries + 1):
            try:
                return self._once("GET", path, params=params, retry_connect=True)
            except ServiceError as exc:
                if not _transient(exc) or isinstance(exc, NotSent) or attempt == self.read_retries:
                    raise
                self._sleep(self._backoff(attempt + 1, exc))
        raise AssertionError("unreachable")

    def _once(self, method: str, path: str, *, retry_connect: bool = False,
              **kwargs: Any) -> Any:
        """One request (plus reconnects when it never left); the parsed JSON body."""
        attempts = 3 if retry_connect else 1
        for attempt in range(attempts):
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except NOT_SENT_ERRORS as exc:
                # Nothing was sent: retrying cannot duplicate anything.
                if attempt == attempts - 1:
                    raise self._transport_error(exc) from None
                self._sleep(min(self.poll_interval, 1.0))
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from None
        if response.status_code >= 300:
            raise self._api_error(response)
        if not response.content:
            return None
        return self._parse_json(response.text)

    def _parse_json(self, text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError:
            snippet = self._scrub(text[:200])
            raise TransportError(f"the service's answer is not JSON: {snippet!r}") from None

    def _expect(self, kind: type, value: Any) -> Any:
        if not isinstance(value, kind):
            raise TransportError(f"the service's answer is a {type(value).__name__}, "
                                 f"expected a JSON {'object' if kind is dict else 'list'}")
        return value

    def _api_error(self, response: httpx.Response) -> ApiError:
        try:
            body = response.json()
            detail = body.get("detail", body) if isinstance(body, dict) else body
        except ValueError:
            detail = response.text[:500] or response.reason_phrase
        return ApiError(response.status_code, self._scrub(_detail_text(detail)),
                        response.headers.get("Retry-After"))

    def _transport_error(self, exc: httpx.HTTPError) -> TransportError:
        """NotSent when EXC came before the request began, else TransportError."""
        kind = type(exc).__name__
        text = self._scrub(str(exc)) or kind
        if isinstance(exc, NOT_SENT_ERRORS):
            return NotSent(f"no connection to {self.api_url} ({kind}: {text}); nothing was sent")
        return TransportError(f"no usable answer from {self.api_url} ({kind}: {text})")

    def _scrub(self, text: str) -> str:
        secret = self._cli_id.reveal()
        return text.replace(secret, HIDDEN) if secret else text


def submission_path(leaderboard: str, gpu: str, mode: str) -> str:
    """The submission endpoint; leaderboard and mode lower-cased as the service expects."""
    return (f"/submission/{quote(leaderboard.lower(), safe='')}/"
            f"{quote(gpu, safe='')}/{mode.lower()}")


def _accepted(answer: Any) -> Accepted:
    details = answer.get("details") if isinstance(answer, dict) else None
    sid = details.get("id") if isinstance(details, dict) else None
    if not isinstance(sid, int):
        raise TransportError("the service accepted the file but its answer has no "
                             "submission id; check `qrsub submissions list`")
    return Accepted(submission_id=sid, job_status_id=details.get("job_status_id"),
                    runner_queue=answer.get("runner_queue"), raw=answer)


def _transient(exc: Exception) -> bool:
    return isinstance(exc, TransportError) or (isinstance(exc, ApiError) and exc.transient)


def _detail_text(detail: Any) -> str:
    """The service's `detail` as one readable string (validation errors come as lists)."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        parts = [d.get("msg", json.dumps(d)) if isinstance(d, dict) else str(d)
                 for d in detail]
        return "; ".join(parts)
    return json.dumps(detail)


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs from a text/event-stream, per the SSE framing rules."""
    event, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue  # a comment / keep-alive
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if data:
        yield event, "\n".join(data)


_WAIT_IN_TEXT = re.compile(r"(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?)\b", re.IGNORECASE)


def retry_after_seconds(exc: ApiError, now: Callable[[], float] = time.time) -> float | None:
    """How long a 429 asks us to wait: its Retry-After header (seconds, or an HTTP
    date), else a time its detail names ("try again in 30 seconds"); None when
    it names none."""
    header = (exc.retry_after or "").strip()
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass
        try:
            return max(0.0, email.utils.parsedate_to_datetime(header).timestamp() - now())
        except (TypeError, ValueError):
            pass
    match = _WAIT_IN_TEXT.search(exc.detail or "")
    if match:
        value = float(match.group(1))
        return value * 60 if match.group(2).lower().startswith("min") else value
    return None
