"""The adapter's part for numba-cuda's CUDA simulator (emulation's SIMT kernels): its device arrays, its
simulated threads and the hooks the memory-access traces (tiledmm.analysis.trace) record through. Checked
against numba-cuda 0.30.4; nothing here imports numba until called."""
from __future__ import annotations

import os
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
    caller: numba-cuda 0.30.4's simulator runs each CUDA thread on a ``kernel.BlockThread`` (a Python
    thread; numba_sim_block_runner's pooled threads are of that class) holding ``blockIdx``, ``threadIdx``
    and ``thread_id``. A pooled Python thread runs many simulated threads in turn: state kept per simulated
    thread is keyed by this, not by the Python thread."""
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
    numba_sim_block_runner()        # first: the hooks wrap it and restore it (a launch inside must not swap it)
    patched = []

    def patch(cls, name, new):
        patched.append((cls, name, getattr(cls, name)))
        setattr(cls, name, new)

    if on_barrier is not None:
        orig_sync = simkernel.BlockThread.syncthreads

        def hooked(orig_sync):
            def syncthreads(self):
                orig_sync(self)
                on_barrier()
            return syncthreads
        patch(simkernel.BlockThread, "syncthreads", hooked(orig_sync))
        if _runner["installed"]:
            pooled = _pooled_class(simkernel).thread_class
            patch(pooled, "syncthreads", hooked(pooled.syncthreads))
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


# numba-cuda 0.30.4's BlockManager.run and BlockThread (a hash of their source): what numba_sim_block_runner
# stands in for
_RUNNER_SOURCE = "cd94e88569ebafaa"
_runner = {"installed": None}     # None: not decided yet; then whether it went in (decided once a process)
_runner_lock = threading.Lock()


def _numba_sim_source_hash() -> str:
    import hashlib
    import inspect

    from numba.cuda.simulator import kernel as simkernel
    try:
        src = inspect.getsource(simkernel.BlockManager.run) + inspect.getsource(simkernel.BlockThread)
    except (OSError, TypeError):
        src = ""
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def numba_sim_block_runner() -> bool:
    """Once per process, where numba's block runner is the one checked (numba-cuda 0.30.4): runs the
    simulator's blocks on a pool of Python threads kept for the process, one simulated CUDA thread at a time.

    numba's ``kernel.BlockManager.run`` starts a new Python thread (``kernel.BlockThread``) per CUDA thread per
    block and polls them for barriers in a loop that holds the GIL; the threads then run by turns of the
    interpreter's switch interval (5 ms), and starting them (~0.25 ms each) was most of a small launch's time.
    Here a simulated thread runs until it reaches ``syncthreads()`` or ends and then hands over to the next
    directly (a lock released for it): first the threads not yet started (a thread that has ended takes the next
    of those itself, so a block without barriers runs on one Python thread), then, once every thread still
    running waits at the barrier, all of them again in order. That is one of the interleavings a GPU may run:
    a barrier still holds every live thread, and threads that have ended no longer count (numba's rule). A
    thread's exception ends the block as numba's does (the same ``tid=[..] ctaid=[..]`` message; the threads
    waiting at a barrier are woken to raise and end); the launching thread raises it. Returns whether it is
    installed (not where numba's source differs: then numba's own runner, and the source is not read again)."""
    if _runner["installed"] is not None:
        return _runner["installed"]
    with _runner_lock:
        if _runner["installed"] is not None:
            return _runner["installed"]
        if _numba_sim_source_hash() != _RUNNER_SOURCE:
            _runner["installed"] = False
            return False
        from numba.cuda.simulator import kernel as simkernel
        simkernel.BlockManager.run = _pooled_class(simkernel).run
        _runner["installed"] = True
    return True


_pool: dict = {}     # "runner": the pooled runner (made once numba is imported)


def _pooled_class(simkernel):
    """The block runner on pooled threads (see numba_sim_block_runner), made on first use (numba imported)."""
    if "runner" in _pool:
        return _pool["runner"]
    from collections import deque

    import numpy as np
    from numba.cuda.simulator.kernelapi import Dim3

    idle: list = []               # pooled threads with no simulated thread
    launch_lock = [threading.Lock()]   # one block at a time (numba's simulator runs one launch at a time)
    FRESH = object()              # the next to run is a simulated thread not yet started

    def forked():                 # a forked child has none of the pool's threads
        idle.clear()
        launch_lock[0] = threading.Lock()
    os.register_at_fork(after_in_child=forked)

    def free_thread():
        try:
            return idle.pop()
        except IndexError:
            t = PooledThread()
            t.start()
            return t

    class Block:
        """One block's run: the simulated threads not yet started, those waiting at the barrier, those let
        through it and not yet resumed. Only the thread holding the turn reads or changes it."""

        def __init__(self, manager, grid_point, args):
            self.manager, self.args = manager, args
            self.blockIdx = Dim3(*grid_point)
            dims = manager._block_dim
            # in linear thread order (threadIdx.x fastest), as a GPU numbers a block's threads into warps
            self.fresh = deque(p[::-1] for p in np.ndindex(*dims[::-1]))
            self.blockDim = Dim3(*dims)
            self.waiting: list = []
            self.ready: deque = deque()
            self.error = None
            self.aborted = False
            self.done = threading.Lock()
            self.done.acquire()

        def next_turn(self):
            """Who runs next: FRESH, a waiting thread (the barrier opened once all live threads wait), or
            None (the block has ended)."""
            if self.fresh:
                return FRESH
            if not self.ready and self.waiting:
                self.ready, self.waiting = deque(self.waiting), []
            return self.ready.popleft() if self.ready else None

        def fail(self, exc, tb):
            if self.error is None:
                self.error = (exc, tb)
            self.aborted = True
            self.fresh.clear()     # threads not started yet never start; the waiting ones end at their barrier

    class PooledThread(simkernel.BlockThread):
        """A Python thread of the pool: it runs simulated CUDA threads one after another, carrying what
        numba's simulator reads from the running thread (blockIdx, threadIdx, thread_id, syncthreads, ...)."""

        def __init__(self):
            # kept for the process: not named as the "tiledmm-" threads of a call, which end with it
            threading.Thread.__init__(self, name="numba-simulator-pool", daemon=True)
            self._go = threading.Lock()
            self._go.acquire()
            self._block = None
            self.syncthreads_event = threading.Event()     # numba's; unused here
            self.syncthreads_blocked = False
            self.exception = None
            self.abort = False
            self.debug = False
            self.blockIdx = self.threadIdx = Dim3(0, 0, 0)
            self.thread_id = 0

        def run(self):
            while True:
                self._go.acquire()
                blk = self._block
                while True:
                    self._one(blk, blk.fresh.popleft())
                    nxt = blk.next_turn()
                    if nxt is not FRESH:
                        break                   # otherwise this thread takes the next not yet started
                self._block = None
                idle.append(self)
                if nxt is None:
                    blk.done.release()
                else:
                    nxt._go.release()
                blk = nxt = None                # an idle thread keeps no launch's arguments alive

        def _one(self, blk, point):
            manager = blk.manager
            self._manager, self.blockIdx, self.threadIdx = manager, blk.blockIdx, Dim3(*point)
            x, y, z = point
            self.thread_id = x + blk.blockDim.x * (y + blk.blockDim.y * z)
            self.abort, self.exception, self.debug = False, None, manager._debug
            try:
                if manager._debug:
                    with np.errstate(divide="raise"):
                        manager._f(*blk.args)
                else:
                    manager._f(*blk.args)
            except Exception as e:      # numba's BlockThread.run: the exception names the thread
                tid = "tid=%s" % list(self.threadIdx)
                ctaid = "ctaid=%s" % list(self.blockIdx)
                msg = "%s %s" % (tid, ctaid) if str(e) == "" else "%s %s: %s" % (tid, ctaid, e)
                try:
                    named = type(e)(msg)
                except Exception:       # noqa: BLE001  (a type that takes other arguments: raised as it was)
                    named = e
                blk.fail(named, sys.exc_info()[2])
            except BaseException as e:  # noqa: BLE001  (a KeyboardInterrupt in a kernel: the launch raises it)
                blk.fail(e, e.__traceback__)

        def syncthreads(self):
            blk = self._block
            if blk.aborted:
                self.abort = True
                raise RuntimeError("abort flag set on syncthreads call")
            self.syncthreads_blocked = True
            blk.waiting.append(self)
            nxt = blk.next_turn()
            if nxt is FRESH:
                other = free_thread()
                other._block = blk
                other._go.release()
                self._go.acquire()
            elif nxt is not self:
                nxt._go.release()
                self._go.acquire()
            self.syncthreads_blocked = False
            if blk.aborted:
                self.abort = True
                raise RuntimeError("abort flag set on syncthreads clear")

    def run(self, grid_point, *args):
        with launch_lock[0]:
            blk = Block(self, grid_point, args)
            if not blk.fresh:
                return
            t = free_thread()
            t._block = blk
            t._go.release()
            try:
                blk.done.acquire()
            except BaseException as e:  # interrupted while the block runs: it ends at its next barrier or end
                blk.fail(e, e.__traceback__)
                raise
        if blk.error is not None:
            raise blk.error[0].with_traceback(blk.error[1])

    run.__qualname__ = "numba_sim_block_runner.<locals>.run"
    _pool["runner"] = type("PooledRunner", (), {"run": run, "thread_class": PooledThread})
    return _pool["runner"]
