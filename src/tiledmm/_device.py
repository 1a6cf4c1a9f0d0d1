"""The device facts every kernel family and every model reads, per device index.

One place for what a launch plans with: the SMs a persistent grid fills (less ``TILEDMM_SM_MARGIN``,
the SMs left to kernels running beside tiledmm's -- NCCL's, when ``tiledmm.distributed`` overlaps
communication with the local products), the shared memory one block may opt in to, and the compute
capability. Each is read from ``tiledmm.analysis.device.properties`` (once per index and process;
tests may install fakes there), so two GPU models in one process each get their own. Nothing here
imports Triton; torch only to ask for the current device.
"""
from __future__ import annotations

import functools
import os

from . import _backend


def current_index(index: int | None = None) -> int:
    """``index``, or the current CUDA device's where it is None (0 in emulation)."""
    if index is not None:
        return index
    if _backend.emulating():
        return 0
    import torch
    return torch.cuda.current_device()


def properties(index: int | None = None):
    """Device ``index``'s properties (``analysis.device.DeviceProperties``; None: the current device)."""
    from .analysis.device import properties as read
    return read(current_index(index))


@functools.lru_cache(maxsize=None)
def sm_margin() -> int:
    """``TILEDMM_SM_MARGIN``: SMs every persistent grid leaves free (0 where unset or not a number);
    read once per process (``sm_margin.cache_clear()`` reads it again)."""
    try:
        return max(0, int(os.environ.get("TILEDMM_SM_MARGIN", "0")))
    except ValueError:
        return 0


def num_sms(index: int | None = None) -> int:
    """SMs the kernels plan for on device ``index`` (persistent grids, the model): the device's, less
    ``TILEDMM_SM_MARGIN``; at least one."""
    return max(1, properties(index).num_sms - sm_margin())


SMEM_SLACK = 1024       # bytes of a block's opt-in shared memory kept back for barriers


def smem_limit(index: int | None = None) -> int:
    """Shared memory one block may opt in to on device ``index`` (232,448 bytes on the H100 and the
    H200), less barrier slack."""
    return properties(index).smem_per_block_optin - SMEM_SLACK


def capability(index: int | None = None) -> tuple:
    """Compute capability of device ``index``; (0, 0) in emulation."""
    return tuple(properties(index).capability)


def is_hopper(index: int | None = None) -> bool:
    """Whether device ``index`` is an sm_90 GPU (wgmma, the tensor-memory copy engine); never in
    emulation."""
    return not _backend.emulating() and capability(index) == (9, 0)


__all__ = ["current_index", "properties", "sm_margin", "num_sms", "smem_limit", "capability", "is_hopper"]
