"""The overlapped blocked schedule (PanelKnobs.overlap, kernels/overlap.py) against the plain one.

Both run the same panel and strip programs on every matrix, so on the interpreter the results
are bit for bit the same; the GPU twin is in test_gpu_kernels.py.
"""
import pytest
import torch
from kernel_helpers import harness_check, route, special_matrices

from qrsub.kernels import blocked


@pytest.mark.parametrize("n,batch,width", [
    (40, 5, 16),   # odd batch: halves of 3 and 2
    (37, 2, 16),   # n not a multiple of the panel width, the smallest batch that splits
    (33, 4, 32),   # a last panel one column wide
    (1, 3, 16),    # n = 1: one panel, nothing to overlap
    (20, 1, 8),    # a batch of 1 cannot split: the plain schedule
])
def test_overlapped_schedule_gives_the_plain_result(n, batch, width):
    A = special_matrices(n, batch)  # random, zero column, all zeros, identity, rank deficient
    before = A.clone()
    H0, tau0 = blocked.qr_blocked(A, route(panel=dict(width=width)))
    H1, tau1 = blocked.qr_blocked(A, route(panel=dict(width=width, overlap=True)))
    assert torch.equal(A, before), "drivers must not write to their input"
    assert torch.equal(H0, H1) and torch.equal(tau0, tau1)
    assert harness_check(A, H1, tau1) < 0.5


def test_each_launch_pairs_one_halfs_panel_with_the_others_strip(monkeypatch):
    launches = []
    monkeypatch.setattr(blocked, "panel_and_strip", lambda p, s: launches.append(("pair", p["j"], s["row0"])))
    monkeypatch.setattr(blocked, "run_stage", lambda stage: launches.append((stage[0], stage[1].get("j"))))
    A = special_matrices(40, 4)
    blocked.qr_blocked(A, route(panel=dict(width=16, overlap=True)))
    # panels at 0, 16, 32 (the last without a strip): half A leads, half B follows a launch behind
    assert launches == [("panel", 0), ("pair", 0, 0), ("pair", 16, 0), ("pair", 16, 16), ("pair", 32, 16),
                        ("panel", 32)]


@pytest.mark.parametrize("sections,message", [
    (dict(driver="twolevel", panel=dict(width=16, overlap=True)), "panel.overlap: got true with driver twolevel"),
    (dict(panel=dict(overlap=True), strip=dict(split_rows=64)), "panel.overlap: got true with strip.split_rows 64"),
])
def test_overlap_refuses_the_routes_it_cannot_run(sections, message):
    with pytest.raises(ValueError, match=message):
        route(**sections)
