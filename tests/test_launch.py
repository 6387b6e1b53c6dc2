"""kernels/launch.py: programmatic dependent launch (settings.pdl) reaches launches only on a GPU
and only inside `dependent_launches`; the interpreter never runs its instructions.
test_gpu_kernels.py runs the drivers with it on a GPU."""
import pytest
import torch
from kernel_helpers import route, special_matrices

from qrsub.kernels import launch, plan, routing


def test_launches_are_plain_outside_the_block_and_in_the_interpreter():
    assert launch.pdl_launch() == {"PDL": False}
    with launch.dependent_launches(True):
        assert launch.pdl_launch() == {"PDL": False}, "the interpreter has no griddepcontrol"


def test_the_block_turns_it_on_and_restores_the_caller_s_choice(monkeypatch):
    monkeypatch.setattr(launch, "interpreted", lambda: False)
    with launch.dependent_launches(True):
        assert launch.pdl_launch() == {"PDL": True, "launch_pdl": True}
        with launch.dependent_launches(False):
            assert launch.pdl_launch() == {"PDL": False}
        assert launch.pdl_launch()["PDL"]
    assert launch.pdl_launch() == {"PDL": False}


@pytest.mark.parametrize("driver", ["blocked", "twolevel"])
def test_a_route_with_pdl_on_factors_as_without(driver):
    """On the CPU the setting changes nothing (no griddepcontrol there); what this checks is
    that every launch of the driver takes the kernels' PDL constant."""
    A = special_matrices(40, batch=2)
    knobs = route(driver=driver, panel=dict(width=16), strip=dict(fuse_next=driver == "blocked"))
    outs = [routing.qr_routed(A, [knobs], plan.Settings(pdl=pdl)) for pdl in (False, True)]
    assert all(torch.equal(a, b) for a, b in zip(*outs))
