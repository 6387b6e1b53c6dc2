"""qr_v2 reference: input generation and the checker, faithful to the service.

generate_input must reproduce the service's matrices bit for bit, so the order
of random draws below is part of the contract (docs/harness.md, "Input generation").
"""
import torch

try:  # imported inside the qrsub package (tests, tools)
    from .task import input_t, output_t
except ImportError:  # laid flat in a run directory, as the service does
    from task import input_t, output_t

EPS32 = torch.finfo(torch.float32).eps
FACTOR_GATE = 20.0
ORTH_GATE = 100.0

# Profiles of a "mixed" batch: fixed order and weights (dense is the majority).
MIXED_PROFILES = ("dense", "rankdef", "nearrank", "clustered", "band", "rowscale", "nearcollinear")
MIXED_WEIGHTS = (6, 1, 1, 1, 1, 1, 1)


def ref_kernel(data: input_t) -> output_t:
    return torch.geqrf(data)


# ---------------------------------------------------------------- generation

def _logspace(stop: float, n: int, device) -> torch.Tensor:
    return torch.logspace(0, stop, n, dtype=torch.float32, device=device)


def _scale_by_cond(a: torch.Tensor, cond: int) -> torch.Tensor:
    """Column scales 10^0 .. 10^-cond; cond 0 leaves A as is."""
    if not cond:
        return a
    return a * _logspace(-cond, a.shape[-1], a.device)


def _add_diagonal(a: torch.Tensor, start: float, end: float) -> torch.Tensor:
    n = a.shape[-1]
    a = a.clone()
    a.diagonal(dim1=-2, dim2=-1).add_(torch.linspace(start, end, n, dtype=torch.float32, device=a.device))
    return a


def _case_upper(a, cond, gen):
    return _scale_by_cond(_add_diagonal(torch.triu(a), 1.0, 0.25), cond)


def _case_diagonal(a, cond, gen):
    m, n = a.shape[0], a.shape[-1]
    d = torch.randn((m, n), dtype=torch.float32, device=a.device, generator=gen)
    d = (torch.sign(d).clamp(min=0) * 2 - 1) * _logspace(-max(cond, 2), n, a.device)
    return torch.diag_embed(d)


