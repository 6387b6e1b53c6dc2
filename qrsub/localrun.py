"""Run a submission through the qr_v2 harness on this machine, as the service does.

Public API:

    run_local(submission, mode="test", *, cases=None, seed=None, harness=None,
              timeout=None, max_n=None, keep=False, on_stage=None,
              on_compile=None, on_stage_start=None, cpu=None,
              max_repeats=None) -> LocalRun
        Lay the harness and SUBMISSION in a fresh directory, run the compile
        pass (`python submission.py`), then `python eval.py MODE cases.txt`
        with a POPCORN_FD pipe. Mode "leaderboard" runs the stages test,
        benchmark, leaderboard and stops at the first failing one (as the
        service's ranked run). CASES is a `--cases` selector
        (qrsub.harness.select_cases). Without a GPU only cases with
        n <= max_n (default CPU_MAX_N) run, with TRITON_INTERPRET=1 in the
        child's environment. ON_STAGE(stage_result) is called as each stage
        ends, ON_COMPILE(compile_result) after the compile pass,
        ON_STAGE_START(mode, indices, skipped) before each stage (skipped:
        (index, spec) pairs over max_n), ON_CASE(CaseEvent) as each case
        finishes, while the stage still runs. CPU=None probes for a GPU; True/False
        forces it. MAX_REPEATS caps the benchmark repetitions (a local-only
        knob; the service does not cap). Raises HarnessError for a bad
        selection, a missing file or a task.yml without a timeout.

    LocalRun: stages (list[StageResult]), compile (CompileResult), run_dir
        (kept only with keep=True), cpu (bool), seed, max_n, skipped (list of
        (stage mode, index, spec) left out by max_n), coverage (list of
        Coverage, one per stage reached, run or not); passed (the harness's
        verdict, as the service would give it), fallbacks (routes that fell
        back to torch.geqrf, which the service would not notice).
    StageResult: mode, report (dict), cases (list[report.CaseResult], indices
        as in task.yml), exit_code, output_tail, timed_out, timeout_s,
        fallbacks (list[qrsub.fallbacks.Fallback]), cpu; passed,
        timeout_message (what a case cut off by the timeout reports), cut_off
        (those cases).
    Coverage: stage, total (the stage's cases in task.yml), ran, over_max_n;
        unselected (left out by the `--cases` selector).
    CaseEvent: mode, index (as in task.yml), spec (dict), fields (the report's
        keys for the case: status, message or error; runs, mean, ... in ns),
        seconds (wall time since the case started).

    has_gpu() -> bool                    whether torch sees a CUDA device
    timeout_message(seconds, cpu) -> str what a case cut off by the timeout reports;
                                         without a GPU, in the interpreter's words
    STAGES (mode -> stages)
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from qrsub import fallbacks
from qrsub.harness import (HARNESS_FILES, HarnessError, cases_for, default_harness, load_task, select_cases,
                           stage_timeout, task_yml)
from qrsub.report import CaseResult, cases_from_report, parse_report

STAGES = {"test": ("test",), "benchmark": ("benchmark",), "profile": ("profile",),
          "leaderboard": ("test", "benchmark", "leaderboard")}
# Without a GPU, Triton's interpreter needs minutes per reflector-heavy batch (40x176
# outlasts the 240 s test timeout): by default only the n=32 case runs; --max-n widens it.
CPU_MAX_N = 64


def timeout_message(seconds: float, cpu: bool) -> str:
    """What a case that the stage's timeout cut off reports. Without a GPU the cause is the
    interpreter's speed, not the kernel, and the words say so."""
    if cpu:
        return (f"timed out after {seconds:g} s in Triton's CPU interpreter; "
                "a GPU runs this case in milliseconds")
    return f"timed out: the run was killed after {seconds:g} s"
TAIL_CHARS = 4000


@dataclass
class CompileResult:
    ok: bool
    message: str = ""


@dataclass
class StageResult:
    mode: str
    report: dict = field(default_factory=dict)
    cases: list = field(default_factory=list)
    exit_code: int | None = None
    output_tail: str = ""
    timed_out: bool = False
    timeout_s: float | None = None
    fallbacks: list = field(default_factory=list)
    cpu: bool = False
    wall_s: float = 0.0                      # the stage's eval.py, start to end
    service_limit_s: float | None = None     # task.yml's limit for the stage on the service
    total_cases: int = 0                     # the stage's cases in task.yml, run here or not

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def timeout_message(self) -> str:
        return timeout_message(self.timeout_s or 0, self.cpu)

    @property
    def cut_off(self) -> list:
        """The cases the stage's timeout cut off (started and unfinished, or never started)."""
        return [c for c in self.cases if not c.passed and c.error == self.timeout_message] if self.timed_out else []


