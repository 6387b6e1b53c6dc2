"""`qrsub test --local` end to end: the starter passes, broken submissions get one clear line."""
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from qrsub.cli import main
from qrsub.cli.test import verdict
from qrsub.harness import HARNESS_FILES, HarnessError, default_harness, select_cases
from qrsub.localrun import CPU_MAX_N, CaseEvents, Coverage, LocalRun, StageResult, timeout_message
from qrsub.report import CaseResult

FIXTURES = Path(__file__).parent / "fixtures" / "harness"
STARTER = default_harness() / "submission.py"
TINY_TASK = """\
test_timeout: 60
benchmark_timeout: 60
ranked_timeout: 60
tests:
  - {"batch": 2, "n": 8, "cond": 1, "seed": 11}
  - {"batch": 2, "n": 16, "cond": 0, "seed": 12, "case": "mixed"}
benchmarks:
  - {"batch": 2, "n": 8, "cond": 1, "seed": 21}
"""


@pytest.fixture
def harness(tmp_path):
    """Our harness files with a tiny task.yml: --harness points here."""
    folder = tmp_path / "harness"
    folder.mkdir()
    for name in HARNESS_FILES:
        shutil.copyfile(default_harness() / name, folder / name)
    (folder / "task.yml").write_text(TINY_TASK)
    return folder


def qrsub_test(*args, env=None):
    runner = CliRunner(env={"COLUMNS": "200", "QRSUB_EVAL_MAX_REPEATS": "2", **(env or {})})
    result = runner.invoke(main, ["test", *map(str, args)], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())  # rich may wrap: compare words


# ------------------------------------------------------------ end to end

def test_starter_passes_with_json_and_keep(harness, tmp_path):
    out_json = tmp_path / "out.json"
    code, out = qrsub_test("--local", STARTER, "--harness", harness, "--json", out_json,
                           "--keep", "--seed", "random")
    assert code == 0, out
    assert "no GPU: running on the CPU" in out and "TRITON_INTERPRET=1" in out
    assert "POPCORN_SEED=" in out
    assert "qr_v2 test (2 cases)" in out and "verdict: pass" in out and out.endswith("PASS (test: 2 of 2 cases)")
    progress = out.split("qr_v2 test")[0]  # each case's line comes as it ends, before the table
    assert "test 0 2x8: pass (" in progress and "test 1 2x16: pass (" in progress
    assert "FAIL" not in out
    data = json.loads(out_json.read_text())
    assert data["passed"] is True and data["cpu"] is True and isinstance(data["seed"], int)
    assert data["coverage"] == [{"stage": "test", "total": 2, "ran": 2, "over_max_n": 0, "unselected": 0}]
    [stage] = data["stages"]
    assert [c["status"] for c in stage["cases"]] == ["pass", "pass"]
    assert stage["service_limit_s"] == 60 and 0 < stage["wall_s"] < 60
    assert re.search(r"test stage: \d+ s of the 60 s the service allows it", out)
    assert all(0 <= c["factor_margin"] < 1 for c in stage["cases"])
    run_dir = Path(out.split("run directory: ")[1].split()[0])
    try:
        assert sorted(p.name for p in run_dir.glob("*.py")) == sorted([*HARNESS_FILES, "submission.py"])
        assert (run_dir / "cases.txt").read_text() == (
            "batch: 2; n: 8; cond: 1; seed: 11\nbatch: 2; n: 16; cond: 0; seed: 12; case: mixed\n")
    finally:
        shutil.rmtree(run_dir)


def test_leaderboard_mode_runs_three_stages_and_max_n_skips(harness):
    code, out = qrsub_test("--local", STARTER, "--harness", harness, "--mode", "leaderboard",
                           "--max-n", 8)
    assert code == 0, out
    for stage in ("qr_v2 test (1 cases)", "qr_v2 benchmark (1 cases)", "qr_v2 leaderboard (1 cases)"):
        assert stage in out
    assert "mean CPU us" in out and "geomean (CPU timings):" in out
    assert "benchmark 0 2x8: pass, mean " in out and "leaderboard 0 2x8: pass, mean " in out
    assert "test: running 1 case(s); skipped (n > 8): #1 (2x16)" in out
    assert re.search(r"test stage: \d+ s of the 60 s the service allows it \(1 of its 2 cases ran here\)", out)
    assert re.search(r"leaderboard stage: \d+ s of the 60 s the service allows it", out)
    assert out.endswith("PASS (test: 1 of 2 cases, 1 need a GPU; benchmark: 1 of 1 cases; "
                        "leaderboard: 1 of 1 cases)")


def test_a_cpu_run_says_how_much_it_covered():
    """The real task.yml: without a GPU, the default --max-n leaves one test case of 22."""
    code, out = qrsub_test("--local", STARTER)
    assert code == 0, out
    assert out.endswith("PASS (test: 1 of 22 cases, 21 need a GPU)")


