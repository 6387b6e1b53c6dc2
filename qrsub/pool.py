"""A pool of worker processes, one per GPU (CUDA_VISIBLE_DEVICES set for each).

Jobs (JSON dicts) go out from one queue to persistent workers started as
`python -m qrsub.pool MODULE:FUNCTION`; each worker calls FUNCTION(job, log)
and answers one JSON line per job, logs to its own file, and is restarted if
it dies. With more workers than GPUs, workers share GPUs (which exercises
the pool on one GPU, not the timings).
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from qrsub.bench.engine import error_text


def visible_devices() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries ([] without CUDA)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def assign_devices(n_workers: int, devices: Sequence[str]) -> list[str]:
    """Worker i runs on devices[i mod len]: one per GPU, or several sharing when forced."""
    if not devices:
        raise ValueError("no GPU to give the workers")
    if n_workers < 1:
        raise ValueError(f"--workers must be at least 1, got {n_workers}")
    return [devices[i % len(devices)] for i in range(n_workers)]


def worker_env(device: str, base: dict | None = None) -> dict:
    """The environment of a worker pinned to DEVICE (it sees it as cuda:0)."""
    env = dict(os.environ if base is None else base)
    env["CUDA_VISIBLE_DEVICES"] = device
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Worker:
    index: int
    device: str
    log_path: Path
    runner: str
    proc: subprocess.Popen | None = None
    jobs_done: list[str] = field(default_factory=list)

    def start(self) -> None:
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "qrsub.pool", self.runner],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
            env=worker_env(self.device))
        log.close()   # the child holds its own handle

    def run(self, job: dict) -> dict:
        """Send JOB, wait for its result; a dead worker yields an error and is restarted."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        start = time.monotonic()
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = self.proc.wait()
            self.proc = None
            result = {"name": job.get("name"), "stage": "worker",
                      "error": f"worker {self.index} died (exit {code}); see {self.log_path}"}
        else:
            result = json.loads(line)
        self.jobs_done.append(str(job.get("name")))
        return {**result, "worker": self.index, "cuda_visible_devices": self.device,
                "log": str(self.log_path), "wall_s": time.monotonic() - start}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def run_pool(jobs: Sequence[dict], devices: Sequence[str], log_dir: Path, runner: str,
             on_result: Callable[[dict], None] | None = None) -> list[dict]:
    """Run JOBS on one worker per entry of DEVICES (a device may repeat); results in job order.

    Jobs go out from one queue, so a fast worker takes more of them.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    workers = [Worker(i, d, log_dir / f"worker-{i}-gpu{d}.log", runner) for i, d in enumerate(devices)]
    todo: queue.Queue = queue.Queue()
    for k, job in enumerate(jobs):
        todo.put((k, job))
    results: list[dict | None] = [None] * len(jobs)
    lock = threading.Lock()

    def drain(worker: Worker) -> None:
        try:
            while True:
                try:
                    k, job = todo.get_nowait()
                except queue.Empty:
                    return
                result = worker.run(job)
                with lock:
                    results[k] = result
                    if on_result:
                        on_result(result)
        finally:
            worker.stop()

    threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def _worker_main(runner: str) -> int:
    """A worker: read JSON jobs from stdin, answer one JSON line each on the real stdout.

    Anything else printed (by submissions, Triton, torch) goes to the log
    (stderr), so it cannot corrupt the protocol.
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    module_name, attr = runner.split(":")
    fn = getattr(__import__(module_name, fromlist=[attr]), attr)
    pid, device = os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES", "")

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} worker pid {pid} CUDA_VISIBLE_DEVICES={device}] {msg}",
              file=sys.stderr, flush=True)

    log(f"started, runner {runner}")
    for line in sys.stdin:
        job = json.loads(line)
        log(f"job {job.get('name')}: start")
        t0 = time.monotonic()
        try:
            result = fn(job, log)
        except Exception as exc:  # a job runs submissions' code: its crash is that job's result, not the worker's end
            log(traceback.format_exc())
            result = {"name": job.get("name"), "stage": "crash", "error": error_text(exc)}
        result = {**result, "pid": pid}
        log(f"job {job.get('name')}: done in {time.monotonic() - t0:.1f}s "
            f"({result.get('stage', '')}{': ' + result['error'] if result.get('error') else ''})")
        proto.write(json.dumps(result) + "\n")
    log("no more jobs, exiting")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2:
        sys.exit(_worker_main(sys.argv[1]))
    sys.exit("usage: python -m qrsub.pool MODULE:FUNCTION  (started by the pool, e.g. `qrsub sweep`)")
