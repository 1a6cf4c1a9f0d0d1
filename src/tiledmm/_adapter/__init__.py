"""Every private interface of Triton, torch and numba that tiledmm uses, in one place.

tiledmm's short path is a few microseconds because it skips the public launch machinery of
its libraries. Those shortcuts use interfaces the libraries do not promise to keep, so each is
here, next to the versions it was checked against, with a public fallback:

=====================================  =========================  ===================================
private interface                      checked against            fallback
=====================================  =========================  ===================================
``CompiledKernel.run(...)`` called     Triton 3.6.0 (CUDA)        ``kernel[grid](...)`` (public)
positionally (grid, stream, function,
packed metadata, three hooks, args);
its C ``launch`` called with the
cooperative/PDL flags and scratch
buffers, after comparing the source
of Triton's Python launcher
(``BoundLaunch``, ``bind_compiled``);
``global_scratch_size/align``,
``profile_scratch_size``, ``num_ctas``
Triton's specialisation of runtime     Triton 3.6.0 (CUDA)        none (tiledmm keys the compiled
arguments mirrored (``int_key``,                                  kernels it launches directly on it)
``arg_key``: ints ==1, %16, 64-bit;
pointers' dtype, 16-byte alignment)
``CompiledKernel(src, group, hash)``    Triton 3.6.0 (CUDA)        Triton's JIT (computes
built from ``get_cache_manager(hash)``                             ``triton_key``, ~0.45 s once)
``.get_group``; ``ASTSource(fn, sig,
constants, attrs)`` (``fn`` may be a
``SourceStub``); ``fn.cache_key``
(the kernel index, below)
the C launch inside Triton's           Triton 3.6.0 (CUDA)        ``kernel[grid](...)`` (public;
``wrap_handle_tensordesc`` (its                                    gluon_gemm, one warning)
closure, compared as source) and
``make_tensordesc_arg`` with a
stand-in descriptor (Gluon kernels)
``torch._C._cuda_getCurrentRawStream``  torch 2.11 / 2.13          ``torch.cuda.current_stream()``
``torch._C._cuda_getDevice``            torch 2.11 / 2.13          ``torch.cuda.current_device()``
``torch._debug_has_internal_overlap``   torch 2.11 / 2.13          zero-stride test
``torch.cuda._sleep``                   torch 2.11 / 2.13          none needed (a GPU busy-wait)
``Tensor._version``, ``StorageWeakRef``  torch 2.11 / 2.13          (kmajor_cache: opt-in only)
numba ``DeviceNDArray`` over a foreign  numba-cuda 0.30.4          numba's ``device_array``
pointer (``MemoryPointer``, ``owner``)
numba's ``CUDACache`` subclassed: its   numba-cuda 0.30.4          no disk cache (the SIMT kernels
``_index_key``, ``_impl_class``, the                               compile in every process)
locator and ``IndexDataCacheFile``
classes, a dispatcher's ``_cache``
``numba.core.config.reload_config``,   numba-cuda 0.30.4          none: emulation's SIMT kernels
``.ENABLE_CUDASIM`` (numba.cuda's mode                             refused with the fix named
after an earlier ``import numba``)
the simulator's ``BlockManager.run``    numba-cuda 0.30.4         numba's runner (a new Python thread
replaced: pooled ``BlockThread``s, one                            per CUDA thread per block, polled)
simulated thread at a time
(``numba_sim_block_runner``)
``JITFunction``,                        Triton 3.9.0 (CPU)        none: a Triton imported before
``InterpretedFunction(fn)`` and                                    tiledmm could not run the block
``knobs.runtime.interpret`` (emulation                             kernels in emulation
after an earlier ``import triton``)
=====================================  =========================  ===================================

Triton's launch shortcuts are used only after a *self-test* on first use: a tiny kernel is
launched through the public path and through both private forms, and its output checked. A pass
is remembered beside the kernel index, keyed by Triton's fingerprint, torch, the driver and the GPU
(``_verdict_path``): a later process under the same conditions skips the test; a failure is never
remembered. On a Triton version not in ``TRITON_CHECKED``, or where the self-test fails, tiledmm
warns once and launches through ``kernel[grid](...)`` for the rest of the process (correct, some
microseconds slower per call). Nothing here imports Triton, torch or numba at import time. The parts beside
this file (launch, gluon_launch, index_entry, store_build, torch_private, numba_private, numba_sim, boot) are re-exported here.

Where direct launches are on, tiledmm also keeps its own *kernel index* (``index_key``,
``remember_compiled``, ``load_compiled``; the folder ``tiledmm-index/`` in Triton's cache folder,
cleared with it): a kernel compiled in one process is found in the next from Triton's disk
cache without Triton's JIT, whose first lookup of a process computes ``triton_key`` (a hash of
libtriton.so and Triton's sources, ~0.45 s). Triton's own key is never replaced. Any miss or
error takes the JIT as before. ``TILEDMM_KERNEL_INDEX=off`` turns the index off.
"""
from __future__ import annotations