def test_leaderboard_mode_stops_after_failing_tests(harness):
    code, out = qrsub_test("--local", FIXTURES / "fails_n16.py", "--harness", harness,
                           "--mode", "leaderboard")
    assert code == 1
    assert "qr_v2 test (2 cases)" in out and "benchmark" not in out.split("qr_v2 test")[1]
    assert "case 1: R - Q.T @ A is too large: matrix=" in out
    assert "test 0 2x8: pass (" in out and "test 1 2x16: fail (" in out
    assert out.endswith("FAIL (test: 2 of 2 cases)")  # the ranked run stopped there


@pytest.mark.parametrize("fixture,line", [
    ("syntax_error.py", "case 0: SyntaxError: expected ':' (submission.py:5)"),
    ("raises.py", "case 0: RuntimeError: boom from the fixture (submission.py:6 in custom_kernel)"),
    ("import_error.py", "case 0: ModuleNotFoundError: No module named 'qrsub_no_such_module' "
                        "(submission.py:2 in <module>)"),
    ("nan_output.py", "case 0: H contains NaN or Inf"),
    ("wrong_shape.py", "case 0: tau shape must be (2, 8), got (2, 7)"),
])
def test_broken_submission_gets_one_clear_line(harness, fixture, line):
    code, out = qrsub_test("--local", FIXTURES / fixture, "--harness", harness, "--cases", "0")
    assert code == 1
    assert line in out
    assert "Traceback" not in out
    assert out.endswith("FAIL (test: 1 of 2 cases, 1 not selected)")


def test_hang_is_killed_at_the_timeout(harness):
    code, out = qrsub_test("--local", FIXTURES / "hang.py", "--harness", harness,
                           "--cases", "0", "--timeout", "4")
    assert code == 1
    # Without a GPU a timeout is the interpreter's, and the verdict is not a kernel's failure.
    interpreter = "timed out after 4 s in Triton's CPU interpreter; a GPU runs this case in milliseconds"
    assert f"case 0: {interpreter}" in out
    assert out.endswith(f"verdict: unfinished UNFINISHED (test: 1 of 2 cases, 1 not selected; "
                        f"case 0 (2x8) {interpreter})")


def test_compile_pass_failure_is_reported_and_evaluation_goes_on(harness):
    code, out = qrsub_test("--local", FIXTURES / "compile_fails.py", "--harness", harness,
                           "--cases", "case=dense")
    assert code == 0, out
    assert "compile pass failed" in out and "compile step exploded" in out
    assert "qr_v2 test (1 cases)" in out


def test_variant_is_built_first_and_its_build_removed(harness):
    code, out = qrsub_test("--local", "geqrf", "--harness", harness, "--cases", "0")  # a bare variant name
    assert code == 0, out
    built = Path(out.split("test ")[1].split()[0])
    assert "qrsub-build-" in str(built) and built.name == "submission.py"  # the build is what ran
    assert not built.parent.exists()


def test_a_variant_that_does_not_build_names_its_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {default_harness().parent / 'variants' / 'geqrf.yaml'}\n"
                   "routes:\n  - {name: rest, driver: cusolver}\n")
    code, out = qrsub_test("--local", bad)
    assert code == 1
    assert "bad.yaml:3:" in out and "driver" in out


# ------------------------------------------------------------ fallbacks

FALLS_BACK = FIXTURES / "falls_back.py"
FALLBACK_LINE = ("fallback: route 'big' fell back to torch.geqrf: OutOfResources: out of resource: "
                 "shared memory, Required: 262144, Hardware limit: 232448")


def test_a_route_that_fell_back_fails_the_variant(harness, tmp_path):
    out_json = tmp_path / "out.json"
    code, out = qrsub_test("--local", FALLS_BACK, "--harness", harness, "--json", out_json)
    assert code == 1
    assert "verdict: pass" in out  # the harness passes geqrf's answer; the variant was not tested
    assert FALLBACK_LINE in out
    assert out.endswith("FAIL (test: 2 of 2 cases; 1 route(s) fell back to torch.geqrf)")
    data = json.loads(out_json.read_text())
    assert (data["passed"], data["harness_passed"]) == (False, True)
    assert data["fallbacks"] == [{"route": "big", "reason": FALLBACK_LINE.split("torch.geqrf: ", 1)[1]}]


def test_allow_fallback_passes_but_still_reports_it(harness):
    code, out = qrsub_test("--local", FALLS_BACK, "--harness", harness, "--allow-fallback")
    assert code == 0, out
    assert FALLBACK_LINE in out and out.endswith("PASS (test: 2 of 2 cases)")


# ------------------------------------------------------- fast error paths

def test_without_local_points_to_submit():
    code, out = qrsub_test(STARTER)
    assert code == 2
    assert "qrsub submit --mode test" in out


def test_missing_default_submission_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = qrsub_test("--local")
    assert code == 1
    assert "build/submission.py does not exist" in out and "qrsub build" in out


def test_bad_seed_and_bad_selector(harness):
    code, out = qrsub_test("--local", STARTER, "--seed", "abc")
    assert code == 2 and "--seed" in out
    code, out = qrsub_test("--local", STARTER, "--harness", harness, "--cases", "7")
    assert code == 1 and "out of range" in out