def _case_rankdef(a, cond, gen):
    rank = max(1, 3 * a.shape[-1] // 4)
    a = a.clone()
    a[:, :, rank:] = 0
    return _scale_by_cond(a, cond)


def _case_nearrank(a, cond, gen):
    m, n = a.shape[0], a.shape[-1]
    rank = max(1, 3 * n // 4)
    tail = n - rank
    if tail > 0:
        noise = torch.randn((m, n, tail), dtype=torch.float32, device=a.device, generator=gen)
        a = a.clone()
        a[:, :, rank:] = a[:, :, :tail] + 1e-5 * noise
    return _scale_by_cond(a, cond)


def _case_clustered(a, cond, gen):
    n = a.shape[-1]
    scales = torch.ones(n, dtype=torch.float32, device=a.device)
    scales[n // 2:] = 4 * EPS32
    if n >= 8:
        scales[max(0, n // 2 - 2):min(n, n // 2 + 2)] = EPS32 ** 0.5
    return a * scales


def _case_band(a, cond, gen):
    n = a.shape[-1]
    bw = max(2, min(32, n // 32))
    idx = torch.arange(n, device=a.device)
    mask = (idx[:, None] - idx[None, :]).abs() <= bw
    a = torch.where(mask, a, torch.zeros((), dtype=a.dtype, device=a.device))
    return _scale_by_cond(_add_diagonal(a, 1.0, 0.5), cond)


def _case_nearcollinear(a, cond, gen):
    m, n = a.shape[0], a.shape[-1]
    base = torch.randn((m, n, 1), dtype=torch.float32, device=a.device, generator=gen)
    noise = torch.randn((m, n, n), dtype=torch.float32, device=a.device, generator=gen)
    return _scale_by_cond(base.expand(m, n, n) + 1e-4 * noise, cond)


def _case_rowscale(a, cond, gen):
    n = a.shape[-1]
    return _logspace(-max(cond, 4), n, a.device).reshape(1, n, 1) * a


CASES = {
    "dense": lambda a, cond, gen: _scale_by_cond(a, cond),
    "upper": _case_upper,
    "diagonal": _case_diagonal,
    "rankdef": _case_rankdef,
    "nearrank": _case_nearrank,
    "clustered": _case_clustered,
    "band": _case_band,
    "nearcollinear": _case_nearcollinear,
    "rowscale": _case_rowscale,
}


def apply_case(a: torch.Tensor, case: str, cond: int, gen: torch.Generator) -> torch.Tensor:
    """Apply CASE to an (m, n, n) batch, drawing extra randoms from GEN in the service's order."""
    if case not in CASES:
        raise ValueError(f"unknown QR test case: {case!r}")
    return CASES[case](a, cond, gen)


def mixed_labels(m: int, gen: torch.Generator, device) -> torch.Tensor:
    """One profile index per matrix; with m >= 2, at least one dense and one other."""
    weights = torch.tensor(MIXED_WEIGHTS, dtype=torch.float32, device=device)
    labels = torch.multinomial(weights, m, replacement=True, generator=gen)
    if m >= 2:
        if not (labels == 0).any():
            labels[torch.randint(0, m, (1,), device=device, generator=gen)] = 0
        elif (labels == 0).all():
            pos = torch.randint(0, m, (1,), device=device, generator=gen)
            labels[pos] = torch.randint(1, len(MIXED_PROFILES), (1,), device=device, generator=gen)
    return labels


def _apply_mixed(a: torch.Tensor, cond: int, gen: torch.Generator) -> torch.Tensor:
    labels = mixed_labels(a.shape[0], gen, a.device)
    for k, profile in enumerate(MIXED_PROFILES):
        mask = labels == k
        if mask.any():
            a[mask] = apply_case(a[mask], profile, cond, gen)
    return a


def generate_input(batch: int, n: int, cond: int, seed: int, case: str = "dense") -> input_t:
    """The service's input for one case: a contiguous batch x n x n float32 tensor."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    case = case.lower()
    a = torch.randn((batch, n, n), dtype=torch.float32, device=device, generator=gen)
    if case == "mixed":
        a = _apply_mixed(a, cond, gen)
    else:
        a = apply_case(a, case, cond, gen)
    return a.contiguous()


# ------------------------------------------------------------------ checking
#
# Every message below is the service's text, character for character, so that
# a failure seen on the leaderboard can be found here with grep (docs/harness.md,
# "The checker"). Numbers in messages are formatted with `:.3g`.

def _check_tensor(name: str, t, shape: tuple, device) -> str | None:
    """The first contract violation of one output tensor, or None."""
    if not isinstance(t, torch.Tensor):
        return f"{name} must be a torch.Tensor"
    if tuple(t.shape) != shape:
        return f"{name} shape must be {shape}, got {tuple(t.shape)}"
    if t.dtype != torch.float32:
        return f"{name} dtype must be torch.float32, got {t.dtype}"
    if t.device != device:
        return f"{name} must be on {device}, got {t.device}"
    if not torch.isfinite(t).all():
        return f"{name} contains NaN or Inf"
    return None


def _l1(x: torch.Tensor) -> torch.Tensor:
    """Per-matrix L1 operator norm (max column sum) in float64."""
    return torch.linalg.matrix_norm(x.double(), ord=1)


def _finite(x: torch.Tensor) -> bool:
    return bool(torch.isfinite(x).all())


def _max(x: torch.Tensor) -> float:
    return float(x.max()) if x.numel() else 0.0


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    """The service's verdict on OUTPUT for input DATA: (passed, message).

    Gates, in the service's order: the output's form (tuple, then H, then
    tau), finite Q and R, the factor residual ||R - Q^T A||_1 <= 20 n eps ||A||_1
    per matrix, then the orthogonality residual max ||Q^T Q - I||_1 <= 100 n eps.
    """
    if not isinstance(output, tuple) or len(output) != 2:
        return False, "output must be a tuple `(H, tau)`"
    batch, n = data.shape[0], data.shape[-1]
    H, tau = output
    for name, t, shape in (("H", H, (batch, n, n)), ("tau", tau, (batch, n))):
        problem = _check_tensor(name, t, shape, data.device)
        if problem:
            return False, problem

    Q = torch.linalg.householder_product(H, tau)
    R = torch.triu(H)
    if not _finite(Q):
        return False, "Q materialized from `(H, tau)` contains NaN or Inf"
    if not _finite(R):
        return False, "R extracted from `triu(H)` contains NaN or Inf"

    nn = max(n, 1)
    factor_rtol = FACTOR_GATE * nn * EPS32
    orth_rtol = ORTH_GATE * nn * EPS32
    A, Qd, Rd = data.double(), Q.double(), R.double()

    # Factor gate: per matrix, against that matrix's own ||A||_1.
    P = Qd.mT @ A
    if not _finite(P):
        return False, "Q.T @ A contains NaN or Inf"
    factor_res = _l1(Rd - P)
    if not _finite(factor_res):
        return False, "R - Q.T @ A residual produced NaN or Inf"
    a_norm = _l1(A)
    # A zero matrix has nothing to scale by; avoid 0/0 in the scaled residuals.
    unit = EPS32 * nn * a_norm.clamp_min(torch.finfo(torch.float64).tiny)
    scaled_factor = factor_res / unit
    allowed = factor_rtol * a_norm
    if (factor_res > allowed).any():
        worst = int(torch.argmax(scaled_factor))
        return False, (
            f"R - Q.T @ A is too large: matrix={worst}, "
            f"residual={float(factor_res[worst]):.3g}, allowed={float(allowed[worst]):.3g}, "
            f"scaled={float(scaled_factor[worst]):.3g}")

    # Orthogonality gate: the worst matrix against orth_rtol * ||I||_1 = orth_rtol.
    QtQ = Qd.mT @ Qd
    if not _finite(QtQ):
        return False, "Q.T @ Q contains NaN or Inf"
    orth_res = _l1(QtQ - torch.eye(n, dtype=torch.float64, device=data.device))
    if not _finite(orth_res):
        return False, "Q.T @ Q residual produced NaN or Inf"
    worst_orth = _max(orth_res)
    scaled_orth = worst_orth / (EPS32 * nn)
    if worst_orth > orth_rtol:
        return False, (
            f"Q is not orthogonal enough: residual={worst_orth:.3g}, allowed={orth_rtol:.3g}, "
            f"scaled={scaled_orth:.3g}")

    QR = Qd @ Rd
    if not _finite(QR):
        return False, "Q @ R contains NaN or Inf"
    diagnostics = {
        "factor_rtol": factor_rtol,
        "orth_rtol": orth_rtol,
        "scaled_factor_residual": _max(scaled_factor),
        "scaled_reconstruction_residual": _max(_l1(QR - A) / unit),
        "scaled_triangular_residual": _max(_l1(torch.tril(P, diagonal=-1)) / unit),
        "scaled_orthogonality_residual": scaled_orth,
    }
    message = "; ".join(f"{k}={v:.3g}" for k, v in diagnostics.items())
    return True, f"{message}; batch={batch}; n={n}"
