"""Out-of-core GEMM: C = alpha*A@B + beta*C for host matrices larger than the GPU.

The lectures' tiling one level up: host RAM plays DRAM, the GPU's memory plays shared
memory. C is computed in blocks of bm x bn; each block is the sum over K-chunks of
(bm x bk) @ (bk x bn) products run by a device GEMM callback.

Data movement (one orientation; the other is the same on C^T = B^T A^T):

* B is cut into column *panels* (K x bn). A panel stays on the GPU while every row
  block of C in that column is computed ("resident"), so B crosses PCIe once; A's
  row tiles (bm x bk) stream through, once per column panel. When even one panel
  does not fit, B's tiles stream too ("streamed").
* Bytes host->device:  M*K*n_j + K*N*(1 if resident else n_i) (+ M*N if beta != 0),
  bytes device->host: M*N (times the element sizes). The planner tries both
  orientations (the larger operand resident: streamed fewest times) and every block
  shape that fits the budget, and keeps the one with the smallest modelled time
  (copy and GEMM rates, first-load and last-store exposure, per-call cost): a model,
  nothing is timed on the call path.
* Three CUDA streams: copies in, GEMMs, copies out. Device tiles live in rings of
  slots (double buffering) and events order reuse: a slot is refilled only after the
  GEMMs that read it, a C slot only after its block went back to the host. The next
  panel is loaded a little after each GEMM of the current column.
* Host side: pinned sources whose tile has unit inner stride go straight to the GPU
  (cudaMemcpy2DAsync for strided tiles, found in the CUDA runtime torch loaded;
  checked once on a small strided copy, else staged). Pageable sources (numpy) are
  copied into a ring of pinned staging buffers by a pool of host threads, running
  ahead of the copy stream; results come back through pinned buffers the same way.
* Without a GPU (emulation) the "device" is the CPU: the same schedule, slots and
  staging run with plain buffers and no streams, so tests exercise the blocking.

Modules: planner (the Plan and its model), schedule (operands, slots, the GEMM steps),
runner (the streams, staging threads and the entry points), cudart (the device and the
CUDA runtime's 2-D copy), gemms (the device GEMM callbacks), runs (random fills and
sampled checks for the CLI and the benchmark).
"""
from .gemms import Gemm, tiledmm_gemm, torch_gemm
from .planner import GiB, MiB, Plan, plan_out_of_core
from .runner import matmul_out_of_core, warm_out_of_core
from .runs import check_sampled, fill_random, row_chunks, sample_index

__all__ = ["matmul_out_of_core", "plan_out_of_core", "warm_out_of_core", "Plan", "Gemm", "torch_gemm",
           "tiledmm_gemm", "fill_random", "check_sampled", "sample_index", "row_chunks", "MiB", "GiB"]
