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
_numba_refused = ""      # why numba's simulator cannot be had in this process (see after_earlier_imports)
_settled = False


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
    ``import tiledmm`` calls this first, before anything of tiledmm imports numba or Triton (a user's
    earlier import of either is dealt with by ``after_earlier_imports``, which ``import tiledmm`` calls
    next). Prints nothing."""
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
        _mode, _why = "emulation", why
    return _mode


def after_earlier_imports(adapter) -> None:
    """Emulation in a process that imported Triton or numba before tiledmm (``import tiledmm`` calls this
    right after ``decide``, with ``tiledmm._adapter``, the home of the private interfaces it takes: passed
    in, so that this module, below the adapter, imports nothing of it). Triton: its interpreter is
    switched on after the fact (``interpret_imported_triton``). numba: after ``import numba`` alone its
    config is read again, so that numba.cuda, imported later, is the simulator; a ``numba.cuda`` already
    imported in its GPU mode cannot become the simulator, so the SIMT kernels are refused, with the fix,
    and the block kernels still run. Said at import as a warning. Nothing on a GPU."""
    global _numba_refused, _settled
    if decide() != "emulation" or _settled:
        return
    _settled = True
    _adapter = adapter
    if "triton" in sys.modules:
        _adapter.interpret_imported_triton()
    if not _adapter.numba_simulator_ready():
        _numba_refused = (f"numba.cuda was imported before tiledmm, in its GPU mode, and tiledmm runs in "
                          f"emulation ({_why}), so the SIMT kernels (naive, tiled, ...) cannot run in numba's "
                          "simulator in this process; import tiledmm before numba.cuda, or set "
                          "NUMBA_ENABLE_CUDASIM=1 before starting Python (the Triton kernels still run)")
        import warnings
        warnings.warn(f"tiledmm: {_numba_refused}", RuntimeWarning, stacklevel=2)   # at `import tiledmm`


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


def numba_cuda():
    """The ``numba.cuda`` module, in the mode chosen above."""
    mode()
    if _numba_refused:
        from ._errors import TiledmmError
        raise TiledmmError(_numba_refused)
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
