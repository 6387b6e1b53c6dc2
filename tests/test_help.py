"""Every command's and subcommand's --help teaches by example, and every file an example names
is in the repository (or is what a command writes)."""
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from qrsub.cli import DEFAULT_SUBMISSION, main

ROOT = Path(__file__).resolve().parent.parent
# Options whose value is where a command writes: an example may name a file that is not there yet.
OUTPUTS = {"out", "output", "json_path", "plot_path", "run_dir", "ledger_path"}


def commands(cmd: click.Command = main, path: tuple = ()) -> list[tuple[tuple, click.Command]]:
    """(path, command) for the root, every command, and every subcommand of a group."""
    found = [(path, cmd)]
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            found += commands(cmd.get_command(ctx, name), (*path, name))
    return found


COMMANDS = commands()


def examples(path: tuple) -> list[str]:
    """The command lines under the `Examples:` heading of `qrsub PATH --help`."""
    result = CliRunner().invoke(main, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.strip() == "Examples:" for line in lines), f"{' '.join(('qrsub', *path))} --help has no Examples:"
    start = next(i for i, line in enumerate(lines) if line.strip() == "Examples:") + 1
    found = []
    for line in lines[start:]:
        if not line.strip():
            break
        found.append(line.split(" # ")[0].strip())
    return found


def resolve(words: list[str]) -> tuple[click.Command, click.Context, list[str]]:
    """The (sub)command an example line runs, its context, and its own arguments."""
    cmd, ctx, rest = main, click.Context(main, info_name="qrsub"), words[1:]
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"no command {rest[0]!r} in `{' '.join(words)}`"
        cmd, ctx, rest = sub, click.Context(sub, info_name=rest[0], parent=ctx), rest[1:]
    return cmd, ctx, rest


def named_files(cmd: click.Command, ctx: click.Context, args: list[str]) -> list[str]:
    """What the arguments name as input files: arguments (not ids) and path options, not outputs."""
    values, extra, _ = cmd.make_parser(ctx).parse_args(list(args))
    assert not extra, f"`{' '.join(args)}`: left over {extra}"
    params = {p.name: p for p in cmd.params}
    names = []
    for name, value in values.items():
        param = params[name]
        if name in OUTPUTS or isinstance(param.type, click.types.IntParamType) \
                or not isinstance(value, (str, tuple, list)):  # a flag, or left unset
            continue
        if isinstance(param, click.Argument) or isinstance(param.type, click.Path):
            names += list(value) if isinstance(value, (tuple, list)) else [value]
    return names


def exists(name: str) -> bool:
    """A file or folder in the repository, a shipped variant's bare name, or what `qrsub build` writes."""
    if name == DEFAULT_SUBMISSION:
        return True
    if name.startswith(("/", "~")):
        return False
    path = ROOT / name
    if ROOT not in path.resolve().parents and path.resolve() != ROOT:
        return False
    return path.exists() or ("/" not in name and (ROOT / "variants" / f"{name}.yaml").is_file())


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=lambda v: " ".join(("qrsub", *v)) if isinstance(v, tuple) else "")
def test_every_help_has_examples_naming_files_that_exist(path, cmd):
    lines = examples(path)
    prefix = " ".join(("qrsub", *path))
    assert any(line == prefix or line.startswith(prefix + " ") for line in lines), \
        f"{prefix} --help: no example of {prefix} itself among {lines}"
    for line in lines:
        for part in line.replace("&&", "|").split("|"):
            words = shlex.split(part)
            if not words or words[0] != "qrsub":
                continue
            sub, ctx, args = resolve(words)
            missing = [name for name in named_files(sub, ctx, args) if not exists(name)]
            assert not missing, f"{prefix} --help: `{part.strip()}` names {missing}, not in the repository"


def test_the_walk_reaches_every_subcommand():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "test", "bench", "submit", "submissions", "submissions list", "submissions show",
            "submissions wait", "submissions delete"} <= names


@pytest.mark.parametrize("name,known", [("variants/champion.yaml", True), ("champion-nograph", True),
                                        (DEFAULT_SUBMISSION, True), ("variants/bn32.yaml", False),
                                        ("~/reference-kernels/problems/qr_v2", False), ("my_try.py", False),
                                        ("/tmp/x.py", False), ("../elsewhere/docs", False)])
def test_the_check_tells_a_repository_file_from_one_that_is_not(name, known):
    assert exists(name) is known


def test_outputs_and_ids_are_not_looked_for():
    cmd, ctx, args = resolve(shlex.split("qrsub bench variants/geqrf.yaml nope.py --json out.json --plot o.png"))
    assert named_files(cmd, ctx, args) == ["variants/geqrf.yaml", "nope.py"]
    cmd, ctx, args = resolve(shlex.split("qrsub submissions wait 1234 --json out.json"))
    assert named_files(cmd, ctx, args) == []
