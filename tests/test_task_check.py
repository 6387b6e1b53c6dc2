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
    assert values["factor_rtol"] == pytest.approx(gates.factor * 16 * eps, rel=1e-5)
    assert values["orth_rtol"] == pytest.approx(gates.orth * 16 * eps, rel=1e-5)
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
    assert message.startswith("factor residual too large: matrix 1 ")
    assert "gate 20" in message


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
    assert "matrix 2" in message


def test_zero_tau_fails():
    a = generate_input(2, 8, 0, 3)
    h, tau = _geqrf(a)
    ok, message = check_implementation(a, (h, torch.zeros_like(tau)))
    assert not ok and message.startswith("factor residual too large")


def test_non_orthogonal_q_fails_the_orthogonality_gate():
    # Build A so that Q^T A equals R exactly for a non-orthogonal Q (tau scaled by 1.01):
    # the factor gate passes and only the orthogonality gate can catch it.
    h, tau = torch.geqrf(generate_input(2, 8, 0, 17))
    tau = tau * 1.01
    q = torch.linalg.householder_product(h, tau).double()
    a = torch.linalg.solve(q.mT, torch.triu(h).double()).float().contiguous()
    ok, message = check_implementation(a, (h, tau))
    assert not ok
    assert message.startswith("Q is not orthogonal: matrix ")
    assert "gate 100" in message


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


def test_gates_that_are_not_plain_numbers_are_named(tmp_path):
    from qrsub.harness import HarnessError, read_gates

    path = tmp_path / "reference.py"
    path.write_text("FACTOR_GATE = 20.0\nORTH_GATE = 5 * FACTOR_GATE\n")
    with pytest.raises(HarnessError, match=r"reference.py: no top-level number assigned to ORTH_GATE"):
        read_gates(path)
