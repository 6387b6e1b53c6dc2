"""tools/panel_t_cost.py's copy of kernels/: the grouped panel without T's recurrence, the rest
unchanged (the tool's timings compare the two; the CPU checks what the copy computes)."""
import sys
from pathlib import Path

import torch

from qrsub.kernels import panel, plan

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import panel_t_cost  # noqa: E402


def test_the_copy_skips_t_and_keeps_the_factor():
    copy_panel, copy_plan = panel_t_cost.without_t()
    A = torch.randn(2, 64, 64)
    outputs = {}
    for name, (module, knobs_module) in {"built": (panel, plan), "copy": (copy_panel, copy_plan)}.items():
        H, tau = torch.zeros_like(A), torch.zeros(2, 64)
        T, V = torch.zeros(2, 16, 16), torch.zeros(2, 64, 16)
        knobs = knobs_module.PanelKnobs(width=16, num_warps=4, unroll=4, broadcast="shuffle")
        module.householder_panel(A, H, tau, T, V, 0, 16, knobs=knobs)
        outputs[name] = H, T
    torch.testing.assert_close(outputs["copy"][0][:, :, :16], outputs["built"][0][:, :, :16])
    assert outputs["built"][1].abs().sum() > 0
    assert torch.equal(outputs["copy"][1], torch.zeros_like(outputs["copy"][1]))
