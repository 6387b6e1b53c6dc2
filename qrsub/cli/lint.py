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
    (torch, triton, stdlib, task and cuda.bindings only), directive-placement,
    directive-missing, gpu (a `#!POPCORN gpu` the leaderboard is not known to
    offer, as qrsub/rules.py lists them; `qrsub submit` asks the service itself),
    concurrent-graph (graph.mode concurrent, or child graphs added by hand:
    branches that run concurrently, which the service warns may disqualify;
    `qrsub submit` sends it only with --accept-concurrency-risk).
    A variant (.yaml) is built in memory and its submission linted.
    Exits 1 when there is any problem.

    \b
    Examples:
      qrsub lint build/submission.py
      qrsub lint variants/champion.yaml        # the H200 champion: a gpu warning
      qrsub lint task/submission.py variants/b200.yaml
      qrsub lint variants/champion-concurrent.yaml   # opt-in: a concurrent-graph warning
    """
    from qrsub.cli import build_or_fail
    from qrsub.lint import lint_bytes

    failed = False
    for name in files:
        built = build_or_fail(name)
        # a built variant is linted under the name the service would see it by
        filename = "submission.py" if built.variant else Path(name).name
        shown = f"{name} -> submission.py" if built.variant else name
        problems = lint_bytes(built.content, filename)
        for p in problems:
            tag = " [refused by the service]" if p.hard else ""
            click.echo(f"{shown}:{p.line}: {p.rule}: {p.message}{tag}")
        if not problems:
            click.echo(f"{shown}: ok", err=True)
        failed = failed or bool(problems)
    if failed:
        raise SystemExit(1)
