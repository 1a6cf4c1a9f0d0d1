"""Multi-GPU GEMM on torch.distributed: one process per GPU (NCCL), or CPU processes (gloo).

The lectures' phase loop one level up: a thread block loads a tile of A and of B into
shared memory, multiplies, moves on along K. Here a GPU is the block, and the
collaborative load is a broadcast.

* ``summa``: A (M x K), B (K x N), C (M x N) block-distributed over a pr x pc process
  grid (rank = row * pc + col). For each K-panel, the grid column owning A's panel
  broadcasts it along each grid row, the grid row owning B's panel broadcasts it along
  each grid column, and every rank adds A_panel @ B_panel to its C block. Broadcasts are
  issued ahead (``depth`` panels in flight, receive buffers in a ring) on their own
  stream, so the next panels travel while this panel's GEMM runs; a rank multiplies the
  panels it already holds first (every rank issues the collectives in one order; only
  the order of the local products differs).
* ``allgather_matmul``: A row-sharded (rank r holds rows r of A), B's column block local:
  C_local = A @ B_local. The shards are all-gathered in row chunks; a rank multiplies
  its own shard at once and each gathered chunk as it lands, while later chunks travel.
* ``matmul_reducescatter``: A column-sharded, B row-sharded (the K split): C = sum_r A_r B_r,
  each rank keeping its rows. Partial products are computed chunk by chunk and each
  chunk is reduce-scattered while the next is computed.
* Unfused baselines ``allgather_then_matmul`` and ``matmul_then_reducescatter``.

Uneven shapes work: blocks are as even as possible (the first ``n % p`` parts one
longer); collectives that need equal sizes are padded internally.
The local GEMM is ``gemm(a, b, c, alpha, beta)`` (c = alpha*a@b + beta*c in place, on
torch's current stream); default: ``tiledmm_gemm()``, the Triton block kernel.

Modules: layout (the process grid, block ranges, scattering and gathering whole matrices),
streams (the compute and communication streams, collectives issued and landed, the first-use
preparation of local products), summa, sharded (the all-gather and reduce-scatter algorithms).
"""
from ..outofcore.gemms import Gemm, tiledmm_gemm, torch_gemm
from .layout import Grid, block_range, gather_rows, gather_summa, grid_shape, scatter_summa, shard_cols, shard_rows
from .sharded import allgather_matmul, allgather_then_matmul, matmul_reducescatter, matmul_then_reducescatter
from .summa import summa

__all__ = ["Grid", "grid_shape", "block_range", "summa", "allgather_matmul", "matmul_reducescatter",
           "allgather_then_matmul", "matmul_then_reducescatter", "scatter_summa", "gather_summa",
           "shard_rows", "shard_cols", "gather_rows", "Gemm", "torch_gemm", "tiledmm_gemm"]
