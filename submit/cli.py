"""The `qrsub` command line: a click group whose commands live one per module.

Commands are imported only when invoked, so `qrsub --help` stays fast (torch is
not imported to print help).
"""
from __future__ import annotations

import importlib

import click

# name -> "module:attribute"; each command module owns one command (or group).
COMMANDS: dict[str, str] = {
    "submit": "qrsub.submit.submit_cmd:submit",
    "submissions": "qrsub.submit.submissions_cmd:submissions",
    "test": "qrsub.submit.test_cmd:test",
    "bench": "qrsub.submit.bench_cmd:bench",
    "sweep": "qrsub.submit.sweep_cmd:sweep",
    "build": "qrsub.submit.build_cmd:build",
    "lint": "qrsub.submit.lint_cmd:lint",
    "variants": "qrsub.submit.variants_cmd:variants",
    "diff": "qrsub.submit.variants_cmd:diff",
}


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
    Typical flow:
      qrsub build variants/champion.yaml      # -> build/submission.py
      qrsub test --local                      # the service's harness, on this machine
      qrsub bench variants/champion.yaml variants/geqrf.yaml
      qrsub submit --leaderboard qr_v2        # the service's API, with a local ledger
    """