@dataclass
class Coverage:
    """How many of one stage's cases ran."""

    stage: str
    total: int         # the stage's cases in task.yml (profile: the first one only)
    ran: int
    over_max_n: int    # left out by max_n: without a GPU, the cases that need one

    @property
    def unselected(self) -> int:
        return self.total - self.ran - self.over_max_n


@dataclass
class LocalRun:
    mode: str
    stages: list = field(default_factory=list)
    compile: CompileResult = field(default_factory=lambda: CompileResult(True))
    run_dir: str | None = None
    cpu: bool = False
    seed: int | None = None
    max_n: int | None = None
    skipped: list = field(default_factory=list)
    coverage: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        expected = len(STAGES[self.mode])
        return len(self.stages) == expected and all(s.passed for s in self.stages)

    @property
    def fallbacks(self) -> list:
        return list(dict.fromkeys(f for stage in self.stages for f in stage.fallbacks))


# ------------------------------------------------------------- the harness

def _format_case(spec: dict) -> str:
    # Keys in the order task.yml writes them, as the service's test file does.
    return "; ".join(f"{k}: {v}" for k, v in spec.items())


def _lay_out(run_dir: Path, submission: Path, harness: Path | None) -> None:
    source = harness or default_harness()
    missing = [name for name in HARNESS_FILES if not (source / name).is_file()]
    if missing:
        raise HarnessError(f"harness {source} lacks {', '.join(missing)}; "
                            "point --harness at a folder with task.py, utils.py, reference.py and eval.py")
    for name in HARNESS_FILES:
        shutil.copyfile(source / name, run_dir / name)
    shutil.copyfile(task_yml(harness), run_dir / "task.yml")
    shutil.copyfile(submission, run_dir / "submission.py")


# ------------------------------------------------------------- processes

def has_gpu() -> bool:
    import torch
    return torch.cuda.is_available()


