"""Test-wide setup. Triton reads TRITON_INTERPRET when it is imported, so it is set here,
before any test module imports triton: without a GPU, kernels run through the interpreter."""
import os

import pytest

try:
    import torch
    _HAS_GPU = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a dependency
    _HAS_GPU = False

if not _HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    """GPU tests carry the `gpu` marker and skip where there is no GPU."""
    if _HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

