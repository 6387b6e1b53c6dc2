"""Variant files: the knob schema, loading with `extends`, and validation.

A variant (variants/*.yaml) names the leaderboard and GPU and routes shapes
(n, batch) to a driver with its knobs. Loading resolves the `extends` chain
(deep merge; routes patched by name), fills every knob from the route, then the
variant's `defaults`, then the schema's one default, and validates each knob
once. The schema is derived from the typed plan (kernels/plan.py), and the result
is a frozen `Variant` whose `routes` are the plan's `Route`s, exactly what the
drivers read (`route.panel.num_warps`) and what the submission holds.

Every error names the file, line and column the value came from (even when it
came from a parent file), the knob, and the allowed values.

    >>> v = load_variant("variants/champion.yaml")
    >>> v.route_for(n=512, batch=640).driver
    'blocked'
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from qrsub.kernels import plan
from qrsub.rules import REFUSED_WORD

# ---------------------------------------------------------------------------
# Locations and errors


@dataclass(frozen=True)
class Loc:
    """A 1-based position in a variant file."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class VariantError(Exception):
    """One or more problems in a variant; each line is `FILE:LINE:COL: knob: message`."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(dict.fromkeys(problems))  # one report per problem, in order
        super().__init__("\n".join(self.problems))


class _Errors:
    """Collects problems so that one load reports all of them, not just the first."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, loc: Loc | None, knob: str, message: str) -> None:
        where = f"{loc}: " if loc else ""
        self.items.append(f"{where}{knob}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            raise VariantError(self.items)


# ---------------------------------------------------------------------------
# YAML with positions


class LMap(dict):
    """A YAML mapping that remembers where its keys and values are."""

    def __init__(self, loc: Loc):
        super().__init__()
        self.loc = loc
        self.key_locs: dict[str, Loc] = {}
        self.val_locs: dict[str, Loc] = {}

    def put(self, key: str, value: Any, key_loc: Loc, val_loc: Loc) -> None:
        self[key] = value
        self.key_locs[key] = key_loc
        self.val_locs[key] = val_loc

    def drop(self, key: str) -> None:
        self.pop(key, None)
        self.key_locs.pop(key, None)
        self.val_locs.pop(key, None)

    def copy_located(self) -> "LMap":
        out = LMap(self.loc)
        for key, value in self.items():
            out.put(key, value, self.key_locs[key], self.val_locs[key])
        return out


class LList(list):
    """A YAML sequence that remembers where its items are."""

    def __init__(self, loc: Loc, items: list, item_locs: list[Loc]):
        super().__init__(items)
        self.loc = loc
        self.item_locs = item_locs


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: `off`, `on`, `yes`, `no` stay strings.

    `graph: {mode: off}` must mean the string "off", not False.
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def _loc(node: yaml.Node, file: str) -> Loc:
    return Loc(file, node.start_mark.line + 1, node.start_mark.column + 1)


def parse_located(text: str, file: str) -> Any:
    """YAML text -> plain values, with LMap/LList carrying positions. Raises VariantError."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _convert(node, loader, file)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Loc(file, mark.line + 1, mark.column + 1) if mark else None
        raise VariantError([f"{loc or file}: yaml: {exc.problem or exc}"]) from None
    finally:
        loader.dispose()


def _convert(node: yaml.Node, loader: _Loader, file: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = LMap(_loc(node, file))
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, str):
                raise VariantError([f"{_loc(key_node, file)}: yaml: keys must be names, got {key!r}"])
            if key in out:
                raise VariantError([f"{_loc(key_node, file)}: {key}: duplicate key "
                                    f"(first at line {out.key_locs[key].line})"])
            out.put(key, _convert(value_node, loader, file), _loc(key_node, file), _loc(value_node, file))
        return out
    if isinstance(node, yaml.SequenceNode):
        return LList(_loc(node, file), [_convert(n, loader, file) for n in node.value],
                     [_loc(n, file) for n in node.value])
    return loader.construct_object(node)


# ---------------------------------------------------------------------------
# The schema, derived from the typed plan (kernels/plan.py): one knob per dataclass field.


@dataclass(frozen=True)
class Knob:
    """One knob: its YAML path, its one default, what is allowed, and what it does."""

    path: tuple[str, ...]
    default: Any
    allowed: Any          # a plan check (Pow2, OneOf, ...): .problem(value) -> None or the allowed values
    doc: str

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    def check(self, value: Any) -> str | None:
        return self.allowed.problem(value)


def _knobs(group: type, prefix: tuple[str, ...]) -> tuple[Knob, ...]:
    return tuple(Knob((*prefix, f.name), f.default, f.metadata["allowed"], f.metadata["doc"])
                 for f in fields(group))


_DRIVER_FIELD = next(f for f in fields(plan.Route) if f.name == "driver")
# Every route knob, in the order of the variant files: the driver, then each section's fields.
ROUTE_KNOBS: tuple[Knob, ...] = (
    Knob(("driver",), _DRIVER_FIELD.default, _DRIVER_FIELD.metadata["allowed"], _DRIVER_FIELD.metadata["doc"]),
    *(k for section, group in plan.SECTIONS.items() for k in _knobs(group, (section,))),
)
SETTINGS_KNOBS: tuple[Knob, ...] = _knobs(plan.Settings, ())

TOP_KEYS = ("leaderboard", "gpu", "description", "extends", "settings", "defaults", "routes")
ROUTE_SECTIONS = tuple(plan.SECTIONS)
ROUTE_KEYS = ("name", "n", "batch", "driver", *ROUTE_SECTIONS, "remove", "before")
DEFAULT_KEYS = ("driver", *ROUTE_SECTIONS)
SECTION_KEYS = {s: tuple(k.path[1] for k in ROUTE_KNOBS if k.path[0] == s) for s in ROUTE_SECTIONS}
# A knob written flat on a route (`panel_width: 16`, or `width: 16`) -> where it belongs.
FLAT_HINTS = {**{k.path[1]: k.dotted for k in ROUTE_KNOBS if len(k.path) == 2},
              **{"_".join(k.path): k.dotted for k in ROUTE_KNOBS if len(k.path) == 2}}

# The grid a variant must cover without gaps (every test and benchmark shape lies inside).
COVER_N, COVER_BATCH = 8192, 2048

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _unknown(key: str, allowed: Iterable[str], where: str) -> str:
    allowed = list(allowed)
    if key in FLAT_HINTS:
        hint = f"; did you mean {FLAT_HINTS[key]} (write it as {FLAT_HINTS[key].split('.')[0]}: " \
               f"{{{FLAT_HINTS[key].split('.')[1]}: ...}})?"
    else:
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"unknown key '{key}' in {where}{hint} allowed: {', '.join(allowed)}"


def _check_keys(m: LMap, allowed: Iterable[str], where: str, errors: _Errors, knob: str) -> None:
    allowed = tuple(allowed)
    for key in m:
        if key not in allowed:
            errors.add(m.key_locs[key], f"{knob}.{key}" if knob else key, _unknown(key, allowed, where))


# ---------------------------------------------------------------------------
# Loading and `extends`


def _read_tree(path: Path, errors_file: str) -> LMap:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VariantError([f"{errors_file}: cannot read: {exc}"]) from None
    tree = parse_located(text, errors_file)
    if tree is None:
        raise VariantError([f"{errors_file}:1:1: variant: the file is empty"])
    if not isinstance(tree, LMap):
        raise VariantError([f"{errors_file}:1:1: variant: expected a mapping of {', '.join(TOP_KEYS)}"])
    return tree


def _display(path: Path) -> str:
    """A path as errors show it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _load_chain(path: Path, seen: tuple[Path, ...]) -> tuple[LMap, tuple[Path, ...]]:
    """The merged tree of `path` and its ancestors, and the ancestors (nearest first)."""
    tree = _read_tree(path, _display(path))
    if "extends" not in tree:
        return tree, ()
    parent_name = tree["extends"]
    loc = tree.val_locs["extends"]
    if not isinstance(parent_name, str) or not parent_name:
        raise VariantError([f"{loc}: extends: expected a variant file name, e.g. champion.yaml"])
    parent = (path.parent / parent_name).resolve()
    if parent in seen or parent == path.resolve():
        raise VariantError([f"{loc}: extends: a cycle: {' -> '.join(p.name for p in (*seen, path, parent))}"])
    if not parent.is_file():
        raise VariantError([f"{loc}: extends: no such file {_display(parent)}"])
    base, ancestors = _load_chain(parent, (*seen, path.resolve()))
    tree.drop("extends")
    return _merge_top(base, tree), (parent, *ancestors)


def _deep_merge(base: Any, over: Any) -> Any:
    """Mappings merge key by key (the child wins); anything else is replaced."""
    if not (isinstance(base, LMap) and isinstance(over, LMap)):
        return over
    out = base.copy_located()
    for key, value in over.items():
        merged = _deep_merge(base[key], value) if key in base else value
        out.put(key, merged, over.key_locs[key], over.val_locs[key])
    return out


def _merge_top(base: LMap, child: LMap) -> LMap:
    routes = child.get("routes")
    rest = child.copy_located()
    rest.drop("routes")
    out = _deep_merge(base, rest)
    if routes is not None:
        out.put("routes", _patch_routes(base.get("routes"), routes, child.val_locs["routes"]),
                child.key_locs["routes"], child.val_locs["routes"])
    return out


def _patch_routes(base: Any, child: Any, child_loc: Loc) -> LList:
    """Routes patched by name: same name merges, new names append (or go `before` one), `remove: true` drops."""
    if not isinstance(child, LList):
        raise VariantError([f"{child_loc}: routes: expected a list of routes"])
    items = list(base) if isinstance(base, LList) else []
    locs = list(base.item_locs) if isinstance(base, LList) else []
    for route, loc in zip(child, child.item_locs):
        if not isinstance(route, LMap) or not isinstance(route.get("name"), str):
            raise VariantError([f"{loc}: routes: a route that patches a parent's needs a `name`"])
        name = route["name"]
        names = [r.get("name") if isinstance(r, LMap) else None for r in items]
        patch = route.copy_located()
        remove = patch.pop("remove", False)
        before = patch.pop("before", None)
        for key in ("remove", "before"):
            patch.drop(key)
        if remove is True:
            if name not in names:
                raise VariantError([f"{route.key_locs['remove']}: routes.remove: no route named '{name}' "
                                    f"in the parent (routes: {', '.join(map(str, names))})"])
            i = names.index(name)
            del items[i], locs[i]
            continue
        if remove is not False:
            raise VariantError([f"{route.val_locs['remove']}: routes.remove: expected true or false"])
        if name in names:
            i = names.index(name)
            patch, loc = _deep_merge(items[i], patch), locs[i]
            if before is None:
                items[i] = patch
                continue
            del items[i], locs[i]
            names = [r.get("name") if isinstance(r, LMap) else None for r in items]
        if before is None:
            items.append(patch)
            locs.append(loc)
            continue
        if before not in names:
            raise VariantError([f"{route.val_locs['before']}: routes.before: no route named {before!r} "
                                f"(routes: {', '.join(map(str, names))})"])
        i = names.index(before)
        items.insert(i, patch)
        locs.insert(i, loc)
    return LList(base.loc if isinstance(base, LList) else child.loc, items, locs)


# ---------------------------------------------------------------------------
# Resolution and validation


@dataclass(frozen=True)
class Variant:
    """A loaded, merged and validated variant: its routes (plan.Route) and settings (plan.Settings)."""

    name: str
    path: Path
    leaderboard: str
    gpu: str
    description: str
    parents: tuple[Path, ...]
    routes: tuple[plan.Route, ...]
    settings: plan.Settings = field(default_factory=plan.Settings)

    def route_for(self, n: int, batch: int) -> plan.Route:
        """The route the kernels would take for an n x n batch (first match wins)."""
        for route in self.routes:
            if route.covers(n, batch):
                return route
        raise LookupError(f"variant {self.name}: no route for n={n}, batch={batch}")


def _lookup(m: Any, path: tuple[str, ...]) -> tuple[bool, Any, Loc | None]:
    """(found, value, value's location) of a YAML path in a located mapping."""
    for key in path[:-1]:
        if not isinstance(m, LMap) or key not in m:
            return False, None, None
        m = m[key]
    if not isinstance(m, LMap) or path[-1] not in m:
        return False, None, None
    return True, m[path[-1]], m.val_locs[path[-1]]


def _frozen(value: Any) -> Any:
    """Lists -> tuples: the plan's knob groups are frozen, and their repr goes into the submission."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _plain(value: Any) -> Any:
    """Located containers -> plain lists and dicts, as the file wrote them (for messages)."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _resolve_knob(knob: Knob, sources: list[Any], errors: _Errors, where: str) -> Any:
    for source in sources:
        found, value, loc = _lookup(source, knob.path)
        if found:
            break
    else:
        return knob.default
    value = _plain(value)
    problem = knob.check(value)
    if problem:
        errors.add(loc, f"{where}{knob.dotted}", f"got {value!r}; allowed: {problem}")
    return _frozen(value)


def _resolve_range(route: LMap, key: str, errors: _Errors, where: str) -> tuple[int, int | None]:
    if key not in route:
        return 1, None
    value, loc = route[key], route.val_locs[key]
    allowed = "[min, max] (inclusive integers >= 1; max may be null for unbounded), or one integer"
    if plan.is_int(value) and value >= 1:
        return value, value
    if (isinstance(value, list) and len(value) == 2 and plan.is_int(value[0]) and value[0] >= 1
            and (value[1] is None or plan.is_int(value[1]))):
        lo, hi = value
        if hi is not None and hi < lo:
            errors.add(loc, f"{where}{key}", f"got [{lo}, {hi}]: max is below min")
        return lo, hi
    errors.add(loc, f"{where}{key}", f"got {_plain(value)!r}; allowed: {allowed}")
    return 1, None


def _check_sections(m: LMap, allowed_top: tuple[str, ...], where: str, errors: _Errors) -> None:
    _check_keys(m, allowed_top, where, errors, where.rstrip("."))
    for section in (s for s in ROUTE_SECTIONS if s in m):
        value = m[section]
        if not isinstance(value, LMap):
            errors.add(m.val_locs[section], f"{where}{section}",
                       f"expected a mapping of {', '.join(SECTION_KEYS[section])}")
        else:
            _check_keys(value, SECTION_KEYS[section], section, errors, f"{where}{section}")


def _resolve_route(route: Any, loc: Loc, defaults: LMap, errors: _Errors) -> plan.Route | None:
    """The route's plan.Route, or None when a problem was reported (all of them are, in `errors`)."""
    if not isinstance(route, LMap):
        errors.add(loc, "routes", "each route is a mapping with name, n, batch, driver and knob sections")
        return None
    name = route.get("name")
    where = f"routes[{name}]." if isinstance(name, str) else "routes."
    if not isinstance(name, str) or not _NAME_RE.match(name) or REFUSED_WORD in name.lower():
        errors.add(route.val_locs.get("name", route.loc), f"{where}name",
                   f"got {name!r}; allowed: a name of letters, digits, '_', '.', '-' "
                   "(without the word the service refuses)")
    for key in ("remove", "before"):
        if key in route:
            errors.add(route.key_locs[key], f"{where}{key}", "only in a variant that `extends` another")
    _check_sections(route, ROUTE_KEYS, where, errors)
    before = len(errors.items)
    n_range = _resolve_range(route, "n", errors, where)
    batch_range = _resolve_range(route, "batch", errors, where)
    values = {knob.path: _resolve_knob(knob, [route, defaults], errors, where) for knob in ROUTE_KNOBS}
    if len(errors.items) > before:
        return None
    sections = {section: group(**{p[1]: v for p, v in values.items() if p[0] == section})
                for section, group in plan.SECTIONS.items()}
    driver = values[("driver",)]
    for path, message in plan.route_problems(driver, sections, n_range):
        errors.add(_loc_of(path, route, defaults), f"{where}{'.'.join(path)}", message)
    if len(errors.items) > before:
        return None
    return plan.Route(name=name, n_range=n_range, batch_range=batch_range, driver=driver, **sections)


def _loc_of(path: tuple[str, ...], route: LMap, defaults: LMap) -> Loc:
    for source in (route, defaults):
        found, _, loc = _lookup(source, path)
        if found:
            return loc
    return route.loc


def _check_cover(routes: list[plan.Route], locs: list[Loc], where: Loc, errors: _Errors) -> None:
    """No gap in n 1..COVER_N x batch 1..COVER_BATCH, and no route shadowed by earlier ones."""
    def cuts(bounds: list[tuple], top: int) -> list[int]:
        points = {1, top + 1}
        for lo, hi in bounds:
            for p in (lo, None if hi is None else hi + 1):
                if p is not None and 1 <= p <= top:
                    points.add(p)
        return sorted(points)

    n_cuts = cuts([r.n_range for r in routes], COVER_N)
    b_cuts = cuts([r.batch_range for r in routes], COVER_BATCH)
    used = [False] * len(routes)
    inside = [False] * len(routes)
    for n_lo, n_next in zip(n_cuts, n_cuts[1:]):
        for b_lo, b_next in zip(b_cuts, b_cuts[1:]):
            hit = next((i for i, r in enumerate(routes) if r.covers(n_lo, b_lo)), None)
            if hit is None:
                errors.add(where, "routes", f"no route covers n in {n_lo}..{n_next - 1}, "
                           f"batch in {b_lo}..{b_next - 1}; end with a catch-all (n: [1, null], batch: [1, null])")
                return
            used[hit] = True
            for i, r in enumerate(routes):
                inside[i] = inside[i] or r.covers(n_lo, b_lo)
    names = [r.name for r in routes]
    for i, r in enumerate(routes):
        if inside[i] and not used[i]:
            close = difflib.get_close_matches(str(r.name), [str(n) for n in names[:i]], n=1, cutoff=0.6)
            hint = f"; did you mean to patch '{close[0]}'?" if close else ""
            errors.add(locs[i], f"routes[{r.name}]", "never used: earlier routes cover all its shapes "
                       f"(move it up, or use `before:`){hint}")


def _check_top(tree: LMap, errors: _Errors) -> tuple[str, str, str]:
    _check_keys(tree, TOP_KEYS, "a variant", errors, "")
    leaderboard = tree.get("leaderboard", "qr_v2")
    if not isinstance(leaderboard, str) or not re.match(r"^[a-z0-9_-]+$", leaderboard):
        errors.add(tree.val_locs.get("leaderboard"), "leaderboard",
                   f"got {leaderboard!r}; allowed: a leaderboard name such as qr_v2")
    gpu = tree.get("gpu")
    if "gpu" not in tree:
        errors.add(Loc(tree.loc.file, 1, 1), "gpu", "missing; allowed: a GPU type such as H200 or B200")
    elif not isinstance(gpu, str) or not re.match(r"^[A-Za-z0-9_]+$", gpu):
        errors.add(tree.val_locs["gpu"], "gpu", f"got {gpu!r}; allowed: one GPU type such as H200 or B200")
    description = tree.get("description", "")
    if not isinstance(description, str) or "\n" in description.strip() or REFUSED_WORD in description.lower():
        errors.add(tree.val_locs.get("description"), "description",
                   "allowed: one line of text (without the word the service refuses: it goes into the file)")
    return str(leaderboard), str(gpu), str(description).strip()


def _resolve_settings(tree: LMap, errors: _Errors) -> plan.Settings:
    settings = tree.get("settings", LMap(tree.loc))
    if not isinstance(settings, LMap):
        errors.add(tree.val_locs["settings"], "settings", "expected a mapping")
        settings = LMap(tree.loc)
    _check_keys(settings, [k.dotted for k in SETTINGS_KNOBS], "settings", errors, "settings")
    out = {k.dotted: _resolve_knob(k, [settings], errors, "settings.") for k in SETTINGS_KNOBS}
    lo, hi = out["graph_min_numel"], out["graph_max_numel"]
    if plan.is_int(lo) and plan.is_int(hi) and hi < lo:
        errors.add(settings.val_locs.get("graph_max_numel", settings.loc), "settings.graph_max_numel",
                   f"got {hi}; allowed: at least graph_min_numel ({lo})")
    return plan.Settings(**out)


def _resolve(tree: LMap, path: Path, parents: tuple[Path, ...]) -> Variant:
    errors = _Errors()
    leaderboard, gpu, description = _check_top(tree, errors)
    settings = _resolve_settings(tree, errors)
    defaults = tree.get("defaults", LMap(tree.loc))
    if not isinstance(defaults, LMap):
        errors.add(tree.val_locs["defaults"], "defaults", "expected a mapping of " + ", ".join(DEFAULT_KEYS))
        defaults = LMap(tree.loc)
    _check_sections(defaults, DEFAULT_KEYS, "defaults.", errors)
    raw_routes = tree.get("routes")
    if not isinstance(raw_routes, LList) or not raw_routes:
        errors.add(tree.val_locs.get("routes", Loc(tree.loc.file, 1, 1)), "routes",
                   "expected a non-empty list of routes (name, n, batch, driver, knobs)")
        errors.raise_if_any()
    routes, locs = [], []
    for raw, loc in zip(raw_routes, raw_routes.item_locs):
        route = _resolve_route(raw, loc, defaults, errors)
        if route is not None:
            routes.append(route)
            locs.append(loc)
    names = [r.name for r in routes]
    for r, loc in zip(routes, locs):
        if names.count(r.name) > 1:
            errors.add(loc, f"routes[{r.name}].name", "duplicate route name (names must be unique)")
    errors.raise_if_any()
    _check_cover(routes, locs, raw_routes.loc, errors)
    errors.raise_if_any()
    return Variant(name=path.stem, path=path, leaderboard=leaderboard, gpu=gpu, description=description,
                   parents=parents, routes=tuple(routes), settings=settings)


def load_variant(path: str | Path) -> Variant:
    """Load, merge (`extends`) and validate a variant file. Raises VariantError."""
    path = Path(path)
    if not path.is_file():
        raise VariantError([f"{path}: no such variant file"])
    tree, parents = _load_chain(path, ())
    return _resolve(tree, path, parents)


def parse_variant(text: str, path: str | Path = "<variant>.yaml") -> Variant:
    """Validate variant text as if it were the file `path` (its `extends` resolve beside `path`)."""
    path = Path(path)
    tree = parse_located(text, _display(path))
    if not isinstance(tree, LMap):
        raise VariantError([f"{_display(path)}:1:1: variant: expected a mapping of {', '.join(TOP_KEYS)}"])
    parents: tuple[Path, ...] = ()
    if "extends" in tree:
        parent_name, loc = tree["extends"], tree.val_locs["extends"]
        parent = (path.parent / str(parent_name)).resolve()
        if not parent.is_file():
            raise VariantError([f"{loc}: extends: no such file {_display(parent)}"])
        base, ancestors = _load_chain(parent, (path.resolve(),))
        tree.drop("extends")
        tree, parents = _merge_top(base, tree), (parent, *ancestors)
    return _resolve(tree, path, parents)


def variants_dir() -> Path:
    """./variants when run from a checkout, else the installed package's variants."""
    local = Path.cwd() / "variants"
    if local.is_dir() and any(local.glob("*.yaml")):
        return local
    import qrsub.variants
    return Path(qrsub.variants.__file__).parent


def find_variant(name: str | Path) -> Path:
    """A variant path from a path or a bare name (`champion` -> variants/champion.yaml)."""
    path = Path(name)
    if path.is_file():
        return path
    candidate = variants_dir() / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    if candidate.is_file():
        return candidate
    raise VariantError([f"{name}: no such variant (looked for {path} and {candidate})"])
