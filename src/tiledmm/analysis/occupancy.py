"""Blocks per SM and what limits them, by the CUDA occupancy rules.

Limits: threads (warps) per SM, blocks per SM, registers (allocated per warp in
units of 256), shared memory (allocated per block in units, plus 1 KB reserved
per block from compute capability 8.0 on). The lectures do this arithmetic
without granularities or the reservation; ``slide_*`` fields give their way too.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .device import DeviceProfile


def _shared_unit(cc) -> int:
    return 512 if cc[0] < 2 else 128


def _reserved(cc) -> int:
    return 1024 if cc[0] >= 8 else 0


@dataclass
class Occupancy:
    device: str
    threads_per_block: int
    regs_per_thread: int
    shared_per_block: int
    launchable: bool
    why_not: str
    blocks_by_threads: int
    blocks_by_block_limit: int
    blocks_by_regs: int | None
    blocks_by_shared: int | None
    blocks_per_sm: int
    limited_by: list
    active_threads: int
    active_warps: int
    occupancy: float
    slide_blocks_by_shared: int | None     # shared per SM // shared per block, no units or reservation
    pending_loads: int                      # blocks x threads x loads per thread per phase

    def as_dict(self) -> dict:
        return asdict(self)


def occupancy(dev: DeviceProfile, threads_per_block: int, *, shared_per_block: int = 0,
              regs_per_thread: int = 0, loads_per_thread: int = 2) -> Occupancy:
    T = threads_per_block
    warps = math.ceil(T / dev.warp_size)
    max_warps = dev.max_threads_per_sm // dev.warp_size
    why = ""
    if T > dev.max_threads_per_block:
        why = f"{T} threads per block exceeds this device's limit of {dev.max_threads_per_block}"
    limit_shared = dev.shared_per_block_optin or dev.shared_per_block
    if shared_per_block > limit_shared:
        why = why or f"{shared_per_block} B of shared memory per block exceeds the limit of {limit_shared} B"
    if regs_per_thread > dev.max_regs_per_thread:
        why = why or f"{regs_per_thread} registers per thread exceeds {dev.max_regs_per_thread}"
    by_threads = max_warps // warps
    by_blocks = dev.max_blocks_per_sm
    by_regs = None
    if regs_per_thread:
        per_warp = math.ceil(regs_per_thread * dev.warp_size / 256) * 256
        by_regs = (dev.regs_per_sm // per_warp) // warps
    by_shared = slide = None
    if shared_per_block and dev.shared_per_sm:
        unit = _shared_unit(dev.cc)
        per_block = math.ceil((shared_per_block + _reserved(dev.cc)) / unit) * unit
        by_shared = dev.shared_per_sm // per_block
        slide = dev.shared_per_sm // shared_per_block
    limits = {"threads": by_threads, "blocks": by_blocks, "registers": by_regs, "shared memory": by_shared}
    blocks = 0 if why else min(v for v in limits.values() if v is not None)
    limited = [k for k, v in limits.items() if v is not None and v == blocks] if not why else []
    return Occupancy(dev.name, T, regs_per_thread, shared_per_block, not why, why, by_threads, by_blocks, by_regs,
                     by_shared, blocks, limited, blocks * T, blocks * warps,
                     blocks * warps / max_warps if max_warps else 0.0, slide, blocks * T * loads_per_thread)


def tiled_shared_bytes(tile: int, itemsize: int = 4) -> int:
    """Two TILE x TILE shared arrays (subTileM, subTileN)."""
    return 2 * tile * tile * itemsize


def numba_resources(kernel: str, tile: int, dtype: str = "float32", shape=(256, 256, 256)) -> dict:
    """Registers per thread, shared and local memory per block, read from the compiled
    numba kernel (compiles it for 2-D arrays of ``dtype``). GPU only."""
    import numpy as np

    from .. import registry
    from .._backend import emulating, numba_cuda
    spec = registry.get(kernel)
    if spec.make is None or emulating():
        return {}
    k = spec.make(tile, dtype)
    cuda = numba_cuda()
    J, K, L = shape
    a = cuda.device_array((J, K), dtype)
    b = cuda.device_array((K, L), dtype)
    p = cuda.device_array((J, L), dtype)
    grid, block = spec.launch_config(tile, J, K, L)
    k[grid, block](a, b, p)
    cuda.synchronize()
    compiled = next(iter(k.overloads.values()))
    out = {"regs_per_thread": compiled.regs_per_thread, "shared_per_block": compiled.shared_mem_per_block,
           "local_per_thread": compiled.local_mem_per_thread, "threads_per_block": int(np.prod(block))}
    try:  # instruction mix of the SASS (needs nvdisasm)
        import re
        sass = k.inspect_sass(next(iter(k.overloads)))
        ops = re.findall(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M)
        mix = {}
        for op in ops:
            base = op.split(".")[0]
            key = op if base in ("LDS", "LDG", "STS", "STG") else base
            mix[key] = mix.get(key, 0) + 1
        out["sass"] = {k2: v for k2, v in sorted(mix.items()) if k2.split(".")[0] in
                       ("FFMA", "DFMA", "LDS", "LDG", "STS", "STG", "BAR", "LDL", "STL", "IMAD", "IADD3", "LEA")}
    except Exception as e:  # noqa: BLE001
        out["sass"] = {"unavailable": str(e)[:80]}
    return out
