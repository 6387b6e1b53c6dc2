"""The package is exactly as wide as the code, and nothing at the checkout root shadows the harness."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"qrsub", "qrsub.bench", "qrsub.cli", "qrsub.kernels", "qrsub.submit", "qrsub.task",
            "qrsub.variants", "qrsub.templates"}
NOT_PACKAGES = ("qrsub.tests", "qrsub.docs", "qrsub.qrsub")
SPECS = f"""
import importlib.util
for name in {sorted(PACKAGES)!r}:
    assert importlib.util.find_spec(name) is not None, name
for name in {NOT_PACKAGES!r}:
    assert importlib.util.find_spec(name) is None, name
print("ok")
"""


def output_of(code: str, cwd: Path, *args: str, env: dict | None = None) -> str:
    """What `python ARGS -c CODE` prints, run in CWD; it must succeed."""
    done = subprocess.run([sys.executable, *args, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_harness_task_module_is_not_shadowed_from_the_checkout_root():
    """`python -c` from the checkout root puts the root first on sys.path, where task/ is a package: the
    harness's own imports must still find task.py's names when its folder comes later."""
    code = (f"import sys; sys.path.append({str(ROOT / 'task')!r})\n"
            "from task import input_t, output_t\n"
            "import reference\n"
            "print(reference.input_t is input_t)")
    assert output_of(code, ROOT) == "True"


def test_only_the_code_folders_import_from_the_install(tmp_path):
    assert output_of(SPECS, tmp_path) == "ok"


def test_the_command_line_starts_without_torch():
    code = ("import sys, qrsub.cli, qrsub.report, qrsub.harness\n"
            "qrsub.harness.checker_gates(); qrsub.harness.default_harness()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')))")
    assert output_of(code, ROOT) == "[]"


def test_python_m_qrsub_in_a_checkout_never_installed_says_how_to_install():
    """-S keeps site-packages, and with it any install, out: the checkout's qrsub/ folder is all
    there is, as on a machine where the checkout was copied and never installed."""
    done = subprocess.run([sys.executable, "-S", "-m", "qrsub", "build", "champion"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "qrsub is not installed" in done.stderr and f"pip install -e {ROOT}" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_wheel_holds_exactly_the_code_folders(tmp_path):
    """Built from a copy of the whole checkout (tests/ and docs/ included), with the build backend only."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                             ".pytest_cache"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [wheel] = (tmp_path / "dist").glob("qrsub-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"qrsub", wheel.name.split("-py")[0] + ".dist-info"}
    packages = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packages == PACKAGES
    assert {f"qrsub.{p.parent.name}" for p in (ROOT / "qrsub").glob("*/__init__.py")} <= packages  # none forgotten
    for data in ("qrsub/task/task.yml", "qrsub/templates/submission.py.j2", "qrsub/variants/champion.yaml",
                 "qrsub/task/eval.py", "qrsub/kernels/routing.py"):
        assert data in names, data

    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # -S: no site-packages, so the editable install of this checkout cannot answer instead of the wheel
    assert output_of(SPECS, tmp_path, "-S", env={"PYTHONPATH": str(site)}) == "ok"
