"""Small kernels for the tests of numba's simulator as tiledmm runs it (tiledmm._adapter's pooled block runner).
Imported in emulation only. ``cuda`` is a module global: the simulator swaps globals bound to numba.cuda for
its fake module during a launch."""
import threading

import numpy as np

from tiledmm import _backend

cuda = _backend.numba_cuda()
ran = []       # (blockIdx.x, linear thread index, Python thread) of each thread of `plain`


@cuda.jit
def plain(out):
    t = cuda.threadIdx.x + cuda.blockDim.x * cuda.threadIdx.y
    out[cuda.blockIdx.x, t] = t + 100 * cuda.blockIdx.x
    ran.append((cuda.blockIdx.x, t, threading.get_ident()))


@cuda.jit
def barriers(out, counts):
    sh = cuda.shared.array(32, np.int64)
    t = cuda.threadIdx.x
    sh[t] = t
    counts[t] = cuda.syncthreads_count(t % 3 == 0)
    out[t] = sh[(t + 1) % 32]               # written by another thread before the barrier
    if t >= 30:
        return                              # the next barrier holds the 30 threads still running
    cuda.syncthreads()
    sh[t] = 2 * t
    cuda.syncthreads()
    out[t] += sh[29 - t]


@cuda.jit
def fails(out):
    t = cuda.threadIdx.x
    sh = cuda.shared.array(16, np.float32)
    sh[t] = 1.0
    cuda.syncthreads()
    out[t + 11 * (t == 5)] = sh[t]          # thread 5 stores past the end; the others wait at the barrier
    cuda.syncthreads()
