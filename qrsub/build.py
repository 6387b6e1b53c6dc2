"""Render a variant and the kernel library into one submission file.

The submission is `templates/submission.py.j2` filled with: the directive block
and provenance, the kernel modules of `kernels/` in MODULE_ORDER (their
intra-package imports removed, their other top-level imports hoisted and
de-duplicated), the resolved ROUTES and SETTINGS literals, and `custom_kernel`.
The kernels in the file are the kernels in the package, line for line.

Refused (BuildError, nothing written): a source line containing the word the
service refuses, two modules binding the same top-level name, an
intra-package import the single file cannot satisfy, an invalid variant
(VariantError), and any hard lint problem in the result.

    >>> text = build_variant("variants/champion.yaml")
    >>> write_build("variants/champion.yaml", "build/submission.py")
"""
from __future__ import annotations

import ast
import hashlib
import pprint
import warnings
from dataclasses import dataclass
from pathlib import Path

import jinja2

from qrsub.files import write_atomic
from qrsub.rules import REFUSED_WORD, refused_lines
from qrsub.variant import Variant, load_variant

# Names the template defines: a kernel module must not bind them.
TEMPLATE_NAMES = ("custom_kernel", "ROUTES", "SETTINGS", "input_t", "output_t")
ENTRY_POINT = ("routing", "qr_routed")
NEVER_INLINED = ("naive",)


class BuildError(Exception):
    """The build cannot produce a valid submission; the message names the file, line and fix."""


class BuildWarning(UserWarning):
    """The build succeeded with a caveat (e.g. a kernel module not written yet)."""


def _package_dir(package: str) -> Path:
    import importlib
    return Path(importlib.import_module(package).__file__).parent


def default_kernels_dir() -> Path:
    return _package_dir("qrsub.kernels")


def default_template() -> Path:
    return _package_dir("qrsub.templates") / "submission.py.j2"


def default_module_order() -> tuple[str, ...]:
    import qrsub.kernels
    return tuple(qrsub.kernels.MODULE_ORDER)


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


def _check_internal(node: ast.ImportFrom | ast.Import, top: bool, order: tuple[str, ...], earlier: tuple[str, ...],
                    shown: str) -> None:
    """An internal import can be dropped only if the names it binds are the inlined modules' globals."""
    target = _internal_target(node)
    if target is None or isinstance(node, ast.Import) or any(a.asname for a in node.names):
        raise BuildError(f"{shown}:{node.lineno}: `{ast.unparse(node)}`: the single-file submission drops "
                         "package imports, so only `from .module import name` (no `as`, no module "
                         "objects) keeps working")
    if target in NEVER_INLINED or target not in order:
        raise BuildError(f"{shown}:{node.lineno}: imports from '{target}', which is never inlined in the "
                         "submission (not in kernels/__init__.py MODULE_ORDER)")
    if top and target not in earlier:
        raise BuildError(f"{shown}:{node.lineno}: imports from '{target}', which comes later in "
                         "MODULE_ORDER: a module may use at import time only modules before it")


def read_module(path: Path, name: str, order: tuple[str, ...], shown: str) -> Module:
    """Parse a kernel module, check its imports, and split off the imports to hoist."""
    earlier = order[:order.index(name)]
    source = path.read_text(encoding="utf-8")
    _check_refused_word(source, shown)
    try:
        tree = ast.parse(source, filename=shown)
    except SyntaxError as exc:
        raise BuildError(f"{shown}:{exc.lineno}: does not compile: {exc.msg}") from None
    lines = source.splitlines()
    drop: set[int] = set()
    hoisted, internal = [], []
    for stmts in _stmt_lists(tree):
        top = stmts is tree.body
        mine = [s for s in stmts if _is_internal(s)]
        for s in mine:
            _check_internal(s, top, order, earlier, shown)
            internal.append(s)
            drop.update(range(s.lineno, s.end_lineno + 1))
        if mine and len(mine) == len(stmts) and not top:
            # The block held only package imports: keep it a valid block.
            lines[mine[0].lineno - 1] = " " * mine[0].col_offset + "pass"
            drop.discard(mine[0].lineno)
        if top:
            hoisted = [s for s in stmts if isinstance(s, (ast.Import, ast.ImportFrom)) and not _is_internal(s)]
            drop.update(line for s in hoisted for line in range(s.lineno, s.end_lineno + 1))
    body = "\n".join(line for i, line in enumerate(lines, 1) if i not in drop).strip("\n")
    defines, binds = _names(tree)
    uses = tuple((_internal_target(s), a.name, s.lineno) for s in internal for a in s.names)
    return Module(name, path, source, body, tuple(ast.unparse(s) for s in hoisted), defines, binds, uses)


def _check_uses(modules: list[Module]) -> None:
    """`from .panel import x`: panel must bind x, since the import line is gone in the file."""
    by_name = {m.name: m for m in modules}
    for m in modules:
        for target, name, line in m.uses:
            if target in by_name and name not in by_name[target].defines and name not in by_name[target].binds:
                raise BuildError(f"kernels/{m.name}.py:{line}: imports `{name}` from '{target}', "
                                 f"which does not define it")


