"""Graphs captured in two parts (GraphKnobs.head), so that the first kernels start sooner.

A replayed graph's first kernel does not start when the replay is called: on the H200 the
640x512 route's graph (46 kernels) began its first kernel about 118 us after the call, and
then ran its kernels back to back (eleventh session, tools/launch_gaps.py). At one call per
timed repetition that wait is part of every timing. With a head, the driver's first capture
points (its panels and strips, in launch order) go into a small graph of their own, replayed
first: its kernels run while the host still launches the larger rest.

`SplitGraph` stands in for torch.cuda.CUDAGraph inside torch.cuda.graph's context, which only
calls its capture_begin and capture_end: at the head's last capture point it ends the first
part and begins the second on the same capture queue and memory pool. Drivers call
`capture_point()` at their phase boundaries; outside a split capture it does nothing.
"""
import contextlib

import torch

_SPLITTING = None  # the SplitGraph being captured now, or None


class SplitGraph:
    """Two CUDA graphs replayed in order: the first `head` capture points, then the rest (one
    graph where the call has no more than `head` points)."""

    def __init__(self, head: int):
        self.head = head
        self.points = 0
        self.parts = [torch.cuda.CUDAGraph()]
        self.options = {}

    def capture_begin(self, *pool, **options):
        self.options = options
        self.parts[0].capture_begin(*pool, **options)

    def capture_end(self):
        self.parts[-1].capture_end()

    def point(self):
        self.points += 1
        if self.points == self.head:
            self.parts[-1].capture_end()
            rest = torch.cuda.CUDAGraph()
            # the first part's pool: the rest may reuse memory the head's capture freed
            rest.capture_begin(self.parts[0].pool(), **self.options)
            self.parts.append(rest)

    def replay(self):
        for part in self.parts:
            part.replay()


def new_graph(head: int):
    """A graph to capture into: split after `head` capture points, or whole where head is 0."""
    return SplitGraph(head) if head else torch.cuda.CUDAGraph()


@contextlib.contextmanager
def captured(graph):
    """torch.cuda.graph(graph), with the drivers' capture points cutting it where graph is a
    SplitGraph."""
    global _SPLITTING
    with torch.cuda.graph(graph):
        outer, _SPLITTING = _SPLITTING, graph if isinstance(graph, SplitGraph) else None
        try:
            yield
        finally:
            _SPLITTING = outer


def capture_point():
    """A phase boundary of a driver (after a panel or a strip): where a split capture may cut."""
    if _SPLITTING is not None:
        _SPLITTING.point()
