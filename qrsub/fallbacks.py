"""Routes that fell back to torch.geqrf: how a submission says so, and how the tools read it.

A built submission keeps a safety net: a route whose Triton kernels fail at their
first launch (compile or out-of-resources errors only) runs torch.geqrf instead,
so the service still gets a correct answer. Everywhere but on the service that
must be loud, so the submission (kernels/routing.py) keeps this contract, whose
one home is kernels/fallback.py:

- it prints exactly one line to stderr, matched by LINE:
      qrsub: route 'NAME' fell back to torch.geqrf: REASON
- it appends (NAME, REASON) to its module-level list FALLBACKS;
- with QRSUB_STRICT_ROUTES=1 in its environment it raises instead of falling back.

`qrsub test --local` and the sweep gate read the line from the harness's output,
`qrsub bench` reads FALLBACKS of the submission it loaded. LINE is the one
pattern of that line in qrsub; `line()` writes it, for fixtures and tests.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from qrsub.kernels.fallback import FALLBACK_LINE, FALLBACK_LIST, STRICT_ENV

# FALLBACK_LINE with its two fields as groups (a route name holds no quote or newline).
LINE = re.compile("^" + re.escape(FALLBACK_LINE).replace(re.escape("{route}"), "(?P<route>[^'\n]*)")
                  .replace(re.escape("{reason}"), "(?P<reason>.*)") + "$", re.MULTILINE)
LIST_NAME = FALLBACK_LIST


@dataclass(frozen=True)
class Fallback:
    route: str
    reason: str

    def __str__(self) -> str:
        return line(self.route, self.reason).removeprefix("qrsub: ")


def line(route: str, reason: str) -> str:
    """The stderr line of a fallback, as the submission prints it."""
    return FALLBACK_LINE.format(route=route, reason=reason)


def in_output(text: str) -> list[Fallback]:
    """The fallbacks a submission's output announces, each once, in order."""
    return list(dict.fromkeys(Fallback(m["route"], m["reason"].rstrip()) for m in LINE.finditer(text)))


def in_module(module) -> list[Fallback]:
    """The fallbacks a loaded submission recorded in its FALLBACKS list (none when it keeps no list)."""
    return [Fallback(str(route), str(reason)) for route, reason in getattr(module, LIST_NAME, ())]
