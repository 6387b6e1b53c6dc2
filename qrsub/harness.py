"""What our copy of the qr_v2 harness (task/) says, read from its own files.

The harness files are laid flat in a run directory and must not import qrsub,
so the facts they hold stay in them, and the tools read them from there:

- task.yml: the test and benchmark cases, each stage's timeout;
- reference.py: the checker's gates (read from its source: importing it would
  import torch, which a command line must not pay for at start);
- eval.py: how many inputs one benchmark repetition times (`input_count`;
  import it from qrsub.task.eval, which needs only the standard library).

Also here: picking cases with a `--cases` selector, and putting the harness's
top-level modules (`task`, `reference`, `utils`) on sys.path for in-process use.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HARNESS_FILES = ("task.py", "utils.py", "reference.py", "eval.py")
# The stage a mode runs -> its timeout's key in task.yml (profile runs under the benchmark's).
TIMEOUT_KEYS = {"test": "test_timeout", "benchmark": "benchmark_timeout",
                "leaderboard": "ranked_timeout", "profile": "benchmark_timeout"}
GATE_NAMES = ("FACTOR_GATE", "ORTH_GATE")


class HarnessError(Exception):
    """A problem with the harness or the cases asked of it (not a submission's verdict)."""


def default_harness() -> Path:
    """The package's task/ folder (found without running it: its __init__ imports torch)."""
    return Path(importlib.util.find_spec("qrsub.task").origin).resolve().parent


def harness_on_path() -> None:
    """Make the harness's top-level modules (`task`, `reference`, `utils`) importable here."""
    folder = str(default_harness())
    if folder not in sys.path:
        sys.path.insert(0, folder)   # submissions do `from task import input_t, output_t`


# ---------------------------------------------------------------- task.yml

def task_yml(harness: Path | None = None) -> Path:
    """HARNESS's task.yml, else the package's."""
    for folder in (harness, default_harness()):
        if folder is not None and (folder / "task.yml").is_file():
            return folder / "task.yml"
    raise HarnessError(f"no task.yml in {harness or default_harness()}")


def load_task(harness: str | Path | None = None) -> dict:
    with open(task_yml(Path(harness) if harness else None)) as f:
        return yaml.safe_load(f)


def cases_for(task: dict, mode: str) -> list[dict]:
    """The service's case list: `tests` for test mode, `benchmarks` for the timed modes."""
    return [dict(c) for c in (task["tests"] if mode == "test" else task["benchmarks"])]


def stage_timeout(task: dict, mode: str) -> float:
    """The stage's timeout in seconds, as task.yml gives it."""
    key = TIMEOUT_KEYS[mode]
    if key not in task:
        raise HarnessError(f"task.yml has no `{key}`: the service's task.yml gives every stage's timeout "
                           f"({', '.join(dict.fromkeys(TIMEOUT_KEYS.values()))}); add it, or pass --timeout")
    return float(task[key])


# ---------------------------------------------------------------- selection

def _parse_range(token: str, count: int) -> range:
    lo, _, hi = token.partition("-")
    try:
        start, stop = int(lo), int(hi or lo)
    except ValueError:
        raise HarnessError(f"--cases: {token!r} is neither an index, a range like 3-5, "
                           "nor a filter like n=512") from None
    if not (0 <= start <= stop < count):
        raise HarnessError(f"--cases: {token!r} is out of range (cases are 0..{count - 1})")
    return range(start, stop + 1)


def _matches(spec: dict, key: str, values: set[str]) -> bool:
    value = spec.get(key, "dense" if key == "case" else None)
    return str(value).lower() in values


def select_cases(specs: list[dict], selector: str | None) -> list[int]:
    """Indices of SPECS picked by a `--cases` SELECTOR (None or "" picks all; may pick none).

    Indices (`3`) and ranges (`0-2`) pick; filters (`n=512`, `case=mixed`) narrow:
    values of one key are alternatives, different keys must all hold, and
    `case=dense` matches specs without a case. Raises HarnessError for a bad token.
    """
    indices: set[int] = set()
    filters: dict[str, set[str]] = {}
    for token in (t.strip() for t in (selector or "").split(",")):
        if not token:
            continue
        if "=" in token:
            key, _, value = token.partition("=")
            filters.setdefault(key.strip(), set()).add(value.strip().lower())
        else:
            indices.update(_parse_range(token, len(specs)))
    return [i for i, spec in enumerate(specs)
            if (not indices or i in indices)
            and all(_matches(spec, k, v) for k, v in filters.items())]


# ---------------------------------------------------------------- the checker

@dataclass(frozen=True)
class Gates:
    """The checker's gates on the scaled residuals: a case passes below both."""

    factor: float
    orth: float


@functools.cache
def checker_gates() -> Gates:
    """FACTOR_GATE and ORTH_GATE as the harness's reference.py assigns them."""
    return read_gates(default_harness() / "reference.py")


def read_gates(path: Path) -> Gates:
    """The gates a reference.py assigns at top level, read from its source."""
    found = {}
    for stmt in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if stmt.targets[0].id in GATE_NAMES and isinstance(stmt.value, ast.Constant):
                found[stmt.targets[0].id] = float(stmt.value.value)
    missing = [name for name in GATE_NAMES if name not in found]
    if missing:
        raise HarnessError(f"{path}: no top-level number assigned to {' or '.join(missing)}: the tools read "
                           "the checker's gates from there, so keep them plain assignments like `FACTOR_GATE = 20.0`")
    return Gates(factor=found["FACTOR_GATE"], orth=found["ORTH_GATE"])

