"""Count a kernel's SASS instructions per loop body for sm_90, on a machine without a GPU.

Triton compiles for sm_90 (and, with --arch 100, for the B200's sm_100) anywhere; ptxas and
cuobjdump come with its package. The
launcher specializes pointers and integer arguments divisible by 16, which decides the
vector width of loads and so the layouts: the compile here assumes every pointer and
integer argument is (true of the benchmark shapes' panels and strips).

The panel (householder_panel_kernel), by its knobs:

    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4
    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4 --grouped   # broadcast shuffle
    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4 --grouped --maxnreg 168
    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4 --grouped --pending
    python tools/sass_loop.py --bl 512 --bb 32 --warps 4 --unroll 4 --grouped --v-parts  # V packed
    python tools/sass_loop.py --bl 256 --bl2 128 --bb 32 --warps 4 --unroll 4 --grouped  # 384 rows, 2 tiles

Any other kernel of kernels/, by module.name and its compile-time constants:

    python tools/sass_loop.py --kernel strip.fused_strip_kernel --warps 4 --const BB=32 --const BM=16 \\
        --const BN=128 --const NUM_STAGES=4 --const PROJECT=fp16x3 --const TCONTRACT=fp32 \\
        --const APPLY=fp16x3 --const APPLY_PREV=True
    python tools/sass_loop.py --kernel strip.fused_strip_kernel ... --const V_PARTS=True \\
        --int-ptr va_ptr --int-ptr vb_ptr        # strip.v_parts: V's fp16x3 parts packed in int32

The warp driver's QR (kernels/warp.py), and the layouts its load and its shuffles get:

    python tools/sass_loop.py --kernel warp.warp_qr_kernel --warps 1 --const NB=32 --const SHUFFLE=True
    python tools/sass_loop.py --kernel warp.warp_qr_kernel --warps 1 --const NB=32 --const SHUFFLE=True \\
        --load-layouts        # or --asm-layouts

Registers and spills depend on Triton's version: the H200 runs Triton 3.6, and the CPU
machine's newer Triton can differ a lot (the fused strip's projection-only pass: 131
registers and no shared-memory pipeline with 3.9, 253 registers with 3.6, as the device's
Nsight Compute reported). For the device's figures, run this under a Triton 3.6 without torch:

    python3 -m venv /tmp/triton36 && /tmp/triton36/bin/pip install triton==3.6.0
    /tmp/triton36/bin/python tools/sass_loop.py --grouped

(it then imports the checkout's kernels/ with a stand-in for torch, which no kernel needs to
compile). Prints registers, spill stack, the kernel's instruction count, and per backward
branch (a loop) its instruction count and the most common opcodes. Used for
docs/perf-log.md's instruction counts.
"""
import argparse
import ast
import collections
import importlib
import os
import re
import subprocess
import sys
import tempfile
import types

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kernel_module(name: str):
    """kernels/<name>.py: installed as qrsub.kernels, or else the checkout's own kernels/ package
    with a stand-in for torch (compiling needs Triton only)."""
    try:
        return importlib.import_module(f"qrsub.kernels.{name}")
    except ImportError:
        try:
            import torch  # noqa: F401
        except ImportError:
            stand_in = types.ModuleType("torch")
            stand_in.Tensor = object
            sys.modules["torch"] = stand_in
        sys.path.insert(0, ROOT)
        return importlib.import_module(f"kernels.{name}")


def argument_type(name: str, int_ptrs=()) -> str:
    """A kernel argument's type by its name: the relocation table (relocate.py) holds int64
    offsets, the pointers named in int_ptrs point at int32 (V's packed parts: strip.v_parts), any
    other *_ptr at fp32, the rest are ints."""
    if name == "table_ptr":
        return "*i64"
    if name in int_ptrs:
        return "*i32"
    return "*fp32" if name.endswith("_ptr") else "i32"


