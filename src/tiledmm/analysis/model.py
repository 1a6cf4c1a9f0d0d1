"""Traffic and roofline models: global-memory bytes per FLOP for each kernel, the
bandwidth-bound ceiling BW / (B/FLOP), the compute ceiling, and which binds."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .device import DeviceProfile


def bytes_per_flop(kernel: str, tile: int | None = None, itemsize: int = 4) -> float:
    """Global-memory bytes a kernel requests per floating-point operation (2 per multiply-add).

    A block computing a BM x BN tile of P loads a BM x BK and a BK x BN tile for BM*BN*BK
    multiply-adds: itemsize*(BM+BN)/(2*BM*BN) B/FLOP. naive (1 x 1: each operand serves one
    multiply-add): 2*4 B / 2 FLOP = 4 B/FLOP, the lectures' number; tiled T (T x T): 4/T.
    The block tile comes from the kernel's registry entry."""
    bm, bn = block_tile(kernel, tile)
    return itemsize * (bm + bn) / (2 * bm * bn)


def block_tile(kernel: str, tile: int | None) -> tuple[int, int]:
    """(BM, BN): the P tile one block computes, from the registry."""
    from .. import registry
    from .._arrays import TiledmmError
    spec = registry.get(kernel)
    if spec.block_tile is None:
        raise TiledmmError(f"no traffic model for kernel {kernel!r} (its registry entry gives no block tile)")
    return spec.block_tile(spec.check_tile(tile))


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
    bm, bn = block_tile(kernel, tile)
    reads = J * K * math.ceil(L / bn) + K * L * math.ceil(J / bm)
    return {"requested_read": reads * itemsize, "requested_write": J * L * itemsize,
            "compulsory_read": (J * K + K * L) * itemsize, "compulsory_write": J * L * itemsize}
