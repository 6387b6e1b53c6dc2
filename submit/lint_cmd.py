"""`qrsub lint`: check a submission against the service's rules and ours."""
from __future__ import annotations

from pathlib import Path

import click


@click.command("lint")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
def lint(files: tuple[str, ...]) -> None:
    """Check submission FILEs; one line per problem: FILE:LINE: rule: message.

    \b
    The service refuses a file for: empty, size (> 1,000,000 bytes), utf8,
    stream (the word, any case, even in a comment), extension (.py .cu .cuh
    .cpp), directive (the first comment block: `#!POPCORN leaderboard NAME`,
    `#!POPCORN gpu NAME`; no argument, unknown or repeated). Those lines end in
    [refused by the service]. Ours: syntax, custom-kernel, task-import, import
    (torch, triton, stdlib and task only), directive-placement, directive-missing.
    A variant (.yaml) is built in memory and its submission linted.
    Exits 1 when there is any problem.

    \b
    Examples:
      qrsub lint build/submission.py
      qrsub lint variants/champion.yaml
      qrsub lint task/submission.py my_kernel.py
    """
    from qrsub.lint import lint_file, lint_text

    failed = False
    for name in files:
        path = Path(name)
        if path.suffix in (".yaml", ".yml"):
            from qrsub.submit.build_cmd import build_or_fail
            text, _, _ = build_or_fail(name)
            problems, shown = lint_text(text, "submission.py"), f"{name} -> submission.py"
        elif not path.is_file():
            raise click.ClickException(f"{name}: no such file")
        else:
            problems, shown = lint_file(path), name
        for p in problems:
            tag = " [refused by the service]" if p.hard else ""
            click.echo(f"{shown}:{p.line}: {p.rule}: {p.message}{tag}")
        if not problems:
            click.echo(f"{shown}: ok", err=True)
        failed = failed or bool(problems)
    if failed:
        raise SystemExit(1)
