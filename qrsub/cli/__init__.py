"""The `qrsub` command line: a click group whose commands live one per module (here,
and in qrsub.submit for `submit` and `submissions`).

Commands are imported only when invoked, so `qrsub --help` stays fast (torch is
not imported to print help).
"""
from __future__ import annotations

import importlib

import click

# Where `qrsub build` writes; `qrsub test` and `qrsub submit` take it by default.
DEFAULT_SUBMISSION = "build/submission.py"

# name -> "module:attribute"; each command module owns one command (or group).
# The commands that talk to the service live with its client in qrsub.submit.
COMMANDS: dict[str, str] = {
    "build": "qrsub.cli.build:build",
    "lint": "qrsub.cli.lint:lint",
    "test": "qrsub.cli.test:test",
    "bench": "qrsub.cli.bench:bench",
    "profile": "qrsub.cli.profile:profile",
    "sweep": "qrsub.cli.sweep:sweep",
    "variants": "qrsub.cli.variants:variants",
    "diff": "qrsub.cli.variants:diff",
    "submit": "qrsub.submit.submit_cmd:submit",
    "submissions": "qrsub.submit.submissions_cmd:submissions",
}


def build_or_fail(source, out=None, *, on_error: str = ""):
    """qrsub.build.build_submission for a command: its BuildError becomes the command's error
    message (file, line and fix), followed by ON_ERROR."""
    from qrsub.build import BuildError, build_submission

    try:
        return build_submission(source, out)
    except BuildError as exc:
        raise click.ClickException(f"{exc}\n{on_error}".rstrip()) from None


def benchmark_cases_or_fail(selector: str | None) -> tuple[list[int], list[dict]]:
    """The benchmark cases of task.yml that a `--cases` SELECTOR picks (all for None): their
    indices and specs. A bad token, or a selection of none, is the option's error."""
    from qrsub.harness import HarnessError, cases_for, load_task, select_cases

    all_cases = cases_for(load_task(), "benchmark")
    try:
        indices = select_cases(all_cases, selector)
    except HarnessError as exc:
        raise click.BadParameter(str(exc), param_hint="--cases") from None
    if not indices:
        raise click.BadParameter(f"{selector!r} selects no case (there are {len(all_cases)}, "
                                 f"indices 0-{len(all_cases) - 1})", param_hint="--cases")
    return indices, [all_cases[i] for i in indices]


class LazyGroup(click.Group):
    """A click group that imports each command's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="qrsub")
def main() -> None:
    """qrsub: build, test, benchmark and submit qr_v2 (batched Householder QR) submissions.

    \b
    Examples:
      qrsub build variants/champion-b200.yaml  # -> build/submission.py
      qrsub test --local                       # the service's harness, on this machine
      qrsub bench variants/champion.yaml variants/geqrf.yaml
      qrsub submit --mode test                 # the service's API, with a local ledger

    That is the typical flow; every command's --help has its own examples.
    """
