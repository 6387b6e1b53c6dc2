"""CUDA graphs of a route's calls: one graph per input shape or per input tensor, or concurrent batch groups.

`ShapeGraphs` (graph.mode capture): the first call of a shape runs eagerly (compiling
every kernel), then the driver is captured on a private copy of the input; later calls
refill that copy and replay. The harness keeps several outputs alive at once, so the
graph's output buffers are cloned out rather than handed back.

`InputGraphs` (graph.mode inplace): a graph per input tensor, reading it where it lies and
handing back its own output buffers, so that a call copies nothing. Each input then has
outputs of its own, which is what the harness needs when it keeps several alive.

`RelocatedGraphs` (graph.mode relocate): a graph per input shape whose kernels find the input
and the outputs through a table of offsets (relocate.py), rewritten before each replay: no
copies, fresh outputs on every call, and the capture on a shape's first call, so that a
harness's timed calls on new tensors are all replays.

`GroupGraphs` (graph.mode concurrent, opt-in): the batch is split into contiguous
groups, each captured as its own graph with its own scratch buffers and memory pool,
and the groups become edge-less branches of one graph, so that one group's panel
overlaps another group's strip. The service warns that work on more than one queue may
disqualify a submission; plan.GRAPH_MODES says how that is kept opt-in and flagged.
"""
import weakref

import torch

from .blocked import output_buffer, output_views
from .capture import captured, new_graph
from .relocate import new_table, offsets, relocating
from .scratch import scratch_scope


class ShapeGraphs:
    """Graphs keyed by (route name, shape, device); each holds its input and output buffers."""

    def __init__(self):
        self.graphs = {}

    def run(self, key, driver, A, clone_outputs: bool = True, packed: bool = True, head: int = 0):
        entry = self.graphs.get(key)
        if entry is None:
            out = driver(A)  # eager first call: compiles, and is this call's answer
            self.graphs[key] = self.capture(driver, A, head)
            return out
        graph, static_in, static_out = entry
        static_in.copy_(A)
        graph.replay()
        if not clone_outputs:
            return static_out
        return copied_out(static_out) if packed else tuple(t.clone() for t in static_out)

    @staticmethod
    def capture(driver, A, head: int):
        static_in = A.clone()
        graph = new_graph(head)
        with captured(graph):
            static_out = driver(static_in)
        return graph, static_in, static_out


def copied_out(outputs: tuple) -> tuple:
    """The outputs copied out of a graph's buffers: in one copy when they are views of one
    contiguous buffer (blocked.new_outputs; a launch saved on every call, which is most of a
    small case's overhead), else one copy each."""
    base = outputs[0]._base
    if base is None or not base.is_contiguous() or any(t._base is not base for t in outputs):
        return tuple(t.clone() for t in outputs)
    copy = base.clone()
    return tuple(copy.as_strided(t.shape, t.stride(), t.storage_offset() - base.storage_offset())
                 for t in outputs)


# graph.mode inplace keeps graphs for at most this many bytes of distinct inputs per route and
# shape (four of 60x1024's 252 MB): each graph holds output buffers as large as its input.
INPLACE_INPUT_BYTES = 1 << 30
# ... and remembers this many tensors called once (keys only, no memory held).
INPLACE_SEEN_INPUTS = 64


