"""`qrsub build`: render a variant and kernels/ into one submission file."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from qrsub.cli import DEFAULT_SUBMISSION, build_or_fail


@click.command("build")
@click.argument("variant", metavar="VARIANT")
@click.option("-o", "--out", default=DEFAULT_SUBMISSION, show_default=True,
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
    from qrsub.build import is_variant
    from qrsub.lint import lint_text

    if not is_variant(Path(variant)):
        raise click.ClickException(f"{variant} is not a variant (a .yaml, or a bare name like champion): "
                                   "a submission file needs no build; `qrsub lint` or `qrsub test --local` it")
    built = build_or_fail(variant, None if out == "-" else out, on_error="nothing written")
    for p in lint_text(built.text, "submission.py"):  # hard ones already failed the build
        click.echo(f"warning: submission.py:{p.line}: {p.rule}: {p.message}", err=True)
    if out == "-":
        sys.stdout.write(built.text)
        return
    v = built.variant
    chain = " <- ".join([v.name, *(p.stem for p in v.parents)])
    click.echo(f"wrote {built.path} ({chain}; {len(v.routes)} routes; {len(built.content):,} bytes; "
               f"{v.leaderboard} on {v.gpu})")
