"""The one build: one file from a variant and kernels/, byte-identical, atomic, refusing what the service refuses."""
import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from qrsub.build import BuildError, build_submission, default_kernels_dir, inline_order, read_sources, render_submission
from qrsub.cli import main
from qrsub.lint import lint_text
from qrsub.kernels import plan
from qrsub.variant import load_variant

ROOT = Path(__file__).resolve().parent.parent
CHAMPION = ROOT / "variants" / "champion.yaml"

VARIANT = """\
leaderboard: qr_v2
gpu: B200
description: a test variant
routes:
  - {name: small, n: [1, 63], panel: {width: 16}}
  - {name: rest, driver: geqrf, graph: {mode: off}}
"""

# A stand-in kernel library: two modules, the second using the first.
HELPERS = '''\
"""Helpers."""
import math

import torch


def pad(n):
    return 1 << math.ceil(math.log2(max(n, 1)))
'''
ROUTING = '''\
"""Routing."""
import torch
import math

from .helpers import pad


def qr_routed(A, routes, settings):
    from .helpers import pad
    assert pad(3) == 4
    return torch.geqrf(A)
'''


def kernels(tmp_path: Path, **modules: str) -> Path:
    """The stand-in library, with the real plan module (ROUTES and SETTINGS are its dataclasses)."""
    folder = tmp_path / "kernels"
    folder.mkdir(exist_ok=True)
    plan_source = (ROOT / "kernels" / "plan.py").read_text()
    for name, source in {"plan": plan_source, "helpers": HELPERS, "routing": ROUTING, **modules}.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return folder


def variant(tmp_path: Path, text: str = VARIANT, name: str = "test.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def build(tmp_path: Path, **modules) -> str:
    return render_submission(load_variant(variant(tmp_path)), kernels_dir=kernels(tmp_path, **modules))


# ---------------------------------------------------------------------------
# The generated file


def test_directives_first_then_provenance(tmp_path):
    text = build(tmp_path)
    lines = text.splitlines()
    assert lines[:2] == ["#!POPCORN leaderboard qr_v2", "#!POPCORN gpu B200"]
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert "# variant: test (a test variant)" in header
    assert "# extends: (none)" in header
    assert "# sources sha256: " in header
    assert "# kernel modules: helpers, plan, routing" in header  # import order, ties alphabetical
    assert "small" in header and "geqrf" in header


def test_file_compiles_imports_only_allowed_modules_and_lints_clean(tmp_path):
    text = build(tmp_path)
    tree = ast.parse(text)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"torch", "triton", "task", "math", "dataclasses", "__future__"} and "task" in imported
    assert lint_text(text, "submission.py") == []
    assert text.count("import torch\n") == 1 and text.count("import math\n") == 1  # hoisted once
    assert "from .helpers" not in text


def test_routes_and_settings_literals_are_the_resolved_variant(tmp_path):
    text = build(tmp_path)
    v = load_variant(tmp_path / "test.yaml")
    # The literals are plan dataclasses: evaluate them with the plan's names only.
    assigned = {node.targets[0].id: eval(compile(ast.Expression(node.value), "submission.py", "eval"), vars(plan))
                for node in ast.parse(text).body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("ROUTES", "SETTINGS")}
    assert assigned == {"ROUTES": v.routes, "SETTINGS": v.settings}
    assert text.rstrip().endswith("return qr_routed(data, ROUTES, SETTINGS)")


