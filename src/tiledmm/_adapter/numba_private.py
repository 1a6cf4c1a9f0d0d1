"""The adapter's part for numba-cuda's private interfaces: device arrays over foreign memory, their raw
pointers and the SIMT kernels' disk cache (see the package's docstring for the versions; the simulator's
are in numba_sim)."""
from __future__ import annotations

import functools
from typing import Callable

# -- numba ---------------------------------------------------------------------------------------------

def numba_array_maker(index: int):
    """``f(shape, strides, dtype, pointer, nbytes, owner)``: a numba DeviceNDArray over device memory
    that ``owner`` keeps alive (numba-cuda 0.30.4's ``MemoryPointer(context, pointer, size,
    owner=)``); None where numba has none of that (callers use numba's ``device_array``)."""
    try:
        from numba.cuda.cudadrv import devicearray, devices, driver   # (the caller has imported numba)
        context = devices.get_context(index)
        pointer, memory, array = driver.binding.CUdeviceptr, driver.MemoryPointer, devicearray.DeviceNDArray
    except (ImportError, AttributeError):
        return None

    def make(shape, strides, dtype, ptr: int, nbytes: int, owner):
        return array(shape, strides, dtype, gpu_data=memory(context, pointer(ptr), nbytes, owner=owner))
    return make


def numba_pointer(x) -> int:
    """The device address of numba device array ``x`` (0 for none): numba-cuda 0.30.4's
    ``DeviceNDArray.gpu_data.device_pointer_value``, read without building the ctypes pointer that the
    public ``device_ctypes_pointer`` makes on each call (the short path reads it per operand)."""
    return x.gpu_data.device_pointer_value or 0


def numba_disk_cache(kernel, tag: str, root: str, on_ready: Callable[[], object] | None = None) -> bool:
    """Give the numba CUDA kernel ``kernel`` (a dispatcher not yet compiled) a disk cache in ``root``
    keyed by ``tag`` -- a text that names everything its factory froze into it (numba-cuda 0.30.4's
    ``CUDACache`` subclassed). numba's own ``cache=True`` keys a kernel by its bytecode and a pickle
    of its closure, which for a factory's kernel holds other dispatchers (pickled by value, their
    own closures included) and misses its jit options (``launch_bounds``); here the closure's hash is
    replaced by the tag's. Each tag has its own index and data files, a data file named by a hash of
    its key, so processes that compile different kernels at once never overwrite each other's data
    (numba numbers data files per index). A damaged or unreadable file is a miss, a failed write is
    ignored. ``on_ready()`` is called after a kernel was loaded from or written to the disk. False
    (nothing changed: the kernel compiles in every process, as before) where this numba differs or
    the folder cannot be written."""
    cls = _numba_cache_class(str(root))
    if cls is None or not hasattr(kernel, "_cache") or not hasattr(kernel, "py_func"):
        return False
    try:
        kernel._cache = cls(kernel.py_func, tag, on_ready)
    except Exception:  # noqa: BLE001 -- no locator (a read-only folder), another numba: no disk cache
        return False
    return True


@functools.lru_cache(maxsize=None)
def _numba_cache_class(root: str):
    """The tagged cache class (``numba_disk_cache``) of one cache folder, or None."""
    import hashlib
    import os
    try:
        import numba_cuda
        from numba.cuda.dispatcher import CUDACache, CUDACacheImpl
        try:
            from numba.cuda.core.caching import IndexDataCacheFile, _CacheLocator, _SourceFileBackedLocatorMixin
        except ImportError:     # numba-cuda before its own copy of numba's caching
            from numba.core.caching import IndexDataCacheFile, _CacheLocator, _SourceFileBackedLocatorMixin
    except ImportError:
        return None

    def sha(x) -> str:
        return hashlib.sha256(x if isinstance(x, bytes) else str(x).encode()).hexdigest()

    class Locator(_SourceFileBackedLocatorMixin, _CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(root, self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self):
            return self._cache_path

    class Impl(CUDACacheImpl):
        _locator_classes = [Locator]

    class KeyedFile(IndexDataCacheFile):
        def __init__(self, cache_path, filename_base, source_stamp):
            super().__init__(cache_path, filename_base, source_stamp)
            self._base = filename_base

        def save(self, key, data):
            name = f"{self._base}.{sha(repr(key))[:20]}.nbc"
            self._save_data(name, data)          # the data first, then the index entry naming it
            try:
                overloads = self._load_index()
            except Exception:  # noqa: BLE001 -- a damaged index: started again
                overloads = {}
            overloads[key] = name
            self._save_index(overloads)

    class TaggedCache(CUDACache):
        _impl_class = Impl

        def __init__(self, py_func, tag: str, on_ready):
            self._tag, self._on_ready = tag, on_ready
            super().__init__(py_func)
            self._cache_file = KeyedFile(self._cache_path, f"{self._impl.filename_base}-{sha(tag)[:16]}",
                                         self._impl.locator.get_source_stamp())

        def _index_key(self, sig, codegen):
            key = (sig, codegen.magic_tuple(), getattr(numba_cuda, "__version__", ""),
                   (sha(self._py_func.__code__.co_code), sha(self._tag)))
            if getattr(self, "_launch_config_key", None) is not None:
                key += (("launch_config", self._launch_config_key),)
            return key

        def load_overload(self, sig, target_context):
            try:
                data = super().load_overload(sig, target_context)
            except Exception:  # noqa: BLE001 -- damaged, truncated, another format: a miss
                return None
            if data is not None:
                self._ready()
            return data

        def save_overload(self, sig, data):
            try:
                super().save_overload(sig, data)
            except Exception:  # noqa: BLE001 -- a full disk, a read-only folder: compiled again next time
                return
            self._ready()

        def _ready(self):
            if self._on_ready is not None:
                try:
                    self._on_ready()
                except Exception:  # noqa: BLE001 -- a marker not written: only a later pick is the poorer
                    pass
    return TaggedCache


def numba_opt_in_shared(kernel, args, nbytes: int, done: set) -> None:
    """Let numba kernel ``kernel``, compiled for ``args``, take ``nbytes`` of dynamic shared memory on its
    device (over 48 KiB is opt-in, ``cuKernelSetAttribute``), once per loaded function and device (``done``
    remembers them). numba-cuda 0.30.4's compiled kernel's ``_codelibrary.get_cufunc()`` and driver binding."""
    from numba.cuda.cudadrv import driver as drv
    compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    cufunc = compiled._codelibrary.get_cufunc()
    key = (id(cufunc), cufunc.device.id)
    if key in done:
        return
    attr = drv.binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    drv.driver.cuKernelSetAttribute(attr, nbytes, cufunc.handle, cufunc.device.id)
    done.add(key)