def compile_kernel(fn, constants: dict, warps: int, maxnreg: int = 0, int_ptrs=(), arch: int = 90):
    """fn compiled for sm_ARCH (90: Hopper, the lent H200; 100: Blackwell, the leaderboard's B200): every argument not in constants a pointer (named *_ptr) or an int,
    all divisible by 16 but those fn does not specialize on alignment (as the launcher). A
    relocation slot (*_SLOT) not given is NO_SLOT, PDL, V_PARTS, LATE_WAIT, TAIL, APPROX and
    RESET are off and T_BUILD is loop unless given, and the cooperative panel's NSLOTS is BB + RESET."""
    defaults = {a: -1 for a in fn.arg_names if a.endswith("_SLOT")}
    defaults.update({a: False for a in ("PDL", "V_PARTS", "LATE_WAIT", "TAIL", "APPROX", "RESET")
                     if a in fn.arg_names})
    if "T_BUILD" in fn.arg_names:
        defaults["T_BUILD"] = "loop"
    if "NSLOTS" in fn.arg_names and "BB" in constants:
        defaults["NSLOTS"] = constants["BB"] + int(bool(constants.get("RESET", False)))
    constants = {**defaults, **constants}
    signature = {a: "constexpr" if a in constants else argument_type(a, int_ptrs) for a in fn.arg_names}
    unaligned = {p.name for p in fn.params if p.do_not_specialize or p.do_not_specialize_on_alignment}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names)
             if a not in constants and a not in unaligned}
    try:
        source = ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs)
    except TypeError:  # Triton 3.6 names them constants
        source = ASTSource(fn=fn, signature=signature, constants=constants, attrs=attrs)
    options = {"num_warps": warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def compile_panel(BL, BB, warps, unroll, grouped, maxnreg=0, pending=False, split=False, v_parts=False,
                  approx=False, arch=90, t_build="loop", BL2=0):
    panel = kernel_module("panel")
    constants = dict(BL=BL, BB=BB, WRITE_T=True, WRITE_V=True, FULL=True, BL2=BL2, UNROLL=unroll,
                     GROUPED=grouped, SHUFFLE=grouped, PENDING=pending, YB=BB, PRE_BM=panel.PENDING_ROWS,
                     PRE_APPLY="fp16x3", SPLIT=split, V_PARTS=v_parts, APPROX=approx, T_BUILD=t_build)
    return compile_kernel(panel.householder_panel_kernel, constants, warps, maxnreg,
                          ("v_ptr",) if v_parts else (), arch)


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


def named_layouts(ttgir: str, op_layout: str) -> list:
    """The blocked layout (sizePerThread, threadsPerWarp, ...) of each op that the regex OP_LAYOUT
    finds in the TTGIR, in program order (its group: the layout's name, or a slice of a named
    layout as `ttg.slice<{dim = D, parent = #NAME}>`, given as "slice D of" the parent's)."""
    layouts = dict(re.findall(r"^#(\w+) = #ttg\.blocked<\{([^}]*)\}>", ttgir, re.M))

    def resolve(name: str) -> str:
        sliced = re.fullmatch(r"ttg\.slice<\{dim = (\d+), parent = #(\w+)\}>", name)
        if sliced:
            return f"slice {sliced.group(1)} of {layouts.get(sliced.group(2), sliced.group(2))}"
        return layouts.get(name, name)
    return [resolve(name) for name in re.findall(op_layout, ttgir)]


def load_layouts(ttgir: str) -> list:
    """Each tt.load's layout: the grouped panel's indexed shuffle needs its tile's load at 4
    columns a thread."""
    return named_layouts(ttgir, r"tt\.load .*?#(\w+)>")


def asm_layouts(ttgir: str) -> list:
    """The layout of each inline assembly op's first operand: the warp driver's shuffle reads its
    tile in the layout the load gave it, with no conversion between."""
    return named_layouts(ttgir, r"elementwise_inline_asm .*?: tensor<[^,]*, #(\w+|ttg\.slice<\{[^}]*\}>)>")


def inline_asm_blocks(ptx: str) -> list:
    """(text, operand registers never written outside inline assembly) of each inline assembly
    block in the PTX. Triton packs PACK values a thread into one block; where a thread holds
    fewer, it passes registers nothing writes (Triton 3.6: no error, garbage operands)."""
    outside = re.sub(r"// begin inline asm\n.*?// end inline asm", "", ptx, flags=re.S)
    # A destination: the operand (or {braced} operands) right after an instruction's opcode.
    written = {reg for dest in re.findall(r"^\s*@?!?%?\w*\s*[a-z][\w.]*\s+(\{[^}]*\}|%\w+)\s*,", outside, re.M)
               for reg in re.findall(r"%\w+", dest)}
    blocks = []
    for text in re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, re.S):
        # Registers a block only writes are its outputs; those it reads must come from outside.
        read = set(re.findall(r"%r\d+|%rd\d+|%f\d+", text)) - written - block_outputs(text)
        blocks.append((text, sorted(read)))
    return blocks


def block_outputs(text: str) -> set:
    """The registers an inline assembly block writes: the first operand of its instructions."""
    return {reg for dest in re.findall(r"(?:^|[;{])\s*[a-z][\w.]*\s+(\{[^}]*\}|%\w+)\s*,", text, re.M)
            for reg in re.findall(r"%\w+", dest)}


