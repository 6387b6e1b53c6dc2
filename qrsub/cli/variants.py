"""`qrsub variants` (list the shipped variants) and `qrsub diff` (resolved knobs that differ)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import click


@click.command("variants")
@click.argument("directory", required=False, type=click.Path(file_okay=False, exists=True))
def variants(directory: str | None) -> None:
    """List the variants in DIRECTORY (default: ./variants): name, gpu, parent, description.

    \b
    Examples:
      qrsub variants
      qrsub variants variants        # any folder of variants; this one is the default
    """
    from qrsub.variant import VariantError, load_variant, variants_dir

    folder = Path(directory) if directory else variants_dir()
    rows = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            v = load_variant(path)
            rows.append((v.name, v.gpu, v.parents[0].stem if v.parents else "-", v.description))
        except VariantError as exc:
            rows.append((path.stem, "?", "?", f"INVALID: {exc.problems[0]}"))
    if not rows:
        raise click.ClickException(f"no variants (*.yaml) in {folder}")
    widths = [max(len(r[i]) for r in [("name", "gpu", "parent", ""), *rows]) for i in range(3)]
    for row in [("name", "gpu", "parent", "description"), *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])


def _fmt(value) -> str:
    if isinstance(value, tuple) and len(value) == 2 and all(v is None or isinstance(v, int) for v in value):
        return f"{value[0]}..{'' if value[1] is None else value[1]}"   # an n or batch range
    return "unbounded" if value is None else str(value)


def diff_variants(a, b) -> list[str]:
    """Lines naming each resolved knob that differs between variants a and b."""
    lines = []
    for key in ("leaderboard", "gpu"):
        if getattr(a, key) != getattr(b, key):
            lines.append(f"{key}: {getattr(a, key)} -> {getattr(b, key)}")
    for f in dataclasses.fields(a.settings):
        va, vb = getattr(a.settings, f.name), getattr(b.settings, f.name)
        if va != vb:
            lines.append(f"settings.{f.name}: {_fmt(va)} -> {_fmt(vb)}")
    names_a, names_b = [r.name for r in a.routes], [r.name for r in b.routes]
    common = [n for n in names_a if n in names_b]
    if common != [n for n in names_b if n in names_a]:
        lines.append(f"route order: {', '.join(names_a)} -> {', '.join(names_b)}")
    routes_b = {r.name: r for r in b.routes}
    for ra in a.routes:
        rb = routes_b.get(ra.name)
        if rb is None:
            lines.append(f"route {ra.name}: only in {a.name}")
            continue
        for (key, va), (_, vb) in zip(ra.knob_items(), rb.knob_items()):
            if va != vb:
                lines.append(f"route {ra.name}: {key}: {_fmt(va)} -> {_fmt(vb)}")
    lines += [f"route {n}: only in {b.name}" for n in names_b if n not in names_a]
    return lines


@click.command("diff")
@click.argument("a", metavar="A.yaml")
@click.argument("b", metavar="B.yaml")
def diff(a: str, b: str) -> None:
    """Show the resolved knobs that differ between variants A and B, route by route.

    Both are fully resolved first (extends merged, defaults filled), so the
    output is what the kernels would see differently. Routes match by name.

    \b
    Examples:
      qrsub diff champion champion-nograph
      qrsub diff variants/champion.yaml variants/b200.yaml
    """
    from qrsub.variant import VariantError, find_variant, load_variant

    try:
        va, vb = load_variant(find_variant(a)), load_variant(find_variant(b))
    except VariantError as exc:
        raise click.ClickException(str(exc)) from None
    lines = diff_variants(va, vb)
    click.echo("\n".join(lines) if lines else f"{va.name} and {vb.name} resolve to the same knobs")