def test_help_teaches_with_examples():
    code, out = qrsub_test("--help")
    assert code == 0
    for text in ("--local", "--cases 0,3-5", "n=512,case=mixed", "--seed", "--harness", "--max-n",
                 "--allow-fallback"):
        assert text in out
    # What the CPU default is (localrun's constant), and what the interpreter can do and costs.
    for text in (f"only the cases with n <= --max-n run, {CPU_MAX_N} by default",
                 f"(default without a GPU: {CPU_MAX_N};", "Triton's interpreter (TRITON_INTERPRET=1)",
                 "40x176 did not finish in 500 s", "UNFINISHED"):
        assert text in out
    assert "n <= 512" not in out


# ------------------------------------------------------------ the last line

def _case(index: int, status: str, error: str | None = None) -> CaseResult:
    return CaseResult(index=index, spec={"batch": 40, "n": 176}, status=status, error=error)


def _run(cpu: bool, cases: list, timed_out: bool = False, coverage=(Coverage("test", 22, 2, 20),)) -> LocalRun:
    stage = StageResult(mode="test", cases=cases, exit_code=None if timed_out else 0, timed_out=timed_out,
                        timeout_s=500, cpu=cpu)
    return LocalRun(mode="test", stages=[stage], cpu=cpu, coverage=list(coverage))


def test_a_timeout_is_the_interpreters_only_without_a_gpu():
    assert timeout_message(500, cpu=True) == ("timed out after 500 s in Triton's CPU interpreter; "
                                              "a GPU runs this case in milliseconds")
    assert timeout_message(500, cpu=False) == "timed out: the run was killed after 500 s"
    for cpu, word in ((True, "UNFINISHED"), (False, "FAIL")):
        run = _run(cpu, [_case(0, "pass"), _case(1, "fail", timeout_message(500, cpu))], timed_out=True)
        assert verdict(run, False, False) == (word, f"test: 2 of 22 cases, 20 {'need a GPU' if cpu else 'over --max-n'}; "
                                                    f"case 1 (40x176) {timeout_message(500, cpu)}")


def test_a_real_failure_beside_a_timeout_is_a_failure():
    run = _run(True, [_case(0, "fail", "H contains NaN or Inf"), _case(1, "fail", timeout_message(500, True))],
               timed_out=True)
    assert verdict(run, False, False)[0] == "FAIL"


def test_a_stage_with_no_case_small_enough_is_unfinished():
    run = _run(True, [_case(0, "pass")], coverage=(Coverage("test", 22, 1, 21), Coverage("benchmark", 12, 0, 12)))
    run.mode = "leaderboard"
    assert verdict(run, run.passed, False) == ("UNFINISHED", "test: 1 of 22 cases, 21 need a GPU; "
                                                             "benchmark: 0 of 12 cases, 12 need a GPU")


# ------------------------------------------------------------ selection

SPECS = [{"batch": 2, "n": 8, "cond": 0, "seed": 1},
         {"batch": 2, "n": 16, "cond": 0, "seed": 2, "case": "mixed"},
         {"batch": 2, "n": 16, "cond": 0, "seed": 3, "case": "rankdef"},
         {"batch": 2, "n": 32, "cond": 0, "seed": 4, "case": "mixed"}]


@pytest.mark.parametrize("selector,expected", [
    (None, [0, 1, 2, 3]),
    ("", [0, 1, 2, 3]),
    ("0,2-3", [0, 2, 3]),
    ("n=16", [1, 2]),
    ("case=mixed", [1, 3]),
    ("case=dense", [0]),
    ("n=16,case=mixed", [1]),
    ("n=8,n=32", [0, 3]),
    ("1-3,case=MIXED", [1, 3]),
])
def test_select_cases(selector, expected):
    assert select_cases(SPECS, selector) == expected


@pytest.mark.parametrize("selector", ["9", "2-1", "x", "1-y"])
def test_select_cases_rejects_bad_tokens(selector):
    with pytest.raises(HarnessError, match="--cases"):
        select_cases(SPECS, selector)


def test_case_events_come_as_each_case_ends():
    """The report's lines become one event per finished case, indexed as in task.yml."""
    events = []
    reader = CaseEvents("benchmark", [{"batch": 2, "n": 8}, {"batch": 4, "n": 16}], [3, 5], events.append)
    lines = ["benchmark-count: 2", "benchmark.0.spec: batch: 2; n: 8",
             *(f"benchmark.0.{key}: 1000.0" for key in ("runs", "mean", "std", "err", "best")),
             "benchmark.0.worst: 2000.0", "benchmark.1.spec: batch: 4; n: 16",
             "benchmark.1.status: fail", "benchmark.1.error: boom", "check: fail"]
    for line in lines[:7]:
        reader.line(line)
    assert events == [], "a timing ends at its worst line"
    for line in lines[7:]:
        reader.line(line)
    assert [(e.index, e.passed) for e in events] == [(3, True), (5, False)]
    assert events[0].fields["mean"] == "1000.0" and events[1].fields == {"status": "fail", "error": "boom"}
