"""The one build: a variant and the kernel library into one submission file.

Every command that needs a submission gets it from `build_submission`: a
submission file (.py) is taken as it is; a variant (a .yaml path or a bare name
like `champion`) is resolved, rendered and, given OUT, written atomically. Any
problem is one BuildError whose message names the file, the line and the fix;
nothing is written then.

The rendered file is `templates/submission.py.j2` filled with: the directive
block and provenance, every kernel module of `kernels/` (but `naive`, the torch
references) in an order derived from their own imports (their intra-package
imports removed, their other top-level imports hoisted and de-duplicated), the
resolved ROUTES and SETTINGS literals, and `custom_kernel`. The kernels in the
file are the kernels in the package, line for line.

Refused: a source line containing the word the service refuses, two modules
binding the same top-level name, an intra-package import the single file cannot
satisfy (a missing module, `naive`, a cycle at import time), an invalid
variant, and any hard lint problem in the result.

    >>> build_submission("variants/champion.yaml", "build/submission.py").path
    PosixPath('build/submission.py')
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import heapq
import importlib.util
import pprint
from dataclasses import dataclass
from pathlib import Path

import jinja2

from qrsub.files import write_atomic
from qrsub.kernels.plan import PANEL_DRIVERS, TWO_LEVEL_DRIVERS
from qrsub.rules import REFUSED_WORD, refused_lines
from qrsub.variant import Variant, VariantError, find_variant, load_variant

# Names the template defines: a kernel module must not bind them.
TEMPLATE_NAMES = ("custom_kernel", "ROUTES", "SETTINGS", "input_t", "output_t")
ENTRY_POINT = ("routing", "qr_routed")
NEVER_INLINED = ("naive",)
VARIANT_SUFFIXES = (".yaml", ".yml")
# The provenance line of a built file that names its variant (see the template).
VARIANT_LINE = "# variant: "


class BuildError(Exception):
    """The build cannot produce a valid submission; the message names the file, line and fix."""


def _package_dir(package: str) -> Path:
    # find_spec locates a package without running its __init__ (qrsub.task's imports torch).
    return Path(importlib.util.find_spec(package).origin).parent


def default_kernels_dir() -> Path:
    return _package_dir("qrsub.kernels")


def default_template() -> Path:
    return _package_dir("qrsub.templates") / "submission.py.j2"


# ---------------------------------------------------------------------------
# Kernel modules


@dataclass(frozen=True)
class Module:
    """One kernel module ready to inline: its body and the imports hoisted out of it."""

    name: str
    path: Path
    source: str
    body: str
    imports: tuple[str, ...]           # normalized import statements (ast.unparse)
    defines: dict                       # top-level name -> line (def, class, assignment)
    binds: dict                         # top-level name -> (imported object, line)
    uses: tuple = ()                    # (module, name, line) of each package import dropped


def _is_internal(node: ast.AST) -> bool:
    """An import of the package itself (`from .x`, `from qrsub...`, `import qrsub...`)."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "qrsub"
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == "qrsub" for a in node.names)
    return False


def _internal_target(node: ast.AST) -> str | None:
    """The kernel module an internal `from` import reads (`from .panel import x` -> 'panel')."""
    if not isinstance(node, ast.ImportFrom):
        return None
    parts = (node.module or "").split(".")
    if node.level > 0:
        return parts[0] or None
    if parts[:2] == ["qrsub", "kernels"] and len(parts) > 2:
        return parts[2]
    return None


