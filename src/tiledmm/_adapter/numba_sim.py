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
    numba_sim_yielding_poll()       # first: the hooks wrap it and restore it (a launch inside must not swap it)
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


# numba-cuda's BlockManager.run as of 0.30.4 (a hash of its source): the loop numba_sim_yielding_poll repeats
_POLL_SOURCE = "54626c6819f55d51"
_poll = {"installed": None}     # None: not decided yet; then whether it went in (decided once a process)
_poll_lock = threading.Lock()


def numba_sim_yielding_poll() -> bool:
    """Once per process, where numba's loop is the one below: numba-cuda 0.30.4's simulator runs a block's
    threads as Python threads, and ``kernel.BlockManager.run`` polls them for barriers in a loop that keeps
    the GIL until the interpreter takes it away (every switch interval, 5 ms), so the threads it waits for
    run only between its turns. The same loop, yielding (``time.sleep(0)``) on each round in which a thread
    still runs: a launch of the lectures' tiled kernel on 70x45x65 took 6.4 s instead of 13.3 s, with the
    same results. Returns whether it is installed (not where numba's source differs: then numba's own
    loop, and the source is not read again on later launches)."""
    if _poll["installed"] is not None:
        return _poll["installed"]
    import hashlib
    import inspect
    import time

    import numpy as np
    from numba.cuda.simulator import kernel as simkernel
    with _poll_lock:
        if _poll["installed"] is not None:
            return _poll["installed"]
        try:
            src = inspect.getsource(simkernel.BlockManager.run)
        except (OSError, TypeError):
            src = ""
        if hashlib.sha256(src.encode()).hexdigest()[:16] != _POLL_SOURCE:
            _poll["installed"] = False
            return False

        def run(self, grid_point, *args):
            threads, livethreads, blockedthreads = set(), set(), set()
            for block_point in np.ndindex(*self._block_dim):
                def target():
                    self._f(*args)
                t = simkernel.BlockThread(target, self, grid_point, block_point, self._debug)
                t.start()
                threads.add(t)
                livethreads.add(t)
            while livethreads:
                for t in livethreads:
                    if t.syncthreads_blocked:
                        blockedthreads.add(t)
                    elif t.exception:
                        for other in threads:     # abort the others, as numba does
                            other.abort = True
                            other.syncthreads_blocked = False
                            other.syncthreads_event.set()
                        raise t.exception[0].with_traceback(t.exception[1])
                if livethreads == blockedthreads:
                    for t in blockedthreads:
                        t.syncthreads_blocked = False
                        t.syncthreads_event.set()
                    blockedthreads = set()
                else:
                    time.sleep(0)                 # the one change: let the running threads have the GIL
                livethreads = {t for t in livethreads if t.is_alive()}
            for t in threads:
                if t.exception:
                    raise t.exception[0].with_traceback(t.exception[1])
        simkernel.BlockManager.run = run
        _poll["installed"] = True
    return True

