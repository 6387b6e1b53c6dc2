"""The WY merge against larft over the whole block and against wy_merge_ref."""
import torch

from qrsub.kernels.naive import larft, panel_ref, wy_merge_ref
from qrsub.kernels.wy import wy_merge


def test_wy_merge_equals_larft_of_the_whole_block():
    g = torch.Generator().manual_seed(3)
    L, widths = 30, [8, 8, 5]
    ob = sum(widths)
    _, tau, _, V = panel_ref(torch.randn(L, ob, generator=g, dtype=torch.float64))
    inner = torch.zeros(1, len(widths), 8, 8, dtype=torch.float64)
    Ts, done = [], 0
    for i, w in enumerate(widths):
        Ti = larft(V[:, done:done + w], tau[done:done + w])
        inner[0, i, :w, :w] = Ti
        Ts.append(Ti)
        done += w
    out = torch.empty(1, ob, ob, dtype=torch.float64)
    wy_merge(V[None], inner, widths, out)
    torch.testing.assert_close(out[0], larft(V, tau))
    torch.testing.assert_close(out[0], wy_merge_ref(V, Ts))

