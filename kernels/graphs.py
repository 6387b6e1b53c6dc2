"""CUDA-graph capture per input shape: hundreds of small launches replayed as one.

The first call of a shape runs eagerly (compiling every kernel), then the
driver is captured on a private copy of the input; later calls refill that
copy and replay. The harness keeps several outputs alive at once, so the
graph's output buffers are cloned out rather than handed back.
"""
import torch


class ShapeGraphs:
    """Graphs keyed by (route name, shape, device); each holds its input and output buffers."""

    def __init__(self):
        self.graphs = {}

    def run(self, key, driver, A, clone_outputs: bool = True):
        entry = self.graphs.get(key)
        if entry is None:
            out = driver(A)  # eager first call: compiles, and is this call's answer
            self.graphs[key] = self.capture(driver, A)
            return out
        graph, static_in, static_out = entry
        static_in.copy_(A)
        graph.replay()
        return tuple(t.clone() for t in static_out) if clone_outputs else static_out

    @staticmethod
    def capture(driver, A):
        static_in = A.clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = driver(static_in)
        return graph, static_in, static_out


def graph_wanted(route, settings, A) -> bool:
    """Capture only on CUDA, when the route's GraphKnobs ask for it and the input's size is in
    the Settings' range."""
    return (A.is_cuda and route.graph.mode != "off"
            and settings.graph_min_numel <= A.numel() <= settings.graph_max_numel)
