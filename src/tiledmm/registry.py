"""The kernel registry: every kernel tiledmm can run, by name.

A kernel family (``kernels/simt``, ``kernels/block``, the cuBLAS baseline) registers
``KernelSpec``s; the public API, the harness, the benchmark and the CLI only ever
look kernels up here, so a new rung of the ladder plugs in without touching them.
"""
from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ._arrays import TiledmmError


@dataclass(frozen=True)
class KernelSpec:
    """Everything about one kernel: what it computes on, how it is launched, and what the
    analysis tools need to know of it."""
    name: str
    family: str                      # "simt" | "block" | "library"
    summary: str
    dtypes: tuple[str, ...]
    # launch(a, b, c, *, tile, opts): enqueue P = a @ b into c on the current (torch) stream; a, b, c are
    # torch tensors on the kernels' device (CPU in emulation), 2-D -- or 3-D where ``batched`` -- with any
    # non-negative strides; with ``epilogue`` it also takes alpha= and beta= and computes
    # c = alpha * a @ b + beta * c itself, else the API finishes with the shared epilogue.
    launch: Callable[..., None] = field(repr=False)
    tiles: tuple[int, ...] = ()
    default_tile: int | None = None
    batched: bool = False            # launch takes 3-D (batch, m, k) @ (batch or 1, k, n)
    epilogue: bool = False           # launch applies alpha and beta itself
    options: tuple[str, ...] = ()    # extra keyword options it understands (precision, variant, config)
    emulation_limit: int | None = None   # max multiply-adds in emulation; None = not emulable
    casts_out: bool = False          # launch writes a c of any supported float dtype (else c.dtype == a.dtype)
    # check_options(dtype, opts): raise TiledmmError for options the kernel cannot take with this dtype
    check_options: Callable[[str, dict], object] | None = field(default=None, repr=False)
    # fast_plan(kind, a, precision) -> plan or None: the family's short path for repeat calls on device
    # arrays like ``a``; plan(a, b, out, alpha, beta) returns the result, or None where the full path
    # must handle the call (tiledmm.api tries it first once a call of the kind has succeeded)
    fast_plan: Callable[..., Any] | None = field(default=None, repr=False)
    # preload(): import what launch needs where that takes long (the Triton family: Triton itself, ~0.2 s)
    # and put the loaded hooks on the spec; safe from any thread. tiledmm.api runs it in a thread for
    # host operands, so the import overlaps their copies (or out of core's planning and staging); the
    # loaded spec has None here. launch and fast_plan work without it (they load on first use).
    preload: Callable[[], object] | None = field(default=None, repr=False)
    order: int = 100                 # position in tables and plots (the order of the argument)
    # for the analysis tools (SIMT kernels): the compiled kernel, its launch configuration,
    # the P tile one block computes, and the barriers each K-phase passes
    make: Callable[..., Any] | None = field(default=None, repr=False)            # (tile, dtype) -> kernel
    launch_config: Callable[..., Any] | None = field(default=None, repr=False)   # (tile, J, K, L) -> (grid, block)
    block_tile: Callable[[int | None], tuple[int, int]] | None = field(default=None, repr=False)
    barriers_per_phase: int = 1

    def check_call(self, dtype: str, opts: dict, hint: str = "") -> None:
        """The call's options and dtype against what this kernel takes: one message for every door
        (tiledmm.matmul, the out-of-core and distributed block GEMMs); ``hint`` ends the dtype's."""
        unknown = set(opts) - set(self.options)
        if unknown:
            raise TiledmmError(f"kernel {self.name!r} takes no option(s) {sorted(unknown)}; "
                               f"it understands {list(self.options) or 'none'}")
        if dtype not in self.dtypes:
            raise TiledmmError(f"kernel {self.name!r} supports dtypes {list(self.dtypes)}, not {dtype}{hint}")

    def check_tile(self, tile: int | None) -> int | None:
        """The tile this kernel runs with (its default for None); a TiledmmError names what is wrong."""
        if tile is not None and (isinstance(tile, bool) or not hasattr(type(tile), "__index__")):
            raise TiledmmError(f"tile={tile!r} is a {type(tile).__name__}: give a whole number "
                               f"(e.g. tile={int(tile) if isinstance(tile, str) and tile.isdigit() else 16})")
        if not self.tiles:
            if tile is not None:
                raise TiledmmError(f"kernel {self.name!r} takes no tile (got tile={tile!r})")
            return None
        if tile is None:
            return self.default_tile
        if tile not in self.tiles:
            raise TiledmmError(f"kernel {self.name!r} supports tile in {list(self.tiles)}, got tile={tile!r}")
        return int(tile)

    def emulation_tile(self, m: int, n: int) -> int | None:
        """The tile for an M x N output in the simulator when none was asked for: the smallest of ``tiles``
        whose block holds the whole output where that is below the default, else the default. The simulator
        runs every CUDA thread's code in Python, and a 3 x 5 output in a 16 x 16 block ran 256 of them for 15
        results; each thread still adds along K in order, so the sums are the same. Where the kernel has a
        launch configuration, "holds" is its grid of one block (``block_tile`` is the traffic model's tile:
        the naive kernel's is 1 x 1, yet its TILE x TILE block computes TILE x TILE results)."""
        if not self.tiles or self.default_tile is None or (self.block_tile is None and self.launch_config is None):
            return self.default_tile
        for t in sorted(self.tiles):
            if t >= self.default_tile:
                break
            if self.launch_config is not None:
                if math.prod(self.launch_config(t, m, 1, n)[0]) == 1:
                    return t
            else:
                bm, bn = self.block_tile(t)
                if bm >= m and bn >= n:
                    return t
        return self.default_tile