class InputGraphs:
    """Graphs keyed by the input tensor: the route, its address, shape, strides and device,
    and the tensor object itself (held weakly).

    A replay reads whatever the input's memory holds when it runs, so a tensor refilled in
    place is factored afresh: nothing is ever answered from an earlier call. A call's outputs
    are the graph's own buffers; they stay as returned until the next call on the same tensor
    overwrites them. A new tensor at a freed tensor's address is a new input, not a replay:
    the harness checks a case by calling on clones, each freed before the next lands at the
    same address, and holds every output until it has checked them all, so replaying there
    would overwrite the outputs it still holds.

    A tensor's first call runs eagerly, its second captures and replays, later calls replay:
    an input factored once (the harness checks each case on fresh clones) costs no capture.
    Per route and shape, graphs for at most INPLACE_INPUT_BYTES of inputs are kept, the least
    recently used dropped first (a dropped graph's outputs stay valid for whoever holds them).
    """

    def __init__(self, input_bytes: int = INPLACE_INPUT_BYTES):
        self.input_bytes = input_bytes
        # shape key -> {input key: (weak input, graph, outputs)}, least recently used first
        self.graphs = {}
        self.seen = {}  # shape key -> {input key: weak input called once}, oldest first
        # input address -> (owner, shape key, input key, shape) of the graph last captured there
        self.addresses = {}

    def replay(self, A, owner):
        """A's graph replayed, and its outputs, if this tensor (with its present shape and
        strides) has a graph captured under OWNER (the caller's list of routes, whose route
        for A's shape cannot change); else None. qr_routed looks here before it picks a route,
        whose selection and checks would cost more host time than the lookup (20x32's kernel
        takes only a few microseconds)."""
        found = self.addresses.get(A.data_ptr())
        if found is None or found[0] is not owner:
            return None
        _owner, shape_key, key, shape = found
        graphs = self.graphs.get(shape_key)
        entry = None if graphs is None else graphs.get(key)
        if entry is None or entry[0]() is not A or A.stride() != key[1] or A.shape != shape:
            return None
        graphs[key] = graphs.pop(key)  # now the most recently used
        entry[1].replay()
        return entry[2]

    def run(self, shape_key, driver, A, head: int = 0, owner=None):
        """A's outputs: a replay of its graph, else an eager call (its first) or a capture (its
        second). OWNER, if given, lets replay() find the graph captured here."""
        key = (A.data_ptr(), A.stride())
        graphs = self.graphs.get(shape_key)
        if graphs is None:
            graphs = self.graphs[shape_key] = {}
        entry = graphs.pop(key, None)
        if entry is not None and entry[0]() is A:
            # The common call, first: a replay, which adds no graph (nothing to trim).
            graphs[key] = entry  # now the most recently used
            entry[1].replay()
            return entry[2]
        # No graph, or another tensor's at a freed one's address (whose outputs may be held): a
        # first call runs eagerly, a second captures.
        seen = self.seen.setdefault(shape_key, {})
        seen_ref = seen.pop(key, None)
        if seen_ref is None or seen_ref() is not A:
            seen[key] = weakref.ref(A)
            if len(seen) > INPLACE_SEEN_INPUTS:
                del seen[next(iter(seen))]
            return driver(A)
        entry = (weakref.ref(A), *self.capture(driver, A, head))
        graphs[key] = entry  # now the most recently used
        if owner is not None:
            self.addresses[key[0]] = (owner, shape_key, key, A.shape)
        self.trim(shape_key, A)
        _input, graph, out = entry
        graph.replay()
        return out

    def trim(self, shape_key, A):
        """Drop the shape's oldest graphs past the byte budget (always keeping the newest)."""
        entries = self.graphs[shape_key]
        per_input = A.numel() * A.element_size()
        while len(entries) > max(1, self.input_bytes // per_input):
            key = next(iter(entries))
            del entries[key]
            found = self.addresses.get(key[0])
            if found is not None and found[1] == shape_key and found[2] == key:
                del self.addresses[key[0]]

    @staticmethod
    def capture(driver, A, head: int):
        graph = new_graph(head)
        with captured(graph):
            out = driver(A)
        return graph, out


class RelocatedGraphs:
    """Graphs keyed like ShapeGraphs, each captured with its kernels' input and output pointers
    relocatable (relocate.py), and replayed on any input of its shape.

    A shape's first call runs eagerly (compiling every kernel; it is that call's answer), then
    captures at once: the harness's check calls come before its timed ones, so no capture
    falls in a timed loop. A later call allocates fresh outputs, writes its input's and outputs'
    offsets from the captured ones into the graph's table (in the call's queue, after whatever
    the queue holds) and replays. The outputs are the caller's, as an eager call's are; nothing
    is copied. A captured input or output is never read or written by a replay: every pointer
    into them is moved. An input whose strides differ from the captured one's, or whose offset
    would misalign the kernels' vectorized accesses, runs eagerly.
    """

    def __init__(self):
        self.graphs = {}

    def run(self, key, driver, A, head: int = 0):
        entry = self.graphs.get(key)
        if entry is None:
            out = driver(A)
            self.graphs[key] = self.capture(driver, A, head)
            return out
        graph, table, captured_input, captured_outputs, strides = entry
        if tuple(A.stride()) != strides:
            return driver(A)
        flat = output_buffer(A)
        deltas = offsets(captured_input, captured_outputs.data_ptr(), A, flat)
        if deltas is None:
            return driver(A)
        # Pageable host memory: CUDA stages it before returning, so the next call may build its
        # own; the copy takes its turn in the queue, after any replay still pending there.
        table.copy_(torch.tensor(deltas, dtype=torch.int64), non_blocking=True)
        graph.replay()
        return output_views(flat, A)

    @staticmethod
    def capture(driver, A, head: int):
        """(graph, its table, the captured input's address, the captured outputs, A's strides).
        The captured outputs stay allocated, so that a pointer a kernel failed to move would
        write there (and leave the caller's outputs unwritten) rather than into another tensor."""
        table = new_table(A.device)
        flat = output_buffer(A)
        graph = new_graph(head)
        with relocating(table, A, flat), captured(graph):
            driver(A, out=output_views(flat, A))
        return graph, table, A.data_ptr(), flat, tuple(A.stride())


def group_spans(batch: int, groups: int) -> list:
    """[(lo, hi)] of min(groups, batch) contiguous, non-empty batch groups covering 0..batch in
    order, sizes as even as possible (the first batch % count groups hold one more)."""
    count = max(1, min(groups, batch))
    size, extra = divmod(batch, count)
    spans, lo = [], 0
    for i in range(count):
        hi = lo + size + (i < extra)
        spans.append((lo, hi))
        lo = hi
    return spans


def run_group(index: int, driver, A):
    """The driver on one group's matrices, with scratch buffers of that group's own: groups of
    equal size would otherwise share T and V while their branches run at the same time."""
    with scratch_scope(f"group{index}"):
        return driver(A)


def joined(outs) -> tuple:
    """(H, tau) of the whole batch from the groups' outputs, in batch order. torch.cat copies,
    so the result never aliases a graph's buffers, whatever Settings.clone_outputs says."""
    return tuple(torch.cat(parts) for parts in zip(*outs))


class GroupGraphs:
    """Concurrent groups keyed like ShapeGraphs: per key, one graph whose edge-less branches are
    the groups' own captures, the private input they read and the outputs each group writes.

    The graph launched is group 0's torch graph, with the other groups added to it as child
    nodes without edges: torch replays it on its current queue, where the input copy before it
    and the output copies after it also go, so the call is ordered with the caller's work
    without naming or assuming any queue. (Built as a separate parent graph and launched on
    the legacy default queue, it would run out of order whenever torch's current queue is
    another one.)
    """

    def __init__(self):
        self.graphs = {}

    def run(self, key, driver, A, groups: int):
        entry = self.graphs.get(key)
        if entry is None:
            # Eager first call, group by group: compiles each group's kernels, allocates its
            # scratch outside the capture, and is this call's answer.
            spans = group_spans(A.shape[0], groups)
            out = joined([run_group(i, driver, A[lo:hi]) for i, (lo, hi) in enumerate(spans)])
            self.graphs[key] = self.capture(driver, A, spans)
            return out
        graph, static_in, static_outs, _captures = entry
        static_in.copy_(A)
        graph.replay()
        return joined(static_outs)

    @staticmethod
    def capture(driver, A, spans):
        """(the graph to launch, the private input, each group's outputs, every group's capture).

        Each group reads its own rows of one private input (drivers never write their input) and
        is captured with torch's default private memory pool: groups running at the same time
        must not reuse memory another group's capture freed. The captures stay referenced, since
        their pools hold the memory the branches use."""
        static_in = A.clone()
        captures, static_outs = [], []
        for i, (lo, hi) in enumerate(spans):
            graph = torch.cuda.CUDAGraph(keep_graph=True)  # keeps the cudaGraph_t for raw_cuda_graph
            with torch.cuda.graph(graph):
                static_outs.append(run_group(i, driver, static_in[lo:hi]))
            captures.append(graph)
        for branch in captures[1:]:
            add_child_graph(captures[0].raw_cuda_graph(), branch.raw_cuda_graph())
        captures[0].instantiate()
        return captures[0], static_in, static_outs, captures


def add_child_graph(parent: int, child: int) -> None:
    """Clone the graph CHILD into PARENT as a node without dependencies (both cudaGraph_t handles,
    as torch's raw_cuda_graph gives them), so CUDA may run it beside every other node of PARENT."""
    try:
        from cuda.bindings import runtime
    except ImportError as err:
        raise RuntimeError("graph.mode concurrent needs the cuda.bindings package (torch's CUDA wheels "
                           "install it; else pip install cuda-bindings), or use graph.mode capture") from err
    # cuda.bindings returns (error code, *outputs); it takes the handles as plain ints.
    status, _node = runtime.cudaGraphAddChildGraphNode(parent, None, 0, child)
    if status != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaGraphAddChildGraphNode failed: {getattr(status, 'name', status)}")


def graph_wanted(route, settings, A) -> bool:
    """Capture only on CUDA, when the route's GraphKnobs ask for it and the input has at least
    settings.graph_min_numel elements and, in modes capture and inplace, at most graph_max_numel. Mode
    concurrent has no upper bound: it exists for the largest batches (640x512), and its
    groups' overlap is what pays for copying a large input into the graph's buffer."""
    if not A.is_cuda or route.graph.mode == "off" or A.numel() < settings.graph_min_numel:
        return False
    return route.graph.mode == "concurrent" or A.numel() <= settings.graph_max_numel
