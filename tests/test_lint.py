"""`qrsub lint`: each rule on a crafted bad file."""
from click.testing import CliRunner

from pathlib import Path

from qrsub.cli import main
from qrsub.harness import load_task
from qrsub.lint import lint_bytes, lint_text
from qrsub.rules import LEADERBOARD_GPUS, MAX_BYTES, header_directives

VARIANTS = Path(__file__).resolve().parent.parent / "variants"

GOOD = """\
#!POPCORN leaderboard qr_v2
#!POPCORN gpu B200
# a comment in the block
import math

import torch
import triton
import triton.language as tl
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    return torch.geqrf(data)
"""


def rules(text: str, filename: str = "submission.py") -> list[tuple[int, str, bool]]:
    return [(p.line, p.rule, p.hard) for p in lint_text(text, filename)]


def test_a_good_file_is_clean():
    assert rules(GOOD) == []


# --- the service's rules (hard) ----------------------------------------------


def test_empty():
    assert (1, "empty", True) in rules("")


def test_size():
    text = GOOD + "#" * (MAX_BYTES - len(GOOD) + 1) + "\n"
    assert (1, "size", True) in rules(text)
    assert rules(GOOD + "#" * (MAX_BYTES - len(GOOD.encode()) - 1) + "\n") == []


def test_not_utf8():
    data = GOOD.encode() + b"# caf\xe9\n"
    assert (GOOD.count("\n") + 1, "utf8", True) in [(p.line, p.rule, p.hard) for p in lint_bytes(data, "s.py")]
    assert (1, "utf8", True) in rules("x = '\ud800'\n")


def test_the_refused_word_in_any_case_anywhere():
    text = GOOD + "# upSTREAM note\nx = 'Stream'\n"
    found = [r for r in rules(text) if r[1] == "stream"]
    n = GOOD.count("\n")
    assert found == [(n + 1, "stream", True), (n + 2, "stream", True)]


def test_extension():
    assert (1, "extension", True) in rules(GOOD, "submission.txt")
    assert all(r[1] != "extension" for ext in (".py", ".cu", ".cuh", ".cpp") for r in rules(GOOD, "s" + ext))


def test_directive_without_argument():
    assert (1, "directive", True) in rules(GOOD.replace("leaderboard qr_v2", "leaderboard"))


def test_unknown_directive():
    assert (2, "directive", True) in rules(GOOD.replace("#!POPCORN gpu B200", "#!POPCORN gpux B200"))
    assert (2, "directive", True) in rules(GOOD.replace("#!POPCORN gpu B200", "#!POPCORN"))


def test_duplicate_directive_including_gpu_and_gpus():
    assert (3, "directive", True) in rules(GOOD.replace("# a comment", "#!POPCORN leaderboard qr_v2"))
    assert (3, "directive", True) in rules(GOOD.replace("# a comment", "#!POPCORN gpus B200"))


def test_cpp_style_directives_count():
    text = GOOD.replace("#!POPCORN leaderboard qr_v2", "//!POPCORN leaderboard qr_v2")
    assert rules(text, "s.cu") == []


def test_only_the_first_comment_block_holds_directives():
    # A blank line ends the block: the gpu directive after it is ignored by the service.
    text = GOOD.replace("#!POPCORN gpu B200\n", "\n#!POPCORN gpu B200\n")
    found = rules(text)
    assert (3, "directive-placement", False) in found
    assert (1, "directive-missing", False) in found
    assert not any(hard for _, _, hard in found)


# --- ours (soft) --------------------------------------------------------------


def test_a_gpu_the_leaderboard_does_not_offer_is_a_warning():
    problems = lint_text(GOOD.replace("gpu B200", "gpus H100 B200 H200"), "submission.py")
    found = [(p.line, p.hard, p.message.split(", so")[0], p.message.split("refuses ")[1][:4]) for p in problems]
    assert found == [(2, False, "qr_v2 runs on B200 only", "H100"), (2, False, "qr_v2 runs on B200 only", "H200")]
    assert "`#!POPCORN gpu B200`" in problems[0].message  # the fix
    assert rules(GOOD.replace("leaderboard qr_v2", "leaderboard other_lb").replace("gpu B200", "gpu H200")) == []


def test_the_known_gpus_are_task_ymls():
    assert LEADERBOARD_GPUS["qr_v2"] == tuple(load_task()["gpus"])


def test_does_not_compile():
    assert (14, "syntax", False) in rules(GOOD + "def broken(:\n")


def test_missing_custom_kernel():
    assert (1, "custom-kernel", False) in rules(GOOD.replace("def custom_kernel", "def kernel"))


def test_missing_task_import():
    assert (1, "task-import", False) in rules(GOOD.replace("from task import input_t, output_t\n", ""))


