"""The grouped product's engine below the operator layer: validation (``check``, which the operator's fake
implementation calls too) and the product without autograd (``compute``, the operator's kernel), launching
``kernels/block/grouped.py``. ``tiledmm.grouped`` is the public door (see its docstring for the layouts)."""
from __future__ import annotations

from typing import Any, NamedTuple

from . import _backend
from ._arrays import TiledmmError

_backend.mode()     # GPU or emulation is decided before torch is imported (importing torch may import triton)
import torch  # noqa: E402

from .ops._impl import check_activation  # noqa: E402

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
EMULATION_LIMIT = 2 ** 20       # multiply-adds a call may take in the interpreter (TILEDMM_EMULATION_LIMIT)


class Problem(NamedTuple):
    layout: str          # "m", "n", "k" or "batch" (kernels/block/grouped.py)
    shape: tuple         # the result's
    dtype: Any           # the result's torch dtype
    groups: int
    work: int            # multiply-adds, at most


def _what(t, name: str) -> str:
    if not isinstance(t, torch.Tensor):
        return f"{name}: {type(t).__name__}"
    dev = "cpu" if t.device.type == "cpu" else f"{t.device.type}:{t.device.index or 0}"
    return f"{name}: {'x'.join(map(str, t.shape)) or 'scalar'} {str(t.dtype).replace('torch.', '')} on {dev}"