import functools
import threading
import warnings

from .. import _backend, _cachefile

TRITON_CHECKED = ("3.6.0",)      # Triton versions whose launcher the direct launch was checked against

# -- Triton: the compiled kernel's launcher -----------------------------------------------------------

_direct: bool | None = None      # None: not decided yet; then whether direct launches are in use
_direct_lock = threading.Lock()
_why_not: str = ""


def triton_direct() -> bool:
    """Whether tiledmm may launch compiled Triton kernels through their launcher directly (decided
    once per process: a checked Triton version on a GPU, and a passing self-test)."""
    global _direct
    if _direct is None:
        if _capturing():
            return False     # the self-test synchronises: not inside a CUDA graph capture (decided later)
        with _direct_lock:
            if _direct is None:
                _direct = _decide()
    return _direct


def _capturing() -> bool:
    if _backend.emulating():
        return False
    import torch
    return torch.cuda.is_current_stream_capturing()


def _decide() -> bool:
    global _why_not
    if _backend.emulating():
        _why_not = "emulation"
        return False         # the interpreter has no launcher to skip: nothing to warn about
    triton_cache_ready()     # before the self-test's compile
    import triton
    if triton.__version__ not in TRITON_CHECKED:
        _why_not = f"Triton {triton.__version__} is not among the versions checked {list(TRITON_CHECKED)}"
    elif not _passed_before(verdict := _verdict_path()):
        try:
            _why_not = _self_test()
        except Exception as e:   # noqa: BLE001  whatever a changed launcher raises, the public path stays
            _why_not = f"self-test raised {type(e).__name__}: {str(e)[:200]}"
        if not _why_not and verdict is not None:
            try:
                _write_atomic(verdict, "passed")
            except OSError:     # a read-only cache folder: the next process tests again
                pass
    if _why_not:
        warnings.warn(f"tiledmm: {_why_not}; launching Triton kernels through kernel[grid](...) instead "
                      "(correct, a few microseconds slower per call)", RuntimeWarning, stacklevel=3)
        return False
    return True


def _verdict_path():
    """Where a passed self-test is remembered: beside the kernel index, keyed by Triton's fingerprint
    (version, install and files: its launcher's source among them), torch's version and CUDA, the GPU
    and the driver -- whatever could make the launch it checks behave differently. None where the
    index is off or a part cannot be had."""
    try:
        if not _index_on():
            return None
        import hashlib

        import torch
        driver = getattr(torch._C, "_cuda_getDriverVersion", lambda: None)()
        parts = (triton_fingerprint(), torch.__version__, torch.version.cuda, driver, gpu_target(),
                 torch.cuda.get_device_name())
        return _index_path("selftest-" + hashlib.sha256(repr(parts).encode()).hexdigest())
    except Exception:   # noqa: BLE001  no verdict kept: the self-test runs
        return None


def _passed_before(path) -> bool:
    """Whether the self-test passed in an earlier process under the same conditions (``path``: its
    ``_verdict_path``): then this process skips it (~0.07 s of a first call: the probe's load, three
    launches, a sync). A file that is not a kept pass is a miss (one warning): the test runs."""
    def kept_pass(text: str) -> bool:
        _cachefile.need(text == "passed", "not a kept pass")
        return True
    return path is not None and bool(_cachefile.read_text(path, "kept self-test", kept_pass,
                                                          then="ignored: the self-test runs"))


