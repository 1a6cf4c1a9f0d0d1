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
    # the tests marked "compiles" (sm_90 compiles on the CPU) first -- xdist hands tests out in this order:
    # after Triton's interpreter has run a kernel in a process it leaves triton.language patched (a @jit helper
    # of its standard library called from a kernel patches triton.language.core for good, Triton 3.9), and a
    # Gluon compile in that process then fails (CI flakes in sessions 16 and 22, the second from compile tests
    # this sort did not yet name)
    # then the tests marked "slow" (seconds to minutes in emulation): started late, one of them keeps a worker
    # busy after the other has run out of tests; started first, the short ones fill in around them
    items.sort(key=lambda item: (item.get_closest_marker("compiles") is None, item.get_closest_marker("slow") is None))
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
