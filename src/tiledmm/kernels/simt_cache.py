"""The SIMT kernels' compiled code on disk, so a new process does not compile them again.

numba compiles a kernel on its first launch in every process: about 4.5 s for rung 11 on an H100,
most of ``tiledmm run``'s time. Every rung's factory (``make(tile, dtype)``, ``make_shape``,
``make_async``) hands the kernel it made to ``cached`` with the factory's arguments; the kernel then
keeps its compiled code (PTX and cubin, per signature and GPU architecture) in

    $NUMBA_CACHE_DIR if you set it, else <tiledmm's cache folder>/numba
    (tiledmm's cache folder: $TILEDMM_CACHE_DIR, else $XDG_CACHE_HOME/tiledmm, else ~/.cache/tiledmm)

keyed by a *tag*: the factory's name and arguments and a hash of this package's sources (a changed
kernel file, or a changed helper in ``_tiles.py``, is a new tag), with numba's own key (signature,
architecture, numba-cuda version). ``_adapter.numba_disk_cache`` does the numba side. A load or a
save of a kernel leaves a *ready mark* per tag and GPU architecture, which the Triton dispatcher reads
(``ready``, no numba import) to let rung 11 be a default pick once its kernel is on disk.
``TILEDMM_SIMT_CACHE=off`` turns it off (every process compiles again). In emulation (numba's
simulator) nothing is compiled and nothing cached. This module lives outside ``kernels/simt`` so
that the dispatcher's check imports neither that package nor numba (about a second).
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from .. import _adapter, tuning
from .._backend import emulating

SIMT = Path(__file__).with_name("simt")       # the kernels' sources


def enabled() -> bool:
    return os.environ.get("TILEDMM_SIMT_CACHE", "").strip().lower() not in ("0", "off", "false", "no")


def root() -> Path:
    """Where the compiled kernels go: numba's own folder if you named one, else tiledmm's."""
    user = os.environ.get("NUMBA_CACHE_DIR")
    return Path(user) if user else tuning.cache_dir() / "numba"


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """A hash of every source file of the SIMT kernels (``kernels/simt`` and this module): any edit makes
    new tags."""
    h = hashlib.sha256()
    for f in [*sorted(SIMT.glob("*.py")), Path(__file__)]:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def tag_of(factory: str, *args) -> str:
    """The cache tag of ``factory(*args)``'s kernel (arguments by ``repr``: ints, strings, frozen
    dataclasses)."""
    return "|".join([source_digest(), factory, *(repr(a) for a in args)])


@functools.lru_cache(maxsize=None)
def _numba_cuda_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:
        return "none"


def _mark(tag: str, capability: tuple) -> Path:
    key = f"{tag}|sm{capability[0]}{capability[1]}|numba-cuda{_numba_cuda_version()}"
    return root() / "ready" / hashlib.sha256(key.encode()).hexdigest()[:32]


def cached(kernel, factory: str, *args):
    """``kernel`` (a numba dispatcher made by ``factory(*args)``) with its disk cache; ``kernel``
    itself in emulation, with the cache off, or where numba's cache cannot be attached."""
    if emulating() or not enabled() or getattr(kernel, "_tiledmm_tag", None):
        return kernel
    tag = tag_of(factory, *args)

    def ready():
        from numba import cuda
        path = _mark(tag, tuple(cuda.get_current_device().compute_capability))
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(tag + "\n")
    if _adapter.numba_disk_cache(kernel, tag, str(root() / "kernels"), ready):
        kernel._tiledmm_tag = tag
    return kernel


def ready(factory: str, *args, capability: tuple) -> bool:
    """Whether ``factory(*args)``'s kernel was loaded from or written to the disk cache on a GPU of
    this ``capability`` (so a new process loads it instead of compiling); reads one file's presence."""
    return enabled() and not emulating() and _mark(tag_of(factory, *args), tuple(capability)).exists()


ASYNC = "k11_async.make_async"      # rung 11's factory (its tag's name)


def async_ready(config_name: str, dtype: str, vec_b: bool, capability: tuple) -> bool:
    """Whether rung 11's kernel of this configuration (``k11_async.Config.name``), dtype and copies of
    B (``vec_b``: 16-byte copies of a row-major, aligned B's rows) is on disk for this GPU (``ready``;
    another layout of the operands is another signature, compiled once)."""
    return ready(ASYNC, config_name, dtype, vec_b, True, capability=capability)