def _write_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (``_cachefile.write_atomic``; the index folder is
    tiledmm's own: a damaged entry or a file in the folder's place is replaced). Raises OSError."""
    _cachefile.write_atomic(path, text, own_folder=True)


def decided() -> bool:
    """Whether ``triton_direct`` has decided (it waits while a CUDA graph is being captured)."""
    return _direct is not None


def why_not_direct() -> str:
    """Why direct launches are off ("" where they are on or undecided)."""
    return _why_not


def _self_test() -> str:
    """Launch a probe kernel through the public path, ``CompiledKernel.run`` (``run_compiled``) and its
    ``BoundLaunch`` (the C launch, as every direct launch calls it); "" where all three wrote what they
    should, else what went wrong. The probe comes from the kernel index where it is there (no JIT, no
    ``triton_key``), launched publicly by ``CompiledKernel[grid]``."""
    import torch

    from .._adapter_probe import probe_kernel
    n, block = 300, 64
    grid = -(-n // block)
    x = torch.zeros(3, n, dtype=torch.int32, device="cuda")
    key = index_key(probe_kernel, {"BLOCK": block}, 4, 3, (str(x.dtype), x.data_ptr() % 16 == 0))
    ck = load_compiled(key, probe_kernel)
    if ck is None:
        ck = probe_kernel[(grid,)](x[0], n, 5, BLOCK=block, num_warps=4, num_stages=3)   # public; compiles
        remember_compiled(key, ck)
    else:                                                             # the index's kernel, launched publicly
        ck[(grid, 1, 1)](x[0], n, 5, block)
    stream = raw_stream(torch.cuda.current_device())
    run_compiled(ck, grid, 1, 1, stream, (x[1], n, 7, block))
    bound = bind_compiled(ck, checked=False)
    if bound is None:
        return "Triton's launcher has an unknown body"
    if bound.scratch_bytes:
        return "the probe kernel asks for global scratch"
    bound(grid, 1, 1, stream, None, x[2].data_ptr(), n, 9, block)
    torch.cuda.synchronize()
    want = torch.arange(n, dtype=torch.int32, device="cuda")
    for row, value in enumerate((5, 7, 9)):
        if not torch.equal(x[row], want + value):
            return f"self-test launch {row} wrote wrong values"
    return ""


# -- Triton: tiledmm's own index of compiled kernels ----------------------------------------------------
#
# (module docstring.) One small JSON file per kernel: the key is made of cheap parts -- the JIT
# function's source key, the meta-parameters, the specialisation, the GPU target, the cache-invalidating
# environment, Triton's version and the path, size and mtime of its installed files (not their content);
# the entry names Triton's cache entry (hash, kernel name) and holds the signature, constants and attrs
# the launcher is built from. A hit builds the CompiledKernel as Triton's ``compile`` does on a cache hit.

_fingerprint: str | None = None


def _index_on() -> bool:
    import os
    if os.environ.get("TILEDMM_KERNEL_INDEX", "").lower() in ("off", "0", "no", "false") or _backend.emulating():
        return False
    import triton
    return triton.__version__ in TRITON_CHECKED


def triton_fingerprint() -> str:
    """Triton's version and install folder, and the path, size and mtime of every file under the parts
    ``triton_key`` hashes (runtime, compiler, backends -- with ptxas and libdevice, without the CUDA
    headers and CUPTI --, language, _C): computed once per process."""
    global _fingerprint
    if _fingerprint is None:
        import hashlib
        import os
        import triton
        root = os.path.dirname(os.path.abspath(triton.__file__))
        h = hashlib.sha256(f"{triton.__version__}|{root}".encode())
        for sub in ("runtime", "compiler", "backends", "language", "_C"):
            for folder, dirs, files in os.walk(os.path.join(root, sub)):
                dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "include") and "cupti" not in d)
                for name in sorted(files):
                    st = os.stat(os.path.join(folder, name))
                    h.update(f"|{folder[len(root):]}/{name}:{st.st_size}:{st.st_mtime_ns}".encode())
        _fingerprint = h.hexdigest()
    return _fingerprint


def gpu_target() -> tuple:
    """(backend, arch, warp size) of the current device, as Triton compiles for it."""
    from triton.runtime import driver
    t = driver.active.get_current_target()
    return t.backend, t.arch, t.warp_size


class IndexKey(str):
    """A kernel-index key (the text: this machine's, ``triton_fingerprint`` in it) carrying the same
    specialisation's *shipped key* in ``shipped``: the one key of the package's compiled kernels
    (``load_compiled`` looks it up on a miss), made of parts that are alike on every machine with this
    tiledmm and this Triton version."""
    shipped: str | None = None


def index_key(fn, meta: dict, num_warps: int, num_stages: int, spec) -> IndexKey | None:
    """tiledmm's key of one specialisation of JIT function ``fn`` (None where the index is off or a
    part cannot be had), with its shipped key (``IndexKey``). ``spec``: what the launch's runtime
    arguments specialise on (any value with a stable repr). ``fn`` may instead be a string that stands
    for its source: a hash of the whole file that defines it (a kernel whose module should not be
    imported just to look it up: gluon-ws)."""
    triton_cache_ready()     # (a lookup comes before the first compile of a kernel)
    if not _index_on():
        return None
    try:
        import hashlib

        import triton
        from triton import knobs
        from triton._C.libtriton import get_cache_invalidating_env_vars
        if knobs.compilation.always_compile:
            return None
        common = (fn if isinstance(fn, str) else fn.cache_key, sorted(meta.items()), num_warps, num_stages, spec,
                  gpu_target())
        rest = (sorted(get_cache_invalidating_env_vars().items()), getattr(fn, "debug", None), knobs.runtime.debug,
                knobs.compilation.instrumentation_mode)
        key = IndexKey(hashlib.sha256(repr((*common, triton_fingerprint(), *rest)).encode()).hexdigest())
        key.shipped = hashlib.sha256(repr(("shipped", *common, triton.__version__, *rest)).encode()).hexdigest()
        return key
    except Exception:   # noqa: BLE001  a changed Triton: no index, the JIT as before
        return None


def _index_path(key: str):
    """Beside Triton's own cache (an index into it: cleared with it, shared by every tiledmm
    cache folder), in a folder of tiledmm's own: ``<Triton's cache>/tiledmm-index/``."""
    from pathlib import Path

    from triton import knobs
    return Path(knobs.cache.dir) / "tiledmm-index" / f"{key}.json"


def remember_compiled(key: str | None, ck, **notes) -> None:
    """Record the CompiledKernel ``ck`` under ``key`` (atomic write; another process writing the same
    key writes the same), with the caller's ``notes`` (JSON values: facts about the kernel that
    ``load_compiled(require=...)`` can ask for). Nothing where the key is None or ``ck`` has a
    constant JSON cannot hold."""
    if key is None or ck is None:
        return
    import json
    try:
        src = ck.src
        entry = {"hash": ck.hash, "name": ck.name,
                 "source": [type(src).__module__, type(src).__qualname__],
                 "signature": dict(src.signature),
                 "constants": [[list(k), _encode(v)] for k, v in src.constants.items()],
                 "attrs": [[list(k), v] for k, v in src.attrs.items()], "notes": notes,
                 "shipped": getattr(key, "shipped", None)}       # (what export_compiled ships it under)
        _write_atomic(_index_path(key), json.dumps(entry))
    except Exception:   # noqa: BLE001  (a read-only cache folder, an odd constant): not remembered
        pass


def load_compiled(key: str | None, fn=None, require: dict | None = None):
    """The CompiledKernel recorded under ``key``, built from Triton's cache entry (its handles loaded
    on the current device), without Triton's JIT; None where there is none, its notes lack an item of
    ``require``, or anything is amiss. ``fn``: the JIT function the entry belongs to (its source object
    refers to it), or a ``SourceStub`` for it."""
    if key is None:
        return None
    try:
        entry = _cachefile.read_json(_index_path(key), "kernel-index entry", _index_entry,
                                     then="ignored: Triton's JIT finds the kernel")
    except Exception:   # noqa: BLE001  an unreadable cache folder: a miss
        return None
    if entry is None:     # not compiled here before (or damaged): the package's compiled kernels, if it has it
        return _load_shipped(key, fn, require)
    return _from_entry(entry, fn, require)


def _from_entry(entry: dict, fn, require: dict | None, group: dict | None = None):
    """The CompiledKernel an index entry describes (``group``: its files, else Triton's cache entry's),
    loaded on the current device; None where anything is amiss."""
    import importlib
    try:
        notes = entry.get("notes") or {}
        if any(notes.get(k) != v for k, v in (require or {}).items()):
            return None
        from triton.compiler import compiler
        from triton.runtime.cache import get_cache_manager
        module, qualname = entry["source"]
        if not module.startswith("triton."):
            return None
        if isinstance(fn, SourceStub):
            source = compiler.ASTSource
        else:
            source = getattr(importlib.import_module(module), qualname)
        name = entry["name"]
        group = group or get_cache_manager(entry["hash"]).get_group(f"{name}.json")
        if not group or f"{name}.json" not in group:
            return None
        constants = {tuple(k): _decode(v) for k, v in entry["constants"]}
        attrs = {tuple(k): v for k, v in entry["attrs"]}
        src = source(fn, entry["signature"], constants, attrs)
        ck = compiler.CompiledKernel(src, group, entry["hash"])
        if ck.name != name or ck.hash != entry["hash"]:
            return None
        ck.run            # loads the binary and builds the launcher now: a failure is a miss
        return ck
    except Exception:   # noqa: BLE001  missing or corrupt entry, a changed Triton: a miss
        return None


# -- Triton: its cache folder ------------------------------------------------------------------------------
#
# Triton cannot compile without writing its cache folder (``knobs.cache.dir``: TRITON_CACHE_DIR, else
# ~/.triton/cache); an unusable one (under a file, read-only, full) would end the first compile with a raw
# OSError. ``triton_cache_ready`` looks once, before the first compile, and where Triton cannot write
# there, gives it a private temporary folder for the process (``_cachefile.usable_folder``: one warning).

_cache_ready = False
_cache_lock = threading.Lock()


def triton_cache_ready() -> None:
    """Make sure Triton can write its cache folder, once per process (on a GPU; the interpreter writes
    none): see above. Raises TiledmmError where no folder can be written."""
    global _cache_ready
    if _cache_ready:
        return
    with _cache_lock:
        if not _cache_ready:
            if not _backend.emulating():
                _settle_triton_cache()
                _early_modules()
            _cache_ready = True


def _early_modules() -> None:
    """The store's compiled launchers and driver helpers into Triton's cache before Triton's driver is first
    made (it builds its helpers then): ``store_build.install_modules``."""
    try:
        import triton
        store = _prebuilt_store(triton.__version__) if _prebuilt_on() and _index_on() else None
        if store is not None:
            from .store_build import install_modules
            install_modules(store)
    except Exception:   # noqa: BLE001  a damaged store or cache: Triton builds its own, as without a store
        pass


def _settle_triton_cache() -> str:
    """The folder Triton keeps compiled kernels in: its own where writable, else a private one for this
    process (``knobs.cache.dir``, and TRITON_CACHE_DIR for child processes)."""
    import os

    from triton import knobs
    folder = knobs.cache.dir
    usable = _cachefile.usable_folder(folder, "Triton's cache folder", "TRITON_CACHE_DIR",
                                      "its kernels are compiled again in every process")
    if usable != folder:
        knobs.cache.dir = usable
        os.environ["TRITON_CACHE_DIR"] = usable
    return usable


# -- Triton: compiled kernels shipped in the package ------------------------------------------------------
#
# The kernel index made portable: a miss in this machine's index looks the specialisation's shipped key
# (``IndexKey.shipped``) up in the package's store of compiled kernels, one per Triton version:
# ``kernels/block/prebuilt/triton-<version>.json`` (index: shipped key -> the entry ``remember_compiled``
# writes, and its files) and ``prebuilt/blobs/`` (each distinct file once, gzipped, named by a hash of
# its content). A hit installs the kernel's files into Triton's cache and its entry into the local index
# (the next process finds it there) and compiles nothing. scripts/build_kernels.py writes the store on a
# GPU (``export_compiled``). A store only for other Triton versions that covers this GPU: one warning,
# and the JIT compiles as before; ``TILEDMM_PREBUILT=off`` leaves the store alone.

# 2: a kernel's signature as [name, type] pairs (its order is the launch's argument order: a JSON object
# can lose it to key sorting)
PREBUILT_FORMAT = 2
_prebuilt_warned = False


def prebuilt_dir():
    """The package's store of compiled kernels."""
    from pathlib import Path
    return Path(__file__).parent.parent / "kernels" / "block" / "prebuilt"