def test_imports_outside_torch_triton_stdlib():
    found = rules(GOOD + "import numpy as np\n\n\ndef f():\n    from cupy import array\n    from .x import y\n")
    n = GOOD.count("\n")
    assert (n + 1, "import", False) in found
    assert (n + 5, "import", False) in found
    assert (n + 6, "import", False) in found   # a relative import: a one-file submission has no package


def test_python_rules_only_for_python():
    assert rules("__global__ void k() {}\n", "k.cu") == [(1, "directive-missing", False)] * 2


# --- the command ----------------------------------------------------------------


def test_cli_prints_one_line_per_problem_and_fails(tmp_path):
    path = tmp_path / "sub.py"
    path.write_text(GOOD + "# streams\n")
    result = CliRunner().invoke(main, ["lint", str(path)])
    assert result.exit_code == 1
    assert f"{path}:{GOOD.count(chr(10)) + 1}: stream: " in result.output
    assert "[refused by the service]" in result.output


def test_cli_clean_file_exits_zero(tmp_path):
    path = tmp_path / "sub.py"
    path.write_text(GOOD)
    assert CliRunner().invoke(main, ["lint", str(path)]).exit_code == 0


def test_cli_warns_for_the_h200_champion_on_qr_v2():
    result = CliRunner().invoke(main, ["lint", str(VARIANTS / "champion.yaml")])
    assert result.exit_code == 1
    assert "champion.yaml -> submission.py:2: gpu: qr_v2 runs on B200 only, so the service refuses H200" \
        in result.output
    assert CliRunner().invoke(main, ["lint", str(VARIANTS / "champion-b200.yaml")]).exit_code == 0


def test_cli_on_a_variant_that_does_not_build_says_what_is_wrong_and_nothing_about_writing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {VARIANTS / 'geqrf.yaml'}\nroutes:\n  - {{name: rest, driver: cusolver}}\n")
    result = CliRunner().invoke(main, ["lint", str(bad)])
    assert result.exit_code == 1
    assert "bad.yaml:3:" in result.output and "driver" in result.output
    assert "written" not in result.output  # lint writes nothing, so it says nothing about it


def test_the_service_reads_the_first_directive_of_each_kind_in_the_header_only():
    text = ("#!POPCORN leaderboard qr_v2\n#!POPCORN gpus B200 H100\n#!POPCORN gpu A100\n#!POPCORN leaderboard\n"
            "import torch\n#!POPCORN leaderboard other\n")
    assert header_directives(text) == {"leaderboard": ["qr_v2"], "gpu": ["B200", "H100"]}


# --- concurrent graph branches (opt-in: graph.mode concurrent) ---------------------


def built(name: str) -> str:
    from qrsub.build import build_submission
    return build_submission(VARIANTS / name).text


def test_a_concurrent_build_gets_one_concurrent_graph_warning_and_no_refused_word():
    from qrsub.rules import CONCURRENCY_RISK, refused_lines

    text = built("champion-concurrent.yaml")
    assert refused_lines(text) == []
    problems = lint_text(text, "submission.py")
    assert [p.rule for p in problems] == ["gpu", "concurrent-graph"]  # the H200 gpu warning, then ours
    [risk] = [p for p in problems if p.rule == "concurrent-graph"]
    assert not risk.hard and "route 'mid' uses graph.mode concurrent" in risk.message
    assert CONCURRENCY_RISK in risk.message and "--accept-concurrency-risk" in risk.message
    assert "Route(name='mid'," in text.split("\n")[risk.line - 1], "the line of the route in ROUTES"


def test_the_champion_carries_the_concurrent_code_but_no_warning_for_it():
    text = built("champion.yaml")
    assert "cudaGraphAddChildGraphNode" in text and "from cuda.bindings import runtime" in text
    assert [p.rule for p in lint_text(text, "submission.py")] == ["gpu"]


def test_several_concurrent_routes_are_one_finding_naming_them():
    routes = ("ROUTES = (Route(name='a', graph=GraphKnobs(mode='concurrent', groups=2)),\n"
              "          Route(name='b', graph=GraphKnobs(mode='capture', groups=0)),\n"
              "          Route(name='c', graph=GraphKnobs(mode='concurrent', groups=4)))\n")
    found = [p for p in lint_text(GOOD + routes, "submission.py") if p.rule == "concurrent-graph"]
    assert [(p.line, p.message.split(" graph.mode")[0]) for p in found] == [
        (GOOD.count("\n") + 1, "routes 'a', 'c' use")]


def test_a_hand_written_file_that_adds_child_graphs_is_flagged_too():
    text = GOOD + ("\nfrom cuda.bindings import runtime\n\n\ndef join(parent, child):\n"
                   "    return runtime.cudaGraphAddChildGraphNode(parent, None, 0, child)\n")
    found = [(p.line, p.rule) for p in lint_text(text, "submission.py")]
    assert found == [(GOOD.count("\n") + 6, "concurrent-graph")]  # cuda.bindings itself is no import warning
    assert rules(GOOD + "from cuda import cudart\n")[0][1] == "import"  # cuda-python's other modules are
