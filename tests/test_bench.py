"""The bench engine on the CPU: ABBA order, stop rules, report, plot, refusal, dry run."""
import functools
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from qrsub import stats
from qrsub.bench import engine, report, timer
from qrsub.cli.bench import bench as bench_cli
from qrsub.task.eval import input_count

STARTER = "task/submission.py"
FALLS_BACK = Path(__file__).parent / "fixtures" / "harness" / "falls_back.py"


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class FakeTimer:
    """Candidate i takes base[i] * (1 + noise) seconds; each call advances the fake clock."""

    def __init__(self, base, clock, noise=None, fail_prepare=(), raise_at=None, fail_finish=(), warm_up_s=0.0):
        self.base, self.clock = base, clock
        self.noise = noise or (lambda i, k: 0.0)
        self.fail_prepare, self.raise_at, self.fail_finish = set(fail_prepare), raise_at, set(fail_finish)
        self.warm_up_s = warm_up_s   # seconds prepare takes (imports and compiles on a first case)
        self.calls = []

    def prepare(self, spec, active):
        self.clock.t += self.warm_up_s
        return {i: "H contains NaN or Inf" for i in active if i in self.fail_prepare}

    def time(self, cand):
        k = sum(1 for c in self.calls if c == cand)
        self.calls.append(cand)
        if self.raise_at == (cand, k):
            raise RuntimeError("illegal memory access")
        self.clock.t += 0.01
        return self.base[cand] * (1 + self.noise(cand, k))

    def finish(self, spec, active):
        return {i: "recheck failed" for i in active if i in self.fail_finish}


SPEC = {"batch": 20, "n": 32, "cond": 1, "seed": 43214}


