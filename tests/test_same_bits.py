"""tools/same_bits.py: two builds on one input, H and tau compared bit for bit (on the CPU,
through Triton's interpreter: this checks the tool, not a GPU knob's verdict)."""
import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import same_bits  # noqa: E402
from qrsub.harness import cases_for, load_task, select_cases  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAMPION = str(ROOT / "variants" / "champion.yaml")
GEQRF = str(ROOT / "variants" / "geqrf.yaml")


def test_a_build_against_itself_gives_the_same_bits(capsys):
    assert same_bits.main([CHAMPION, CHAMPION, "2:8:dense:1", "1:5:rankdef:0"]) == 0
    out = capsys.readouterr().out
    assert out.count(": same bits") == 2
    assert "the same bits on every input" in out


def test_another_factorization_is_told_apart(capsys):
    # torch.geqrf's sums are not the warp kernel's: some bit of H or tau differs.
    assert same_bits.main([CHAMPION, GEQRF, "2:8:dense:1"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT bits" in out and "different bits on 1 input(s)" in out


def test_the_default_inputs_are_the_640x512_benchmark_cases():
    cases = cases_for(load_task(), "benchmark")
    picked = select_cases(cases, same_bits.DEFAULT_CASES)
    assert picked == [3, 7, 9, 10]
    assert {(cases[i]["batch"], cases[i]["n"]) for i in picked} == {(640, 512)}


@pytest.mark.parametrize("text", ["2:64:dense", "2:x:dense:1", "2:64:dense:-1"])
def test_a_malformed_input_names_the_form(text):
    with pytest.raises(argparse.ArgumentTypeError, match="batch:n:case:cond"):
        same_bits.parse_input(text)