def _import_binds(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """Names an import binds -> the object they name ('tl' -> 'triton.language')."""
    out = {}
    for alias in node.names:
        if isinstance(node, ast.Import):
            out[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        else:
            out[alias.asname or alias.name] = f"{'.' * node.level}{node.module or ''}.{alias.name}"
    return out


def _targets(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _targets(t)]
    if isinstance(target, ast.Starred):
        return _targets(target.value)
    return []


def _top_level(body: list[ast.stmt]):
    """Statements run at module level, including those inside if/try/with/for blocks."""
    for stmt in body:
        yield stmt
        for attr in ("body", "orelse", "finalbody"):
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from _top_level(getattr(stmt, attr, []) or [])
        for handler in getattr(stmt, "handlers", []) or []:
            yield from _top_level(handler.body)


def _names(tree: ast.Module) -> tuple[dict, dict]:
    defines, binds = {}, {}
    for stmt in _top_level(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defines.setdefault(stmt.name, stmt.lineno)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for name in _targets(target):
                    defines.setdefault(name, stmt.lineno)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            for name in _targets(stmt.target):
                defines.setdefault(name, stmt.lineno)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)) and not _is_internal(stmt):
            for name, obj in _import_binds(stmt).items():
                binds.setdefault(name, (obj, stmt.lineno))
    # Dunders (__all__, __version__) mean nothing in a script: let modules repeat them.
    defines = {k: v for k, v in defines.items() if not (k.startswith("__") and k.endswith("__"))}
    return defines, binds


def _check_refused_word(text: str, shown: str) -> None:
    for lineno, line in refused_lines(text):
        raise BuildError(f"{shown}:{lineno}: contains '{REFUSED_WORD}' (any case), which the service "
                         f"refuses anywhere in a submission, comments included: reword it "
                         f"(e.g. spell a torch attribute with getattr and a joined name)\n    {line.strip()}")


def _stmt_lists(tree: ast.AST):
    """Every list of statements in the tree (module, function, class and block bodies)."""
    for node in ast.walk(tree):
        for attr in ("body", "orelse", "finalbody"):
            value = getattr(node, attr, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


@dataclass(frozen=True)
class ParsedModule:
    """A kernel module's text, parsed, with its package imports: (statement, run at import time)."""

    name: str
    path: Path
    text: str
    tree: ast.Module
    internal: tuple[tuple[ast.ImportFrom, bool], ...]

    @property
    def shown(self) -> str:
        return f"kernels/{self.name}.py"

    def needs(self) -> dict[str, int]:
        """Modules this one imports from at import time -> the line of the first such import."""
        out: dict[str, int] = {}
        for node, top in self.internal:
            if top:
                out.setdefault(_internal_target(node), node.lineno)
        return out


def _check_internal(node: ast.stmt, shown: str) -> None:
    """An internal import can be dropped only if the names it binds are the inlined modules' globals."""
    target = _internal_target(node)
    if target is None or isinstance(node, ast.Import) or any(a.asname for a in node.names):
        raise BuildError(f"{shown}:{node.lineno}: `{ast.unparse(node)}`: the single-file submission drops "
                         "package imports, so only `from .module import name` (no `as`, no module "
                         "objects) keeps working")


def read_source(path: Path, name: str) -> ParsedModule:
    """Parse a kernel module and check the form of its package imports."""
    shown = f"kernels/{name}.py"
    text = path.read_text(encoding="utf-8")
    _check_refused_word(text, shown)
    try:
        tree = ast.parse(text, filename=shown)
    except SyntaxError as exc:
        raise BuildError(f"{shown}:{exc.lineno}: does not compile: {exc.msg}") from None
    internal = []
    for stmts in _stmt_lists(tree):
        for stmt in stmts:
            if _is_internal(stmt):
                _check_internal(stmt, shown)
                internal.append((stmt, stmts is tree.body))
    return ParsedModule(name, path, text, tree, tuple(internal))


def read_sources(kernels_dir: Path) -> dict[str, ParsedModule]:
    """Every kernel module to inline, by name; each package import must name one of them."""
    paths = {p.stem: p for p in sorted(Path(kernels_dir).glob("*.py"))
             if p.stem != "__init__" and p.stem not in NEVER_INLINED}
    sources = {name: read_source(path, name) for name, path in paths.items()}
    for src in sources.values():
        for node, _ in src.internal:
            target = _internal_target(node)
            if target in NEVER_INLINED:
                raise BuildError(f"{src.shown}:{node.lineno}: imports from '{target}', which holds the torch "
                                 "references and is never inlined in the submission: use it in tests only")
            if target not in sources:
                raise BuildError(f"{src.shown}:{node.lineno}: imports from '{target}', but kernels/{target}.py "
                                 "does not exist: add the module or fix the import")
    module, entry = ENTRY_POINT
    if module not in sources:
        raise BuildError(f"kernels/{module}.py does not exist: the submission's custom_kernel calls "
                         f"{entry}(A, routes, settings) from it")
    return sources


def inline_order(sources: dict[str, ParsedModule]) -> list[str]:
    """The modules with each after those it imports from at import time (ties by name).

    A cycle of such imports has no order: a BuildError names its files and lines.
    """
    needs = {name: set(src.needs()) for name, src in sources.items()}
    users = {name: [other for other in needs if name in needs[other]] for name in needs}
    ready = [name for name, deps in needs.items() if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for user in users[name]:
            needs[user].discard(name)
            if not needs[user]:
                heapq.heappush(ready, user)
    if len(order) < len(sources):
        raise BuildError(_cycle_message(sources, [n for n in sources if n not in order]))
    return order


def _cycle_message(sources: dict[str, ParsedModule], stuck: list[str]) -> str:
    """Walk the import-time imports among STUCK until a module repeats: that loop is the cycle."""
    path = [min(stuck)]
    while True:
        src = sources[path[-1]]
        nxt = min(t for t in src.needs() if t in stuck)
        if nxt in path:
            loop = path[path.index(nxt):] + [nxt]
            break
        path.append(nxt)
    links = [f"{sources[a].shown}:{sources[a].needs()[b]} imports from '{b}'" for a, b in zip(loop, loop[1:])]
    return ("; ".join(links) + ": a cycle of imports at import time, which the single file cannot order: "
            "move one of these imports into the function that uses it")


def read_module(src: ParsedModule) -> Module:
    """Split a parsed kernel module into the body to inline and the imports to hoist."""
    lines = src.text.splitlines()
    drop: set[int] = set()
    hoisted = []
    for stmts in _stmt_lists(src.tree):
        top = stmts is src.tree.body
        mine = [s for s in stmts if _is_internal(s)]
        for s in mine:
            drop.update(range(s.lineno, s.end_lineno + 1))
        if mine and len(mine) == len(stmts) and not top:
            # The block held only package imports: keep it a valid block.
            lines[mine[0].lineno - 1] = " " * mine[0].col_offset + "pass"
            drop.discard(mine[0].lineno)
        if top:
            hoisted = [s for s in stmts if isinstance(s, (ast.Import, ast.ImportFrom)) and not _is_internal(s)]
            drop.update(line for s in hoisted for line in range(s.lineno, s.end_lineno + 1))
    body = "\n".join(line for i, line in enumerate(lines, 1) if i not in drop).strip("\n")
    defines, binds = _names(src.tree)
    uses = tuple((_internal_target(s), a.name, s.lineno) for s, _ in src.internal for a in s.names)
    return Module(src.name, src.path, src.text, body, tuple(ast.unparse(s) for s in hoisted), defines, binds, uses)


def _check_uses(modules: list[Module]) -> None:
    """`from .panel import x`: panel must bind x, since the import line is gone in the file."""
    by_name = {m.name: m for m in modules}
    for m in modules:
        for target, name, line in m.uses:
            if name not in by_name[target].defines and name not in by_name[target].binds:
                raise BuildError(f"kernels/{m.name}.py:{line}: imports `{name}` from '{target}', "
                                 f"which does not define it")


def read_modules(kernels_dir: Path) -> list[Module]:
    """The kernel modules to inline, in an order their import-time imports allow."""
    sources = read_sources(kernels_dir)
    return [read_module(sources[name]) for name in inline_order(sources)]


def _check_names(modules: list[Module]) -> None:
    """One namespace: no two modules may bind the same top-level name differently."""
    seen: dict[str, tuple[str, int, str | None]] = {}  # name -> (module, line, imported object or None)
    for m in modules:
        for name, line in m.defines.items():
            if name in TEMPLATE_NAMES:
                raise BuildError(f"kernels/{m.name}.py:{line}: defines `{name}`, which the submission "
                                 "template defines: rename it")
        entries = [(n, line, None) for n, line in m.defines.items()]
        entries += [(n, line, obj) for n, (obj, line) in m.binds.items() if n not in m.defines]
        for name, line, obj in entries:
            if name in seen:
                other, other_line, other_obj = seen[name]
                if obj is not None and obj == other_obj:
                    continue  # the same import in two modules: hoisted once
                raise BuildError(f"kernels/{m.name}.py:{line}: `{name}` is also bound at "
                                 f"kernels/{other}.py:{other_line}; the submission is one namespace: "
                                 "rename one of them (or import it from the earlier module)")
            seen[name] = (m.name, line, obj)


def _hoist(modules: list[Module]) -> str:
    """Imports of all modules, first-seen order, `from __future__` first, each once."""
    imports = list(dict.fromkeys(i for m in modules for i in m.imports))
    future = [i for i in imports if i.startswith("from __future__")]
    users = [m.name for m in modules if any(i.startswith("from __future__") for i in m.imports)]
    if future and len(users) < len(modules):
        raise BuildError(f"kernels/{users[0]}.py: `{future[0]}` would apply to every module of the single "
                         "file, changing the others: drop it (or use it in every kernel module)")
    return "\n".join(future + [i for i in imports if i not in future])


# ---------------------------------------------------------------------------
# Rendering


def source_hash(modules: list[Module], template_text: str) -> str:
    """sha256 of the inlined kernel sources and the template (names included)."""
    digest = hashlib.sha256()
    for m in modules:
        digest.update(f"kernels/{m.name}.py\0".encode())
        digest.update(m.source.encode("utf-8") + b"\0")
    digest.update(b"template\0" + template_text.encode("utf-8"))
    return digest.hexdigest()


def _warps_text(warps) -> str:
    if isinstance(warps, int):
        return str(warps)
    return "[" + ",".join(f"{'-' if r is None else r}:{w}" for r, w in warps) + "]"


def route_line(r) -> str:
    """One route (plan.Route), compact, for the provenance comment."""
    rng = lambda bounds: f"{bounds[0]}..{'' if bounds[1] is None else bounds[1]}"
    parts = [f"{r.name:<14}", f"n {rng(r.n_range):<11}", f"batch {rng(r.batch_range):<8}", f"{r.driver:<8}"]
    if r.driver in PANEL_DRIVERS:
        parts += [f"panel b{r.panel.width} w{_warps_text(r.panel.num_warps)}",
                  f"strip {r.strip.bm}x{r.strip.bn} s{r.strip.num_stages} w{r.strip.num_warps}",
                  f"prec {r.precision.project}/{r.precision.tcontract}/{r.precision.apply}"]
    if r.driver in TWO_LEVEL_DRIVERS:
        parts.append(f"outer {r.twolevel.outer} far {r.twolevel.far_precision}")
    if r.driver == "coop":
        parts.append(f"coop {r.coop.programs}x {r.coop.exchange} rows<={r.coop.max_rows}")
    parts.append(f"graph {r.graph.mode}" + (f", {r.graph.groups} groups" if r.graph.groups else ""))
    return "  ".join(parts).rstrip()


def _literal(value) -> str:
    # Dict order is the schema's order (stable); pprint wraps long literals readably.
    return pprint.pformat(value, width=100, sort_dicts=False)


def render(variant: Variant, modules: list[Module], template_text: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    chain = " <- ".join([f"{variant.name}.yaml", *(p.name for p in variant.parents)])
    return env.from_string(template_text).render(
        leaderboard=variant.leaderboard, gpu=variant.gpu, variant=variant.name,
        variant_title=f"{variant.name} ({variant.description})" if variant.description else variant.name,
        chain=chain if variant.parents else "(none)",
        source_hash=source_hash(modules, template_text),
        module_names=", ".join(m.name for m in modules),
        settings_line=", ".join(f"{k}={v}" for k, v in dataclasses.asdict(variant.settings).items()),
        route_lines=[route_line(r) for r in variant.routes], imports=_hoist(modules),
        modules=modules, routes=_literal(tuple(variant.routes)), settings=_literal(variant.settings))


def _check_result(text: str) -> None:
    """The rendered file: it compiles, and the service's own rules pass."""
    from qrsub.lint import lint_text
    try:
        compile(text, "submission.py", "exec")
    except SyntaxError as exc:
        raise BuildError(f"the rendered submission does not compile (line {exc.lineno}: {exc.msg}); "
                         "check templates/submission.py.j2") from None
    hard = [p for p in lint_text(text, "submission.py") if p.hard]
    if hard:
        raise BuildError("\n".join(f"submission.py:{p.line}: {p.rule}: {p.message}" for p in hard))


def render_submission(variant: Variant, *, kernels_dir: Path | None = None, template: Path | None = None) -> str:
    """The submission text of a loaded variant, from the kernels and the template. Writes nothing."""
    kernels_dir = Path(kernels_dir) if kernels_dir else default_kernels_dir()
    template = Path(template) if template else default_template()
    template_text = template.read_text(encoding="utf-8")
    _check_refused_word(template_text, f"templates/{template.name}")
    modules = read_modules(kernels_dir)
    _check_names(modules)
    _check_uses(modules)
    module, entry = ENTRY_POINT
    if not any(entry in m.defines for m in modules if m.name == module):
        raise BuildError(f"kernels/{module}.py: does not define `{entry}(A, routes, settings)`, "
                         "which custom_kernel calls")
    text = render(variant, modules, template_text)
    _check_result(text)
    return text


# ---------------------------------------------------------------------------
# The one build


@dataclass(frozen=True)
class Submission:
    """A submission ready to lint, run or send."""

    text: str
    source: Path                  # what was named: a submission file or a variant
    path: Path | None             # the file itself, or where the build was written (None: not written)
    variant: Variant | None       # the resolved variant it was built from

    @property
    def content(self) -> bytes:
        """The file's bytes (a submission file's own, undecodable ones included)."""
        return self.text.encode("utf-8", errors="surrogateescape")

    @property
    def variant_name(self) -> str | None:
        """The variant it came from: the one built, or the one a built file's header names."""
        if self.variant is not None:
            return self.variant.name
        for line in self.text.split("\n"):
            if not line.startswith("#"):
                return None  # provenance lives in the top comment block only
            if line.startswith(VARIANT_LINE):
                words = line[len(VARIANT_LINE):].split()
                return words[0] if words else None
        return None


def is_variant(path: Path) -> bool:
    """Whether PATH names a variant (a .yaml, or a bare name like `champion`) rather than a file to take as is."""
    return path.suffix.lower() in VARIANT_SUFFIXES or (not path.suffix and not path.exists())


def build_submission(source: str | Path, out: str | Path | None = None, *, kernels_dir: Path | None = None,
                     template: Path | None = None) -> Submission:
    """The submission SOURCE names: a submission file as it is, or a variant (a .yaml path or a
    bare name like `champion`) built from kernels/ and the template, and written to OUT when given
    (atomically: on any error nothing is written). A submission file is never copied.

    Raises BuildError, whose message names the file, the line and the fix.
    """
    source = Path(source)
    if not is_variant(source):
        if not source.is_file():
            raise BuildError(f"{source} does not exist: name a submission file or a variant (a .yaml, or a "
                             "bare name like champion), or build one with `qrsub build VARIANT.yaml`")
        text = source.read_bytes().decode("utf-8", errors="surrogateescape")
        return Submission(text, source, source, None)
    try:
        variant = load_variant(find_variant(source))
    except VariantError as exc:  # its lines are FILE:LINE:COL: knob: problem
        raise BuildError(str(exc)) from None
    text = render_submission(variant, kernels_dir=kernels_dir, template=template)
    path = write_atomic(Path(out), text) if out is not None else None
    return Submission(text, source, path, variant)
