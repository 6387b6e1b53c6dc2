"""Count a kernel's SASS instructions per loop body for sm_90, on a machine without a GPU.

Triton compiles for sm_90 anywhere; ptxas and cuobjdump come with its package. The
launcher specializes pointers and integer arguments divisible by 16, which decides the
vector width of loads and so the layouts: the compile here assumes every pointer and
integer argument is (true of the benchmark shapes' panels).

    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4
    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4 --grouped   # broadcast shuffle
    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4 --grouped --maxnreg 168
    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4 --grouped --pending

Prints registers, spill stack, and per backward branch (a loop) its instruction count and
the most common opcodes. Used for docs/perf-log.md's instruction counts.
"""
import argparse
import collections
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from qrsub.kernels import panel

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def compile_panel(BL, BB, warps, unroll, grouped, maxnreg=0, pending=False):
    fn = panel.householder_panel_kernel
    constants = dict(BL=BL, BB=BB, WRITE_T=True, WRITE_V=True, FULL=True, BL2=0, UNROLL=unroll,
                     GROUPED=grouped, SHUFFLE=grouped, PENDING=pending, YB=BB, PRE_BM=panel.PENDING_ROWS, PRE_APPLY="fp16x3")
    signature = {a: "constexpr" if a in constants else ("*fp32" if a.endswith("_ptr") else "i32")
                 for a in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a not in constants}
    source = ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs)
    options = {"num_warps": warps, **panel.register_cap(maxnreg)}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def tool(name, cubin, *flags):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([os.path.join(BIN, name), *flags, f.name], capture_output=True, text=True).stdout


def loop_bodies(sass):
    """[(instruction count, Counter of opcodes)] for each backward branch."""
    lines = [(int(a, 16), ins.strip()) for a, ins in re.findall(r"/\*([0-9a-f]+)\*/\s+([^;]*);", sass)]
    bodies = []
    for addr, ins in lines:
        target = re.search(r"BRA\b.*?0x([0-9a-f]+)", ins)
        if target and int(target.group(1), 16) < addr:
            lo = int(target.group(1), 16)
            ops = [i.split()[1 if i.startswith("@") else 0].split(".")[0] for a, i in lines if lo <= a <= addr]
            bodies.append((len(ops), collections.Counter(ops)))
    return bodies


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bl", type=int, default=512)
    parser.add_argument("--bb", type=int, default=32)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--unroll", type=int, default=4)
    parser.add_argument("--grouped", action="store_true", help="the grouped panel with its indexed shuffle")
    parser.add_argument("--maxnreg", type=int, default=0, help="cap registers a thread (panel.max_registers)")
    parser.add_argument("--pending", action="store_true",
                        help="with the previous panel's update applied first (panel.apply_pending, in fp16x3)")
    args = parser.parse_args()
    kernel = compile_panel(args.bl, args.bb, args.warps, args.unroll, args.grouped, args.maxnreg, args.pending)
    cubin = kernel.asm["cubin"]
    print(" ".join(re.findall(r"(REG:\d+|STACK:\d+)", tool("cuobjdump", cubin, "--dump-resource-usage"))))
    for count, ops in loop_bodies(tool("cuobjdump", cubin, "-sass")):
        print(f"loop: {count} instructions; {', '.join(f'{op} {n}' for op, n in ops.most_common(8))}")


if __name__ == "__main__":
    main()