def check(a, b, offs=None, bias=None, out_dtype=None, act: str = "none", out=None) -> Problem:
    """Validate a call (one-line TiledmmErrors naming shapes, dtypes and devices; the operator's fake
    implementation calls this too, so nothing here reads data); returns what the call computes."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TiledmmError(f"grouped_matmul takes torch tensors; got {_what(t, name)}")
        if t.dim() not in (2, 3):
            raise TiledmmError(f"grouped_matmul takes 2-D or 3-D operands; got {_what(a, 'a')}; {_what(b, 'b')}")
        if t.dtype not in _DTYPES:
            raise TiledmmError(f"unsupported dtype: {_what(t, name)}; grouped_matmul takes float32, float64, "
                               "float16, bfloat16")
    if a.dtype != b.dtype:
        raise TiledmmError(f"mixed dtypes: {_what(a, 'a')}; {_what(b, 'b')}; convert one so both have the same dtype")
    if a.device != b.device:
        raise TiledmmError(f"a and b are on different devices: {_what(a, 'a')}; {_what(b, 'b')}")
    layout = {(2, 3): "m", (3, 2): "n", (2, 2): "k", (3, 3): "batch"}[a.dim(), b.dim()]
    if a.shape[-1] != b.shape[-2]:
        raise TiledmmError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} (a's last "
                           f"dimension, {a.shape[-1]}, must equal b's second-to-last, {b.shape[-2]})")
    if layout == "batch":
        if offs is not None:
            raise TiledmmError(f"3-D a and b are equal groups: offs must be None; got {_what(offs, 'offs')}")
        if a.shape[0] != b.shape[0]:
            raise TiledmmError(f"group counts differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
        G = a.shape[0]
    else:
        along = {"m": "a's rows", "n": "b's columns", "k": "K"}[layout]
        if not isinstance(offs, torch.Tensor):
            raise TiledmmError(f"a {a.dim()}-D a and {b.dim()}-D b need offs, the int32 group ends along {along} "
                               f"(1-D, on {a.device}); got {_what(offs, 'offs') if offs is not None else 'None'}")
        if offs.dim() != 1 or offs.dtype != torch.int32 or offs.device != a.device:
            raise TiledmmError(f"offs must be a 1-D int32 tensor on {a.device} (the group ends along {along}); "
                               f"got {_what(offs, 'offs')}")
        G = offs.shape[0]
        owner = {"m": ("b", b), "n": ("a", a)}.get(layout)
        if owner is not None and owner[1].shape[0] != G:
            raise TiledmmError(f"offs has {G} group ends but {owner[0]} has {owner[1].shape[0]} groups "
                               f"({_what(owner[1], owner[0])})")
    M = a.shape[-2]
    N = b.shape[-1]
    K = a.shape[-1]
    shape = {"m": (M, N), "n": (M, N), "k": (G, M, N), "batch": (G, M, N)}[layout]
    work = M * N * K * (G if layout == "batch" else 1)
    if bias is not None:
        want = (N,) if layout == "n" else (G, N)
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != want or not bias.is_floating_point() or \
                bias.device != a.device:
            what = "value per column" if layout == "n" else "row per group"
            raise TiledmmError(f"bias must be a float tensor of shape {want} on {a.device} (one {what}); "
                               f"got {_what(bias, 'bias')}")
    if out_dtype is not None and out_dtype not in _DTYPES:
        raise TiledmmError(f"out_dtype must be one of float32, float64, float16, bfloat16; got {out_dtype!r}")
    dtype = out_dtype or (out.dtype if isinstance(out, torch.Tensor) else a.dtype)
    if out is not None:
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape or out.dtype != dtype or \
                out.device != a.device:
            raise TiledmmError(f"out must be a {'x'.join(map(str, shape))} {str(dtype).replace('torch.', '')} tensor "
                               f"on {a.device}; got {_what(out, 'out')}")
    if act != "none":
        check_activation(act)
    return Problem(layout, shape, dtype, G, work)


def _kernels_device(a) -> None:
    where = "cpu" if _backend.emulating() else "cuda"
    if a.device.type != where:
        raise TiledmmError(f"grouped_matmul runs on {where} tensors here ({'emulation' if where == 'cpu' else 'GPU'}); "
                           f"got {_what(a, 'a')}: move the operands and offs there")


def compute(a, b, offs, bias, out_dtype, act: str, precision: str | None, out=None):
    """The product, no autograd recorded (the operator's kernel): a new tensor, or ``out`` filled.
    Checked here too (``check``), so every door gives the same errors."""
    p = check(a, b, offs, bias, out_dtype, act, out)
    if a.device.type == "cpu" and not _backend.emulating():     # host tensors: computed on the GPU, returned here
        dev = torch.device("cuda", torch.cuda.current_device())
        moved = [None if t is None else t.to(dev) for t in (a, b, offs, bias)]
        r = compute(*moved, out_dtype, act, precision)
        if out is None:
            return r.to(a.device)
        out.copy_(r)
        return out
    _kernels_device(a)
    from .kernels.block import check_precision
    prec = check_precision(str(a.dtype).replace("torch.", ""), precision)
    if _backend.emulating() and p.work > _backend.emulation_limit(EMULATION_LIMIT):
        raise TiledmmError(f"grouped product {tuple(a.shape)} @ {tuple(b.shape)} is {p.work:,} multiply-adds, "
                           f"over the emulation limit of {_backend.emulation_limit(EMULATION_LIMIT):,}: with no GPU "
                           "the kernel runs in Triton's interpreter. Use smaller tensors, a GPU, or raise "
                           "TILEDMM_EMULATION_LIMIT if you will wait.")
    from ._adapter import internal_overlap
    from ._arrays import overlaps
    target = out
    if out is not None and internal_overlap(out):
        raise TiledmmError(f"out has overlapping elements (strides {tuple(out.stride())}); pass a tensor with one "
                           "element per position")
    if out is None or any(t is not None and overlaps(out, t) for t in (a, b, offs, bias)):
        target = torch.empty(p.shape, dtype=p.dtype, device=a.device)
    if target.numel():
        _launch(a.detach(), b.detach(), target, offs, None if bias is None else bias.detach(), p.layout, act, prec)
    if out is not None and target is not out:
        out.copy_(target)
        return out
    return target


def _launch(a, b, c, offs, bias, layout: str, act: str, precision: str) -> None:
    from .kernels.block import grouped as kernel
    if not _backend.emulating() and a.device.index != torch.cuda.current_device():
        with torch.cuda.device(a.device):
            kernel.launch(a, b, c, offs, layout, bias=bias, act=act, precision=precision)
        return
    kernel.launch(a, b, c, offs, layout, bias=bias, act=act, precision=precision)


__all__ = ["check", "compute", "Problem", "EMULATION_LIMIT", "TiledmmError"]