_REGISTRY: dict[str, KernelSpec] = {}
_lock = threading.Lock()


def register(spec: KernelSpec) -> KernelSpec:
    with _lock:
        if spec.name in _REGISTRY:
            raise RuntimeError(f"kernel {spec.name!r} registered twice")
        _REGISTRY[spec.name] = spec
    return spec


def amend(name: str, **fields: Any) -> KernelSpec:
    """Replace fields of a registered spec (a family adding hooks that live in modules importing
    the one that registers it): the registry holds the new frozen spec from then on."""
    with _lock:
        spec = _REGISTRY[name] = dataclasses.replace(_REGISTRY[name], **fields)
    return spec


# The family module of the kernels a first call most often names, so that such a call imports
# only its own family (numba's import alone costs about a second); any other name loads all.
_HOME = {"triton": "tiledmm.kernels.block", "triton-fp8": "tiledmm.kernels.block", "cublas": "tiledmm.kernels.library"}


def _load(name: str | None = None) -> None:
    import importlib
    if name in _HOME:
        importlib.import_module(_HOME[name])
        if name in _REGISTRY:
            return
    from .kernels import FAMILIES
    for family in FAMILIES:                     # importing a family registers its kernels
        importlib.import_module(family)


# Extensions: layers above the API that the API calls into -- the autograd door of ``tiledmm.ops``
# (torch.autograd around these same kernels, for tensors that need gradients). Named here by module and
# loaded on first use, as the kernel families are: the layer registers its hook (``provide``), so the
# API imports nothing of it and the layers stay acyclic (ops imports the API, never the reverse).
_EXTENSION_HOME = {"autograd": "tiledmm.ops"}
_extensions: dict[str, Callable[..., Any]] = {}


def provide(name: str, hook: Callable[..., Any]) -> None:
    """Register extension ``name``'s hook (its home module does, on import)."""
    _extensions[name] = hook


def extension(name: str) -> Callable[..., Any]:
    """Extension ``name``'s hook, importing its home module on first use."""
    hook = _extensions.get(name)
    if hook is None:
        import importlib
        importlib.import_module(_EXTENSION_HOME[name])
        hook = _extensions[name]
    return hook


def get(name: str) -> KernelSpec:
    spec = _REGISTRY.get(name)
    if spec is not None:
        return spec
    _load(name)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise TiledmmError(f"unknown kernel {name!r}; choose one of {names()}") from None


def names() -> list[str]:
    _load()
    return [s.name for s in sorted(_REGISTRY.values(), key=lambda s: (s.order, s.name))]


def all_specs() -> list[KernelSpec]:
    return [get(n) for n in names()]


def shape_class(m: int, n: int, k: int) -> tuple[int, int, int]:
    """The autotuners' key: log2 buckets of M, N, K, so that a new shape in a known class
    reuses the tuned choice instead of tuning again."""
    return tuple(int(math.log2(max(x, 1))) for x in (m, n, k))


__all__ = ["KernelSpec", "register", "amend", "get", "names", "all_specs", "shape_class", "provide", "extension"]
