"""Lint a submission file before the service sees it.

Two kinds of rules:

- hard: the service's own (docs/service.md; their constants are in
  qrsub.rules): it refuses the file.
  `empty`, `size` (> 1,000,000 bytes), `utf8`, `stream` (the word, any case,
  anywhere), `extension` (.py .cu .cuh .cpp), `directive` (the first block of
  comment lines: `#!POPCORN leaderboard NAME`, `#!POPCORN gpu NAME...` or
  `gpus`; a missing argument, an unknown directive or a duplicate is an error).
- soft (ours, for Python files): `syntax` (the file compiles), `custom-kernel`
  (defines it), `task-import` (imports from `task`), `import` (only torch,
  triton, the standard library, task and cuda.bindings), `directive-placement`
  (a directive after the first comment block is ignored by the service),
  `directive-missing`,
  `gpu` (the `#!POPCORN gpu` names a GPU the leaderboard is not known to offer:
  qrsub.rules.LEADERBOARD_GPUS; `qrsub submit` asks the service itself),
  `concurrent-graph` (a qrsub build whose routes use graph.mode concurrent, or a
  file that adds child graphs itself: concurrent graph branches, which the service
  warns may disqualify; `qrsub submit` sends it only with --accept-concurrency-risk).

    >>> [f"{p.line}: {p.rule}" for p in lint_text("import numpy\\n", "sub.py")]
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from qrsub.rules import (ACCEPT_CONCURRENCY_FLAG, CONCURRENCY_RISK, CONCURRENT_RULE, DIRECTIVES, EXTENSIONS,
                         MAX_BYTES, REFUSED_WORD, gpu_not_offered, header_directives, parse_directives,
                         refused_lines)

ALLOWED_TOP_MODULES = frozenset({"torch", "triton", "task", "__future__"}) | frozenset(sys.stdlib_module_names)
# Allowed with their submodules: recent torch CUDA wheels depend on cuda-bindings (the lent H200's
# torch 2.11 has it). A built file imports it only inside the concurrent graph mode, which the
# concurrent-graph rule flags on its own.
ALLOWED_PACKAGES = ("cuda.bindings",)
# What a file calls to join graphs as concurrent branches (kernels/graphs.py does it for
# graph.mode concurrent; a hand-written file may do it itself).
CHILD_GRAPH_CALL = "cudaGraphAddChildGraphNode"


@dataclass(frozen=True)
class Problem:
    """One lint finding. `hard`: the service itself refuses the file for it."""

    line: int
    rule: str
    message: str
    hard: bool


def lint_text(text: str, filename: str) -> list[Problem]:
    """All problems of a submission's text, sorted by line. `filename` decides the extension rule."""
    problems = _file_rules(text, filename)
    problems += _refused_word(text)
    problems += _directives(text)
    problems += _gpus(text)
    if filename.endswith(".py") and text:
        problems += _python_rules(text)
    return sorted(problems, key=lambda p: (p.line, not p.hard, p.rule))


def lint_bytes(data: bytes, filename: str) -> list[Problem]:
    """Lint raw file bytes (undecodable bytes are reported, not fatal)."""
    return lint_text(data.decode("utf-8", errors="surrogateescape"), filename)


# ---------------------------------------------------------------------------
# The service's rules (hard)


def _file_rules(text: str, filename: str) -> list[Problem]:
    out = []
    size = _byte_size(text)
    if not size:
        out.append(Problem(1, "empty", "the file is empty (the service answers 400)", True))
    if size > MAX_BYTES:
        out.append(Problem(1, "size", f"{size:,} bytes, over the service's {MAX_BYTES:,} (413)", True))
    bad_line = _first_non_utf8_line(text)
    if bad_line:
        out.append(Problem(bad_line, "utf8", "not valid UTF-8 (the service answers 400)", True))
    if not filename.endswith(EXTENSIONS):
        out.append(Problem(1, "extension", f"'{Path(filename).name}' must end in {', '.join(EXTENSIONS)}", True))
    return out


def _byte_size(text: str) -> int:
    """The file's size in bytes (text from lint_bytes carries bad bytes as surrogate escapes)."""
    try:
        return len(text.encode("utf-8", errors="surrogateescape"))
    except UnicodeEncodeError:
        return len(text.encode("utf-8", errors="replace"))


def _first_non_utf8_line(text: str) -> int | None:
    """Line of the first character that is not valid UTF-8 (lone surrogates, escaped bad bytes)."""
    for lineno, line in enumerate(text.split("\n"), 1):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            return lineno
    return None


def _refused_word(text: str) -> list[Problem]:
    return [Problem(lineno, "stream", f"contains '{REFUSED_WORD}' (any case): the service refuses the file", True)
            for lineno, _ in refused_lines(text)]


