"""The adapter's part for numba-cuda's CUDA simulator (emulation's SIMT kernels): its device arrays, its
simulated threads and the hooks the memory-access traces (tiledmm.analysis.trace) record through. Checked
against numba-cuda 0.30.4; nothing here imports numba until called."""
from __future__ import annotations

import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Callable


def numba_sim_array(a):
    """A simulator device array over the numpy array ``a`` itself, no copy (numba-cuda 0.30.4's
    ``numba.cuda.simulator.cudadrv.devicearray.FakeCUDAArray``; ``cuda.to_device`` would copy)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    return FakeCUDAArray(a)


def numba_is_sim_array(x) -> bool:
    """Whether ``x`` is a device array of numba's simulator: the class name of numba-cuda 0.30.4's
    ``FakeCUDAArray`` (compared by name, so that numba need not be imported to ask)."""
    return type(x).__name__ == "FakeCUDAArray"


def numba_sim_thread() -> tuple:
    """(blockIdx, threadIdx, linear thread index in its block) of the simulated CUDA thread running the
    caller: numba-cuda 0.30.4's simulator runs each CUDA thread as a ``kernel.BlockThread`` (a Python
    thread) holding ``blockIdx``, ``threadIdx`` and ``thread_id``."""
    t = threading.current_thread()
    return tuple(t.blockIdx), tuple(t.threadIdx), int(t.thread_id)


@contextmanager
def numba_sim_hooks(on_barrier: Callable[[], object] | None = None,
                    shared_array: Callable[[tuple, object, str | None], object] | None = None,
                    on_block: Callable[[], object] | None = None):
    """While in the block, numba-cuda 0.30.4's simulator calls ``on_barrier()`` in a simulated thread after
    each ``syncthreads()`` it passes (``kernel.BlockThread.syncthreads``); ``on_block()`` after each block
    it ran (``kernel.BlockManager.run``); and ``cuda.shared.array(shape, dtype)`` returns
    ``shared_array(shape, numpy dtype, source line of the call)``, made once per launch and call site for all
    its threads, as the simulator's own (``kernelapi.FakeCUDAShared.array`` and its per-launch
    ``_allocations``, keyed by the caller's file and line; the simulator runs the blocks one after another).
    The simulator's classes are patched for the process and restored on leaving."""
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi
    patched = []

    def patch(cls, name, new):
        patched.append((cls, name, getattr(cls, name)))
        setattr(cls, name, new)

    if on_barrier is not None:
        orig_sync = simkernel.BlockThread.syncthreads

        def syncthreads(self):
            orig_sync(self)
            on_barrier()
        patch(simkernel.BlockThread, "syncthreads", syncthreads)
    if shared_array is not None:
        from numba.core import types
        from numba.np import numpy_support
        lock = threading.Lock()

        def array(self, shape, dtype, alignment=None):
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            frame = traceback.extract_stack(sys._getframe())[-2]      # the kernel's line
            key = (frame.filename, frame.lineno)
            with lock:   # the threads race here: all must get the one array of this line
                res = self._allocations.get(key)
                if res is None:
                    res = self._allocations[key] = shared_array(shape, dtype, frame.line)
            return res
        patch(kernelapi.FakeCUDAShared, "array", array)
    if on_block is not None:
        orig_run = simkernel.BlockManager.run

        def run(self, *args, **kwargs):
            r = orig_run(self, *args, **kwargs)
            on_block()
            return r
        patch(simkernel.BlockManager, "run", run)
    try:
        yield
    finally:
        for cls, name, orig in reversed(patched):
            setattr(cls, name, orig)
