"""SIMT kernels in numba-cuda, written the lectures' way (threadIdx, shared arrays,
syncthreads), one file a rung, numbered in the order of the argument."""
from . import k01_naive, k02_tiled  # noqa: F401
