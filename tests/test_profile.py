"""`qrsub profile` on the CPU: grouping, per-call numbers, the trace reader, the table of our
kernel names against kernels/, the command with the GPU capture replaced, refusal, dry run."""
import ast
import functools
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from qrsub import profile as prof
from qrsub.bench import timer
from qrsub.cli.profile import profile as profile_cli

ROOT = Path(__file__).resolve().parent.parent
STARTER = "task/submission.py"
FIXTURES = Path(__file__).parent / "fixtures" / "harness"

TF32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SIMT_GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
COPY_KERNEL = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
               "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const>(int)")
UNKNOWN = "void at::native::triu_tril_kernel<float, int, true, 4, true>(at::cuda::detail::TensorInfo<float, int>)"

EXPECTED_GROUPS = {
    "householder_panel_kernel": "panel",
    "warp_qr_kernel": "warp QR",
    "coop_panel_kernel": "coop panel",
    "tsqr_combine_kernel": "TSQR panel",
    "trailing_strip_kernel": "strip",
    "project_split_kernel": "strip",
    "apply_split_kernel": "strip",
    "block_t_kernel": "block T",
    "gram_kernel": "Gram",
    TF32_GEMM: "GEMM tf32",
    "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4": "GEMM tf32",
    SIMT_GEMM: "GEMM fp32 SIMT",
    "ampere_sgemm_32x32_sliced1x4_nn": "GEMM fp32 SIMT",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>": "GEMM fp32 SIMT",
    "nvjet_tst_128x64_64x6_1x1_v_bz_coopA_NNN": "GEMM",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float>": "GEMM",
    "Memcpy DtoD (Device -> Device)": "copies",
    "Memset (Device)": "copies",
    COPY_KERNEL: "copies",
    FILL: "elementwise",
    "void at::native::unrolled_elementwise_kernel<at::native::mul_kernel_cuda>": "elementwise",
    UNKNOWN: "other",
    "householder_panel_kernel_v2": "other",    # a new kernel is not taken for an old one
}


@pytest.mark.parametrize("name, group", EXPECTED_GROUPS.items(), ids=lambda x: str(x)[:40])
def test_group_of(name, group):
    assert prof.group_of(name) == group


def test_a_group_matches_by_names_or_by_a_pattern_never_neither():
    with pytest.raises(ValueError, match="by name or a pattern"):
        prof.KernelGroup("empty", "matches everything")
    with pytest.raises(ValueError, match="by name or a pattern"):
        prof.KernelGroup("both", "ambiguous", kernels=("k",), pattern="k")


def test_every_launched_triton_kernel_has_its_group_and_the_table_names_no_other():
    """The table's Triton names are read from kernels/: each @triton.jit function launched as
    `name[grid](...)` is named in exactly one group, and the table names nothing else."""
    jit, launched = set(), set()
    for path in (ROOT / "kernels").glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
                jit.add(node.name)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                    and isinstance(node.func.value, ast.Name):
                launched.add(node.func.value.id)
    ours = [k for g in prof.GROUPS for k in g.kernels]
    assert len(ours) == len(set(ours)), "a kernel named in two groups"
    assert jit & launched, "found no launched Triton kernel in kernels/: the scan is broken"
    missing = (jit & launched) - set(ours)
    assert not missing, f"add these launched kernels to qrsub/profile.py GROUPS: {sorted(missing)}"
    stale = set(ours) - (jit & launched)
    assert not stale, f"GROUPS names kernels that kernels/ does not launch: {sorted(stale)}"


