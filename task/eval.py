"""qr_v2 evaluation entry point, faithful to the service's eval.py protocol.

    POPCORN_FD=<fd> [POPCORN_SEED=<s>] python eval.py MODE TESTFILE

MODE is test, benchmark, leaderboard or profile. The report goes to the file
descriptor POPCORN_FD as `key: value` lines. Exit codes: 0 all passed,
112 a case failed, 111 no POPCORN_FD, 2 bad arguments, 113 bad test file.
Every case runs in one spawned worker process, reused across the run's cases.

Local-only knob (the service never sets it): QRSUB_EVAL_MAX_REPEATS=N caps the
benchmark repetitions, so qrsub's own tests can run the timed modes quickly.
"""
import dataclasses
import math
import multiprocessing
import os
import re
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

EXIT_OK, EXIT_ARGS, EXIT_FAIL, EXIT_NO_FD, EXIT_TESTFILE = 0, 2, 112, 111, 113
MODES = ("test", "benchmark", "leaderboard", "profile")
REQUIRED_KEYS = ("batch", "n", "cond", "seed")
MAX_MESSAGE = 2000

# Benchmark budgets (docs/harness.md, "benchmark mode" and "leaderboard mode").
BENCH_BUDGET_NS = {"benchmark": 10e9, "leaderboard": 30e9}
BENCH_MAX_REPEATS = {"benchmark": 200, "leaderboard": 1000}
WARMUP_BUDGET_NS = {"benchmark": 0.1e9, "leaderboard": 0.5e9}
MIN_TIME_NS = 0.1e9
MAX_WALL_NS = 120e9
INPUT_BYTES = 256 * 1024 * 1024
MAX_INPUTS = 50


@dataclasses.dataclass
class Case:
    spec: str  # the test file's line, as the report shows it
    args: dict


