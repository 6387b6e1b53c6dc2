"""Where one call of a variant leaves the GPU idle: each kernel's host launch, GPU start and end.

`qrsub profile` gives a case's idle time (wall minus kernel time) but not where it falls. This
tool takes one eager call apart under torch.profiler with host activity on: for each launch,
the time the host issued it, the time the GPU began it, and the gap since the previous kernel
ended. A gap where the GPU began the kernel within a few microseconds of its launch was the
host's doing (the GPU had run dry); a gap elsewhere is the GPU's own. It also times the host's
enqueue of whole calls against the GPU's elapsed time, as the harness measures it (a CUDA event
recorded before the call, one after):

    python tools/launch_gaps.py variants/champion.yaml --case 3 [--calls 5] [--rows 60] [--loops 20]

With --loops, it also runs the harness's repetition: every input of the case called back to
back between two events, after warm calls on each (graphs captured). It prints the host's time
a call (the loop's Python and launches, no wait) beside the GPU's (the events): where the two
are about equal, the host bounds the case and a faster kernel buys nothing.

A GPU tool: it refuses to run without CUDA.
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from call_phases import add_case_arguments, first_input_of_case, harness_inputs

# A kernel that began within this many microseconds of its host launch found the GPU idle.
HOST_BOUND_US = 8.0


def host_and_gpu_us(calls) -> tuple:
    """(host us, GPU us) of CALLS() run from an idle GPU: the host's time to enqueue it, and the
    elapsed time between a CUDA event recorded before it and one after (as the harness times)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    calls()
    end.record()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6, start.elapsed_time(end) * 1e3


def timed_calls(kernel, x, calls: int) -> list:
    """[(host enqueue us, GPU elapsed us)] of CALLS calls, each from an idle GPU."""
    return [host_and_gpu_us(lambda: kernel(x)) for _ in range(calls)]


def back_to_back(kernel, inputs: list, loops: int) -> list:
    """[(host us a call, GPU us a call)] of LOOPS harness repetitions: each input of the list
    called in turn between two events, the host not waiting inside the loop."""
    for x in inputs:  # each input's first calls: eager, then its graph's capture
        for _ in range(3):
            kernel(x)
    rows = []
    for _ in range(loops):
        host, gpu = host_and_gpu_us(lambda: [kernel(x) for x in inputs])
        rows.append((host / len(inputs), gpu / len(inputs)))
    return rows


def launches(trace: dict) -> list:
    """[(name, host launch ts, GPU start ts, GPU end ts)] of the trace's kernels and copies, by GPU start."""
    host = {}
    for ev in trace.get("traceEvents", []):
        corr = (ev.get("args") or {}).get("correlation")
        if ev.get("cat") in ("cuda_runtime", "cuda_driver") and corr is not None:
            host[corr] = ev["ts"]
    rows = []
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            corr = (ev.get("args") or {}).get("correlation")
            rows.append((ev["name"], host.get(corr), ev["ts"], ev["ts"] + ev.get("dur", 0)))
    return sorted(rows, key=lambda r: r[2])


def gap_table(rows: list, limit: int) -> None:
    """Print each launch's gap since the previous kernel's end, and whose the gap was."""
    if not rows:
        print("no GPU activity recorded")
        return
    t0 = rows[0][2]
    host_gap = gpu_gap = 0.0
    prev_end = None
    print(f"{'kernel':<34} {'launch':>9} {'start':>9} {'dur':>8} {'gap':>7} {'lag':>7}  idle because")
    for i, (name, launch, start, end) in enumerate(rows):
        gap = 0.0 if prev_end is None else max(0.0, start - prev_end)
        lag = None if launch is None else start - launch
        why = ""
        if gap > 1.0:
            host = lag is not None and lag < HOST_BOUND_US
            why = "host late" if host else "GPU"
            host_gap += gap if host else 0.0
            gpu_gap += 0.0 if host else gap
        if i < limit:
            launch_s = "-" if launch is None else f"{launch - t0:9.1f}"
            lag_s = "-" if lag is None else f"{lag:7.1f}"
            print(f"{name[:34]:<34} {launch_s:>9} {start - t0:9.1f} {end - start:8.1f} {gap:7.1f} {lag_s:>7}  {why}")
        prev_end = end if prev_end is None else max(prev_end, end)
    span = rows[-1][3] - t0
    busy = sum(end - start for _, _, start, end in rows)
    first_lag = rows[0][2] - rows[0][1] if rows[0][1] is not None else float("nan")
    print(f"{len(rows)} launches; first kernel began {first_lag:.1f} us after its launch; span {span:.1f} us, "
          f"kernels {busy:.1f} us; gaps: host late {host_gap:.1f} us, GPU {gpu_gap:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_case_arguments(parser)
    parser.add_argument("--calls", type=int, default=5, help="calls timed for host enqueue against GPU time")
    parser.add_argument("--rows", type=int, default=60, help="launches listed (the totals count all)")
    parser.add_argument("--loops", type=int, default=0,
                        help="harness repetitions timed back to back over all the case's inputs (0: none)")
    parser.add_argument("--json", type=Path, help="also write the launches here")
    args = parser.parse_args()
    from torch.profiler import ProfilerActivity, profile
    with tempfile.TemporaryDirectory() as tmp:  # the built file stays while its kernels run
        module, spec, x = first_input_of_case(args, Path(tmp), "_launch_gaps", warm_calls=3)
        for enq, gpu in timed_calls(module.custom_kernel, x, args.calls):
            print(f"call: host enqueue {enq:9.1f} us, GPU events {gpu:9.1f} us")
        if args.loops:
            inputs = harness_inputs(spec)
            for host, gpu in back_to_back(module.custom_kernel, inputs, args.loops):
                print(f"back to back over {len(inputs)} inputs: host {host:8.2f} us a call, GPU {gpu:8.2f} us a call")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.cuda.synchronize()
            module.custom_kernel(x)
            torch.cuda.synchronize()
        trace_path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace_path))
        rows = launches(json.loads(trace_path.read_text()))
    print(f"{args.variant}, case {args.case} ({spec['batch']}x{spec['n']}), one call under the profiler:")
    gap_table(rows, args.rows)
    if args.json:
        args.json.write_text(json.dumps([dict(zip(("name", "launch", "start", "end"), r)) for r in rows]))


if __name__ == "__main__":
    main()