def test_the_file_runs_its_custom_kernel(tmp_path):
    """Laid beside a task.py, the file imports and factors (the stand-in routes to geqrf)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "submission.py").write_text(build(tmp_path))
    (out / "task.py").write_text("from typing import TypeVar\nimport torch\n"
                                 "input_t = TypeVar('input_t', bound=torch.Tensor)\n"
                                 "output_t = TypeVar('output_t', bound=tuple)\n")
    code = ("import torch, submission\nA = torch.randn(2, 5, 5)\nH, tau = submission.custom_kernel(A)\n"
            "assert torch.equal(H, torch.geqrf(A)[0])\nprint('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_nested_package_import_becomes_pass_when_it_was_the_only_statement(tmp_path):
    text = build(tmp_path, routing=ROUTING + "\n\ndef only():\n    from .helpers import pad\n")
    assert "def only():\n    pass" in text
    compile(text, "submission.py", "exec")


# ---------------------------------------------------------------------------
# Byte-identical rebuilds and the source hash


def test_rebuilds_are_byte_identical(tmp_path):
    first = build(tmp_path)
    second = build(tmp_path)
    assert first == second


def test_hash_follows_the_sources(tmp_path):
    def digest(text):
        return next(line for line in text.splitlines() if "sha256" in line)

    before = build(tmp_path)
    after = build(tmp_path, helpers=HELPERS + "\n# a changed comment\n")
    assert digest(before) != digest(after)


def test_champion_builds_identically_twice():
    first, second = build_submission(CHAMPION).text, build_submission(CHAMPION).text
    assert first == second
    assert [p for p in lint_text(first, "submission.py") if p.hard] == []


# ---------------------------------------------------------------------------
# Refusals


def test_refused_word_in_a_kernel_names_file_and_line(tmp_path):
    with pytest.raises(BuildError, match=r"kernels/helpers.py:3: contains 'stream'"):
        build(tmp_path, helpers='"""Helpers."""\nimport torch\n# launch on a side Stream\n')


def test_refused_word_in_the_template(tmp_path):
    template = tmp_path / "t.j2"
    template.write_text("#!POPCORN leaderboard {{ leaderboard }}\n# upstream\n")
    with pytest.raises(BuildError, match=r"templates/t.j2:2: contains 'stream'"):
        render_submission(load_variant(variant(tmp_path)), kernels_dir=kernels(tmp_path), template=template)


def test_duplicate_top_level_names_are_refused(tmp_path):
    with pytest.raises(BuildError, match=r"kernels/routing.py:\d+: `pad` is also bound at kernels/helpers.py:7"):
        build(tmp_path, routing="import torch\n\n\ndef pad(n):\n    return n\n\n\n"
                                "def qr_routed(A, r, s):\n    return torch.geqrf(A)\n")


def test_conflicting_imports_are_refused_but_the_same_import_is_fine(tmp_path):
    with pytest.raises(BuildError, match="`sqrt` is also bound"):
        build(tmp_path, helpers="from math import sqrt\n", routing="from torch import sqrt\n"
                                                                   "def qr_routed(A, r, s):\n    return A\n")


def test_template_names_are_reserved(tmp_path):
    with pytest.raises(BuildError, match="defines `ROUTES`"):
        build(tmp_path, helpers="ROUTES = []\n")


@pytest.mark.parametrize("routing,match", [
    ("from .naive import x\n", r"kernels/routing.py:1: imports from 'naive', which holds the torch references"),
    ("def qr_routed(A, r, s):\n    from .wy import x\n", r"kernels/routing.py:2: imports from 'wy', but "
                                                          r"kernels/wy.py does not exist"),
    ("from .helpers import pad as p\n", "no `as`"),
    ("from . import helpers\n", "no `as`, no module"),
    ("from .helpers import nothing\ndef qr_routed(A, r, s):\n    return A\n", "does not define it"),
    ("def qr_routed(A, r, s):\n    return A\nx = (\n", "does not compile"),
])
def test_package_imports_the_single_file_cannot_keep(tmp_path, routing, match):
    with pytest.raises(BuildError, match=match):
        build(tmp_path, routing=routing)


def test_routing_must_define_the_entry_point(tmp_path):
    with pytest.raises(BuildError, match="does not define `qr_routed"):
        build(tmp_path, routing="import torch\n")


def test_a_missing_routing_module_is_an_error(tmp_path):
    folder = kernels(tmp_path)
    (folder / "routing.py").unlink()
    with pytest.raises(BuildError, match=r"kernels/routing.py does not exist: the submission's custom_kernel calls"):
        render_submission(load_variant(variant(tmp_path)), kernels_dir=folder)


def test_the_inlining_order_follows_the_import_time_imports(tmp_path):
    """Each module after those it imports from at import time; an import inside a function orders nothing."""
    folder = kernels(tmp_path, zeta="Z = 1\n", alpha="def late():\n    from .routing import qr_routed\n",
                     helpers=HELPERS + "\nfrom .zeta import Z\n")
    assert inline_order(read_sources(folder)) == ["alpha", "plan", "zeta", "helpers", "routing"]
    text = render_submission(load_variant(variant(tmp_path)), kernels_dir=folder)
    assert "# kernel modules: alpha, plan, zeta, helpers, routing" in text
    assert text.index("# kernels/zeta.py") < text.index("# kernels/helpers.py") < text.index("# kernels/routing.py")


def test_the_real_kernels_come_after_what_they_import():
    order = inline_order(read_sources(default_kernels_dir()))
    sources = read_sources(default_kernels_dir())
    assert order[-1] == "routing" and "naive" not in order
    assert all(order.index(dep) < order.index(name) for name in order for dep in sources[name].needs())


def test_an_import_cycle_names_both_files(tmp_path):
    with pytest.raises(BuildError, match=r"kernels/helpers.py:\d+ imports from 'routing'; "
                                         r"kernels/routing.py:5 imports from 'helpers': a cycle"):
        build(tmp_path, helpers=HELPERS + "\nfrom .routing import qr_routed\n")


def test_a_future_import_in_one_module_only_is_refused(tmp_path):
    with pytest.raises(BuildError, match=r"kernels/helpers.py: `from __future__ import annotations` would apply"):
        build(tmp_path, helpers="from __future__ import annotations\n" + HELPERS)


def test_an_invalid_variant_is_one_build_error_naming_its_line(tmp_path):
    bad = variant(tmp_path, VARIANT.replace("width: 16", "width: 12"), "bad.yaml")
    with pytest.raises(BuildError, match=r"bad.yaml:5:46: routes\[small\].panel.width"):
        build_submission(bad, kernels_dir=kernels(tmp_path))


# ---------------------------------------------------------------------------
# Submission files and names


def test_a_submission_file_is_taken_byte_for_byte(tmp_path):
    path = tmp_path / "mine.py"
    data = b"#!POPCORN leaderboard qr_v2\r\n# variant: champion (copied)\r\nx = '\xe9'\n"
    path.write_bytes(data)
    built = build_submission(path, tmp_path / "elsewhere.py")
    assert (built.path, built.content, built.variant) == (path, data, None)
    assert built.variant_name == "champion"
    assert not (tmp_path / "elsewhere.py").exists()     # a submission file is never copied


def test_a_bare_name_is_a_shipped_variant():
    built = build_submission("geqrf")
    assert built.variant.name == built.variant_name == "geqrf" and built.path is None
    assert built.text.startswith("#!POPCORN leaderboard qr_v2\n")


@pytest.mark.parametrize("name,match", [("no-such-file.py", "no-such-file.py does not exist"),
                                        ("no-such-variant", "no-such-variant: no such variant")])
def test_what_does_not_exist_is_named(name, match):
    with pytest.raises(BuildError, match=match):
        build_submission(name)


# ---------------------------------------------------------------------------
# Atomic writes


def test_a_build_is_written_atomically(tmp_path):
    out = tmp_path / "out" / "submission.py"
    built = build_submission(variant(tmp_path), out, kernels_dir=kernels(tmp_path))
    assert built.path == out and out.read_text() == built.text
    assert built.text.startswith("#!POPCORN leaderboard qr_v2\n")
    assert sorted(p.name for p in out.parent.iterdir()) == ["submission.py"]


def test_a_failed_build_leaves_the_old_file_and_no_temp(tmp_path):
    out = tmp_path / "submission.py"
    out.write_text("old")
    bad = variant(tmp_path, VARIANT.replace("width: 16", "width: 12"), "bad.yaml")
    with pytest.raises(BuildError):
        build_submission(bad, out, kernels_dir=kernels(tmp_path))
    with pytest.raises(BuildError):
        build_submission(variant(tmp_path), out, kernels_dir=kernels(tmp_path, helpers="# stream\n"))
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_failed_write_removes_its_temp_file(tmp_path, monkeypatch):
    out = tmp_path / "submission.py"
    out.write_text("old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        build_submission(variant(tmp_path), out, kernels_dir=kernels(tmp_path))
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# ---------------------------------------------------------------------------
# The command line


def test_cli_build_and_lint(tmp_path):
    runner = CliRunner()
    out = tmp_path / "sub.py"
    result = runner.invoke(main, ["build", str(CHAMPION), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and out.is_file()
    # The H200 champion builds, with the one warning that qr_v2 does not run on H200.
    assert "warning: submission.py:2: gpu: qr_v2 runs on B200 only" in result.output
    result = runner.invoke(main, ["lint", str(out)])
    assert result.exit_code == 1
    assert [line.split(": ")[1] for line in result.output.splitlines()] == ["gpu"]
    result = runner.invoke(main, ["build", str(ROOT / "variants" / "champion-b200.yaml"), "-o", str(out)])
    assert result.exit_code == 0 and "warning" not in result.output, result.output
    assert runner.invoke(main, ["lint", str(out)]).exit_code == 0


def test_cli_build_error_writes_nothing(tmp_path):
    bad = variant(tmp_path, VARIANT.replace("driver: geqrf", "driver: cusolver"), "bad.yaml")
    out = tmp_path / "sub.py"
    result = CliRunner().invoke(main, ["build", str(bad), "-o", str(out)])
    assert result.exit_code == 1
    assert "bad.yaml:6:26: routes[rest].driver" in result.output and "nothing written" in result.output
    assert not out.exists()


def test_cli_diff_and_variants():
    runner = CliRunner()
    result = runner.invoke(main, ["diff", str(CHAMPION), str(ROOT / "variants" / "champion-outer32-2048.yaml")])
    assert result.exit_code == 0
    huge_outer = load_variant(CHAMPION).route_for(2048, 8).twolevel.outer
    assert f"route huge: twolevel.outer: {huge_outer} -> 32" in result.output
    result = runner.invoke(main, ["variants", str(ROOT / "variants")])
    assert result.exit_code == 0 and "champion-nograph" in result.output and "INVALID" not in result.output


# ---------------------------------------------------------------------------
# The real kernels, end to end on the CPU (Triton interpreter, in a subprocess)

E2E = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported
import torch
from submission import custom_kernel
from reference import generate_input, check_implementation
for batch, n, cond, seed in {shapes!r}:
    A = generate_input(batch, n, cond, seed)
    ok, message = check_implementation(A, custom_kernel(A.clone()))
    print(batch, n, ok, message)
    assert ok, (batch, n, message)
"""


def run_built(tmp_path: Path, variant_path: Path, shapes, timeout: int) -> subprocess.CompletedProcess:
    build_submission(variant_path, tmp_path / "submission.py")
    for name in ("task.py", "reference.py", "utils.py"):
        (tmp_path / name).write_text((ROOT / "task" / name).read_text())
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # the interpreter path, on the CPU
    return subprocess.run([sys.executable, "-c", E2E.format(shapes=shapes)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_built_champion_factors_small_cases_on_cpu(tmp_path):
    # Routes tiny (n=32) and small (n=130), through the interpreter: small batches keep it under a minute.
    done = run_built(tmp_path, CHAMPION, [(2, 32, 1, 53124), (1, 130, 1, 42)], timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch.geqrf" not in done.stderr, done.stderr  # the kernels ran: no route fell back


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("QRSUB_SLOW"), reason="minutes on the interpreter: QRSUB_SLOW=1 runs it")
def test_built_champion_passes_the_harness_small_cases_on_cpu(tmp_path):
    done = run_built(tmp_path, CHAMPION, [(20, 32, 1, 53124), (40, 176, 1, 3321)], timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch.geqrf" not in done.stderr, done.stderr