def constant(text: str):
    """NAME=VALUE: VALUE as a Python literal (32, True) or else a string (fp16x3)."""
    name, _, value = text.partition("=")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", help="module.kernel of kernels/ (default: the panel, by the options below)")
    parser.add_argument("--const", action="append", default=[], type=constant, metavar="NAME=VALUE",
                        help="with --kernel: a compile-time constant (repeat)")
    parser.add_argument("--int-ptr", action="append", default=[], metavar="NAME",
                        help="a pointer argument of --kernel that points at int32 (e.g. va_ptr with V_PARTS=True)")
    parser.add_argument("--bl", type=int, default=512)
    parser.add_argument("--bl2", type=int, default=0, help="a second row tile of this many rows (panel.row_tiles 2)")
    parser.add_argument("--bb", type=int, default=32)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--unroll", type=int, default=4)
    parser.add_argument("--grouped", action="store_true", help="the grouped panel with its indexed shuffle")
    parser.add_argument("--maxnreg", type=int, default=0, help="cap registers a thread (panel.max_registers)")
    parser.add_argument("--pending", action="store_true",
                        help="with the previous panel's update applied first (panel.apply_pending, in fp16x3)")
    parser.add_argument("--split", action="store_true", help="the grouped panel in two halves (panel.split 2)")
    parser.add_argument("--v-parts", action="store_true", help="V stored as its packed fp16x3 parts (strip.v_parts)")
    parser.add_argument("--approx", action="store_true",
                        help="the reflectors' reciprocals by rcp.approx alone (panel.reciprocal approx)")
    parser.add_argument("--t-build", default="loop", choices=kernel_module("plan").T_BUILDS,
                        help="with --grouped: where and how T is built (panel.t_build)")
    parser.add_argument("--arch", type=int, default=90, choices=(90, 100),
                        help="the compile target: 90 (sm_90, Hopper: the H200) or 100 (sm_100, Blackwell: the "
                             "leaderboard's B200), for comparing the layouts the shuffles need")
    parser.add_argument("--ops", type=int, default=8, help="how many of a loop's most common opcodes to print")
    parser.add_argument("--load-layouts", action="store_true",
                        help="print each load's register layout (Triton's TTGIR) instead of the SASS counts")
    parser.add_argument("--asm-layouts", action="store_true",
                        help="print the register layout each inline assembly op reads (Triton's TTGIR), one "
                             "line an op, instead of the SASS counts")
    parser.add_argument("--asm-loops", action="store_true",
                        help="print each inline assembly block that loops (coop.settled_sums_ptx), with any operand "
                             "nothing writes, instead of the SASS counts")
    args = parser.parse_args()
    if args.kernel:
        module, _, name = args.kernel.partition(".")
        kernel = compile_kernel(getattr(kernel_module(module), name), dict(args.const), args.warps, args.maxnreg,
                                args.int_ptr, args.arch)
    else:
        kernel = compile_panel(args.bl, args.bb, args.warps, args.unroll, args.grouped, args.maxnreg, args.pending,
                               args.split, args.v_parts, args.approx, args.arch, args.t_build, args.bl2)
    if args.load_layouts:
        for layout in load_layouts(kernel.asm["ttgir"]):
            print(f"load: {layout}")
        return
    if args.asm_layouts:
        for layout in asm_layouts(kernel.asm["ttgir"]):
            print(f"asm: {layout}")
        return
    if args.asm_loops:
        for text, undefined in inline_asm_blocks(kernel.asm["ptx"]):
            if "again" in text:
                print(f"asm loop: {text.count('ld.')} loads; undefined operands: {' '.join(undefined) or 'none'}")
        return
    cubin = kernel.asm["cubin"]
    print(f"triton {triton.__version__}: "
          + " ".join(re.findall(r"(REG:\d+|STACK:\d+|SHARED:\d+)", tool("cuobjdump", cubin, "--dump-resource-usage"))))
    sass = tool("cuobjdump", cubin, "-sass")
    # Each instruction's line carries its address as /*hex*/: 4 digits up to 64 KiB of code.
    print(f"kernel: {len(re.findall(r'/[*][0-9a-f]{4,}[*]/', sass))} instructions")
    for count, ops in loop_bodies(sass):
        print(f"loop: {count} instructions; {', '.join(f'{op} {n}' for op, n in ops.most_common(args.ops))}")


if __name__ == "__main__":
    main()
