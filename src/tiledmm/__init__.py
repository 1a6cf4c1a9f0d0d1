"""tiledmm: tiled matrix multiplication on NVIDIA GPUs, from the lectures' kernel to cuBLAS speed."""
from . import _backend

_backend.decide()   # GPU or emulation, before anything below imports numba or Triton (they read it at import)
from . import _adapter  # noqa: E402
_backend.after_earlier_imports(_adapter)    # emulation after a user's earlier import of Triton or numba

from ._arrays import TiledmmError  # noqa: E402
from ._backend import emulating  # noqa: E402
from . import registry  # noqa: E402
from .api import kernel_names, matmul  # noqa: E402
from .invariance import batch_invariant  # noqa: E402

__version__ = "0.1.0"
__all__ = ["matmul", "kernel_names", "batch_invariant", "registry", "emulating", "TiledmmError", "enable", "ops", "nn",
           "grouped_matmul", "scaled_matmul", "quantize_fp8", "dequantize_fp8", "__version__"]


def __getattr__(name: str):
    """``tiledmm.enable``, ``tiledmm.ops`` and ``tiledmm.nn`` import torch: loaded on first use."""
    import importlib
    if name in ("ops", "nn"):
        return importlib.import_module(f".{name}", __name__)
    if name == "enable":
        return importlib.import_module(".ops", __name__).enable
    if name == "grouped_matmul":
        return importlib.import_module(".grouped", __name__).grouped_matmul
    if name in ("scaled_matmul", "quantize_fp8", "dequantize_fp8"):      # FP8: torch on first use
        value = globals()[name] = getattr(importlib.import_module(".fp8", __name__), name)
        return value
    raise AttributeError(f"module 'tiledmm' has no attribute {name!r}")
