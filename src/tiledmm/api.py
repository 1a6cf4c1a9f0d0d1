"""The public API: ``tiledmm.matmul``."""
from __future__ import annotations

from typing import Any

from . import _backend, registry
from ._arrays import SUPPORTED_DTYPES, Operand, TiledmmError, empty_like_kind, fill
from .registry import KernelSpec


def default_kernel(dtype: str) -> str:
    """The kernel ``matmul`` uses when none is named."""
    names = registry.names()
    if not _backend.emulating() and "triton" in names and dtype != "float64":
        return "triton"
    return "tiled"


def _validate_pair(A: Operand, B: Operand, spec: KernelSpec) -> tuple[int, ...]:
    both = f"{A.describe()}; {B.describe()}"
    ranks = (3, 2) if spec.batched else (2,)
    for X in (A, B):
        if len(X.shape) not in ranks and not (spec.batched and len(X.shape) == 2):
            want = "2-D (or 3-D batched)" if spec.batched else "2-D"
            raise TiledmmError(f"kernel {spec.name!r} needs {want} matrices; got {both}")
    if len(A.shape) != len(B.shape):
        raise TiledmmError(f"a and b must have the same rank; got {both}")
    for X in (A, B):
        if X.dtype not in SUPPORTED_DTYPES:
            raise TiledmmError(f"unsupported dtype {X.dtype} ({X.name}); tiledmm supports {list(SUPPORTED_DTYPES)}")
    if A.dtype != B.dtype:
        raise TiledmmError(f"mixed dtypes: {both}; convert one so both have the same dtype")
    if A.dtype not in spec.dtypes:
        raise TiledmmError(f"kernel {spec.name!r} supports dtypes {list(spec.dtypes)}, not {A.dtype}")
    if A.device != B.device:
        raise TiledmmError(f"a and b are on different devices: {both}")
    if A.kind != B.kind:
        raise TiledmmError(f"a and b are different array kinds: {both}; pass two of the same kind")
    if A.shape[-1] != B.shape[-2]:
        raise TiledmmError(f"inner dimensions differ: a is {'x'.join(map(str, A.shape))}, "
                           f"b is {'x'.join(map(str, B.shape))} (a's columns must equal b's rows)")
    if len(A.shape) == 3 and A.shape[0] != B.shape[0]:
        raise TiledmmError(f"batch sizes differ: {both}")
    return (*A.shape[:-1], B.shape[-1])


def _validate_out(out: Any, A: Operand, shape: tuple, dtype: str) -> Operand:
    O = Operand.of(out, "out")
    if O.shape != shape or O.dtype != dtype or O.device != A.device or O.kind != A.kind:
        raise TiledmmError(
            f"out must be a {A.kind} {'x'.join(map(str, shape))} {dtype} array on {A.device}; got {O.describe()}")
    return O


def matmul(a: Any, b: Any, *, kernel: str | None = None, tile: int | None = None,
           out: Any = None, **options: Any) -> Any:
    """P = a @ b with a tiledmm kernel.

    a, b: numpy arrays, torch tensors (CPU or CUDA), CuPy arrays or numba device
        arrays, both of one kind, device and dtype (float32 or float64 for the SIMT
        kernels). Device arrays are used in place, with any strides; host arrays are
        copied to the GPU (contiguous) and the result copied back.
    kernel: a name from ``tiledmm.kernel_names()``; default: the fastest correct one.
    tile: the kernel's tile width (``TILE_WIDTH``), where it has one.
    out: optional array of the inputs' kind receiving the result.
    Returns the result in the inputs' kind (``out`` itself when given).
    Inputs are never modified.
    """
    A, B = Operand.of(a, "a"), Operand.of(b, "b")
    spec = registry.get(kernel or default_kernel(A.dtype))
    tile = spec.check_tile(tile)
    unknown = set(options) - set(spec.options)
    if unknown:
        raise TiledmmError(f"kernel {spec.name!r} takes no option(s) {sorted(unknown)}; "
                           f"it understands {list(spec.options) or 'none'}")
    shape = _validate_pair(A, B, spec)
    out_dtype = options.get("out_dtype") or A.dtype
    if out is not None and "out_dtype" in spec.options and "out_dtype" not in options:
        given = Operand.of(out, "out").dtype   # the block kernels write any float dtype ``out`` has
        out_dtype = given if given in ("float32", "float16", "bfloat16") and A.dtype != "float64" else out_dtype
    O = _validate_out(out, A, shape, out_dtype) if out is not None else \
        Operand.of(empty_like_kind(A, shape, out_dtype), "out")
    m, n, k = shape[-2], shape[-1], A.shape[-1]
    batch = shape[0] if len(shape) == 3 else 1
    if batch * m * n == 0:
        return O.obj
    if k == 0:
        fill(O, 0.0)
        return O.obj
    if _backend.emulating():
        work = batch * m * n * k
        if spec.emulation_limit is None:
            raise TiledmmError(f"kernel {spec.name!r} needs a GPU; none is in use (emulation)")
        limit = _backend.emulation_limit(spec.emulation_limit)
        if work > limit:
            raise TiledmmError(
                f"{'x'.join(map(str, A.shape))} @ {'x'.join(map(str, B.shape))} is {work:,} multiply-adds, "
                f"over the emulation limit of {limit:,} for kernel {spec.name!r}: with no GPU "
                "the kernel runs in a simulator, a Python thread per CUDA thread (64^3 takes 10-100 s). "
                "Use smaller matrices, a GPU, or raise TILEDMM_EMULATION_LIMIT if you will wait.")
    launch = spec.prepare(A, B, O, tile, options)
    launch.run()
    launch.finish()
    return O.obj


def kernel_names() -> list[str]:
    """Names of every registered kernel, in the order of the argument."""
    return registry.names()
