"""The templater: one file from a variant and kernels/, byte-identical, atomic, refusing what the service refuses."""
import ast
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from qrsub.build import BuildError, BuildWarning, build_variant, write_build
from qrsub.lint import lint_text
from qrsub.submit.cli import main
from qrsub.kernels import plan
from qrsub.variant import VariantError, load_variant

ROOT = Path(__file__).resolve().parent.parent
CHAMPION = ROOT / "variants" / "champion.yaml"

VARIANT = """\
leaderboard: qr_v2
gpu: H200
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


def build(tmp_path: Path, order=("plan", "helpers", "routing"), **modules) -> str:
    return build_variant(variant(tmp_path), kernels_dir=kernels(tmp_path, **modules), module_order=order)


# ---------------------------------------------------------------------------
# The generated file


def test_directives_first_then_provenance(tmp_path):
    text = build(tmp_path)
    lines = text.splitlines()
    assert lines[:2] == ["#!POPCORN leaderboard qr_v2", "#!POPCORN gpu H200"]
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert "# variant: test (a test variant)" in header
    assert "# extends: (none)" in header
    assert "# sources sha256: " in header
    assert "# kernel modules: plan, helpers, routing" in header
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BuildWarning)
        first, second = build_variant(CHAMPION), build_variant(CHAMPION)
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
        build_variant(variant(tmp_path), kernels_dir=kernels(tmp_path), module_order=("helpers", "routing"),
                      template=template)


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
    ("from .later import x\n", "comes later in MODULE_ORDER"),
    ("from .naive import x\n", "never inlined"),
    ("from .helpers import pad as p\n", "no `as`"),
    ("from . import helpers\n", "no `as`, no module"),
    ("from .helpers import nothing\ndef qr_routed(A, r, s):\n    return A\n", "does not define it"),
    ("def qr_routed(A, r, s):\n    return A\nx = (\n", "does not compile"),
])
def test_package_imports_the_single_file_cannot_keep(tmp_path, routing, match):
    with pytest.raises(BuildError, match=match):
        build(tmp_path, order=("helpers", "routing", "later"), routing=routing, later="x = 1\n")


def test_routing_must_define_the_entry_point(tmp_path):
    with pytest.raises(BuildError, match="does not define `qr_routed"):
        build(tmp_path, routing="import torch\n")


def test_missing_modules_warn_and_are_named_in_the_file(tmp_path):
    with pytest.warns(BuildWarning, match="kernels/wy.py .* does not exist yet"):
        text = build(tmp_path, order=("helpers", "wy", "routing"))
    assert "# MISSING kernel module (not inlined): kernels/wy.py" in text


def test_invalid_variant_raises_before_anything(tmp_path):
    bad = variant(tmp_path, VARIANT.replace("width: 16", "width: 12"), "bad.yaml")
    with pytest.raises(VariantError, match=r"bad.yaml:5:46: routes\[small\].panel.width"):
        build_variant(bad, kernels_dir=kernels(tmp_path), module_order=("helpers", "routing"))


# ---------------------------------------------------------------------------
# Atomic writes


def test_write_build_writes_atomically(tmp_path):
    out = tmp_path / "out" / "submission.py"
    path = write_build(variant(tmp_path), out, kernels_dir=kernels(tmp_path), module_order=("helpers", "routing"))
    assert path == out and out.read_text().startswith("#!POPCORN leaderboard qr_v2\n")
    assert sorted(p.name for p in out.parent.iterdir()) == ["submission.py"]


def test_a_failed_build_leaves_the_old_file_and_no_temp(tmp_path):
    out = tmp_path / "submission.py"
    out.write_text("old")
    bad = variant(tmp_path, VARIANT.replace("width: 16", "width: 12"), "bad.yaml")
    with pytest.raises(VariantError):
        write_build(bad, out, kernels_dir=kernels(tmp_path), module_order=("helpers", "routing"))
    with pytest.raises(BuildError):
        write_build(variant(tmp_path), out, kernels_dir=kernels(tmp_path, helpers="# stream\n"),
                    module_order=("helpers", "routing"))
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_failed_write_removes_its_temp_file(tmp_path, monkeypatch):
    out = tmp_path / "submission.py"
    out.write_text("old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_build(variant(tmp_path), out, kernels_dir=kernels(tmp_path), module_order=("helpers", "routing"))
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# ---------------------------------------------------------------------------
# The command line


def test_cli_build_and_lint(tmp_path):
    runner = CliRunner()
    out = tmp_path / "sub.py"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BuildWarning)
        result = runner.invoke(main, ["build", str(CHAMPION), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and out.is_file()
    result = runner.invoke(main, ["lint", str(out)])
    assert result.exit_code == 0, result.output


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
    assert "route huge: twolevel.outer: 128 -> 32" in result.output
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BuildWarning)
        write_build(variant_path, tmp_path / "submission.py")
    for name in ("task.py", "reference.py", "utils.py"):
        (tmp_path / name).write_text((ROOT / "task" / name).read_text())
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # the interpreter path, on the CPU
    return subprocess.run([sys.executable, "-c", E2E.format(shapes=shapes)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


needs_kernels = pytest.mark.skipif(
    not (ROOT / "kernels" / "routing.py").is_file() or not (ROOT / "task" / "reference.py").is_file(),
    reason="needs kernels/routing.py and task/reference.py")


@needs_kernels
def test_built_champion_factors_small_cases_on_cpu(tmp_path):
    # Routes tiny (n=32) and small (n=130), through the interpreter: small batches keep it under a minute.
    done = run_built(tmp_path, CHAMPION, [(2, 32, 1, 53124), (1, 130, 1, 42)], timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "using torch.geqrf" not in done.stderr, done.stderr  # the kernels ran, no fallback


@needs_kernels
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("QRSUB_SLOW"), reason="minutes on the interpreter: QRSUB_SLOW=1 runs it")
def test_built_champion_passes_the_harness_small_cases_on_cpu(tmp_path):
    done = run_built(tmp_path, CHAMPION, [(20, 32, 1, 53124), (40, 176, 1, 3321)], timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "using torch.geqrf" not in done.stderr, done.stderr
