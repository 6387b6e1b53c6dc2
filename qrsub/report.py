"""Read the qr_v2 harness's `key: value` report and show it to a person.

The same report comes from our local harness (`task/eval.py`, through
`qrsub test --local`) and from the leaderboard service (`qrsub submit`), so
both print through this module.

Public API (stable; other commands import it):

    parse_report(text: str) -> dict[str, str]
        The report's `key: value` lines as an ordered dict. A line that does not
        start with `key: ` continues the previous value (multi-line errors).

    cases_from_report(report: dict, mode: str) -> list[CaseResult]
        Per-case records for MODE ("test", "benchmark", "leaderboard",
        "profile"). Test mode reads the `test.{i}.*` keys, the other modes the
        `benchmark.{i}.*` keys.

    CaseResult (dataclass): index, spec (dict), spec_text, status
        ("pass"/"fail"), message, error, factor / orth (scaled factor and
        orthogonality residuals, parsed from the pass message), runs, mean_ns,
        std_ns, err_ns, best_ns, worst_ns; properties passed, factor_margin
        and orth_margin (each residual over its gate, qrsub.harness.checker_gates:
        below 1 passes), mean_us, std_us, timed.

    geomean_us(cases) -> float | None
        Geometric mean of the cases' benchmark means in microseconds (the
        leaderboard's score); None when no case was timed or a case failed.

    verdict(cases, report=None) -> str
        "pass" or "fail": the report's `check` key when given, else whether
        every case passed.

    render_cases(cases, mode, console=None, title=None, *, cpu_timings=False,
                 verdict_text=None, notes=())
        A rich table: spec, pass/fail, margins, timings (timed modes), then the
        geometric mean and the verdict.

    report_to_json(cases, mode=None, **extra) -> dict
        A JSON-ready dict (`json.dump` it): mode, verdict, geomean_us, cases
        (each as a plain dict), plus any EXTRA keys.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from qrsub.harness import checker_gates

_KEY_LINE = re.compile(r"^([A-Za-z0-9_.\-]+): ?(.*)$")
_TIMING_KEYS = ("runs", "mean", "std", "err", "best", "worst")


@dataclass
class CaseResult:
    """One case of a harness report."""

    index: int
    spec: dict[str, Any] = field(default_factory=dict)
    spec_text: str = ""
    status: str | None = None
    message: str | None = None
    error: str | None = None
    factor: float | None = None
    orth: float | None = None
    runs: int | None = None
    mean_ns: float | None = None
    std_ns: float | None = None
    err_ns: float | None = None
    best_ns: float | None = None
    worst_ns: float | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def timed(self) -> bool:
        return self.mean_ns is not None

    @property
    def factor_margin(self) -> float | None:
        return None if self.factor is None else self.factor / checker_gates().factor

    @property
    def orth_margin(self) -> float | None:
        return None if self.orth is None else self.orth / checker_gates().orth

    @property
    def mean_us(self) -> float | None:
        return None if self.mean_ns is None else self.mean_ns / 1e3

    @property
    def std_us(self) -> float | None:
        return None if self.std_ns is None else self.std_ns / 1e3

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(passed=self.passed, factor_margin=self.factor_margin,
                   orth_margin=self.orth_margin, mean_us=self.mean_us)
        return out


def parse_report(text: str) -> dict[str, str]:
    """Parse `key: value` lines; non-matching lines continue the last value."""
    report: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        match = _KEY_LINE.match(line)
        if match:
            last = match.group(1)
            report[last] = match.group(2).strip()
        elif last is not None and line.strip():
            report[last] += "\n" + line.rstrip()
    return report


def _pairs(text: str, sep: str):
    """(key, value) of each `key<sep>value` in a `;`-separated list, stripped."""
    for part in text.split(";"):
        if sep in part:
            key, value = part.split(sep, 1)
            yield key.strip(), value.strip()


def parse_spec(text: str) -> dict[str, Any]:
    """`batch: 16; n: 512; case: rankdef` -> {"batch": 16, "n": 512, "case": "rankdef"}."""
    spec: dict[str, Any] = {}
    for key, value in _pairs(text, ":"):
        spec[key] = _number(value) if _number(value) is not None else value
    return spec


def parse_pass_message(message: str) -> dict[str, float]:
    """The checker's `name=value; ...` pass message as floats (non-numbers skipped)."""
    values: dict[str, float] = {}
    for key, value in _pairs(message, "="):
        number = _number(value)
        if number is not None:
            values[key] = float(number)
    return values


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def _prefix(mode: str) -> str:
    return "test" if mode == "test" else "benchmark"


def _case_indices(report: dict[str, str], prefix: str) -> list[int]:
    """Indices from `{prefix}-count`, or from the keys when the count is missing."""
    count = _number(report.get(f"{prefix}-count", ""))
    seen = {int(m.group(1)) for key in report
            if (m := re.match(rf"^{prefix}\.(\d+)\.", key))}
    if isinstance(count, int):
        # A run cut short (timeout, crash) has fewer cases than announced.
        return [i for i in range(count) if i in seen]
    return sorted(seen)