def _trace(events):
    """A torch.profiler chrome trace: the GPU EVENTS (cat, name, ts, dur) among host events."""
    host = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.0, "dur": 5.0},
            {"ph": "X", "cat": "cpu_op", "name": "aten::bmm", "ts": 1.0, "dur": 9.0},
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
            {"ph": "s", "cat": "ac2g", "id": 1, "ts": 2.0}]
    gpu = [{"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur}
           for cat, name, ts, dur in events]
    return {"traceEvents": host + gpu}


def _three_calls():
    """Three calls, each: a panel (10 µs), a tf32 GEMM (6) overlapping a SIMT GEMM (4), a fill (2),
    a memcpy (1) and an unknown kernel (1) -> 24 µs of kernels, 20 µs busy, 6 launches."""
    events = []
    for call in range(3):
        t = 100.0 * call
        events += [("kernel", "householder_panel_kernel", t, 10.0),
                   ("kernel", TF32_GEMM, t + 10, 6.0),
                   ("kernel", SIMT_GEMM, t + 12, 4.0),      # inside the tf32 GEMM: counts once in busy
                   ("kernel", FILL, t + 16, 2.0),
                   ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", t + 18, 1.0),
                   ("kernel", UNKNOWN, t + 19, 1.0)]
    return prof.device_events(_trace(events))


def test_settle_calls_every_profiled_input_twice_before_the_timed_calls():
    """graph.mode inplace: a tensor's first call runs eagerly and its second captures; the
    profile times the third."""
    seen = []
    xs = [torch.zeros(1), torch.ones(1)]
    prof.settle(lambda x: seen.append(id(x)), xs)
    assert seen == [id(xs[0]), id(xs[1])] * 2


def test_device_events_keeps_only_gpu_activity():
    events = _three_calls()
    assert len(events) == 18
    assert {e.kind for e in events} == {"kernel", "memcpy"}
    assert events[4] == prof.DeviceEvent("Memcpy DtoD (Device -> Device)", "memcpy", 18.0, 1.0)
    trace = _trace([("gpu_memset", "Memset (Device)", 3.0, 0.5)])
    assert prof.device_events(trace) == [prof.DeviceEvent("Memset (Device)", "memset", 3.0, 0.5)]


def test_busy_time_counts_overlap_once_and_gaps_not_at_all():
    ev = lambda s, d: prof.DeviceEvent("k", "kernel", s, d)
    assert prof.busy_time([ev(0, 10), ev(5, 10), ev(20, 5), ev(21, 1)]) == 20.0
    assert prof.busy_time([]) == 0.0


def test_summarize_divides_by_the_calls_and_shares_sum_to_100():
    case = prof.summarize_case(_three_calls(), 3, wall_us=30.0, profiled_wall_us=35.0)
    assert case["calls"] == 3 and case["launches"] == 6
    assert case["kernel_us"] == pytest.approx(24.0) and case["busy_us"] == pytest.approx(20.0)
    assert case["idle_us"] == pytest.approx(10.0) and case["profiled_wall_us"] == 35.0
    groups = {g["group"]: g for g in case["groups"]}
    assert list(groups) == ["panel", "GEMM tf32", "GEMM fp32 SIMT", "elementwise", "copies", "other"]
    assert groups["panel"]["us"] == pytest.approx(10.0) and groups["panel"]["launches"] == 1
    assert groups["panel"]["share_pct"] == pytest.approx(100 * 10 / 24)
    assert sum(g["share_pct"] for g in case["groups"]) == pytest.approx(100.0)
    assert groups["other"]["kernels"] == [UNKNOWN]
    rows = {r["name"]: r for r in case["kernels"]}
    assert rows[UNKNOWN] == {"name": UNKNOWN, "group": "other", "kind": "kernel", "us": pytest.approx(1.0),
                             "launches": 1.0, "us_per_launch": pytest.approx(1.0)}
    assert rows["Memcpy DtoD (Device -> Device)"]["kind"] == "memcpy"
    assert sum(r["us"] for r in case["kernels"]) == pytest.approx(case["kernel_us"])


def test_summarize_keeps_uneven_calls_fractional_and_refuses_zero_calls():
    events = _three_calls()[:7]       # the first call whole, one panel of the second
    case = prof.summarize_case(events, 2, 20.0, 20.0)
    assert case["launches"] == 3.5 and {g["group"]: g for g in case["groups"]}["panel"]["launches"] == 1.0
    assert prof.fmt_count(3.5) == "3.5" and prof.fmt_count(426.0) == "426"
    with pytest.raises(ValueError, match="at least 1"):
        prof.summarize_case(events, 0, 1.0, 1.0)


def test_summary_line_names_every_number():
    case = {"index": 4, "label": "60x1024 dense c2",
            **prof.summarize_case(_three_calls(), 3, wall_us=4717.0, profiled_wall_us=4800.0)}
    line = prof.summary_line(case)
    for needle in ("[4] 60x1024 dense c2, 3 call(s)", "kernels 24.0 µs/call in 6 launches", "GPU busy 20.0 µs",
                   "wall 4,717 µs/call (4,800 under the profiler)", "idle 4,697 µs (99.6% of wall"):
        assert needle in line, needle


# ------------------------------------------------------------------ the command

def _fake_capture(empty=False):
    """capture_calls without a GPU: the events of `_three_calls` for up to three CALLS (none if EMPTY)."""
    def capture(kernel, inputs, calls):
        assert callable(kernel) and len(inputs) >= 1
        events = [] if empty else [e for e in _three_calls() if e.start_us < 100 * calls]
        return prof.Capture(events, wall_us=30.0, profiled_wall_us=35.0)
    return capture


@pytest.fixture
def cpu_gpu(monkeypatch):
    """The command's GPU parts on the CPU: no GPU check, the harness timer on wall-clock time."""
    monkeypatch.setattr(timer, "require_gpu", lambda command="qrsub bench": None)
    monkeypatch.setattr(timer, "HarnessTimer", functools.partial(timer.HarnessTimer, allow_cpu=True))
    monkeypatch.setattr(prof, "capture_calls", _fake_capture())


def test_cli_refuses_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(profile_cli, ["variants/champion.yaml", "--cases", "0"])
    assert result.exit_code == 1
    assert "qrsub profile needs a CUDA GPU" in result.output and "--dry-run" in result.output


def test_cli_dry_run_shows_the_plan_anywhere(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(profile_cli, ["variants/champion.yaml", "--dry-run", "--cases", "n=1024",
                                              "--calls", "5"])
    assert result.exit_code == 0, result.output
    for needle in ("variants/champion.yaml  (variant, built first)", "cases (3)", "[ 4] 60x1024 dense c2",
                   "[ 8] 60x1024 mixed c2", "[11] 60x1024 nearrank c0", "5 calls timed with CUDA events",
                   "householder_panel_kernel", "GEMM fp32 SIMT", "other"):
        assert needle in result.output, needle
    assert "[ 3]" not in result.output


def test_cli_case_selection_errors_name_the_option():
    result = CliRunner().invoke(profile_cli, [STARTER, "--dry-run", "--cases", "99"])
    assert result.exit_code == 2 and "out of range" in result.output
    result = CliRunner().invoke(profile_cli, [STARTER, "--dry-run", "--cases", "n=7"])
    assert result.exit_code == 2 and "selects no case" in result.output


def test_cli_dry_run_refuses_a_variant_that_does_not_build():
    result = CliRunner().invoke(profile_cli, ["variants/no-such-variant.yaml", "--dry-run", "--cases", "0"])
    assert result.exit_code == 1 and "no-such-variant" in result.output


def test_cli_profiles_each_selected_case_table_and_json(cpu_gpu, tmp_path):
    out = tmp_path / "profile.json"
    # case 0 only: the harness's check of the larger cases takes minutes on the CPU
    result = CliRunner(env={"COLUMNS": "200"}).invoke(profile_cli, [STARTER, "--cases", "case=dense,n=32",
                                                                    "--calls", "3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    for needle in ("[0] 20x32 dense c1: GPU time per call, by kernel group", "GEMM tf32", "all kernels",
                   f"other: {UNKNOWN}", "kernels 24.0 µs/call in 6 launches", "idle 10.0 µs"):
        assert needle in result.output, needle
    data = json.loads(out.read_text())
    assert set(data) == {"command", "source", "variant", "device", "calls", "passed", "fallbacks", "groups",
                         "cases"}
    assert data["passed"] is True and data["fallbacks"] == [] and data["calls"] == 3
    assert [c["index"] for c in data["cases"]] == [0]
    case = data["cases"][0]
    assert case["status"] == "ok" and case["spec"]["batch"] == 20 and case["label"] == "20x32 dense c1"
    assert {"wall_us", "profiled_wall_us", "kernel_us", "busy_us", "idle_us", "launches", "groups",
            "kernels"} <= set(case)
    assert set(case["groups"][0]) == {"group", "us", "share_pct", "launches", "kernels"}
    assert set(case["kernels"][0]) == {"name", "group", "kind", "us", "launches", "us_per_launch"}
    assert [g["group"] for g in data["groups"]][-1] == "other"


def test_cli_a_failing_case_is_reported_not_profiled(cpu_gpu, tmp_path):
    bad = tmp_path / "wrong_shape.py"
    bad.write_text("import torch\ndef custom_kernel(data):\n    H, tau = torch.geqrf(data)\n    return H, tau[:, :-1]\n")
    out = tmp_path / "profile.json"
    result = CliRunner(env={"COLUMNS": "200"}).invoke(profile_cli, [str(bad), "--cases", "0", "--json", str(out)])
    assert result.exit_code == 1, result.output
    assert "FAIL [0] 20x32 dense c1" in result.output and "tau shape must be (20, 32)" in result.output
    assert "1 of 1 case(s) not profiled" in result.output
    data = json.loads(out.read_text())
    assert data["passed"] is False and data["cases"][0]["status"] == "fail" and "groups" not in data["cases"][0]


def test_cli_a_route_that_fell_back_fails_loudly(cpu_gpu):
    result = CliRunner(env={"COLUMNS": "250"}).invoke(profile_cli, [str(FIXTURES / "falls_back.py"), "--cases", "0,1"])
    assert result.exit_code == 1, result.output
    assert "FALLBACK route 'big' fell back to torch.geqrf: OutOfResources" in result.output
    assert "change the route's knobs in the variant" in result.output
    assert "2 of 2 case(s) not profiled" in result.output


def test_a_profile_without_gpu_activity_is_an_error_not_an_empty_table(cpu_gpu, monkeypatch):
    monkeypatch.setattr(prof, "capture_calls", _fake_capture(empty=True))
    harness_timer = timer.HarnessTimer([STARTER], tag="noev", allow_cpu=True)
    case = prof.profile_case(harness_timer, 0, {"batch": 20, "n": 32, "cond": 1, "seed": 43214}, 3)
    assert case["status"] == "fail" and "recorded no GPU activity in 3 call(s)" in case["error"]
    assert harness_timer.inputs == {}     # the case's inputs are freed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_profile_the_champion_on_the_gpu(tmp_path):
    out = tmp_path / "profile.json"
    result = CliRunner().invoke(profile_cli, ["variants/champion.yaml", "--cases", "0", "--json", str(out)])
    assert result.exit_code == 0, result.output
    case = json.loads(out.read_text())["cases"][0]
    assert case["status"] == "ok" and case["launches"] > 0 and case["wall_us"] > 0
    groups = {g["group"]: g for g in case["groups"]}
    assert "panel" in groups and groups["panel"]["launches"] >= 1
    # The union of intervals from the trace's absolute timestamps (about 1e12 ns) rounds at
    # about 1e-4 µs: equal to the kernel sum when nothing overlaps, never more beyond that.
    assert 0 < case["busy_us"] <= case["kernel_us"] + 1e-3
