"""Multi-GPU GEMM on torch.distributed: one process per GPU (NCCL), or CPU processes (gloo).

The lectures' phase loop one level up: a thread block loads a tile of A and of B into
shared memory, multiplies, moves on along K. Here a GPU is the block, and the
collaborative load is a broadcast.

* ``summa``: A (M x K), B (K x N), C (M x N) block-distributed over a pr x pc process
  grid (rank = row * pc + col). For each K panel, the owner of A's panel sends it along
  its grid row and the owner of B's panel along its grid column, and every rank adds
  A_panel @ B_panel to its C block. The panels travel ``depth`` ahead on two streams (A's
  on the row communicator, B's on the column one, side by side) while the products run;
  the panel schedule is the scaling model's (a small first panel, wider ones after it).
  ``prepare_summa`` stores a rank's blocks panel by panel once (no staging copies).
* ``allgather_matmul``: A row-sharded (rank r holds rows r of A), B's column block local:
  C_local = A @ B_local. A rank multiplies its own shard at once and the others' as they land.
* ``matmul_reducescatter``: A column-sharded, B row-sharded (the K split): C = sum_r A_r B_r,
  each rank keeping its rows; partial products made chunk by chunk, each sent on while the
  next is made.
* Unfused baselines ``allgather_then_matmul`` and ``matmul_then_reducescatter``.
* ``model``: the scaling model (latency and bandwidth per link, the GEMM rate, the overlap)
  that predicts all of these for P GPUs on one or several nodes (``tiledmm dist --predict``).

Engines: "nccl" (NCCL collectives; gloo on the CPU) and "symm" (torch's symmetric memory: the
copy engines read the peers' memory, no SM taken from the products; GPUs of one node).
Uneven shapes work: blocks are as even as possible (the first ``n % p`` parts one
longer); collectives that need equal sizes are padded internally.
The local GEMM is ``gemm(a, b, c, alpha, beta)`` (c = alpha*a@b + beta*c in place, on
torch's current stream); default: ``tiledmm_gemm()``, the Triton block kernel.

Modules: layout (the process grid, block ranges, scattering and gathering whole matrices),
streams (the compute and communication streams, collectives issued and landed, the timeline),
summa, sharded (the all-gather and reduce-scatter algorithms), model, _symm (torch's symmetric
memory).
"""
from ..outofcore.gemms import Gemm, tiledmm_gemm, torch_gemm
from . import model
from .layout import Grid, block_range, gather_rows, gather_summa, grid_shape, scatter_summa, shard_cols, shard_rows
from .sharded import allgather_matmul, allgather_then_matmul, matmul_reducescatter, matmul_then_reducescatter
from .streams import ENGINES
from .summa import SummaOperands, prepare_summa, summa, summa_panels

__all__ = ["Grid", "grid_shape", "block_range", "summa", "summa_panels", "prepare_summa", "SummaOperands",
           "allgather_matmul", "matmul_reducescatter", "allgather_then_matmul", "matmul_then_reducescatter",
           "scatter_summa", "gather_summa", "shard_rows", "shard_cols", "gather_rows", "Gemm", "torch_gemm",
           "tiledmm_gemm", "model", "ENGINES"]
