"""The timing engine of `qrsub bench` (and of the timing half of `qrsub sweep`).

Two variants a few percent apart cannot be told apart by timing one, then the
other: a GPU's clock drifts by more than that over a minute. So candidates are
timed in one process, round by round, each round in alternating order
(A B, B A, A B, ...): whatever drifts hits every candidate alike, and the
ratio of two candidates within one round cancels it. Repetitions go on until
every candidate's 95% interval of the median is tight (half-width < `target`
of the median) or the case's share of the time budget is spent.

The engine (`run_case`, `run_bench`) only sees a `Timer`, so its round-robin
and stop rules are tested on the CPU with a fake timer and a fake clock;
`qrsub.bench.timer.HarnessTimer` is the real one.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

from qrsub import stats


class Timer(Protocol):
    """What the engine needs from whatever runs the kernels."""

    def prepare(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        """Set the case up for the ACTIVE candidates; return {candidate: error} for those failing the check."""

    def time(self, cand: int) -> float:
        """One repetition of candidate CAND: seconds per call."""

    def finish(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        """Recheck the last outputs and free the case; return {candidate: error}."""


@dataclass(frozen=True)
class StopRule:
    """When a case has been timed enough.

    tight: every candidate has >= min_reps samples and its median's 95%
    interval has a half-width under `target` of the median.
    budget: the case's share of the time is spent on its rounds (its warm-up
    not counted), after at least floor_reps rounds, as the harness takes at
    least 3. max-reps: a cap, so a noisy case ends.
    """

    target: float = 0.01
    min_reps: int = 10
    floor_reps: int = 3
    max_reps: int = 1000

    def reason(self, samples: dict[int, list[float]], elapsed: float, budget: float) -> str | None:
        reps = min((len(s) for s in samples.values()), default=0)
        if not samples:
            return "no candidate"
        if reps >= self.max_reps:
            return "max-reps"
        if reps >= self.min_reps and all(
                stats.median_interval(s).rel_half_width < self.target for s in samples.values()):
            return "tight"
        if reps >= self.floor_reps and elapsed >= budget:
            return "budget"
        return None


def round_order(r: int, active: Sequence[int]) -> list[int]:
    """Candidates of round R: in order on even rounds, reversed on odd (ABBA...)."""
    return list(active) if r % 2 == 0 else list(reversed(active))


@dataclass
class CaseRun:
    spec: dict
    samples: dict[int, list[float]] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    rounds: int = 0
    elapsed: float = 0.0
    reason: str = ""


# on_round(case position, rounds so far, seconds spent on the case, the case's budget)
RoundHook = Callable[[int, int, float, float], None]


def run_case(timer: Timer, spec: dict, n_cands: int, stop: StopRule, budget: float,
             clock: Callable[[], float] = time.monotonic,
             on_round: Callable[[int, float], None] | None = None) -> CaseRun:
    """Time one case: check, then rounds in ABBA order until STOP says enough."""
    run = CaseRun(spec)
    run.failures.update(timer.prepare(spec, list(range(n_cands))))
    # the budget is timing time: a first case's warm-up (imports, compiles) would otherwise spend
    # its share before one round (20x32 stopped at 3 rounds, one of them cold, in 16 s)
    start = clock()
    active = [i for i in range(n_cands) if i not in run.failures]
    run.samples = {i: [] for i in active}
    while active:
        for i in round_order(run.rounds, active):
            try:
                run.samples[i].append(timer.time(i))
                run.order.append(i)
            except Exception as exc:  # a kernel that dies mid-timing fails this case only
                run.failures[i] = error_text(exc)
        active = [i for i in active if i not in run.failures]
        # a candidate that failed mid-case loses its samples: ratios need whole rounds
        run.samples = {i: run.samples[i] for i in active}
        run.rounds += 1
        run.elapsed = clock() - start
        if on_round:
            on_round(run.rounds, run.elapsed)
        run.reason = stop.reason(run.samples, run.elapsed, budget) or ""
        if run.reason:
            break
    run.failures.update(timer.finish(spec, active))
    for i in run.failures:
        run.samples.pop(i, None)
    run.elapsed = clock() - start
    run.reason = run.reason or "no candidate"
    return run


def run_bench(timer: Timer, specs: Sequence[dict], n_cands: int, stop: StopRule, budget: float,
              clock: Callable[[], float] = time.monotonic, on_round: RoundHook | None = None) -> list[CaseRun]:
    """Time every case in turn; a case's budget is what is left, shared among the cases left.

    So a case that gets tight early hands its unused time to the ones after it. The budget is
    timing time, as a case's share is (run_case): the first case's warm-up, which compiles every
    candidate, would otherwise spend the later cases' shares (a 90 s bench of five candidates at
    640x512 left three of its four cases at 3 rounds).
    """
    runs = []
    for pos, spec in enumerate(specs):
        left = budget - sum(run.elapsed for run in runs)
        share = max(0.0, left) / (len(specs) - pos)
        hook = (lambda r, e, pos=pos, share=share: on_round(pos, r, e, share)) if on_round else None
        runs.append(run_case(timer, spec, n_cands, stop, share, clock, hook))
    return runs


def error_text(exc: BaseException) -> str:
    """The exception's last line, with the submission's file:line when there is one."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