def read_modules(kernels_dir: Path, order: tuple[str, ...]) -> tuple[list[Module], list[str]]:
    """The modules in order, and the names of those missing (a warning: the lead is writing them)."""
    modules, missing = [], []
    for name in order:
        if name in NEVER_INLINED:
            raise BuildError(f"kernels/__init__.py: MODULE_ORDER lists '{name}', which holds the torch "
                             "references and is never inlined")
        path = kernels_dir / f"{name}.py"
        if not path.is_file():
            missing.append(name)
            continue
        modules.append(read_module(path, name, order, f"kernels/{name}.py"))
    return modules, missing


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
    users = {m.name for m in modules if any(i.startswith("from __future__") for i in m.imports)}
    if future and len(users) < len(modules):
        warnings.warn(BuildWarning(f"`from __future__` imports of kernels/{', '.join(sorted(users))} apply "
                                   "to every module in the single file"), stacklevel=3)
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


def route_line(r: dict) -> str:
    """One route, compact, for the provenance comment."""
    rng = lambda lo, hi: f"{lo}..{'' if hi is None else hi}"
    parts = [f"{r['name']:<14}", f"n {rng(r['n_min'], r['n_max']):<11}",
             f"batch {rng(r['batch_min'], r['batch_max']):<8}", f"{r['driver']:<8}"]
    if r["driver"] != "geqrf":
        parts += [f"panel b{r['panel_width']} w{_warps_text(r['panel_warps'])}",
                  f"strip {r['strip_bm']}x{r['strip_bn']} s{r['strip_stages']} w{r['strip_warps']}",
                  f"prec {r['prec_project']}/{r['prec_tcontract']}/{r['prec_apply']}"]
    if r["driver"] in ("twolevel", "coop"):
        parts.append(f"outer {r['outer']} far {r['far_precision']}")
    if r["driver"] == "coop":
        parts.append(f"coop {r['coop_programs']}x rows<={r['coop_max_rows']}")
    parts.append(f"graph {r['graph']}")
    return "  ".join(parts).rstrip()


def _literal(value) -> str:
    # Dict order is the schema's order (stable); pprint wraps long literals readably.
    return pprint.pformat(value, width=100, sort_dicts=False)


def render(variant: Variant, modules: list[Module], missing: list[str], template_text: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    chain = " <- ".join([f"{variant.name}.yaml", *(p.name for p in variant.parents)])
    return env.from_string(template_text).render(
        leaderboard=variant.leaderboard, gpu=variant.gpu, variant=variant.name,
        variant_title=f"{variant.name} ({variant.description})" if variant.description else variant.name, chain=chain if variant.parents else "(none)",
        source_hash=source_hash(modules, template_text),
        module_names=", ".join(m.name for m in modules) or "(none)", missing=missing,
        settings_line=", ".join(f"{k}={v}" for k, v in variant.settings.items()),
        route_lines=[route_line(r) for r in variant.routes], imports=_hoist(modules),
        modules=modules, routes=_literal([dict(r) for r in variant.routes]),
        settings=_literal(dict(variant.settings)))


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


def build_variant(variant: str | Path | Variant, *, kernels_dir: Path | None = None,
                  module_order: tuple[str, ...] | None = None, template: Path | None = None) -> str:
    """The submission text for a variant (a path or a loaded Variant). Writes nothing.

    Raises VariantError (bad variant) or BuildError (bad sources). Warns BuildWarning for
    kernel modules that do not exist yet.
    """
    if not isinstance(variant, Variant):
        variant = load_variant(variant)
    kernels_dir = Path(kernels_dir) if kernels_dir else default_kernels_dir()
    order = tuple(module_order) if module_order is not None else default_module_order()
    template = Path(template) if template else default_template()
    template_text = template.read_text(encoding="utf-8")
    _check_refused_word(template_text, f"templates/{template.name}")
    modules, missing = read_modules(kernels_dir, order)
    _check_names(modules)
    _check_uses(modules)
    module, entry = ENTRY_POINT
    if module in missing:
        warnings.warn(BuildWarning(f"kernels/{module}.py does not exist yet: the submission's custom_kernel "
                                   f"calls {entry}, which it does not define"), stacklevel=2)
    elif module in order and not any(entry in m.defines for m in modules):
        raise BuildError(f"kernels/{module}.py: does not define `{entry}(A, routes, settings)`, "
                         "which custom_kernel calls")
    for name in missing:
        warnings.warn(BuildWarning(f"kernels/{name}.py (in MODULE_ORDER) does not exist yet: skipped"),
                      stacklevel=2)
    text = render(variant, modules, missing, template_text)
    _check_result(text)
    return text


def write_build(variant: str | Path | Variant, out: str | Path = "build/submission.py", **kwargs) -> Path:
    """Build and write atomically (temp file + os.replace): on any error nothing is written."""
    text = build_variant(variant, **kwargs)
    return write_atomic(Path(out), text)