def _child_env(cpu: bool, seed: int | None, max_repeats: int | None = None) -> dict:
    env = dict(os.environ)
    env.pop("POPCORN_SEED", None)
    if max_repeats is not None:
        env["QRSUB_EVAL_MAX_REPEATS"] = str(max_repeats)  # local-only cap, see eval.py
    if seed is not None:
        env["POPCORN_SEED"] = str(seed)
    if cpu:
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run through the interpreter
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _run(cmd: list, cwd: Path, env: dict, timeout: float, log: Path,
         pass_fds: tuple = ()) -> tuple[int | None, bool]:
    """Run CMD in its own process group; on timeout kill the whole group (the worker too)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, pass_fds=pass_fds, start_new_session=True)
        for fd in pass_fds:
            os.close(fd)  # the child holds the write end now; EOF comes when it exits
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            return None, True
        finally:
            _kill_group(proc)  # leftovers (a worker stuck after the parent exited)


def _read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _compile_pass(run_dir: Path, env: dict, timeout: float) -> CompileResult:
    """The service runs `python3 submission.py` once first; a failure is reported, not fatal."""
    log = run_dir / "compile.log"
    code, timed_out = _run([sys.executable, "submission.py"], run_dir, env, timeout, log)
    if timed_out:
        return CompileResult(False, f"`python submission.py` did not finish within {timeout:g} s")
    if code != 0:
        return CompileResult(False, f"`python submission.py` exited with {code}: "
                                    f"{_last_line(_read_log(log)[-TAIL_CHARS:]) or 'no output'}")
    return CompileResult(True)


@dataclass
class CaseEvent:
    """One case finished, as the report tells it while the stage still runs."""

    mode: str
    index: int       # as in task.yml
    spec: dict
    fields: dict     # the report's keys for the case: status, message, error; runs, mean, ... (ns)
    seconds: float   # wall time since its spec line

    @property
    def passed(self) -> bool:
        return "error" not in self.fields and self.fields.get("status", "pass") == "pass"


class CaseEvents:
    """Reads the report line by line (eval.py flushes each) and calls ON_CASE as each case ends:
    a long GPU run shows its progress, and a run killed from outside has printed what it did."""

    # The report's last key for a case: test and profile end with message or error, a timing
    # with worst (runs, mean, std, err, best, worst), a failed timing with error.
    LAST_FIELDS = ("message", "error", "worst")

    def __init__(self, mode: str, specs: list, indices: list, on_case: Callable[[CaseEvent], None]):
        self.mode, self.specs, self.indices, self.on_case = mode, specs, indices, on_case
        self.fields, self.started = {}, time.monotonic()

    def line(self, text: str) -> None:
        key, _, value = text.partition(": ")
        parts = key.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return
        local, name = int(parts[1]), parts[2]
        if name == "spec":
            self.fields, self.started = {}, time.monotonic()
            return
        self.fields[name] = value
        if name in self.LAST_FIELDS and local < len(self.indices):
            self.on_case(CaseEvent(self.mode, self.indices[local], self.specs[local], dict(self.fields),
                                   time.monotonic() - self.started))


def _read_pipe(fd: int, sink: list, on_line, failures: list) -> None:
    with os.fdopen(fd, "rb") as f:
        for raw in f:
            sink.append(raw)
            if on_line and not failures:
                try:
                    on_line(raw.decode(errors="replace").rstrip("\n"))
                except Exception as exc:  # raised after the stage: the pipe must keep draining
                    failures.append(exc)


def _run_eval(run_dir: Path, mode: str, env: dict, timeout: float,
              on_line: Callable[[str], None] | None = None) -> tuple[str, int | None, str, bool]:
    """`python eval.py MODE cases.txt` with the POPCORN_FD pipe; returns (report text, code, output, timed out).
    ON_LINE gets each report line as it arrives.

    The output is eval.py's and its worker's stdout and stderr, whole: a submission's fallback lines are in it."""
    read_fd, write_fd = os.pipe()
    chunks: list[bytes] = []
    failures: list[Exception] = []
    reader = threading.Thread(target=_read_pipe, args=(read_fd, chunks, on_line, failures), daemon=True)
    reader.start()
    log = run_dir / f"{mode}.log"
    env = dict(env, POPCORN_FD=str(write_fd))
    code, timed_out = _run([sys.executable, "eval.py", mode, "cases.txt"], run_dir, env,
                           timeout, log, pass_fds=(write_fd,))
    reader.join(timeout=10)
    if failures:
        raise failures[0]
    return b"".join(chunks).decode(errors="replace"), code, _read_log(log), timed_out


# ------------------------------------------------------------ the verdicts

def _fill_missing(cases: list, picked: list[int], specs: list[dict], stage: StageResult) -> list:
    """Cases the report lacks (killed by the timeout, crashed harness) become failures."""
    have = {c.index for c in cases}
    why = (stage.timeout_message if stage.timed_out
           else f"no result: eval.py exited with {stage.exit_code}: "
                f"{_last_line(stage.output_tail) or 'no output'}")
    out = list(cases)
    for local, original in enumerate(picked):
        if local in have:
            continue
        if stage.mode == "leaderboard" and not stage.timed_out and any(not c.passed for c in cases):
            break  # the ranked run stops at the first failure: later cases were never due
        out.append(CaseResult(index=local, spec=dict(specs[original]),
                              spec_text=_format_case(specs[original]), status="fail", error=why))
        if stage.mode == "profile":
            break  # profile runs case 0 only
    for case in out:
        if case.status is None:  # started, never finished
            case.status, case.error = "fail", case.error or why
    return out


def _stage_result(mode: str, text: str, code, output: str, timed_out: bool, timeout: float,
                  picked: list[int], specs: list[dict], cpu: bool) -> StageResult:
    stage = StageResult(mode=mode, report=parse_report(text), exit_code=code,
                        output_tail=output[-TAIL_CHARS:], timed_out=timed_out, timeout_s=timeout,
                        fallbacks=fallbacks.in_output(output), cpu=cpu)
    cases = _fill_missing(cases_from_report(stage.report, mode), picked, specs, stage)
    for case in cases:  # report indices count the cases file; show task.yml's
        case.index = picked[case.index] if case.index < len(picked) else case.index
    stage.cases = sorted(cases, key=lambda c: c.index)
    return stage


def _stage_timeout(task: dict, mode: str, override: float | None) -> float:
    return float(override) if override is not None else stage_timeout(task, mode)


