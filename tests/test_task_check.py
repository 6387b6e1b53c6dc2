"""check_implementation: geqrf passes; corrupted outputs fail with the service's messages."""
import pytest
import torch

from qrsub.harness import Gates, checker_gates
from qrsub.report import parse_pass_message
from qrsub.task import reference
from qrsub.task.reference import check_implementation, generate_input

PASS_KEYS = ["factor_rtol", "orth_rtol", "scaled_factor_residual", "scaled_reconstruction_residual",
             "scaled_triangular_residual", "scaled_orthogonality_residual", "batch", "n"]


@pytest.fixture(scope="module")
def data():
    return generate_input(3, 16, 2, 99, "mixed")


def _geqrf(a):
    h, tau = torch.geqrf(a)
    return h.clone(), tau.clone()


@pytest.mark.parametrize("case", ["dense", "rankdef", "clustered", "band", "rowscale",
                                  "nearcollinear", "nearrank", "upper", "diagonal", "mixed"])
def test_geqrf_passes_every_case(case):
    a = generate_input(4, 24, 2, 5, case)
    ok, message = check_implementation(a, torch.geqrf(a))
    assert ok, message


def test_pass_message_keys_and_values(data):
    ok, message = check_implementation(data, _geqrf(data))
    assert ok
    keys = [part.split("=")[0].strip() for part in message.split(";")]
    assert keys == PASS_KEYS
    values = parse_pass_message(message)
    eps, gates = torch.finfo(torch.float32).eps, checker_gates()
    # Three significant digits, as the service prints them.
    assert values["factor_rtol"] == pytest.approx(gates.factor * 16 * eps, rel=5e-3)
    assert values["orth_rtol"] == pytest.approx(gates.orth * 16 * eps, rel=5e-3)
    assert values["batch"] == 3 and values["n"] == 16
    assert 0 <= values["scaled_factor_residual"] < gates.factor
    assert 0 <= values["scaled_orthogonality_residual"] < gates.orth


def test_the_tools_read_the_gates_the_checker_uses():
    """qrsub.harness reads them from reference.py's source (no torch at a command's start): the same numbers,
    and the service's (docs/harness.md)."""
    assert checker_gates() == Gates(reference.FACTOR_GATE, reference.ORTH_GATE) == Gates(20.0, 100.0)


def test_perturbed_r_fails_naming_the_worst_matrix(data):
    h, tau = _geqrf(data)
    h[1, 0, 5] += 1e-2 * data[1].abs().max()
    ok, message = check_implementation(data, (h, tau))
    assert not ok
    assert message.startswith("R - Q.T @ A is too large: matrix=1, residual=")


def test_small_perturbation_within_gate_passes(data):
    h, tau = _geqrf(data)
    h[0, 0, 5] *= 1 + 1e-7  # well under 20 n eps
    ok, message = check_implementation(data, (h, tau))
    assert ok, message


def test_wrong_tau_fails(data):
    h, tau = _geqrf(data)
    tau[2, 3] *= 1.01
    ok, message = check_implementation(data, (h, tau))
    assert not ok
    assert message.startswith("R - Q.T @ A is too large: matrix=2, ")


def test_zero_tau_fails():
    a = generate_input(2, 8, 0, 3)
    h, tau = _geqrf(a)
    ok, message = check_implementation(a, (h, torch.zeros_like(tau)))
    assert not ok and message.startswith("R - Q.T @ A is too large: ")


def test_non_orthogonal_q_fails_the_orthogonality_gate():
    # Build A so that Q^T A equals R exactly for a non-orthogonal Q (tau scaled by 1.01):
    # the factor gate passes and only the orthogonality gate can catch it.
    h, tau = torch.geqrf(generate_input(2, 8, 0, 17))
    tau = tau * 1.01
    q = torch.linalg.householder_product(h, tau).double()
    a = torch.linalg.solve(q.mT, torch.triu(h).double()).float().contiguous()
    ok, message = check_implementation(a, (h, tau))
    assert not ok
    assert message.startswith("Q is not orthogonal enough: residual=")


@pytest.mark.parametrize("where,value,expected", [
    ("H", float("nan"), "H contains NaN or Inf"),
    ("H", float("inf"), "H contains NaN or Inf"),
    ("tau", float("nan"), "tau contains NaN or Inf"),
])
def test_non_finite_outputs(data, where, value, expected):
    h, tau = _geqrf(data)
    if where == "H":
        h[1, 2, 3] = value
    else:
        tau[1, 3] = value
    assert check_implementation(data, (h, tau)) == (False, expected)


def test_wrong_dtype(data):
    h, tau = _geqrf(data)
    assert check_implementation(data, (h.double(), tau)) == (
        False, "H dtype must be torch.float32, got torch.float64")
    assert check_implementation(data, (h, tau.half())) == (
        False, "tau dtype must be torch.float32, got torch.float16")


def test_wrong_shape(data):
    h, tau = _geqrf(data)
    assert check_implementation(data, (h, tau[:, :-1])) == (
        False, "tau shape must be (3, 16), got (3, 15)")
    assert check_implementation(data, (h[:, :, :8], tau)) == (
        False, "H shape must be (3, 16, 16), got (3, 16, 8)")


def test_wrong_device(data):
    h, tau = _geqrf(data)
    assert check_implementation(data, (h.to("meta"), tau)) == (
        False, "H must be on cpu, got meta")


def test_not_a_tensor(data):
    h, _ = _geqrf(data)
    assert check_implementation(data, (h, [0.0] * 16)) == (False, "tau must be a torch.Tensor")