def _directives(text: str) -> list[Problem]:
    out, seen = [], {}
    for d in parse_directives(text):
        if not d.in_header:
            out.append(Problem(d.line, "directive-placement", "a directive after the first block of comment "
                               "lines: the service ignores it (move it to the top)", False))
            continue
        if d.name is None:
            out.append(Problem(d.line, "directive", f"'{d.prefix}' without a directive; allowed: "
                               "leaderboard NAME, gpu NAME...", True))
            continue
        if d.key is None:
            out.append(Problem(d.line, "directive", f"unknown directive '{d.name}'; allowed: "
                               f"{', '.join(DIRECTIVES)}", True))
            continue
        if not d.args:
            out.append(Problem(d.line, "directive", f"'{d.name}' without an argument", True))
        if d.key in seen:
            out.append(Problem(d.line, "directive", f"'{d.name}' again (first at line {seen[d.key]})", True))
        else:
            seen[d.key] = d.line
        if d.key == "leaderboard" and len(d.args) > 1:
            out.append(Problem(d.line, "directive", f"'leaderboard' takes one name, got {len(d.args)}", False))
    for key in ("leaderboard", "gpu"):
        if key not in seen:
            out.append(Problem(1, "directive-missing", f"no '#!POPCORN {key}' directive at the top "
                               "(the service then needs it on the command line)", False))
    return out


def _gpus(text: str) -> list[Problem]:
    """A GPU the leaderboard is not known to offer (soft: the list is ours, the service's may differ)."""
    leaderboard = header_directives(text).get("leaderboard", [None])[0]
    gpus = next((d for d in parse_directives(text) if d.in_header and d.key == "gpu" and d.args), None)
    if leaderboard is None or gpus is None:
        return []
    return [Problem(gpus.line, "gpu", why, False) for gpu in gpus.args if (why := gpu_not_offered(leaderboard, gpu))]


# ---------------------------------------------------------------------------
# Ours (soft): a Python submission the harness can load


def _python_rules(text: str) -> list[Problem]:
    try:
        tree = ast.parse(text)
        compile(tree, "submission.py", "exec")
    except SyntaxError as exc:
        return [Problem(exc.lineno or 1, "syntax", f"does not compile: {exc.msg}", False)]
    except ValueError as exc:  # e.g. NUL bytes
        return [Problem(1, "syntax", f"does not compile: {exc}", False)]
    out = []
    if not _binds_top_level(tree, "custom_kernel"):
        out.append(Problem(1, "custom-kernel", "no top-level `custom_kernel`: the harness calls "
                           "custom_kernel(data) -> (H, tau)", False))
    if not any(isinstance(n, ast.ImportFrom) and n.module == "task" and n.level == 0 for n in ast.walk(tree)):
        out.append(Problem(1, "task-import", "no `from task import input_t, output_t`", False))
    for node in ast.walk(tree):
        for module in _imported(node):
            if not _allowed_import(module):
                out.append(Problem(node.lineno, "import", f"imports '{module}': only torch, triton, the "
                                   "standard library, task and cuda.bindings are on the service's runner",
                                   False))
    return out + _concurrency(tree)


def _allowed_import(module: str) -> bool:
    return (module.split(".")[0] in ALLOWED_TOP_MODULES
            or any(module == p or module.startswith(p + ".") for p in ALLOWED_PACKAGES))


def _concurrency(tree: ast.Module) -> list[Problem]:
    """One finding for concurrent graph branches: in a qrsub build, the routes whose graph.mode
    is concurrent (its inlined kernels hold the code for every mode, so its ROUTES decide);
    in any other file, a call that adds child graphs."""
    routes = _built_routes(tree)
    if routes:
        concurrent = [(line, name) for line, name, mode in routes if mode == "concurrent"]
        if not concurrent:
            return []
        names = ", ".join(repr(name) for _, name in concurrent)
        routes_use = f"routes {names} use" if len(concurrent) > 1 else f"route {names} uses"
        what = f"{routes_use} graph.mode concurrent (the batch groups run as branches of one graph)"
        line = concurrent[0][0]
    else:
        line = next((n.lineno for n in ast.walk(tree) if _attribute_or_name(n) == CHILD_GRAPH_CALL), None)
        if line is None:
            return []
        what = f"adds child graphs ({CHILD_GRAPH_CALL})"
    return [Problem(line, CONCURRENT_RULE, f"{what}: {CONCURRENCY_RISK}. `qrsub submit` sends it only with "
                    f"{ACCEPT_CONCURRENCY_FLAG}", False)]


def _built_routes(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, name, graph mode) of each `Route(...)` in a qrsub build's ROUTES literal; [] in other files."""
    found = []
    for stmt in tree.body:
        if not _assigns(stmt, "ROUTES"):
            continue
        for node in ast.walk(stmt.value):
            if isinstance(node, ast.Call) and _attribute_or_name(node.func) == "Route":
                graph = _keyword(node, "graph")
                mode = _keyword(graph, "mode") if isinstance(graph, ast.Call) else None
                found.append((node.lineno, _constant(_keyword(node, "name")), _constant(mode)))
    return found


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _constant(node: ast.AST | None):
    return node.value if isinstance(node, ast.Constant) else None


def _attribute_or_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        # A relative import has no package to come from in a one-file submission.
        return ["." * node.level + (node.module or "")] if node.level else [node.module or ""]
    return []


def _assigns(stmt: ast.stmt, name: str) -> bool:
    """Whether STMT is a plain assignment to the name NAME (`NAME = ...`)."""
    return isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


def _binds_top_level(tree: ast.Module, name: str) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            return True
        if _assigns(stmt, name):
            return True
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                return True
    return False