def test_round_order_alternates():
    assert [engine.round_order(r, [0, 1]) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert engine.round_order(1, [0, 1, 2]) == [2, 1, 0]


def test_constant_timings_stop_tight_at_min_reps_in_abba_order():
    clock = FakeClock()
    run = engine.run_case(FakeTimer([1.0, 0.9], clock), SPEC, 2, engine.StopRule(min_reps=10), 100.0, clock)
    assert run.reason == "tight" and run.rounds == 10
    assert run.order[:8] == [0, 1, 1, 0, 0, 1, 1, 0]
    assert run.samples == {0: [1.0] * 10, 1: [0.9] * 10}


def test_noisy_timings_stop_on_budget_after_floor_reps():
    clock = FakeClock()
    noisy = lambda i, k: 0.5 * (k % 2)       # 1.0, 1.5, 1.0, ... never tight
    rule = engine.StopRule(min_reps=10, floor_reps=3)
    run = engine.run_case(FakeTimer([1.0, 1.0], clock, noisy), SPEC, 2, rule, 0.0, clock)
    assert run.reason == "budget" and run.rounds == 3
    run = engine.run_case(FakeTimer([1.0, 1.0], clock, noisy), SPEC, 2, rule, 0.5, clock)
    assert run.reason == "budget" and run.rounds == 25   # 2 calls of 0.01 s per round


def test_a_slow_warm_up_does_not_spend_the_case_budget():
    # 20x32, the first case, once stopped at 3 rounds (one of them cold) in its 16 s share: the
    # candidates' imports and compiles had spent it
    clock = FakeClock()
    noisy = lambda i, k: 0.5 * (k % 2)
    rule = engine.StopRule(min_reps=10, floor_reps=3)
    run = engine.run_case(FakeTimer([1.0, 1.0], clock, noisy, warm_up_s=30.0), SPEC, 2, rule, 0.5, clock)
    assert run.reason == "budget" and run.rounds == 25   # 0.5 s of rounds of 0.02 s, as without a warm-up
    assert run.elapsed == pytest.approx(0.5)


def test_a_slow_warm_up_does_not_spend_the_later_cases_shares():
    clock = FakeClock()
    noisy = lambda i, k: 0.5 * (k % 2)
    rule = engine.StopRule(min_reps=10, floor_reps=3)
    shares = {}
    hook = lambda pos, r, e, share: shares.setdefault(pos, share)
    fake = FakeTimer([1.0, 1.0], clock, noisy, warm_up_s=30.0)
    runs = engine.run_bench(fake, [SPEC, SPEC], 2, rule, 1.0, clock, hook)
    # each case half the second of timing, past 60 s of warm-ups; rounds of 0.02 s
    assert shares[0] == pytest.approx(0.5) and shares[1] == pytest.approx(0.5)
    assert runs[1].reason == "budget" and runs[1].rounds >= 25


def test_an_unsettled_median_is_named_with_its_fix():
    clock = FakeClock()
    cold = lambda i, k: 90.0 if k % 3 == 0 else 0.01 * (k % 2)   # a cold repetition in each case's 3
    runs = engine.run_bench(FakeTimer([1e-5, 1e-5], clock, cold), [SPEC, SPEC], 2,
                            engine.StopRule(min_reps=10, floor_reps=3), 0.0, clock)
    summary = report.summarize(runs, ["champion", "other"], case_indices=[0, 7])
    lines = report.unsettled_lines(summary)
    assert len(lines) == 4 and "20x32 dense c1: champion's median" in lines[0] and "3 reps" in lines[0]
    assert "--cases 0" in lines[0] and "--cases 7" in lines[-1] and "--budget" in lines[0]
    console = Console(record=True, width=400)
    report.render(summary, console)
    assert "is not settled" in console.export_text()
    assert report.unsettled_lines(_summary()) == []   # tight cases: nothing to say


def test_max_reps_caps_a_noisy_case():
    clock = FakeClock()
    noisy = lambda i, k: 0.5 * (k % 2)
    run = engine.run_case(FakeTimer([1.0, 1.0], clock, noisy), SPEC, 2, engine.StopRule(max_reps=7), 1e9, clock)
    assert run.reason == "max-reps" and run.rounds == 7


def test_a_candidate_failing_the_check_is_reported_not_timed():
    clock = FakeClock()
    fake = FakeTimer([1.0, 0.9, 0.8], clock, fail_prepare=[1])
    run = engine.run_case(fake, SPEC, 3, engine.StopRule(), 100.0, clock)
    assert 1 not in fake.calls and run.failures == {1: "H contains NaN or Inf"}
    assert set(run.samples) == {0, 2}
    assert run.order[:4] == [0, 2, 2, 0]


def test_a_candidate_raising_mid_case_is_dropped():
    clock = FakeClock()
    fake = FakeTimer([1.0, 0.9], clock, raise_at=(1, 4))
    run = engine.run_case(fake, SPEC, 2, engine.StopRule(), 100.0, clock)
    assert "illegal memory access" in run.failures[1] and set(run.samples) == {0}
    assert run.reason == "tight"


def test_budget_unused_by_a_tight_case_passes_to_the_next():
    clock = FakeClock()
    shares = {}
    hook = lambda pos, r, e, share: shares.setdefault(pos, share)
    noisy = lambda i, k: 0.5 * (k % 2)
    fake = FakeTimer([1.0, 1.0], clock)
    engine.run_bench(fake, [SPEC, SPEC], 2, engine.StopRule(), 10.0, clock, hook)
    assert shares[0] == pytest.approx(5.0) and shares[1] == pytest.approx(10.0 - 0.2)  # case 0: 10 rounds x 0.02 s
    fake = FakeTimer([1.0, 1.0], clock, noisy)
    runs = engine.run_bench(fake, [SPEC, SPEC, SPEC], 2, engine.StopRule(), 0.3, clock)
    assert all(r.reason == "budget" for r in runs)


def _summary(fail=False):
    clock = FakeClock()
    fake = FakeTimer([1e-3, 0.9e-3, 1e-3], clock, noise=lambda i, k: 0.001 * ((k * 7 + i) % 5),
                      fail_prepare=[2] if fail else [])
    specs = [SPEC, {"batch": 640, "n": 512, "cond": 2, "seed": 1029, "case": "mixed"}]
    runs = engine.run_bench(fake, specs, 3, engine.StopRule(), 10.0, clock)
    return report.summarize(runs, ["champion", "faster", "same"], device="fake")


def test_summary_numbers_and_verdicts():
    s = _summary()
    case = s["cases"][0]
    assert case["label"] == "20x32 dense c1" and case["stop"] == "tight"
    ref, fast, same = case["results"]
    assert "ratio" not in ref and fast["verdict"] == stats.FASTER and same["verdict"] == stats.NOISE
    assert fast["ratio"]["value"] == pytest.approx(0.9, rel=2e-3)
    assert ref["median_us"] == pytest.approx(1000, rel=3e-3) and ref["lo_us"] <= ref["median_us"] <= ref["hi_us"]
    g = {x["candidate"]: x for x in s["geomean"]}
    assert g["faster"]["verdict"] == stats.FASTER and g["faster"]["complete"]
    assert g["faster"]["ratio"]["value"] == pytest.approx(0.9, rel=2e-3)
    json.dumps(s)   # JSON-ready


def test_report_rendering():
    console = Console(record=True, width=200)
    report.render(_summary(fail=True), console)
    text = console.export_text()
    for needle in ("20x32 dense c1", "640x512 mixed c2", "champion", "faster", "FAIL", "H contains NaN or Inf",
                   "geometric mean", "incomplete", "really faster than champion"):
        assert needle in text, needle


def test_plot_is_a_png(tmp_path):
    out = tmp_path / "ratios.png"
    report.plot(_summary(fail=True), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_input_count_as_the_harness():
    assert input_count(20, 32) == 50
    assert input_count(40, 352) == 13
    assert input_count(640, 512) == 1


def test_cli_refuses_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(bench_cli, [STARTER, STARTER])
    assert result.exit_code == 1
    assert "needs a CUDA GPU" in result.output and "--dry-run" in result.output


def test_cli_dry_run_shows_the_plan_anywhere(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(bench_cli, [STARTER, "variants/champion.yaml", "--dry-run", "--cases", "0-2,case=dense"])
    assert result.exit_code == 0, result.output
    for needle in ("submission", "champion", "variant, built first", "cases (3)", "A B | B A", "50 inputs/rep"):
        assert needle in result.output, needle


def test_cli_bad_cases_selector():
    result = CliRunner().invoke(bench_cli, [STARTER, "--dry-run", "--cases", "99"])
    assert result.exit_code == 2 and "out of range" in result.output


def test_cli_end_to_end_with_a_fake_timer(monkeypatch, tmp_path):
    """The whole command, the GPU replaced by a fake timer: table, JSON and plot."""
    clock = FakeClock()
    monkeypatch.setattr(timer, "require_gpu", lambda: None)
    monkeypatch.setattr(timer, "HarnessTimer", lambda subs: FakeTimer([1e-3, 0.95e-3], clock))
    monkeypatch.setattr(engine.time, "monotonic", clock)
    js, png = tmp_path / "out.json", tmp_path / "out.png"
    result = CliRunner().invoke(bench_cli, [STARTER, STARTER, "--cases", "0,1", "--json", str(js), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "really faster than submission" in result.output
    data = json.loads(js.read_text())
    assert data["candidates"] == ["submission", "submission#2"] and len(data["cases"]) == 2
    assert png.read_bytes()[:4] == b"\x89PNG"


BROKEN = {
    "wrong_shape.py": "import torch\ndef custom_kernel(data):\n    H, tau = torch.geqrf(data)\n    return H, tau[:, :-1]\n",
    "raises.py": "def custom_kernel(data):\n    raise ValueError('boom')\n",
    "no_kernel.py": "x = 1\n",
}


def test_harness_timer_checks_before_timing(tmp_path):
    """The harness path on the CPU (wall-clock timings, allowed for this test only)."""
    paths = [STARTER]
    for name, text in BROKEN.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    harness_timer = timer.HarnessTimer(paths, tag="t", allow_cpu=True)
    failures = harness_timer.prepare(SPEC, [0, 1, 2, 3])
    assert set(failures) == {1, 2, 3}
    assert "tau shape must be (20, 32)" in failures[1]
    assert "ValueError: boom (raises.py:2)" in failures[2]
    assert "import failed" in failures[3] and "custom_kernel" in failures[3]
    assert len(harness_timer.inputs[0]) == input_count(20, 32) == 50
    assert 0 < harness_timer.time(0) < 1
    assert harness_timer.finish(SPEC, [0]) == {} and harness_timer.inputs == {}


def test_harness_timer_refuses_a_candidate_that_fell_back():
    """Its outputs pass the check (they are geqrf's), but its timings would not be the variant's."""
    harness_timer = timer.HarnessTimer([FALLS_BACK], tag="f", allow_cpu=True)
    failures = harness_timer.prepare(SPEC, [0])
    assert failures[0].startswith("route 'big' fell back to torch.geqrf: OutOfResources") and "refused" in failures[0]
    assert harness_timer.inputs == {} and harness_timer.outputs == {}
    assert harness_timer.prepare(SPEC, [0]) == failures     # on every later case too


def test_cli_refuses_a_candidate_that_fell_back(monkeypatch):
    """The command with the real harness timer on wall-clock time: the fallback is named, exit 1."""
    monkeypatch.setattr(timer, "require_gpu", lambda: None)
    monkeypatch.setattr(timer, "HarnessTimer", functools.partial(timer.HarnessTimer, allow_cpu=True))
    result = CliRunner(env={"COLUMNS": "250"}).invoke(bench_cli, [str(FALLS_BACK), "--cases", "0"])
    assert result.exit_code == 1, result.output
    assert "not every candidate was timed on every case" in result.output
    assert "falls_back on 20x32 dense c1: route 'big' fell back to torch.geqrf" in result.output


def test_harness_timer_inputs_follow_the_harness_seeds():
    import importlib

    harness_timer = timer.HarnessTimer([STARTER], tag="s", allow_cpu=True)
    harness_timer.prepare(SPEC, [0])
    reference = importlib.import_module("reference")
    expected = reference.generate_input(20, 32, 1, SPEC["seed"] + 2 * 42)
    assert torch.equal(harness_timer.inputs[0][1], expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_harness_timer_on_the_gpu():
    harness_timer = timer.HarnessTimer([STARTER, STARTER])
    assert harness_timer.prepare(SPEC, [0, 1]) == {}
    assert 0 < harness_timer.time(0) < 1 and 0 < harness_timer.time(1) < 1
    assert harness_timer.finish(SPEC, [0, 1]) == {}