def _pick(task: dict, mode: str, selector: str | None, max_n: int | None):
    specs = cases_for(task, mode)
    picked = select_cases(specs, selector)
    if mode == "profile":
        picked = picked[:1]  # the harness profiles the file's first case only
    skipped = [(i, specs[i]) for i in picked if max_n is not None and specs[i]["n"] > max_n]
    kept = [i for i in picked if max_n is None or specs[i]["n"] <= max_n]
    return specs, kept, skipped


def run_local(submission: str | Path, mode: str = "test", *, cases: str | None = None,
              seed: int | None = None, harness: str | Path | None = None,
              timeout: float | None = None, max_n: int | None = None, keep: bool = False,
              on_stage: Callable[[StageResult], None] | None = None,
              on_compile: Callable[[CompileResult], None] | None = None,
              on_stage_start: Callable[[str, list, list], None] | None = None,
              on_case: Callable[[CaseEvent], None] | None = None,
              cpu: bool | None = None, max_repeats: int | None = None) -> LocalRun:
    """Run SUBMISSION through the harness in MODE; see the module docstring."""
    if mode not in STAGES:
        raise HarnessError(f"unknown mode {mode!r}; use one of {', '.join(STAGES)}")
    submission = Path(submission)
    if not submission.is_file():
        raise HarnessError(f"submission {submission} does not exist; build one with "
                            "`qrsub build VARIANT.yaml` or pass a path")
    harness = Path(harness).resolve() if harness else None
    task = load_task(harness)
    cpu = (not has_gpu()) if cpu is None else cpu
    if cpu and max_n is None:
        max_n = CPU_MAX_N
    run_dir = Path(tempfile.mkdtemp(prefix="qrsub-run-"))
    result = LocalRun(mode=mode, cpu=cpu, seed=seed, max_n=max_n, run_dir=str(run_dir) if keep else None)
    try:
        _lay_out(run_dir, submission, harness)
        env = _child_env(cpu, seed, max_repeats)
        result.compile = _compile_pass(run_dir, env, _stage_timeout(task, "test", timeout))
        if on_compile:
            on_compile(result.compile)
        for stage_mode in STAGES[mode]:
            stage = _run_stage(run_dir, task, stage_mode, cases, max_n, env, timeout, result,
                               on_stage_start, on_case)
            if stage is None:
                break
            result.stages.append(stage)
            if on_stage:
                on_stage(stage)
            if not stage.passed:
                break  # as the service: benchmarks only after tests pass, and so on
    finally:
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _run_stage(run_dir: Path, task: dict, mode: str, selector, max_n, env, timeout,
               result: LocalRun, on_start=None, on_case=None) -> StageResult | None:
    specs, picked, skipped = _pick(task, mode, selector, max_n)
    result.skipped.extend((mode, i, spec) for i, spec in skipped)
    total = 1 if mode == "profile" else len(specs)
    result.coverage.append(Coverage(mode, total, len(picked), len(skipped)))
    if not picked:
        if not result.stages:
            raise HarnessError(f"no {mode} case left to run (selection {selector or 'all'}, "
                                f"max n {max_n}); pick cases with --cases or raise --max-n")
        return None
    if on_start:
        on_start(mode, picked, skipped)
    (run_dir / "cases.txt").write_text("".join(_format_case(specs[i]) + "\n" for i in picked))
    limit = _stage_timeout(task, mode, timeout)
    events = CaseEvents(mode, [specs[i] for i in picked], picked, on_case) if on_case else None
    started = time.monotonic()
    text, code, output, timed_out = _run_eval(run_dir, mode, env, limit, events.line if events else None)
    stage = _stage_result(mode, text, code, output, timed_out, limit, picked, specs, result.cpu)
    stage.wall_s = time.monotonic() - started
    stage.service_limit_s = _service_limit(task, mode)
    stage.total_cases = total
    return stage


def _service_limit(task: dict, mode: str) -> float | None:
    """task.yml's timeout for the stage, which the service applies whatever --timeout says here."""
    try:
        return stage_timeout(task, mode)
    except HarnessError:
        return None


def stage_time_note(stage: StageResult) -> str:
    """The stage's wall time beside the service's limit for it, e.g. for the ranked stage, whose
    cases may each run every repetition (with a recheck) for up to 120 s."""
    line = f"{stage.mode} stage: {stage.wall_s:,.0f} s"
    if stage.service_limit_s:
        line += f" of the {stage.service_limit_s:,.0f} s the service allows it"
    if len(stage.cases) < stage.total_cases:
        line += f" ({len(stage.cases)} of its {stage.total_cases} cases ran here)"
    return line
