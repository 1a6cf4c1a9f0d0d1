"""Where kernels run: a real CUDA GPU, or emulation on the CPU.

The choice is made once per process, before numba or triton is imported, because
both read their emulation switches at import time:

* numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) runs the SIMT kernels one
  Python thread per CUDA thread; it bounds-checks every access and names the
  thread that stepped outside an array.
* Triton's interpreter (``TRITON_INTERPRET=1``) runs the block kernels on CPU
  torch tensors.

Emulation is chosen when no CUDA device answers, or when the user asks for it
with ``TILEDMM_EMULATE=1`` (the CLI's ``--emulate`` sets it).
"""
from __future__ import annotations

import ctypes
import os
import sys

_TRUE = ("1", "true", "yes", "on")
_mode: str | None = None


def _driver_device_count() -> int:
    """Count CUDA devices through the driver API, importing neither numba nor torch."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if lib.cuInit(0) != 0:
            return 0
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    return 0


def mode() -> str:
    """``"gpu"`` or ``"emulation"``; decided on first call and fixed for the process."""
    global _mode
    if _mode is None:
        # small toy launches are the point of the lectures' examples: no occupancy nagging
        os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
        forced = os.environ.get("TILEDMM_EMULATE", "").lower() in _TRUE
        forced = forced or os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1"
        if forced or _driver_device_count() == 0:
            _mode = "emulation"
            os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
            os.environ["TRITON_INTERPRET"] = "1"
            if "numba" in sys.modules and not _numba_in_simulator():
                raise RuntimeError(
                    "tiledmm: numba was imported before tiledmm without NUMBA_ENABLE_CUDASIM=1, "
                    "and no CUDA GPU is usable; import tiledmm first or set NUMBA_ENABLE_CUDASIM=1")
            if os.environ.get("TILEDMM_QUIET", "").lower() not in _TRUE:
                why = "asked for (TILEDMM_EMULATE)" if forced else "no CUDA GPU found"
                print(f"tiledmm: {why}; kernels run in emulation (numba CUDA simulator, "
                      f"Triton interpreter): correct but slow, toy sizes only", file=sys.stderr)
        else:
            _mode = "gpu"
    return _mode


def emulating() -> bool:
    return mode() == "emulation"


def _numba_in_simulator() -> bool:
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


def numba_cuda():
    """The ``numba.cuda`` module, in the mode chosen above."""
    mode()
    from numba import cuda
    return cuda


def torch_device() -> str:
    """Where the block (Triton) kernels want their tensors."""
    return "cpu" if emulating() else "cuda"


def emulation_limit(kernel_limit: int) -> int:
    """Most multiply-adds a kernel may take in emulation; TILEDMM_EMULATION_LIMIT overrides."""
    return int(os.environ.get("TILEDMM_EMULATION_LIMIT", kernel_limit))
