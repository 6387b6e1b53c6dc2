"""Plain-torch references for every kernel stage, written for clarity, not speed.

Each function computes what its Triton twin computes, in float64 by default,
so tests can compare the two on small shapes.
"""
import torch


def householder_vector(x: torch.Tensor):
    """dlarfg on a column x (alpha = x[0]): returns (v, tau, beta) with v[0] = 1.

    A column whose tail is exactly zero gives tau = 0 and beta = alpha.
    """
    alpha, tail = x[0], x[1:]
    sigma = torch.dot(tail, tail)
    v = torch.zeros_like(x)
    v[0] = 1
    if sigma == 0:
        return v, x.new_zeros(()), alpha
    norm = torch.sqrt(alpha * alpha + sigma)
    beta = -norm if alpha >= 0 else norm
    v[1:] = tail / (alpha - beta)
    return v, (beta - alpha) / beta, beta


def larft(V: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """T of the compact-WY form H_1...H_b = I - V T V^T (dlarft: forward, columnwise)."""
    b = tau.shape[0]
    T = V.new_zeros(b, b)
    for k in range(b):
        T[:k, k] = -tau[k] * (T[:k, :k] @ (V[:, :k].T @ V[:, k]))
        T[k, k] = tau[k]
    return T


def panel_ref(panel: torch.Tensor):
    """Factor one L x b panel: returns (factored panel, tau, T, V) as the panel kernel does."""
    P = panel.clone()
    L, b = P.shape
    V = P.new_zeros(L, b)
    tau = P.new_zeros(b)
    for k in range(min(b, L)):
        v, tau[k], beta = householder_vector(P[k:, k])
        V[k:, k] = v
        P[k:, k + 1:] -= tau[k] * torch.outer(v, v @ P[k:, k + 1:])
        P[k, k] = beta
        P[k + 1:, k] = v[1:]
    return P, tau, larft(V, tau), V


def strip_ref(C: torch.Tensor, V: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """The trailing update C - V (T^T (V^T C)), i.e. Q^T C for Q = I - V T V^T."""
    return C - V @ (T.T @ (V.T @ C))


def rank_update_ref(C: torch.Tensor, Y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """C - Y W in float64: strip.rank_update's result (C and the output in different tensors)."""
    return C.double() - Y.double() @ W.double()


def fused_strip_ref(C, Va, Wa, Vb, Tb, next_row: int):
    """strip.fused_strip in float64: C' = C - Va Wa (C unchanged where Va is None), and the next
    panel's W = Tb^T Vb^T C' over C's rows next_row.. (Vb's rows as C's)."""
    C = C.double() if Va is None else C.double() - Va.double() @ Wa.double()
    return C, Tb.double().T @ (Vb[next_row:].double().T @ C[next_row:])


def round_tf32_ref(x: torch.Tensor) -> torch.Tensor:
    """fp32 x rounded to tf32 as precision.round_tf32 does: the nearest value with the low 13
    mantissa bits zero, ties to the one whose last kept bit is even (integer arithmetic)."""
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    low, kept = bits & 0x1FFF, bits & ~0x1FFF & 0xFFFFFFFF
    up = (low > 0x1000) | ((low == 0x1000) & (((kept >> 13) & 1) == 1))
    out = torch.where(up, kept + 0x2000, kept)
    return (out - ((out >> 31) << 32)).to(torch.int32).view(torch.float32)


def t_product_ref(T: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """tproduct.t_product: T^T W per matrix of the batch, in float64."""
    return T.double().transpose(-1, -2) @ W.double()


def wy_merge_ref(V: torch.Tensor, inner_T: list) -> torch.Tensor:
    """The T of a block whose reflectors are V's columns, from its inner blocks' T_i.

    T = [[T1, -T1 (V1^T V2) T2], [0, T2]], applied block by block.
    """
    T = inner_T[0]
    done = T.shape[0]
    for Ti in inner_T[1:]:
        w = Ti.shape[0]
        cross = -T @ (V[:, :done].T @ V[:, done:done + w]) @ Ti
        T = torch.cat([torch.cat([T, cross], 1), torch.cat([cross.new_zeros(w, done), Ti], 1)], 0)
        done += w
    return T


def qr_ref(A: torch.Tensor, b: int = 8):
    """Blocked Householder QR of a batch in geqrf's compact form: (H, tau), in A's dtype."""
    H = A.clone()
    batch, n, _ = A.shape
    tau = A.new_zeros(batch, n)
    for i in range(batch):
        for j in range(0, n, b):
            bw = min(b, n - j)
            P, tau[i, j:j + bw], T, V = panel_ref(H[i, j:, j:j + bw])
            H[i, j:, j:j + bw] = P
            H[i, j:, j + bw:] = strip_ref(H[i, j:, j + bw:], V, T)
    return H, tau


def coop_panel_ref(panel: torch.Tensor, programs: int):
    """The cooperative panel's arithmetic: rows split into `programs` slices that
    only exchange per-reflector partial sums (alpha, tail norm, row k, x^T panel).

    Returns (factored panel, tau) like panel_ref; it shows that w = row_k +
    (sum of slice partials) / (alpha - beta) reproduces the one-program panel.
    """
    P = panel.clone()
    L, b = P.shape
    rows_each = -(-L // programs)
    bounds = [(min(L, p * rows_each), min(L, (p + 1) * rows_each)) for p in range(programs)]
    tau = P.new_zeros(b)
    for k in range(min(b, L)):
        row_k = P.new_zeros(b)
        proj = P.new_zeros(b)
        alpha = sigma = P.new_zeros(())
        for lo, hi in bounds:  # what each program writes, then everyone sums
            rows = torch.arange(lo, hi)
            tail = torch.where(rows > k, P[lo:hi, k], P.new_zeros(()))
            proj = proj + tail @ P[lo:hi]
            sigma = sigma + tail @ tail
            if lo <= k < hi:
                row_k = row_k + P[k]
                alpha = alpha + P[k, k]
        if sigma == 0:
            continue
        norm = torch.sqrt(alpha * alpha + sigma)
        beta = -norm if alpha >= 0 else norm
        scale = 1 / (alpha - beta)
        tau[k] = (beta - alpha) / beta
        w = row_k + proj * scale
        v = torch.zeros(L, dtype=P.dtype)
        v[k] = 1
        v[k + 1:] = P[k + 1:, k] * scale
        P[:, k + 1:] -= tau[k] * torch.outer(v, w[k + 1:])
        P[k, k] = beta
        P[k + 1:, k] = v[k + 1:]
    return P, tau


def signed_lu_ref(Q1: torch.Tensor):
    """The modified LU of a b x b block of orthonormal columns: (L1, U, s) with Q1 - diag(s) = L1 U,
    L1 unit lower, U upper, s_k = -sign of the k-th pivot as elimination reaches it (+1 taken as
    the sign of 0). No pivoting is needed: |U_kk| >= 1 (Ballard et al., 2014)."""
    A = Q1.clone()
    b = A.shape[0]
    L1 = torch.eye(b, dtype=A.dtype)
    s = A.new_zeros(b)
    for k in range(b):
        s[k] = 1.0 if A[k, k] < 0 else -1.0
        A[k, k] -= s[k]
        L1[k + 1:, k] = A[k + 1:, k] / A[k, k]
        A[k + 1:, k + 1:] -= torch.outer(L1[k + 1:, k], A[k, k + 1:])
    return L1, torch.triu(A), s


def tsqr_panel_ref(panel: torch.Tensor, programs: int, slice_rows: int):
    """The TSQR panel (coop.exchange tsqr) in plain torch: returns (factored panel, tau, T, V) as
    panel_ref does.

    Each slice of slice_rows rows is factored alone (panel_ref); every slice's R is stacked and
    the stack factored; Q's first b columns are formed from both levels; then the Householder
    vectors are reconstructed from Q (Ballard, Demmel, Grigori, Jacquelin, Nguyen, Solomonik,
    "Reconstructing Householder vectors from Tall-Skinny QR", 2014): Q - [diag(s); 0] = V U
    (signed_lu_ref on Q's top block, V's rows below it Q U^-1), T = -U diag(s) V_top^-T, R =
    diag(s) R_stack. The result is a Householder QR in dlarfg's sign convention wherever every
    reflector has a nonzero tail; where dlarfg would skip one (tau 0), this reflects (tau > 1).
    """
    L, b = panel.shape
    P = torch.zeros(programs * slice_rows, b, dtype=panel.dtype)
    P[:L] = panel
    slices = [panel_ref(P[q * slice_rows:(q + 1) * slice_rows]) for q in range(programs)]
    stack = torch.cat([torch.triu(F[:b]) for F, _, _, _ in slices])
    Fs, _, Tc, Y = panel_ref(stack)
    # Q's first b columns: slice q's rows are Q_q [B_q; 0], B_q block q of the stack's Q.
    Qc = torch.eye(programs * b, b, dtype=P.dtype) - Y @ (Tc @ Y[:b].T)
    Q = torch.cat([torch.cat([Qc[q * b:(q + 1) * b], P.new_zeros(slice_rows - b, b)])
                   - Vq @ (Tq @ (Vq[:b].T @ Qc[q * b:(q + 1) * b]))
                   for q, (_, _, Tq, Vq) in enumerate(slices)])
    L1, U, s = signed_lu_ref(Q[:b])
    V = torch.linalg.solve_triangular(U, Q, upper=True, left=False)
    V[:b] = L1
    T = -torch.linalg.solve_triangular(L1, (U * s[None, :]).T, upper=False, left=True).T
    out = V.clone()
    out[:b] = torch.triu(s[:, None] * Fs[:b]) + torch.tril(L1, -1)
    return out[:L], torch.diagonal(T).clone(), T, V[:L]