def _prebuilt_on() -> bool:
    import os
    return os.environ.get("TILEDMM_PREBUILT", "").lower() not in ("off", "0", "no", "false")


def read_prebuilt(path) -> bytes | None:
    """One file of the store, or None where it is missing or unreadable (the one reader of the store's
    files: a damaged one is a miss)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def _prebuilt_store(version: str):
    """The store's index for Triton ``version`` (its kernels by shipped key, its targets), or None."""
    import json
    data = read_prebuilt(prebuilt_dir() / f"triton-{version}.json")
    try:
        doc = json.loads(data) if data is not None else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != PREBUILT_FORMAT or doc.get("triton") != version:
        return None
    return doc


@functools.lru_cache(maxsize=None)
def _other_versions(target: tuple) -> list[str]:
    """The Triton versions the store holds kernels for ``target`` of, other than this one's."""
    import json

    import triton
    out = []
    for p in sorted(prebuilt_dir().glob("triton-*.json")):
        try:
            doc = json.loads(read_prebuilt(p) or b"")
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("triton") != triton.__version__ and \
                list(target) in [list(t) for t in doc.get("targets", [])]:
            out.append(str(doc.get("triton")))
    return out


def _load_shipped(key, fn, require: dict | None):
    """The package's compiled kernel for ``key.shipped`` (see above), installed into Triton's cache and
    the local index; None where the store lacks it (after one warning per process where the store is
    another Triton version's for this GPU)."""
    global _prebuilt_warned
    shipped = getattr(key, "shipped", None)
    if shipped is None or not _prebuilt_on():
        return None
    try:
        import triton
        store = _prebuilt_store(triton.__version__)
        if store is None:
            if not _prebuilt_warned:
                others = _other_versions(tuple(gpu_target()))
                if others:
                    _prebuilt_warned = True
                    warnings.warn(f"tiledmm: its compiled kernels were built with Triton {', '.join(others)}; this "
                                  f"is Triton {triton.__version__}: kernels compile on their first use instead",
                                  RuntimeWarning, stacklevel=4)
            return None
        entry = store["kernels"].get(shipped)
        if entry is None or any((entry.get("notes") or {}).get(k) != v for k, v in (require or {}).items()):
            return None
        from .store_build import install_entry     # (its launchers went in with triton_cache_ready, before)
        group = install_entry(entry)
        if group is None:
            return None
        local = {k: v for k, v in entry.items() if k != "files"}
        local["signature"] = {name: kind for name, kind in entry["signature"]}    # in parameter order
        ck = _from_entry(local, fn, require, group)
        if ck is not None:
            import json
            try:
                _write_atomic(_index_path(key), json.dumps(local))
            except OSError:     # a read-only cache: the next process installs it again
                pass
        return ck
    except Exception:   # noqa: BLE001  a damaged store, a changed Triton: the JIT as before
        return None


