"""tiledmm: tiled matrix multiplication on NVIDIA GPUs, from the lectures' kernel to cuBLAS speed."""
from ._arrays import TiledmmError
from ._backend import emulating
from . import registry
from .api import kernel_names, matmul

__version__ = "0.1.0"
__all__ = ["matmul", "kernel_names", "registry", "emulating", "TiledmmError", "__version__"]