def _case(report: dict[str, str], prefix: str, i: int) -> CaseResult:
    get = lambda name: report.get(f"{prefix}.{i}.{name}")  # noqa: E731
    spec_text = get("spec") or ""
    case = CaseResult(index=i, spec=parse_spec(spec_text), spec_text=spec_text,
                      message=get("message"), error=get("error"))
    for name in _TIMING_KEYS:
        value = _number(get(name) or "")
        if value is not None:
            setattr(case, "runs" if name == "runs" else f"{name}_ns",
                    int(value) if name == "runs" else float(value))
    # Timed modes report no status on success: the timings are the pass.
    case.status = get("status") or ("pass" if case.timed else None)
    if case.status is None and case.error:
        case.status = "fail"
    if case.message:
        values = parse_pass_message(case.message)
        case.factor = values.get("scaled_factor_residual")
        case.orth = values.get("scaled_orthogonality_residual")
    return case


def cases_from_report(report: dict, mode: str) -> list[CaseResult]:
    """Per-case records of REPORT for MODE (test/benchmark/leaderboard/profile)."""
    prefix = _prefix(mode)
    return [_case(report, prefix, i) for i in _case_indices(report, prefix)]


def geomean_us(cases: Iterable[CaseResult]) -> float | None:
    """Geometric mean of benchmark means in microseconds; None if any case lacks one."""
    means = [c.mean_us for c in cases]
    if not means or any(m is None or m <= 0 for m in means):
        return None
    return math.exp(sum(math.log(m) for m in means) / len(means))


def verdict(cases: Iterable[CaseResult], report: dict | None = None) -> str:
    """The report's `check` when present, else pass iff every case passed."""
    if report and report.get("check") in ("pass", "fail"):
        return report["check"]
    cases = list(cases)
    return "pass" if cases and all(c.passed for c in cases) else "fail"


def _fmt_spec(case: CaseResult) -> str:
    spec = case.spec
    if not spec:
        return case.spec_text
    shape = f"{spec.get('batch', '?')}x{spec.get('n', '?')}"
    rest = [f"cond={spec['cond']}"] if "cond" in spec else []
    rest.append(str(spec.get("case", "dense")))
    return f"{shape} {' '.join(rest)}"


def _fmt_margin(value: float | None) -> str:
    if value is None:
        return "-"
    # Close to the gate is the thing to notice.
    color = "green" if value < 0.5 else "yellow" if value < 1.0 else "red"
    return f"[{color}]{value:.3g}[/{color}]"


def _fmt_us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _fmt_status(case: CaseResult) -> str:
    if case.status == "pass":
        return "[green]pass[/green]"
    if case.status == "fail":
        return "[red]FAIL[/red]"
    return "[dim]?[/dim]"


def render_cases(cases, mode: str, console=None, title: str | None = None, *,
                 cpu_timings: bool = False, verdict_text: str | None = None,
                 notes: Iterable[str] = ()) -> None:
    """Print CASES as a rich table, then the geometric mean (timed modes) and the verdict."""
    from qrsub.console import make_console
    from rich.markup import escape
    from rich.table import Table

    console = console or make_console()
    cases = list(cases)
    timed = any(c.timed for c in cases) or mode in ("benchmark", "leaderboard")
    # Timed modes carry no residuals (their pass has no message): no empty columns.
    margins = any(c.factor is not None or c.orth is not None for c in cases) or not timed
    unit = "CPU us" if cpu_timings else "us"
    table = Table(title=title or f"qr_v2 {mode}", title_justify="left")
    for name, justify in (("#", "right"), ("spec", "left"), ("seed", "right"), ("status", "left")):
        table.add_column(name, justify=justify, no_wrap=True)
    if margins:
        gates = checker_gates()
        table.add_column(f"factor/{gates.factor:g}", justify="right")
        table.add_column(f"orth/{gates.orth:g}", justify="right")
    if timed:
        table.add_column(f"mean {unit}", justify="right")
        table.add_column(f"std {unit}", justify="right")
        table.add_column("runs", justify="right")
    for case in cases:
        row = [str(case.index), escape(_fmt_spec(case)), str(case.spec.get("seed", "")),
               _fmt_status(case)]
        if margins:
            row += [_fmt_margin(case.factor_margin), _fmt_margin(case.orth_margin)]
        if timed:
            row += [_fmt_us(case.mean_us), _fmt_us(case.std_us),
                    "-" if case.runs is None else str(case.runs)]
        table.add_row(*row)
    console.print(table)
    for case in cases:
        if case.status != "pass" and (case.error or case.message):
            first = (case.error or case.message or "").strip()
            console.print(f"  [red]case {case.index}:[/red] {escape(first)}")
    for note in notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if timed:
        score = geomean_us(cases)
        label = "geomean (CPU timings)" if cpu_timings else "geomean (leaderboard score)"
        console.print(f"{label}: " + ("-" if score is None else f"{score:,.3f} us"))
    final = verdict_text or verdict(cases)
    color = "green" if final == "pass" else "red"
    console.print(f"verdict: [bold {color}]{final}[/bold {color}]")


def report_to_json(cases, mode: str | None = None, **extra: Any) -> dict[str, Any]:
    """A JSON-ready dict of the cases, their geometric mean and the verdict."""
    cases = list(cases)
    out: dict[str, Any] = {
        "mode": mode,
        "verdict": verdict(cases),
        "geomean_us": geomean_us(cases),
        "cases": [c.to_dict() for c in cases],
    }
    out.update(extra)
    return out
