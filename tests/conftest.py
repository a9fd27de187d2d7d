"""Test setup shared by every test module.

CI machines have no GPU: kernels then run through Triton's interpreter, which must be
switched on before triton is first imported. GPU-only tests carry ``@pytest.mark.gpu``
and are skipped without CUDA.
"""
import os

import pytest

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a hard dependency
    HAS_CUDA = False

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA/ROCm device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# The test helpers (references, inputs) live beside the tests.
import sys  # noqa: E402

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# `import generated` applies the generated package's own interpreter fixes under
# TRITON_INTERPRET=1 (generated/_interpreter.py): the tests use exactly what users get.
import generated  # noqa: E402,F401
