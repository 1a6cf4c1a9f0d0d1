import os
import tempfile

import numpy as np
import pytest

os.environ.setdefault("TILEDMM_QUIET", "1")
# tests check correctness: the model picks configs (tests that tune turn it on themselves), and
# tuned choices go to a throw-away folder, never the user's cache
os.environ.setdefault("TILEDMM_TUNE", "off")
os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-test-cache-"))

import tiledmm  # noqa: E402  (decides GPU or emulation before numba is imported)
from tiledmm import _backend  # noqa: E402

GPU = not _backend.emulating()


def pytest_collection_modifyitems(config, items):
    if GPU:
        return
    # test_gluon's sm_90 compiles on the CPU first (xdist hands tests out in this order): after Triton's
    # interpreter has run a kernel in a process, it leaves triton.language patched and a Gluon compile of the
    # fused epilogue in that process fails (a CI flake until session 16)
    items.sort(key=lambda item: not (item.nodeid.startswith("tests/test_gluon.py::test_compiles")))
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def randn(rng, shape, dtype=np.float32):
    """Fresh standard-normal data: never zeros."""
    return rng.standard_normal(shape).astype(dtype)
