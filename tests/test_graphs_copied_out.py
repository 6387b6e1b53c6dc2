"""graphs.copied_out: a capture route's outputs leave the graph's buffers in one copy when the
driver put them in one buffer (blocked.new_outputs), else one copy each."""
import torch

from qrsub.kernels.blocked import new_outputs
from qrsub.kernels.graphs import copied_out


def test_views_of_one_buffer_come_out_in_one_copy_with_their_values():
    A = torch.zeros(3, 4, 4)
    H, tau = new_outputs(A)
    H.copy_(torch.arange(48.0).view(3, 4, 4))
    tau.copy_(torch.arange(12.0).view(3, 4) + 100)
    H_out, tau_out = copied_out((H, tau))
    assert torch.equal(H_out, H) and torch.equal(tau_out, tau)
    assert H_out.shape == (3, 4, 4) and tau_out.shape == (3, 4) and H_out.is_contiguous() and tau_out.is_contiguous()
    assert H_out.untyped_storage().data_ptr() == tau_out.untyped_storage().data_ptr(), "one copy"
    assert H_out.untyped_storage().data_ptr() != H.untyped_storage().data_ptr(), "not the graph's buffer"
    H.zero_()
    tau.zero_()  # the next replay rewrites the graph's buffers: the copies keep their values
    assert H_out[2, 3, 3].item() == 47.0 and tau_out[2, 3].item() == 111.0


def test_separate_outputs_are_copied_one_by_one():
    H, tau = torch.ones(2, 3, 3), torch.full((2, 3), 2.0)
    H_out, tau_out = copied_out((H, tau))
    assert torch.equal(H_out, H) and torch.equal(tau_out, tau)
    assert H_out.data_ptr() != H.data_ptr() and tau_out.data_ptr() != tau.data_ptr()


def test_views_of_another_tensor_are_copied_one_by_one():
    """Views whose bases differ (a slice of a larger tensor for H, a separate tau): no shortcut."""
    big = torch.arange(40.0)
    H, tau = big[:18].view(2, 3, 3), torch.ones(2, 3)
    H_out, tau_out = copied_out((H, tau))
    assert torch.equal(H_out, H) and torch.equal(tau_out, tau)
    assert H_out.untyped_storage().data_ptr() != tau_out.untyped_storage().data_ptr()
