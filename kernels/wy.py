"""The WY merge: one block reflector's T from the T_i of the panels inside it.

For Q = (I - Y1 T1 Y1^T)(I - Y2 T2 Y2^T) = I - Y T Y^T with Y = [Y1 Y2]:
T = [[T1, -T1 (Y1^T Y2) T2], [0, T2]]. All cross Gram blocks come from one
Y^T Y product; the merge then walks the inner blocks left to right.
"""
import torch


def wy_merge(Y: torch.Tensor, inner_T: torch.Tensor, widths: list, out: torch.Tensor) -> torch.Tensor:
    """Write the block T into out (batch x ob x ob) and return it.

    Y: batch x L x ob, the block's reflectors (unit diagonal, zeros above);
    inner_T: batch x k x BB x BB, the inner panels' T (zero beyond each width);
    widths: the inner panels' widths, summing to ob.
    """
    gram = torch.bmm(Y.transpose(1, 2), Y)
    out.zero_()
    done = 0
    for i, w in enumerate(widths):
        Ti = inner_T[:, i, :w, :w]
        out[:, done:done + w, done:done + w] = Ti
        if done:
            cross = torch.bmm(out[:, :done, :done], gram[:, :done, done:done + w])
            out[:, :done, done:done + w] = -torch.bmm(cross, Ti)
        done += w
    return out
