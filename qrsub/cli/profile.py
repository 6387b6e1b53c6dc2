"""`qrsub profile`: where one candidate's GPU time goes, per benchmark case, by kernel group."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click


@click.command("profile")
@click.argument("candidate", metavar="CANDIDATE")
@click.option("--cases", "selector", metavar="SEL",
              help="Benchmark cases to profile (as in `qrsub bench`): indices and ranges (0,3,5-7) and/or "
                   "filters (n=512, case=mixed). Default: all 12.")
@click.option("--calls", type=click.IntRange(min=1), default=3, show_default=True,
              help="Calls per case to time and to profile; every number is divided by it.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write every number, the grouping rules and the raw rows per kernel name to FILE.")
@click.option("--dry-run", is_flag=True, help="Print the plan (candidate, cases, calls, kernel groups) and exit; "
                                              "works without a GPU.")
def profile(candidate, selector, calls, json_path, dry_run):
    """Show where CANDIDATE's GPU time goes on each benchmark case.

    CANDIDATE is a submission file (.py) or a variant (.yaml or a bare name,
    built first). Per case of task/task.yml's benchmarks: the harness's own
    inputs, custom_kernel once on each (compile, graph capture) and the
    harness's check; a failing case is reported, not profiled. Then --calls
    calls timed with CUDA events (the wall time) and as many under
    torch.profiler (CUDA activity).

    Reported per case, all per call: the GPU kernel time by kernel group
    (panel, strip, cuBLAS GEMMs in tf32 or fp32 SIMT, elementwise, copies,
    ...), each group's share and launches (kernels, memcpys, memsets); then
    kernel time, launches, GPU busy time, wall time and the idle gap between
    them (launch overhead, graph replay). Kernels no group claims are listed
    under `other` by name.

    A route that fell back to torch.geqrf is not profiled (its kernels would
    be geqrf's): the command says so and exits 1, as it does when any case
    fails.

    \b
    Examples:
      qrsub profile variants/champion.yaml
      qrsub profile variants/champion.yaml --cases n=1024 --json profile.json
      qrsub profile variants/champion.yaml --cases 0,3-5 --calls 10
      qrsub profile task/submission.py --cases case=mixed     # the starter: torch.geqrf
      qrsub profile variants/geqrf.yaml --dry-run              # the plan, no GPU needed
    """
    from qrsub import profile as prof
    from qrsub.cli import benchmark_cases_or_fail, build_or_fail

    indices, specs = benchmark_cases_or_fail(selector)
    if dry_run:
        for line in prof.describe_plan(Path(candidate), indices, specs, calls):
            click.echo(line)
        build_or_fail(candidate)   # the candidate resolves and builds; nothing is written
        return
    from qrsub.bench import timer as bench_timer

    try:
        bench_timer.require_gpu("qrsub profile")
    except bench_timer.NoGPUError as exc:
        raise click.ClickException(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="qrsub-profile-") as tmp:
        built = build_or_fail(candidate, Path(tmp) / "submission.py")
        result = _run(built, indices, specs, calls)
    if json_path:
        from qrsub.files import write_atomic

        write_atomic(json_path, json.dumps(result, indent=1))
        click.echo(f"wrote {json_path}")
    if not result["passed"]:
        raise SystemExit(1)


def _run(built, indices, specs, calls) -> dict:
    """Profile every case in turn, printing each as it comes; the JSON-ready result."""
    from rich.markup import escape

    from qrsub import fallbacks
    from qrsub import profile as prof
    from qrsub.bench import timer as bench_timer
    from qrsub.console import make_console

    console = make_console()
    console.print(f"[bold]profile[/bold] {escape(str(built.source))} on {escape(bench_timer.device_name())}, "
                  f"{calls} call(s) per case")
    harness_timer = bench_timer.HarnessTimer([built.path], tag="profile")
    cases = []
    for index, spec in zip(indices, specs):
        case = prof.profile_case(harness_timer, index, spec, calls)
        render_case(case, console)
        cases.append(case)
    fell = fallbacks.in_module(harness_timer.modules[0]) if harness_timer.modules[0] is not None else []
    failed = [c for c in cases if c["status"] != "ok"]
    for f in fell:
        console.print(f"[bold red]FALLBACK[/bold red] {escape(str(f))}\n  that route runs torch.geqrf, not "
                      "its kernels, so its cases were not profiled: change the route's knobs in the variant "
                      "until its kernels compile and fit (`qrsub test --local` names it too)")
    if failed:
        console.print(f"[bold red]FAIL[/bold red] {len(failed)} of {len(cases)} case(s) not profiled: "
                      + ", ".join(f"[{c['index']}] {escape(c['label'])}" for c in failed))
    return {
        "command": "qrsub profile",
        "source": str(built.source),
        "variant": built.variant_name,
        "device": bench_timer.device_name(),
        "calls": calls,
        "passed": not failed and not fell,
        "fallbacks": [{"route": f.route, "reason": f.reason} for f in fell],
        "groups": prof.groups_table(),
        "cases": cases,
    }


def render_case(case: dict, console) -> None:
    """A case's table (group, µs/call, share, launches/call, µs/launch), the raw names under
    `other`, and its summary line; a failed case in one red line."""
    from rich.markup import escape
    from rich.table import Table

    from qrsub import profile as prof

    if case["status"] != "ok":
        console.print(f"[bold red]FAIL[/bold red] [{case['index']}] {escape(case['label'])}: {escape(case['error'])}")
        return
    table = Table(title=f"[{case['index']}] {case['label']}: GPU time per call, by kernel group")
    for col in ("group", "µs/call", "share", "launches/call", "µs/launch"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for g in case["groups"]:
        per_launch = g["us"] / g["launches"] if g["launches"] else 0.0
        table.add_row(g["group"], prof.fmt_us(g["us"]), f"{g['share_pct']:.1f}%", prof.fmt_count(g["launches"]),
                      prof.fmt_us(per_launch))
    table.add_section()
    table.add_row("all kernels", prof.fmt_us(case["kernel_us"]), "100.0%", prof.fmt_count(case["launches"]), "")
    console.print(table)
    for row in case["kernels"]:
        if row["group"] == prof.OTHER:
            console.print(f"  other: {escape(row['name'])}  ({prof.fmt_us(row['us'])} µs/call, "
                          f"{prof.fmt_count(row['launches'])} launches/call)")
    console.print(escape(prof.summary_line(case)))
