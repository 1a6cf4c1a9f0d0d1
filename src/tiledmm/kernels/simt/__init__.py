"""SIMT kernels in numba-cuda, written the lectures' way (threadIdx, shared arrays,
syncthreads), one file a rung, numbered in the order of the argument:

1. k01_naive          the lectures' simple kernel (and its uncoalesced launch)
2. k02_tiled          the lectures' shared-memory tiled kernel
3. k03_coarsen        thread coarsening: 8 outputs per thread along a column
4. k04_regtile2d      2-D register tiling: an outer-product micro-tile per thread
5. k05_conflict_free  conflict-free shared layout, int32 indices, interior fast path
6. k06_double_buffer  two shared buffers, next tiles prefetched during compute
7. k07_flat_shared    1-D shared tiles at compile-time strides (less address arithmetic)
8. k08_warp_tile      warp tiling: contiguous 4 x 4 sub-tiles per lane (vector shared loads possible)
9. k09_unsigned       uint64 indices: no wrap-around selects, so LDS.128 and fewer registers
10. k10_autotune      rung 9's kernel over block/warp/lane tile shapes, chosen by timing
11. k11_async         cp.async global->shared copies into a ring of shared stages (rung 10 otherwise)
"""
from . import (  # noqa: F401
    k01_naive, k02_tiled, k03_coarsen, k04_regtile2d, k05_conflict_free, k06_double_buffer, k07_flat_shared,
    k08_warp_tile, k09_unsigned, k10_autotune, k11_async)
