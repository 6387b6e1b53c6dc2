"""Relocatable launches: kernels that find their input and outputs through a table of offsets.

graph.mode relocate (graphs.RelocatedGraphs) captures one graph per shape and replays it on any
input tensor of that shape, into fresh outputs. A graph bakes in the addresses its kernels were
launched with, so each kernel that touches the input or the outputs takes a small device table
of element offsets besides its pointers and a compile-time slot per pointer: INPUT_SLOT moves a
pointer from the captured input to this call's, OUTPUT_SLOT from the captured outputs (H and
tau, one buffer) to this call's. Before each replay the table is rewritten in the same queue,
so a replay reads and writes exactly what an eager call would.

Outside `relocating` (every eager launch) every slot is NO_SLOT and the kernels compile as before.
Inside, a tensor whose storage is neither the captured input's nor the outputs' (scratch
buffers, which the graph owns) keeps NO_SLOT.
"""
import contextlib

import torch
import triton
import triton.language as tl

NO_SLOT, INPUT_SLOT, OUTPUT_SLOT = -1, 0, 1
TABLE_SLOTS = 2
# Offsets in the table are multiples of this many elements (64 bytes), which the kernels tell
# the compiler so that a moved pointer keeps the 16-byte alignment its loads are vectorized by;
# RelocatedGraphs replays only inputs and outputs whose offsets keep it.
ALIGN_ELEMENTS = tl.constexpr(16)


@triton.jit
def moved(ptr, table_ptr, SLOT: tl.constexpr):
    """ptr moved by the table's offset in SLOT (elements), or as it is where SLOT is NO_SLOT."""
    if SLOT >= 0:
        ptr += tl.multiple_of(tl.load(table_ptr + SLOT), ALIGN_ELEMENTS)
    return ptr


class Relocation:
    """The captured input's and outputs' storages, and the device table of offsets from them."""

    def __init__(self, table: torch.Tensor, captured_input: torch.Tensor, captured_outputs: torch.Tensor):
        self.table = table
        self.storages = {captured_input.untyped_storage().data_ptr(): INPUT_SLOT,
                         captured_outputs.untyped_storage().data_ptr(): OUTPUT_SLOT}

    def slot(self, t) -> int:
        return NO_SLOT if t is None else self.storages.get(t.untyped_storage().data_ptr(), NO_SLOT)


_ACTIVE = None  # the Relocation that launches take their slots from now, or None


@contextlib.contextmanager
def relocating(table: torch.Tensor, captured_input: torch.Tensor, captured_outputs: torch.Tensor):
    """Within the block, launches give the pointers into captured_input and captured_outputs
    (a flat buffer holding every output) slots of TABLE (int64, TABLE_SLOTS entries, on the
    input's device), where their offsets to the real tensors will be when the kernels run."""
    global _ACTIVE
    if _ACTIVE is not None:
        raise RuntimeError("relocating() blocks do not nest")
    _ACTIVE = Relocation(table, captured_input, captured_outputs)
    try:
        yield _ACTIVE
    finally:
        _ACTIVE = None


def relocation_args(fallback: torch.Tensor, **pointers) -> tuple:
    """(table argument, {SLOT name: slot}) of one launch: for each keyword NAME=tensor, the
    compile-time constant NAME (e.g. SRC_SLOT) holding the tensor's slot. Outside `relocating`
    the table argument is FALLBACK (never read: every slot is NO_SLOT)."""
    if _ACTIVE is None:
        return fallback, {name: NO_SLOT for name in pointers}
    return _ACTIVE.table, {name: _ACTIVE.slot(t) for name, t in pointers.items()}


def new_table(device) -> torch.Tensor:
    return torch.zeros(TABLE_SLOTS, dtype=torch.int64, device=device)


def offsets(captured_input_ptr: int, captured_outputs_ptr: int, A: torch.Tensor, outputs: torch.Tensor):
    """[input offset, outputs offset] in elements from the captured addresses to A's and outputs',
    or None where one is not a multiple of ALIGN_ELEMENTS (the replay would misalign)."""
    size = A.element_size()
    deltas = (A.data_ptr() - captured_input_ptr, outputs.data_ptr() - captured_outputs_ptr)
    if any(d % (ALIGN_ELEMENTS.value * size) for d in deltas):
        return None
    return [d // size for d in deltas]
