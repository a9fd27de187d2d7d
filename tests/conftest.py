"""Test setup shared by every test module.

CI machines have no GPU: kernels then run through Triton's interpreter, which must be
switched on before triton is first imported. GPU-only tests carry ``@pytest.mark.gpu``
and are skipped without CUDA.
"""
import os

import pytest

# `make test` runs one xdist worker per core. torch's intra-op thread pool in every worker, and
# in the tools' subprocesses (they inherit OMP_NUM_THREADS), would oversubscribe the cores: its
# spinning threads made the tuner self-test six times slower (76 s instead of 13 s).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch

    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)

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


@pytest.fixture(autouse=True)
def _forget_patched_plans(request):
    """A call plan made while a test patches the generated modules (a spy launcher, a smaller
    constant, a swapped buffer dict) must not serve a later test's call of the same key:
    forget every plan before and after a test that patches anything."""
    from generated import _runtime

    patches = "monkeypatch" in request.fixturenames
    if patches:
        _runtime.clear_plans()
    yield
    if patches:
        _runtime.clear_plans()