# The adapter's other parts, each one kind of private interface, re-exported: callers use ``_adapter.X``.
from .index_entry import SourceStub, _decode, _encode, _index_entry  # noqa: E402,F401
from .launch import BoundLaunch, arg_key, bind_compiled, int_key, run_compiled  # noqa: E402,F401
from .gluon_launch import TensorDescLaunch, ensure_context, tensordesc_launch  # noqa: E402,F401
from .store_build import export_compiled  # noqa: E402,F401
from .torch_private import (device_getter, gpu_sleep, internal_overlap, raw_stream, raw_stream_getter,  # noqa: E402,F401
                            storage_weakref, symmetric_memory, torch_stream, version_counter)
from .boot import interpret_imported_triton, numba_simulator_ready  # noqa: E402,F401
from .numba_private import numba_array_maker, numba_disk_cache, numba_opt_in_shared, numba_pointer  # noqa: E402,F401
from .numba_sim import (numba_is_sim_array, numba_sim_array, numba_sim_hooks, numba_sim_thread,  # noqa: E402,F401
                        numba_sim_block_runner)

__all__ = ["TRITON_CHECKED", "triton_direct", "triton_cache_ready", "index_key", "load_compiled",
           "remember_compiled", "triton_fingerprint", "decided", "why_not_direct", "run_compiled", "BoundLaunch",
           "bind_compiled", "int_key", "arg_key",
           "TensorDescLaunch", "tensordesc_launch", "ensure_context", "raw_stream", "raw_stream_getter",
           "torch_stream", "device_getter", "internal_overlap", "gpu_sleep", "version_counter", "storage_weakref",
           "numba_array_maker", "numba_disk_cache", "IndexKey", "export_compiled", "prebuilt_dir", "read_prebuilt",
           "interpret_imported_triton", "numba_simulator_ready"]
