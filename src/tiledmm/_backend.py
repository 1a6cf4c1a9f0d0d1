"""Where kernels run: a real CUDA GPU, or emulation on the CPU.

The choice is made once per process, by ``decide`` (``import tiledmm`` calls it before
anything imports numba or triton), because both read their emulation switches at import time:

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
_why = ""
_announced = False


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


def decide() -> str:
    """Choose ``"gpu"`` or ``"emulation"`` once for the process and set numba's and Triton's switches;
    ``import tiledmm`` calls this first, before anything imports numba or Triton. Prints nothing."""
    global _mode, _why
    if _mode is None:
        # small toy launches are the point of the lectures' examples: no occupancy nagging
        os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
        if os.environ.get("TILEDMM_EMULATE", "").lower() in _TRUE:
            why = "asked for (TILEDMM_EMULATE)"
        elif os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1":
            why = "NUMBA_ENABLE_CUDASIM=1 is set"
        elif _driver_device_count() == 0:
            why = "no CUDA GPU found"
        else:
            _mode = "gpu"
            return _mode
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        os.environ["TRITON_INTERPRET"] = "1"
        if "numba" in sys.modules and not _numba_in_simulator():
            raise RuntimeError(
                "tiledmm: numba was imported before tiledmm without NUMBA_ENABLE_CUDASIM=1, "
                "and no CUDA GPU is usable; import tiledmm first or set NUMBA_ENABLE_CUDASIM=1")
        _mode, _why = "emulation", why
    return _mode


def mode() -> str:
    """``"gpu"`` or ``"emulation"`` (see ``decide``); the first call in emulation says so on stderr,
    once, unless TILEDMM_QUIET is set."""
    global _announced
    m = decide()
    if m == "emulation" and not _announced:
        _announced = True
        if os.environ.get("TILEDMM_QUIET", "").lower() not in _TRUE:
            print(f"tiledmm: {_why}; kernels run in emulation (numba CUDA simulator, "
                  f"Triton interpreter): correct but slow, toy sizes only", file=sys.stderr)
    return m


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
    text = os.environ.get("TILEDMM_EMULATION_LIMIT")
    if text is None or not text.strip():
        return kernel_limit
    try:
        limit = int(text.strip().replace("_", ""))
    except ValueError:
        limit = 0
    if limit < 1:
        from ._errors import TiledmmError
        raise TiledmmError(f"TILEDMM_EMULATION_LIMIT={text!r}: write a positive whole number of "
                           f"multiply-adds (e.g. {kernel_limit}), or unset it")
    return limit
