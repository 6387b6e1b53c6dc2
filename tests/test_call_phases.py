"""tools/call_phases.py's projection: a harness run's mean once one-off calls are spread over it."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from call_phases import projected_means_us, ranked_wall_s  # noqa: E402


def test_one_off_repetitions_are_spread_over_the_runs_calls():
    # 50 inputs; the check phase (first) is untimed by the harness; repetitions 1 and 2 cost
    # 99 and 59 ms more than the steady 1 ms pass.
    steady, means = projected_means_us([5.0, 100.0, 60.0, 1.0, 1.0], count=50)
    assert steady == 20.0
    assert means[200] == (1.0 + 158 / 200) * 1000 / 50
    assert means[1000] < means[200]


def test_a_variant_without_one_off_costs_projects_its_steady_time():
    steady, means = projected_means_us([9.0, 2.0, 2.0, 2.0], count=2, repetitions=(200,))
    assert steady == means[200] == 1000.0


def test_a_ranked_case_runs_every_repetition_with_its_recheck_up_to_the_wall_limit():
    assert ranked_wall_s(20.0, 30.0) == 50.0  # 1000 x 50 ms
    assert ranked_wall_s(100.0, 100.0) == 120.0  # the harness stops a case at 120 s
