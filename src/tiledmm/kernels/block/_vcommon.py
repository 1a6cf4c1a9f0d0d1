"""Small helpers shared by the variants (variants.py, tma_persistent, splitk, kmajor_cache, tma_copy).

Each variant module exposes NAME, applicable(), CONFIGS, heuristic() and launch() (and,
where it has them, REPLAYABLE, prune() and TRAITS for the model); variants.from_module
plugs them in. Here: the device facts (``tiledmm._device``, per device index), the one Hopper test, the
one ``kind_of`` and ``cfg``, the FastKernel per (kernel, config, flags). Nothing here launches a kernel.
"""
from __future__ import annotations

import functools

from .fastlaunch import FastKernel, Launcher, current_stream, ensure_allocator  # noqa: F401  (one home for launches)

from ..._device import capability, num_sms, smem_limit  # noqa: F401  (the device facts, one home)
from ..._device import sm_margin as _sm_margin  # noqa: F401
from ..._backend import emulating, mode
from .heuristics import Device

mode()  # decide GPU or emulation (TRITON_INTERPRET) before triton is imported
import triton  # noqa: E402

KINDS = ("16bit", "tf32", "ieee")


def cdiv(x: int, y: int) -> int:
    """Ceiling division on the host (``triton.cdiv`` is a JIT function there: ~3 us a call)."""
    return -(-x // y)


def kind_of(precision: str | None) -> str:
    """Precision option -> config family: 'none' (bf16/fp16) -> '16bit'; 'tf32', 'ieee' as they are."""
    return "16bit" if precision in (None, "none") else precision


def tl_precision(precision: str) -> str:
    return "none" if precision in (None, "none") else precision


def index_of(t) -> int | None:
    """The CUDA device index of tensor ``t`` (None in emulation or for a host tensor)."""
    return None if emulating() or not getattr(t, "is_cuda", False) else t.device.index


def device(index: int | None = None) -> Device:
    """Device ``index`` as the no-timing model sees it (heuristics.Device)."""
    return Device(num_sms(index), capability(index), smem_limit(index))


def hopper(*tensors) -> bool:
    """The one test of a GPU with the copy engine and wgmma (TMA variants): capability 9 or
    later on the tensors' device, never in emulation."""
    return not emulating() and capability(index_of(tensors[0]) if tensors else None)[0] >= 9


_version_readers: list = []     # holds() -> whether a cache keyed by torch's version counter holds a copy


def watch_versions(holds) -> None:
    """Register a cache keyed by torch's version counter (kmajor_cache: the opt-in KCACHE policy) by
    ``holds() -> bool``, whether it holds a copy now (``mark_written`` bumps counters only then)."""
    _version_readers.append(holds)


def mark_written(t) -> None:
    """Bump torch's version counter of an output written by a Triton kernel (torch only sees
    its own in-place ops), so a version-keyed cache (kmajor_cache) notices the write -- only while
    such a cache holds a copy (``watch_versions``): no copy, nothing stale to notice, and the
    output's counter is left as torch's own ops leave it."""
    if not any(holds() for holds in _version_readers):
        return
    try:
        import torch
        torch.autograd.graph.increment_version(t)
    except Exception:  # noqa: BLE001  (inference tensors and old torch: nothing to bump)
        pass


def tma_ok(*tensors) -> bool:
    """The copy engine's rules for a 2-D tensor: unit inner stride, 16-byte aligned base and
    row stride."""
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1 or t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
        if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
            return False
    return True


def cfg(bm, bn, bk, warps, stages, **extra) -> dict:
    """One config: tile, phase width, extra meta-parameters (GROUP_M, ...), warps, stages."""
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, **extra, "num_warps": warps, "num_stages": stages}


@functools.lru_cache(maxsize=None)
def fast(kernel, config: tuple, flags: tuple) -> FastKernel:
    """The FastKernel of ``kernel`` with a config's items (``num_warps``, ``num_stages`` among them)
    and the launch's fixed meta ``flags`` (name, value pairs), one per distinct triple."""
    cfg = dict(config)
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    return FastKernel(kernel, {**cfg, **dict(flags)}, warps, stages)


def split_meta(config: dict) -> tuple[dict, int, int]:
    meta = dict(config)
    return meta, meta.pop("num_warps", 4), meta.pop("num_stages", 3)
