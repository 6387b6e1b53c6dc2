"""eval.py as the service runs it: report format per mode, exit codes, POPCORN_SEED."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qrsub.harness import HARNESS_FILES, default_harness
from qrsub.report import cases_from_report, geomean_us, parse_report
from qrsub.task.reference import generate_input

FIXTURES = Path(__file__).parent / "fixtures" / "harness"
STARTER = default_harness() / "submission.py"
TINY = "batch: 2; n: 8; cond: 1; seed: 5\nbatch: 3; n: 16; cond: 0; seed: 7; case: mixed\n"


def lay_out(tmp_path: Path, submission: Path = STARTER, cases: str = TINY) -> Path:
    for name in HARNESS_FILES:
        shutil.copyfile(default_harness() / name, tmp_path / name)
    shutil.copyfile(submission, tmp_path / "submission.py")
    (tmp_path / "cases.txt").write_text(cases)
    return tmp_path


def run_eval(run_dir: Path, *args, fd=True, seed=None, repeats=3, timeout=120):
    """Run eval.py with a POPCORN_FD pipe; returns (exit code, report text, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("POPCORN_FD", "POPCORN_SEED")}
    env["QRSUB_EVAL_MAX_REPEATS"] = str(repeats)
    if seed is not None:
        env["POPCORN_SEED"] = str(seed)
    read_fd, write_fd = os.pipe()
    if fd:
        env["POPCORN_FD"] = str(write_fd)
    proc = subprocess.Popen([sys.executable, "eval.py", *args], cwd=run_dir, env=env,
                            pass_fds=(write_fd,), stderr=subprocess.PIPE, text=True)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        report = f.read()
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, report, err


def keys(report: str) -> list[str]:
    return [line.split(":", 1)[0] for line in report.splitlines()]


# ---------------------------------------------------------------- exit codes

def test_no_popcorn_fd_exits_111(tmp_path):
    code, report, err = run_eval(lay_out(tmp_path), "test", "cases.txt", fd=False)
    assert code == 111 and report == "" and "POPCORN_FD" in err


@pytest.mark.parametrize("args", [("test",), ("bogus", "cases.txt"), ()])
def test_bad_arguments_exit_2(tmp_path, args):
    code, report, _ = run_eval(lay_out(tmp_path), *args)
    assert code == 2 and report == ""


@pytest.mark.parametrize("content", [None, "batch: 2; n: 8\n", "batch two; n: 8; cond: 0; seed: 1\n",
                                     "batch: 2; n: 8; cond: 0; seed: 1; case: a b\n", "\n"])
def test_bad_test_file_exits_113(tmp_path, content):
    run_dir = lay_out(tmp_path)
    if content is None:
        (run_dir / "cases.txt").unlink()
    else:
        (run_dir / "cases.txt").write_text(content)
    code, report, _ = run_eval(run_dir, "test", "cases.txt")
    assert code == 113 and report == ""


# ---------------------------------------------------------------- test mode

def test_test_mode_report_format(tmp_path):
    code, report, _ = run_eval(lay_out(tmp_path), "test", "cases.txt")
    assert code == 0
    assert keys(report) == ["test-count", "test.0.spec", "test.0.status", "test.0.message",
                            "test.1.spec", "test.1.status", "test.1.message", "check"]
    parsed = parse_report(report)
    assert parsed["test-count"] == "2"
    assert parsed["test.1.spec"] == "batch: 3; n: 16; cond: 0; seed: 7; case: mixed"
    assert parsed["check"] == "pass"
    cases = cases_from_report(parsed, "test")
    assert [c.status for c in cases] == ["pass", "pass"]
    assert all(0 <= c.factor_margin < 1 and 0 <= c.orth_margin < 1 for c in cases)
    assert cases[1].spec == {"batch": 3, "n": 16, "cond": 0, "seed": 7, "case": "mixed"}


@pytest.mark.parametrize("fixture,expected", [
    ("raises.py", "RuntimeError: boom from the fixture (submission.py:6 in custom_kernel)"),
    ("wrong_shape.py", "tau shape must be (2, 8), got (2, 7)"),
    ("syntax_error.py", "SyntaxError: "),
])
def test_failing_submission_exits_112_with_one_line(tmp_path, fixture, expected):
    run_dir = lay_out(tmp_path, FIXTURES / fixture, cases="batch: 2; n: 8; cond: 1; seed: 5\n")
    code, report, err = run_eval(run_dir, "test", "cases.txt")
    assert code == 112
    parsed = parse_report(report)
    assert parsed["test.0.status"] == "fail" and parsed["check"] == "fail"
    assert expected in parsed["test.0.error"]
    assert "\n" not in parsed["test.0.error"]
    if fixture == "syntax_error.py":
        assert "(submission.py:5)" in parsed["test.0.error"]
    if fixture == "raises.py":
        assert "Traceback" in err  # the whole story goes to stderr, not to the report


