"""The service's rules for a submitted file, and the one reader of its directives.

The leaderboard service refuses a file that is empty, larger than MAX_BYTES,
not UTF-8, named with another extension than EXTENSIONS, or that contains
REFUSED_WORD anywhere (any case, comments included). It reads `#!POPCORN`
directives from the file's first block of comment lines only
(docs/service.md). `qrsub lint` reports these rules, `qrsub build` refuses
sources that break them, and `qrsub submit` reads the directives through
`header_directives`.

It warns that work on more than one queue may disqualify a submission: `qrsub lint`
flags concurrent graph branches (CONCURRENT_RULE), and `qrsub submit` sends them only
when the user accepts CONCURRENCY_RISK.

It also refuses a GPU the leaderboard does not offer. LEADERBOARD_GPUS is what
we know of that offline: `qrsub lint` warns with `gpu_not_offered`, and
`qrsub submit` asks the service itself (GET /gpus/{leaderboard}) before it
uploads.

    >>> [d.name for d in parse_directives("#!POPCORN gpu H200\\nimport torch\\n")]
    ['gpu']
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_BYTES = 1_000_000
EXTENSIONS = (".py", ".cu", ".cuh", ".cpp")
# The service refuses any file containing this word, in any case.
REFUSED_WORD = "stream"
DIRECTIVE_PREFIXES = ("#!POPCORN", "//!POPCORN")
# directive -> the key it sets (`gpu` and `gpus` are one directive: a second is a duplicate)
DIRECTIVES = {"leaderboard": "leaderboard", "gpu": "gpu", "gpus": "gpu"}
# The service also warns that work on another stream "may result in disqualification". Graph
# branches that run concurrently are such work even where the file never spells the word:
# `qrsub lint` flags a file that uses them under CONCURRENT_RULE, and `qrsub submit` sends one
# only when given ACCEPT_CONCURRENCY_FLAG, printing CONCURRENCY_RISK.
CONCURRENT_RULE = "concurrent-graph"
ACCEPT_CONCURRENCY_FLAG = "--accept-concurrency-risk"
CONCURRENCY_RISK = ("concurrent branches of one CUDA graph run their kernels side by side on more than one "
                    "hardware queue, and the service warns that work on another stream \"may result in "
                    "disqualification\", whether or not the file spells the word it refuses")
# leaderboard -> the GPU types it runs on (qr_v2's agrees with task/task.yml's `gpus`; a test checks).
LEADERBOARD_GPUS = {"qr_v2": ("B200",)}


def gpu_not_offered(leaderboard: str, gpu: str) -> str | None:
    """Why LEADERBOARD would refuse GPU, with the fix; None when it runs there or is not in LEADERBOARD_GPUS."""
    known = LEADERBOARD_GPUS.get(leaderboard.lower())
    if known is None or gpu in known:
        return None
    return (f"{leaderboard} runs on {' and '.join(known)} only, so the service refuses {gpu}: make it "
            f"`#!POPCORN gpu {known[0]}` (in a variant, `gpu: {known[0]}`)")


def refused_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line holding the refused word, in any case."""
    return [(lineno, line) for lineno, line in enumerate(text.split("\n"), 1) if REFUSED_WORD in line.lower()]


@dataclass(frozen=True)
class Directive:
    """One `#!POPCORN NAME ARGS...` line."""

    line: int
    prefix: str
    name: str | None          # None: the prefix alone
    args: tuple[str, ...]
    in_header: bool           # in the first block of comment lines, the only place the service reads

    @property
    def key(self) -> str | None:
        """What it sets (`leaderboard` or `gpu`), None for an unknown directive."""
        return DIRECTIVES.get(self.name or "")


def header_length(lines: list[str]) -> int:
    """Number of lines in the first block of comment lines."""
    count = 0
    for line in lines:
        if not line.startswith(("#", "//")):
            break
        count += 1
    return count


def parse_directives(text: str) -> list[Directive]:
    """Every directive line of TEXT, in the header or not (lint reports the misplaced ones)."""
    lines = text.split("\n")
    header = header_length(lines)
    found = []
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        prefix = next((p for p in DIRECTIVE_PREFIXES if stripped.startswith(p)), None)
        if prefix is None:
            continue
        words = stripped[len(prefix):].split()
        found.append(Directive(lineno, prefix, words[0] if words else None, tuple(words[1:]), lineno <= header))
    return found


def header_directives(text: str) -> dict[str, list[str]]:
    """What the service reads: key -> arguments of its first well-formed directive in the header."""
    values: dict[str, list[str]] = {}
    for d in parse_directives(text):
        if d.in_header and d.key and d.args:
            values.setdefault(d.key, list(d.args))
    return values
