"""The block reflector's T of a two-level block, from its inner panels.

For Q = (I - Y1 T1 Y1^T)(I - Y2 T2 Y2^T) = I - Y T Y^T with Y = [Y1 Y2]:
T = [[T1, -T1 (Y1^T Y2) T2], [0, T2]]. Two ways to get it:

- `wy_merge` (twolevel.block_t: merge): one Y^T Y product, then the merge walks the
  inner blocks left to right in torch (two small products and two copies per block).
- `block_t_from_gram` (twolevel.block_t: gram): the same Y^T Y product, then one
  kernel builds T column by column as the panel does (dlarft's recurrence
  T[:k, k] = -tau_k T[:k, :k] G[:k, k], T[k, k] = tau_k): two launches in all.
"""
import torch
import triton
import triton.language as tl


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


@triton.jit
def t_from_gram(G, taus, cb, ob):
    """T (BO x BO, zero beyond ob) of reflectors with Gram matrix G (BO x BO) and taus (BO);
    cb = tl.arange(0, BO)."""
    T = tl.zeros(G.shape, dtype=tl.float32)
    for k in range(0, ob):
        g_k = tl.sum(tl.where((cb == k)[:, None], G, 0.0), axis=0)   # row k of G = its column k
        tau_k = tl.sum(tl.where(cb == k, taus, 0.0), axis=0)
        t_col = -tau_k * tl.sum(T * tl.where(cb < k, g_k, 0.0)[None, :], axis=1)
        t_col = tl.where(cb == k, tau_k, tl.where(cb < k, t_col, 0.0))
        T = tl.where((cb == k)[None, :], t_col[:, None], T)
    return T


@triton.jit
def t_from_gram_kernel(g_ptr, tau_ptr, t_ptr, n, J, ob, g_bs, g_ld, t_bs, t_ld, BO: tl.constexpr):
    """Grid: (batch,). Program i reads G (ob x ob at g_ptr + i*g_bs, row stride g_ld) and
    tau[i, J:J+ob], and writes T (ob x ob at t_ptr + i*t_bs, row stride t_ld).
    Invariant: BO >= ob is a power of two >= 16."""
    pid = tl.program_id(0).to(tl.int64)
    cb = tl.arange(0, BO)
    inside = (cb[:, None] < ob) & (cb[None, :] < ob)
    G = tl.load(g_ptr + pid * g_bs + cb[:, None] * g_ld + cb[None, :], mask=inside, other=0.0)
    taus = tl.load(tau_ptr + pid * n + J + cb, mask=cb < ob, other=0.0)
    T = t_from_gram(G, taus, cb, ob)
    tl.store(t_ptr + pid * t_bs + cb[:, None] * t_ld + cb[None, :], T, mask=inside)


def block_t_from_gram(Y: torch.Tensor, tau: torch.Tensor, J: int, out: torch.Tensor) -> torch.Tensor:
    """Write the block T into out (batch x ob x ob, unit column stride) and return it.

    Y: batch x L x ob, the block's reflectors (unit diagonal, zeros above); tau: batch x n,
    the block's taus at columns J..J+ob. The Gram product runs in the caller's cuBLAS
    precision (fp32 unless tf32 is allowed), as the merge's does.
    """
    batch, _, ob = Y.shape
    gram = torch.bmm(Y.transpose(1, 2), Y)
    t_from_gram_kernel[(batch,)](gram, tau, out, tau.shape[1], J, ob, gram.stride(0), gram.stride(1),
                                 out.stride(0), out.stride(1), BO=max(16, triton.next_power_of_2(ob)),
                                 num_warps=4 if ob <= 64 else 8)
    return out
