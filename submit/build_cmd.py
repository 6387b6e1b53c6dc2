"""`qrsub build`: render a variant and kernels/ into one submission file."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import click

DEFAULT_OUT = "build/submission.py"


def build_or_fail(variant: str) -> tuple[str, list[str], object]:
    """(text, warnings, Variant) of a variant given by path or name; ClickException on any error."""
    from qrsub.build import BuildError, build_variant
    from qrsub.variant import VariantError, find_variant, load_variant

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loaded = load_variant(find_variant(variant))
            text = build_variant(loaded)
        except (VariantError, BuildError) as exc:
            raise click.ClickException(f"{exc}\nnothing written") from None
    return text, [str(w.message) for w in caught], loaded


@click.command("build")
@click.argument("variant", metavar="VARIANT")
@click.option("-o", "--out", default=DEFAULT_OUT, show_default=True,
              help="Where to write the submission ('-' for standard output).")
def build(variant: str, out: str) -> None:
    """Build VARIANT (a variants/*.yaml path or a bare name) into one submission file.

    The file holds the #!POPCORN directives, the provenance (variant, extends
    chain, knobs, a sha256 of the sources), the kernel modules of kernels/ in
    dependency order, the resolved ROUTES and SETTINGS, and custom_kernel. The
    same variant and sources give the same bytes; the write is atomic, and
    nothing is written on any error.

    \b
    Examples:
      qrsub build variants/champion.yaml          # -> build/submission.py
      qrsub build champion-nograph -o /tmp/nograph.py
      qrsub build b200 -o - | less
      qrsub build champion && qrsub test --local  # then the local harness
    """
    from qrsub.files import write_atomic
    from qrsub.lint import lint_text

    text, notes, loaded = build_or_fail(variant)
    for note in notes:
        click.echo(f"warning: {note}", err=True)
    for p in lint_text(text, "submission.py"):  # hard ones already failed the build
        click.echo(f"warning: submission.py:{p.line}: {p.rule}: {p.message}", err=True)
    if out == "-":
        sys.stdout.write(text)
        return
    path = write_atomic(Path(out), text)
    chain = " <- ".join([loaded.name, *(p.stem for p in loaded.parents)])
    click.echo(f"wrote {path} ({chain}; {len(loaded.routes)} routes; {len(text.encode()):,} bytes; "
               f"{loaded.leaderboard} on {loaded.gpu})")