# ------------------------------------------------------------- POPCORN_SEED

def test_mix_seed_formula():
    from qrsub.task.eval import mix_seed  # stdlib-only at import: safe in-process
    assert mix_seed(5, 0) == 5 + 5 * 6 // 2
    assert mix_seed(32525, 1234) == 32525 + (32525 + 1234) * (32525 + 1235) // 2


def _recorded(run_dir: Path) -> list[float]:
    return [float(x) for x in (run_dir / "inputs.txt").read_text().split()]


def test_popcorn_seed_mixes_every_case_seed(tmp_path):
    run_dir = lay_out(tmp_path, FIXTURES / "record_inputs.py")
    code, report, _ = run_eval(run_dir, "test", "cases.txt", seed=1234)
    assert code == 0
    mixed = [5 + (5 + 1234) * (5 + 1235) // 2, 7 + (7 + 1234) * (7 + 1235) // 2]
    expected = [float(generate_input(2, 8, 1, mixed[0]).double().sum()),
                float(generate_input(3, 16, 0, mixed[1], "mixed").double().sum())]
    assert _recorded(run_dir) == expected
    # the report's spec shows the test file's line, not the mixed seed
    assert parse_report(report)["test.0.spec"] == "batch: 2; n: 8; cond: 1; seed: 5"


# ----------------------------------------------------------- timed modes

def test_benchmark_mode_report_and_inputs(tmp_path):
    run_dir = lay_out(tmp_path, FIXTURES / "record_inputs.py", cases="batch: 2; n: 8; cond: 1; seed: 5\n")
    code, report, _ = run_eval(run_dir, "benchmark", "cases.txt", repeats=3)
    assert code == 0
    assert keys(report) == ["benchmark-count", "benchmark.0.spec", "benchmark.0.runs",
                            "benchmark.0.mean", "benchmark.0.std", "benchmark.0.err",
                            "benchmark.0.best", "benchmark.0.worst", "check"]
    parsed = parse_report(report)
    assert parsed["benchmark.0.runs"] == "3"
    mean, best, worst = (float(parsed[f"benchmark.0.{k}"]) for k in ("mean", "best", "worst"))
    assert 0 < best <= mean <= worst
    [case] = cases_from_report(parsed, "benchmark")
    assert case.passed and geomean_us([case]) == pytest.approx(mean / 1e3)
    # 50 inputs (256 MiB cap is far), seeds 5+42, 5+84, ...; the warm-up pass comes first
    expected = [float(generate_input(2, 8, 1, 5 + 42 * k).double().sum()) for k in range(1, 51)]
    recorded = _recorded(run_dir)
    assert recorded[:50] == expected
    # warm-up (check + 3 reps) and the timed case (check + 3 reps) each call once per input
    assert len(recorded) == 2 * 4 * 50


def test_benchmark_failure_reports_status_and_error(tmp_path):
    run_dir = lay_out(tmp_path, FIXTURES / "nan_output.py", cases="batch: 2; n: 8; cond: 1; seed: 5\n")
    code, report, _ = run_eval(run_dir, "benchmark", "cases.txt")
    assert code == 112
    parsed = parse_report(report)
    assert parsed["benchmark.0.status"] == "fail"
    assert parsed["benchmark.0.error"] == "H contains NaN or Inf"
    assert "benchmark.0.mean" not in parsed and parsed["check"] == "fail"


def test_leaderboard_stops_at_first_failure(tmp_path):
    cases = ("batch: 1; n: 8; cond: 0; seed: 1\nbatch: 1; n: 16; cond: 0; seed: 2\n"
             "batch: 1; n: 8; cond: 0; seed: 3\n")
    run_dir = lay_out(tmp_path, FIXTURES / "fails_n16.py", cases=cases)
    code, report, _ = run_eval(run_dir, "leaderboard", "cases.txt", repeats=2)
    assert code == 112
    parsed = parse_report(report)
    assert parsed["benchmark-count"] == "3"
    assert parsed["benchmark.0.runs"] == "2"
    assert parsed["benchmark.1.status"] == "fail"
    assert parsed["benchmark.1.error"].startswith("R - Q.T @ A is too large: matrix=0, ")
    assert not any(k.startswith("benchmark.2.") for k in parsed)
    assert parsed["check"] == "fail"


def test_profile_mode_runs_case_zero_once(tmp_path):
    # also: without POPCORN_SEED the case's own seed is used
    run_dir = lay_out(tmp_path, FIXTURES / "record_inputs.py")
    code, report, _ = run_eval(run_dir, "profile", "cases.txt")
    assert code == 0
    assert keys(report) == ["benchmark-count", "benchmark.0.spec", "benchmark.0.status",
                            "benchmark.0.message", "check"]
    assert parse_report(report)["benchmark.0.status"] == "pass"
    assert _recorded(run_dir) == [float(generate_input(2, 8, 1, 5).double().sum())]
