"""Traffic and roofline models: global-memory bytes per FLOP for each kernel, the
bandwidth-bound ceiling BW / (B/FLOP), the compute ceiling, and which binds."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .device import DeviceProfile


def bytes_per_flop(kernel: str, tile: int | None = None, itemsize: int = 4) -> float:
    """Global-memory bytes a kernel requests per floating-point operation (2 per multiply-add).

    naive: 2 operands per multiply-add: 2*4 B / 2 FLOP = 4 B/FLOP (the lectures' number).
    tiled T: each loaded operand serves T multiply-adds: 4/T B/FLOP.
    block tile BM x BN (rungs 3+, Triton): a BM x BK and BK x BN tile per BM*BN*BK
    multiply-adds: itemsize*(BM+BN)/(2*BM*BN) B/FLOP.
    """
    if kernel in ("naive", "naive-uncoalesced"):
        return itemsize * 2 / 2
    if kernel == "tiled":
        return itemsize * 2 / (2 * tile)
    bm, bn = block_tile(kernel, tile)
    return itemsize * (bm + bn) / (2 * bm * bn)


def block_tile(kernel: str, tile: int | None) -> tuple[int, int]:
    if kernel == "coarsen":
        return 64, 64
    if kernel in ("regtile2d", "conflict-free", "double-buffer", "flat-shared", "warp-tile"):
        return tile or 128, tile or 128
    if kernel in ("triton", "cublas"):
        return tile or 128, tile or 128
    if kernel in ("unsigned", "autotuned"):     # rungs 9-10: the block of the shape they run / analyse
        from ..kernels.simt.k09_unsigned import PRESETS
        from ..kernels.simt.k10_autotune import ANALYSED
        sh = PRESETS[tile or 128] if kernel == "unsigned" else ANALYSED
        return sh.BM, sh.BN
    raise ValueError(f"no traffic model for kernel {kernel!r}")


@dataclass
class Roofline:
    kernel: str
    tile: int | None
    device: str
    bytes_per_flop: float
    intensity: float            # FLOP per byte
    bandwidth_gbs: float
    memory_bound_gflops: float  # BW / (B/FLOP)
    compute_peak_gflops: float
    bound_gflops: float
    binds: str

    def as_dict(self) -> dict:
        return asdict(self)


def roofline(kernel: str, dev: DeviceProfile, tile: int | None = None, itemsize: int = 4,
             bandwidth_gbs: float | None = None, peak_gflops: float | None = None) -> Roofline:
    bpf = bytes_per_flop(kernel, tile, itemsize)
    bw = bandwidth_gbs or dev.dram_gbs
    peak = peak_gflops or dev.fp32_tflops * 1000
    mem = bw / bpf
    bound = min(mem, peak) if peak else mem
    return Roofline(kernel, tile, dev.name, bpf, 1 / bpf, bw, mem, peak, bound,
                    "memory bandwidth" if not peak or mem < peak else "compute")


def dram_bytes(kernel: str, J: int, K: int, L: int, tile: int | None = None, itemsize: int = 4,
               cache: str = "none") -> dict:
    """Global traffic of one J x K x L product.

    requested: what the kernel's loads and stores ask for (no cache): naive reads
      2*J*K*L operands; tiled T reads J*K*ceil(L/T) + K*L*ceil(J/T); all write J*L.
    compulsory: each input read once, the output written once -- what DRAM sees when
      the L2 holds every reused tile (the case for 2048^3 on a 50 MB L2, mostly)."""
    import math
    if kernel in ("naive", "naive-uncoalesced"):
        reads = 2 * J * K * L
    elif kernel == "tiled":
        reads = J * K * math.ceil(L / tile) + K * L * math.ceil(J / tile)
    else:
        bm, bn = block_tile(kernel, tile)
        reads = J * K * math.ceil(L / bn) + K * L * math.ceil(J / bm)
    return {"requested_read": reads * itemsize, "requested_write": J * L * itemsize,
            "compulsory_read": (J * K + K * L) * itemsize, "compulsory_write": J * L * itemsize}