@pytest.mark.parametrize("output", ["list", "tensor", "triple", "none"])
def test_not_a_pair_tuple(data, output):
    h, tau = _geqrf(data)
    bad = {"list": [h, tau], "tensor": h, "triple": (h, tau, tau), "none": None}[output]
    assert check_implementation(data, bad) == (False, "output must be a tuple `(H, tau)`")


def test_h_checked_before_tau(data):
    h, tau = _geqrf(data)
    h[0, 0, 0] = float("nan")
    ok, message = check_implementation(data, (h, tau[:, :2]))
    assert message == "H contains NaN or Inf"


# ---- the service's exact wording, on outputs whose residuals are known in closed form
#
# With tau = 0 every reflector is the identity, so Q = I exactly and R = triu(H):
# the residuals below are exact binary fractions and eps = 2**-23, so each
# number in a message is known before formatting it with :.3g.

EPS = 2.0 ** -23


def _diagonal_batch(diag, n=4):
    """A = diag(d) I for each d; H = A and tau = 0 is its exact QR (Q = I)."""
    a = torch.stack([d * torch.eye(n) for d in diag]).contiguous()
    return a, a.clone(), torch.zeros(len(diag), n)


def test_factor_message_is_the_services():
    a, h, tau = _diagonal_batch([1.0, 1.0, 1.0])
    h[1, 0, 1] += 0.5  # R - Q^T A = 0.5 at one entry of matrix 1
    expected = (f"R - Q.T @ A is too large: matrix=1, residual=0.5, "
                f"allowed={20 * 4 * EPS:.3g}, scaled={0.5 / (4 * EPS):.3g}")
    assert expected == "R - Q.T @ A is too large: matrix=1, residual=0.5, allowed=9.54e-06, scaled=1.05e+06"
    assert check_implementation(a, (h, tau)) == (False, expected)


def test_factor_message_names_the_worst_matrix_by_scaled_residual():
    # Matrix 2 has the larger residual, but matrix 1 the larger one relative to ||A||_1.
    a, h, tau = _diagonal_batch([1.0, 1.0, 4.0])
    h[1, 0, 2] += 0.25
    h[2, 1, 3] += 0.5
    assert check_implementation(a, (h, tau)) == (
        False, "R - Q.T @ A is too large: matrix=1, residual=0.25, allowed=9.54e-06, scaled=5.24e+05")


def test_orthogonality_message_is_the_services():
    # One reflector v = e1 with tau = 1/2: Q = diag(1/2, 1), so ||Q^T Q - I||_1 = 3/4.
    # A = diag(2, 1) makes Q^T A = I = R exactly: only the orthogonality gate can fail.
    a = torch.diag(torch.tensor([2.0, 1.0]))[None].contiguous()
    h = torch.eye(2)[None].clone()
    tau = torch.tensor([[0.5, 0.0]])
    expected = (f"Q is not orthogonal enough: residual=0.75, allowed={100 * 2 * EPS:.3g}, "
                f"scaled={0.75 / (2 * EPS):.3g}")
    assert expected == "Q is not orthogonal enough: residual=0.75, allowed=2.38e-05, scaled=3.15e+06"
    assert check_implementation(a, (h, tau)) == (False, expected)


def test_factor_gate_comes_before_orthogonality():
    a = torch.diag(torch.tensor([2.0, 1.0]))[None].contiguous()
    h = torch.eye(2)[None].clone()
    h[0, 0, 1] = 1.0  # R now differs from Q^T A too
    ok, message = check_implementation(a, (h, torch.tensor([[0.5, 0.0]])))
    assert not ok and message.startswith("R - Q.T @ A is too large: matrix=0, residual=")


def test_pass_message_is_the_services():
    a, h, tau = _diagonal_batch([1.0, 2.0, 3.0])
    assert check_implementation(a, (h, tau)) == (True, (
        "factor_rtol=9.54e-06; orth_rtol=4.77e-05; scaled_factor_residual=0; "
        "scaled_reconstruction_residual=0; scaled_triangular_residual=0; "
        "scaled_orthogonality_residual=0; batch=3; n=4"))


def test_q_that_overflows_float32():
    # Finite H and tau whose reflector I - tau v v^T overflows: Q[1, 1] = 1 - 1e20 * 1e40.
    a = torch.eye(2)[None].contiguous()
    h = torch.tensor([[[1.0, 0.0], [1e20, 1.0]]])
    tau = torch.tensor([[1e20, 0.0]])
    assert check_implementation(a, (h, tau)) == (
        False, "Q materialized from `(H, tau)` contains NaN or Inf")


def test_non_finite_product_with_the_input():
    # The checker trusts its input; an infinite entry in A shows up first in Q.T @ A.
    a, h, tau = _diagonal_batch([1.0, 1.0])
    a[0, 2, 1] = float("inf")
    assert check_implementation(a, (h, tau)) == (False, "Q.T @ A contains NaN or Inf")


def test_shape_is_checked_before_dtype(data):
    h, tau = _geqrf(data)
    assert check_implementation(data, (h[:, :, :8].double(), tau)) == (
        False, "H shape must be (3, 16, 16), got (3, 16, 8)")


def test_gates_that_are_not_plain_numbers_are_named(tmp_path):
    from qrsub.harness import HarnessError, read_gates

    path = tmp_path / "reference.py"
    path.write_text("FACTOR_GATE = 20.0\nORTH_GATE = 5 * FACTOR_GATE\n")
    with pytest.raises(HarnessError, match=r"reference.py: no top-level number assigned to ORTH_GATE"):
        read_gates(path)