class Report:
    """`key: value` lines on the POPCORN_FD descriptor, flushed line by line."""

    def __init__(self, fd: int):
        self.file = os.fdopen(fd, "w")

    def log(self, key: str, value) -> None:
        # One line per key: a newline inside a value would start a bogus key.
        text = str(value).replace("\r", "").replace("\n", " | ")
        self.file.write(f"{key}: {text}\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


# ------------------------------------------------------------ the test file

def _parse_value(text: str):
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if re.fullmatch(r"[A-Za-z_][\w\-]*", text):
        return text
    raise ValueError(f"bad value {text!r}")


def parse_case_line(line: str) -> dict:
    args = {}
    for part in line.split(";"):
        key, sep, value = part.partition(":")
        if not sep or not key.strip():
            raise ValueError(f"expected `key: value`, got {part.strip()!r}")
        args[key.strip()] = _parse_value(value.strip())
    missing = [k for k in REQUIRED_KEYS if k not in args]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    return args


def read_cases(path: str) -> list:
    with open(path) as f:
        lines = [line.strip() for line in f]
    return [Case(spec=line, args=parse_case_line(line)) for line in lines if line]


def mix_seed(seed: int, salt: int) -> int:
    """The service's POPCORN_SEED mixing (a Cantor pairing added to the seed)."""
    return seed + (seed + salt) * (seed + salt + 1) // 2


# ----------------------------------------------------- in the worker process

def _describe_exception(exc: BaseException) -> str:
    """`Type: message (file:line in func)`, pointing at the run directory's code when possible."""
    frames = traceback.extract_tb(exc.__traceback__)
    here = os.path.dirname(os.path.abspath(__file__))
    ours = [f for f in frames if os.path.dirname(os.path.abspath(f.filename)) == here]
    frame = (ours or frames or [None])[-1]
    detail = str(exc)
    if isinstance(exc, SyntaxError) and exc.filename:
        # str() of a SyntaxError already says "(file, line N)"; say it once, our way.
        detail = exc.msg
        where = f" ({os.path.basename(exc.filename)}:{exc.lineno})"
    elif frame is not None:
        where = f" ({os.path.basename(frame.filename)}:{frame.lineno} in {frame.name})"
    else:
        where = ""
    text = f"{type(exc).__name__}: {detail}{where}"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "..."


def _kernel():
    from submission import custom_kernel
    return custom_kernel


def _guarded(fn, *args):
    """Run FN in the worker; any exception becomes a (False, message) verdict."""
    try:
        return fn(*args)
    except Exception as exc:  # the submission's fault, reported per case
        traceback.print_exc()  # the whole story for stderr; the report gets one line
        return {"ok": False, "error": _describe_exception(exc)}


def _test_case(args: dict) -> dict:
    from reference import check_implementation, generate_input
    from utils import synchronize
    custom_kernel = _kernel()
    data = generate_input(**args)
    synchronize()
    output = custom_kernel(data.clone())
    synchronize()
    ok, message = check_implementation(data, output)
    return {"ok": ok, "message" if ok else "error": message}


def _profile_case(args: dict) -> dict:
    from reference import check_implementation, generate_input
    from utils import nvtx_range, synchronize
    custom_kernel = _kernel()
    with nvtx_range("generate_input"):
        data = generate_input(**args)
    synchronize()
    with nvtx_range("custom_kernel"):
        output = custom_kernel(data.clone())
        synchronize()
    ok, message = check_implementation(data, output)
    return {"ok": ok, "message" if ok else "error": message}


def _stats(durations: list) -> dict:
    runs = len(durations)
    mean = sum(durations) / runs
    std = math.sqrt(sum((d - mean) ** 2 for d in durations) / (runs - 1)) if runs > 1 else 0.0
    return {"runs": runs, "mean": mean, "std": std, "err": std / math.sqrt(runs),
            "best": min(durations), "worst": max(durations)}


def input_count(batch: int, n: int) -> int:
    """How many inputs one benchmark repetition times: ~INPUT_BYTES of them, 1 to MAX_INPUTS."""
    return max(1, min(MAX_INPUTS, INPUT_BYTES // (batch * n * n * 4)))


def _inputs(args: dict) -> list:
    """The benchmark's input list: input_count of them, seed += 42 before each."""
    from reference import generate_input
    args = dict(args)
    data = []
    for _ in range(input_count(args["batch"], args["n"])):
        args["seed"] += 42
        data.append(generate_input(**args))
    return data


def _check_all(data: list, outputs: list):
    from reference import check_implementation
    for d, out in zip(data, outputs):
        ok, message = check_implementation(d, out)
        if not ok:
            return message
    return None


def _benchmark_case(args: dict, recheck: bool, max_repeats: int, budget_ns: float) -> dict:
    from utils import Stopwatch, clear_l2_cache, synchronize
    custom_kernel = _kernel()
    data = _inputs(args)
    outputs = [custom_kernel(d.clone()) for d in data]
    synchronize()
    problem = _check_all(data, outputs)
    if problem:
        return {"ok": False, "error": problem}

    durations = []
    start = time.perf_counter_ns()
    for i in range(max_repeats):
        synchronize()
        clear_l2_cache()
        watch = Stopwatch()
        watch.start()
        outputs = [custom_kernel(d) for d in data]
        durations.append(watch.stop() / len(data))
        if recheck:
            problem = _check_all(data, outputs)
            if problem:
                return {"ok": False, "error": problem}
        elapsed = time.perf_counter_ns() - start
        if i > 1 and elapsed > MIN_TIME_NS:
            stats = _stats(durations)
            if (stats["err"] / stats["mean"] < 0.001 or stats["mean"] * stats["runs"] > budget_ns
                    or elapsed > MAX_WALL_NS):
                break
    return {"ok": True, **_stats(durations)}


# ------------------------------------------------------ in the main process

class Worker:
    """One spawned worker process, reused across cases; replaced if it dies."""

    def __init__(self):
        self.context = multiprocessing.get_context("spawn")
        self.pool = None

    def run(self, fn, *args) -> dict:
        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=1, mp_context=self.context)
        try:
            return self.pool.submit(_guarded, fn, *args).result()
        except BrokenProcessPool:
            self.pool = None  # the next case gets a fresh worker
            return {"ok": False, "error": "the worker process died (crash or os._exit in the submission)"}
        except Exception as exc:  # e.g. a result that does not pickle
            return {"ok": False, "error": _describe_exception(exc)}

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()


def _log_timing(report: Report, i: int, result: dict) -> None:
    if result["ok"]:
        for key in ("runs", "mean", "std", "err", "best", "worst"):
            report.log(f"benchmark.{i}.{key}", result[key])
    else:
        report.log(f"benchmark.{i}.status", "fail")
        report.log(f"benchmark.{i}.error", result["error"])


def run_tests(report: Report, worker: Worker, cases: list) -> bool:
    report.log("test-count", len(cases))
    passed = True
    for i, case in enumerate(cases):
        report.log(f"test.{i}.spec", case.spec)
        result = worker.run(_test_case, case.args)
        if result["ok"]:
            report.log(f"test.{i}.status", "pass")
            report.log(f"test.{i}.message", result.get("message", ""))
        else:
            passed = False
            report.log(f"test.{i}.status", "fail")
            report.log(f"test.{i}.error", result["error"])
    return passed


def _max_repeats(mode: str) -> int:
    cap = os.environ.get("QRSUB_EVAL_MAX_REPEATS", "").strip()
    return min(BENCH_MAX_REPEATS[mode], int(cap)) if cap.isdigit() and int(cap) > 0 else BENCH_MAX_REPEATS[mode]


def run_benchmarks(report: Report, worker: Worker, cases: list, mode: str) -> bool:
    repeats, budget = _max_repeats(mode), BENCH_BUDGET_NS[mode]
    # Throw-away pass: compiles, autotunes and warms caches before timing.
    warm = cases[:1] if mode == "benchmark" else cases
    for case in warm:
        worker.run(_benchmark_case, case.args, False, repeats, WARMUP_BUDGET_NS[mode])
    report.log("benchmark-count", len(cases))
    passed = True
    for i, case in enumerate(cases):
        report.log(f"benchmark.{i}.spec", case.spec)
        result = worker.run(_benchmark_case, case.args, True, repeats, budget)
        _log_timing(report, i, result)
        if not result["ok"]:
            passed = False
            if mode == "leaderboard":
                break  # the ranked run stops at the first failure
    return passed


def run_profile(report: Report, worker: Worker, cases: list) -> bool:
    report.log("benchmark-count", 1)
    report.log("benchmark.0.spec", cases[0].spec)
    result = worker.run(_profile_case, cases[0].args)
    report.log("benchmark.0.status", "pass" if result["ok"] else "fail")
    report.log("benchmark.0.message" if result["ok"] else "benchmark.0.error",
               result.get("message") or result.get("error", ""))
    return result["ok"]


def main() -> int:
    fd = os.environ.get("POPCORN_FD")
    if not fd:
        print("eval.py: POPCORN_FD is not set (the descriptor the report goes to)", file=sys.stderr)
        return EXIT_NO_FD
    if len(sys.argv) != 3 or sys.argv[1] not in MODES:
        print(f"usage: eval.py {{{'|'.join(MODES)}}} TESTFILE", file=sys.stderr)
        return EXIT_ARGS
    mode, path = sys.argv[1], sys.argv[2]
    try:
        cases = read_cases(path)
        if not cases:
            raise ValueError("no cases")
    except (OSError, ValueError) as exc:
        print(f"eval.py: cannot use test file {path}: {exc}", file=sys.stderr)
        return EXIT_TESTFILE
    salt = os.environ.get("POPCORN_SEED", "").strip()
    if salt:
        if not re.fullmatch(r"[+-]?\d+", salt):
            print(f"eval.py: POPCORN_SEED must be an integer, got {salt!r}", file=sys.stderr)
            return EXIT_ARGS
        for case in cases:
            case.args["seed"] = mix_seed(case.args["seed"], int(salt))

    report, worker = Report(int(fd)), Worker()
    try:
        if mode == "test":
            passed = run_tests(report, worker, cases)
        elif mode == "profile":
            passed = run_profile(report, worker, cases)
        else:
            passed = run_benchmarks(report, worker, cases, mode)
        report.log("check", "pass" if passed else "fail")
    finally:
        worker.close()
        report.close()
    return EXIT_OK if passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
