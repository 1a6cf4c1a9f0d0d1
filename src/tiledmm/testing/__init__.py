"""tiledmm.testing: a randomized checker of ``tiledmm.matmul``'s contract (README, "The contract"),
used by tests/test_fuzz.py and scripts/fuzz.py (the command line: many cases, worker processes).

Every case is drawn from its own generator, ``numpy.random.default_rng([seed, index])``, so a
case is reproduced by its seed and index alone, whatever ran before it (on a GPU its structure comes
from one of ``Env.templates`` per-run templates, its sizes and values from its own generator: see
``draw_case``; worker processes, scripts/fuzz.py's ``--jobs``, share the GPU). A case draws:

* the array kind: torch CUDA most often; numpy, torch CPU, CuPy and numba device arrays where
  importable (in emulation: torch CPU, numpy, numba's simulated device arrays);
* dtype and precision: float32 ieee / tf32, float64, float16, bfloat16 (torch only);
* the kernel: the default most often, else any registered kernel that takes the dtype (and
  the precision; within its emulation limit in emulation), a tile or config for the kernels
  that have them, and now and then a forced Triton ``variant=`` (with a ``config=`` on a GPU);
* ranks and batch dimensions: 1-D vectors, 2-D, 3-D and 4-D, batch dimensions that broadcast;
* sizes: mostly 1..300 (odd ones often), zeros now and then, rarely up to ``Env.max_dim``;
* layouts, per operand: transposed views, slices with steps, negative strides (numpy, CuPy,
  numba), zero strides (expand / broadcast_to), offsets that break 16-byte alignment,
  operands that share one buffer;
* the GEMM form: no out, a fresh out (same dtype, float32 for 16-bit inputs, now and then
  another float), out that *is* an input or overlaps one; alpha and beta incl. 0 and 1; when
  beta == 0 the out (its whole buffer) is poisoned with NaN.

Each operand is a view of a flat buffer; the same view is built over ``arange`` on the host,
so the checker knows which buffer element every array element is. After the call it checks:
the result's kind, device, shape and dtype (``a @ b``'s), that ``out`` is returned, every
input buffer bit-for-bit unchanged (except where out overlaps it), no write into out's buffer
outside out's elements, no NaN from a poisoned out, and the error against the float64
reference (numpy, on the CPU) ``alpha * a @ b + beta * out_old``:

    err = ||C - ref|| / max(||ref||, ||alpha|*|a|@|b| + |beta|*|out_old|| / sqrt(K))

(the second term only matters where ref cancels to near zero; ref == 0 needs C == 0), under a
tolerance per dtype/precision (fp64 1e-12, fp32 1e-5, tf32 5e-3, fp16 5e-3, bf16 3e-2; the
out's dtype where it is coarser) times max(1, sqrt(K / 256)).

A few percent of the cases are invalid inputs (inner dimensions that differ, batches that do
not broadcast, mixed dtypes or kinds, beta without out, a wrong out, an out with overlapping
elements, bad options): they must raise ``tiledmm.TiledmmError``.

Categories: ok; wrong (a wrong answer or a broken promise; also an invalid input accepted);
refused (TiledmmError on a valid input); refused-by-design (a forced variant that cannot run
the call: TiledmmError "variant ... cannot run this call"); crash (any other exception).

Tuning is off (``TILEDMM_TUNE=off``, the model picks; ``setup_env(tune=True)`` keeps first-call timing on)
and tuned choices go to a throw-away folder, never the user's cache.

Modules: ``cases`` (Env, View, Case, draw_case), ``check`` (run_case, Summary, run).
"""
from .cases import DEFAULT_TEMPLATES, FLOATS, Case, Env, View, draw_case, setup_env
from .check import Result, Summary, run, run_case

__all__ = ["DEFAULT_TEMPLATES", "FLOATS", "Case", "Env", "View", "draw_case", "setup_env", "Result", "Summary",
           "run", "run_case"]
