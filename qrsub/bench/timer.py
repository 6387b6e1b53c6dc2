"""The harness's timer: candidates timed exactly as the qr_v2 harness's benchmark mode times.

Per case (docs/harness.md, benchmark mode): the case's inputs (their count is the
harness's `input_count`; seed += 42 before each), every output checked once
before any timing, then per repetition: synchronize, flush L2 with a write as
large as the harness's, CUDA event, `custom_kernel` on every input of the list,
event, synchronize, duration = elapsed / count. (The harness rechecks the
outputs after every repetition; we recheck the last repetition's only, so the
budget goes to timing.)

A candidate whose routes fell back to torch.geqrf (qrsub.fallbacks) is refused:
its timings would be geqrf's under the variant's name.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import time
from pathlib import Path
from typing import Sequence

from qrsub import fallbacks
from qrsub.bench.engine import error_text
from qrsub.harness import harness_on_path

NO_GPU_MESSAGE = (
    "{command} needs a CUDA GPU: without one the kernels run through the CPU "
    "or Triton's interpreter, and those timings say nothing about GPU speed.\n"
    "Run it on a machine with a GPU, or add --dry-run to see the plan here."
)


class NoGPUError(RuntimeError):
    """Raised instead of timing on a machine without CUDA."""


def no_gpu_message(command: str = "qrsub bench") -> str:
    """Why COMMAND refuses to run without CUDA, and what to do instead."""
    return NO_GPU_MESSAGE.format(command=command)


def require_gpu(command: str = "qrsub bench") -> None:
    """Refuse to time without CUDA (see NO_GPU_MESSAGE); the message names COMMAND."""
    import torch

    if not torch.cuda.is_available():
        raise NoGPUError(no_gpu_message(command))


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "none (CPU only)"


class HarnessTimer:
    """Times submissions on the GPU exactly as the harness's benchmark mode does."""

    def __init__(self, submissions: Sequence[Path], tag: str = "bench", allow_cpu: bool = False):
        """ALLOW_CPU is for tests of this class only: wall-clock timings, no meaning."""
        import torch

        if not allow_cpu:
            require_gpu()
        from qrsub.task.utils import L2_FLUSH_BYTES

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.modules = []
        self.load_errors: dict[int, str] = {}
        for i, path in enumerate(submissions):
            try:
                self.modules.append(load_submission(Path(path), f"_qrsub_{tag}_{i}_{Path(path).stem}"))
            except Exception as exc:  # the submission's own code failed: reported per case, never timed
                self.modules.append(None)
                self.load_errors[i] = f"import failed: {error_text(exc)}"
        harness_on_path()
        reference = importlib.import_module("reference")  # the harness's own checker
        self.check = reference.check_implementation
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda" if self.cuda else "cpu")
        self.inputs: dict[int, list] = {}
        self.outputs: dict[int, list] = {}

    def prepare(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        from qrsub.task.eval import _inputs as harness_inputs  # the harness's own list: its count and seeds

        base = harness_inputs(spec)
        failures = {}
        for i in active:
            problem = self.load_errors.get(i) or self._warm_up(i, base)
            if problem:
                failures[i] = problem
                self._drop(i)
        return failures

    def _warm_up(self, i: int, base: list) -> str | None:
        """Run candidate I once on every input (compiles, launches each route this case takes),
        refuse it if a route fell back, check its outputs, time one repetition and discard it
        (fills caches), check again; the problem that refuses it, if any."""
        module = self.modules[i]
        if fallbacks.in_module(module):   # fell back on an earlier case: refused on every later one
            return _refusal(module)
        # each candidate gets its own inputs: one that writes into them cannot skew another
        self.inputs[i] = [x.clone() for x in base]
        try:
            outs = [module.custom_kernel(x.clone()) for x in self.inputs[i]]
            self._sync()
            if fallbacks.in_module(module):
                return _refusal(module)
            problem = self._check(self.inputs[i], outs)
            if problem is None:
                self.time(i)
                problem = self._check(self.inputs[i], self.outputs[i])
        except Exception as exc:  # the submission's own code failed: this case fails, the others go on
            return error_text(exc)
        return problem

    def time(self, cand: int) -> float:
        kernel, inputs = self.modules[cand].custom_kernel, self.inputs[cand]
        if not self.cuda:   # tests only (allow_cpu)
            self.flush.zero_()
            t0 = time.perf_counter()
            self.outputs[cand] = [kernel(x) for x in inputs]
            return (time.perf_counter() - t0) / len(inputs)
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        self._sync()
        self.flush.zero_()          # L2 flush between the sync and the start event, as the harness
        start.record()
        outs = [kernel(x) for x in inputs]
        end.record()
        self._sync()
        self.outputs[cand] = outs
        return start.elapsed_time(end) / 1000.0 / len(inputs)

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def finish(self, spec: dict, active: Sequence[int]) -> dict[int, str]:
        """Recheck the last repetition's outputs (the harness rechecks every one)."""
        failures = {}
        for i in active:
            if i in self.outputs:
                problem = self._check(self.inputs[i], self.outputs[i])
                if problem:
                    failures[i] = f"recheck after timing: {problem}"
        for i in list(self.inputs):
            self._drop(i)
        return failures

    def _check(self, inputs, outputs) -> str | None:
        for k, (x, out) in enumerate(zip(inputs, outputs)):
            ok, message = self.check(x, out)
            if not ok:
                return f"input {k}: {message}"
        return None

    def _drop(self, i: int) -> None:
        self.inputs.pop(i, None)
        self.outputs.pop(i, None)


def _refusal(module) -> str:
    return f"{'; '.join(map(str, fallbacks.in_module(module)))} (refused: its timings would be torch.geqrf's)"


def load_submission(path: Path, module_name: str):
    """Import a submission file under MODULE_NAME, with the harness's `task` importable."""
    harness_on_path()
    # a dotted or dashed name would read as a submodule; Triton and dataclasses look modules up by name
    module_name = re.sub(r"\W", "_", module_name)
    stamp = (str(Path(path).resolve()), Path(path).stat().st_mtime_ns)
    loaded = sys.modules.get(module_name)
    if loaded is not None and getattr(loaded, "_qrsub_loaded_from", None) == stamp:
        return loaded   # e.g. BASE in a sweep worker: one module, its caches kept across jobs
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    module = importlib.util.module_from_spec(spec)
    module._qrsub_loaded_from = stamp
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "custom_kernel", None)):
        raise AttributeError(f"{path}: defines no custom_kernel(data)")
    return module
