"""Device properties the lectures query (cudaGetDeviceProperties), for the GPU in use
or for a built-in profile of the lectures' GPUs, plus derived peaks; and ``properties(index)``,
what the kernels' choices depend on, per device index (a machine may hold two GPU models)."""
from __future__ import annotations

import contextlib
import threading
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    cc: tuple[int, int]
    sms: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm: int            # bytes available to blocks on one SM
    shared_per_block: int         # default per-block limit (48 KB without opt-in since Fermi)
    shared_per_block_optin: int   # with cudaFuncSetAttribute
    regs_per_sm: int
    max_regs_per_thread: int
    warp_size: int = 32
    l2_bytes: int = 0
    clock_mhz: float = 0.0
    mem_bus_bits: int = 0
    dram_gbs: float = 0.0         # peak DRAM bandwidth, GB/s
    fp32_tflops: float = 0.0      # peak FP32 (FMA = 2 FLOP), non-tensor
    tensor_tflops: dict = field(default_factory=dict)   # dense peaks by precision
    source: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


KB = 1024
PROFILES: dict[str, DeviceProfile] = {
    # The lectures' G80 (002: 16 KB shared per SM, 768 threads / 8 blocks per SM, 86.4 GB/s)
    "g80": DeviceProfile("G80 (lectures)", (1, 0), 16, 512, 768, 8, 16 * KB, 16 * KB, 16 * KB, 8192, 128,
                         dram_gbs=86.4, fp32_tflops=0.3456, clock_mhz=1350, mem_bus_bits=384,
                         source="Kirk/Hwu G80 chapter: 16KB shared/SM, 768 threads & 8 blocks per SM, 86.4 GB/s"),
    # The lectures' "current generation" (003: 16 KB shared per SM, 1536 threads per SM)
    "lecture1536": DeviceProfile("1536-thread GPU (lectures)", (2, 0), 16, 1024, 1536, 8, 16 * KB, 16 * KB, 16 * KB,
                                 32768, 63, source="Bertini's slides: 16KB shared/SM, 1536 threads per SM"),
    # The lectures' example GPU for the bandwidth argument (004: 1,000 GFLOP/s, 150 GB/s)
    "example150": DeviceProfile("example GPU (lectures)", (0, 0), 0, 1024, 2048, 32, 0, 0, 0, 65536, 255,
                                dram_gbs=150.0, fp32_tflops=1.0,
                                source="GP-GPU course, lecture 7: 1,000 GFLOP/s and 150 GB/s"),
    # The lectures' Ampere (004: 164 KB shared per SM, 2048 threads per SM)
    "ampere": DeviceProfile("Ampere A100 (lectures)", (8, 0), 108, 1024, 2048, 32, 164 * KB, 48 * KB, 163 * KB,
                            65536, 255, l2_bytes=40 * 2**20, clock_mhz=1410, mem_bus_bits=5120, dram_gbs=1555,
                            fp32_tflops=19.5, tensor_tflops={"tf32": 156, "bf16": 312, "fp16": 312},
                            source="GP-GPU course, lecture 7 (164KB/SM, 2048 threads); CUDA guide CC 8.0 limits; "
                                   "A100 datasheet"),
    "h100": DeviceProfile("NVIDIA H100 80GB HBM3", (9, 0), 132, 1024, 2048, 32, 228 * KB, 48 * KB, 227 * KB,
                          65536, 255, l2_bytes=50 * 2**20, clock_mhz=1980, mem_bus_bits=5120, dram_gbs=3350,
                          fp32_tflops=66.9, tensor_tflops={"tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
                          source="CUDA guide CC 9.0 limits; H100 SXM5 datasheet (dense tensor peaks)"),
}


def profile(name: str) -> DeviceProfile:
    from .._arrays import TiledmmError
    try:
        return PROFILES[name.lower()]
    except KeyError:
        raise TiledmmError(f"unknown device profile {name!r}; choose one of {sorted(PROFILES)}") from None


def query(index: int = 0) -> DeviceProfile:
    """The GPU in use, read through numba's device attributes (cudaGetDeviceProperties);
    peaks derived where a built-in profile of the same chip knows the rates."""
    from .._backend import emulating, numba_cuda
    if emulating():
        from .._arrays import TiledmmError
        raise TiledmmError("no CUDA GPU in use (emulation), so there is no current GPU to describe: pick a "
                           f"built-in profile with --profile ({', '.join(PROFILES)}), e.g. --profile h100")
    cuda = numba_cuda()
    dev = cuda.gpus[index]
    with dev:
        d = cuda.get_current_device()
        g = lambda attr, default=0: getattr(d, attr, default)  # noqa: E731
        name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
        cc = tuple(d.compute_capability)
        sms = g("MULTIPROCESSOR_COUNT")
        clock_mhz = g("CLOCK_RATE") / 1000
        bus = g("GLOBAL_MEMORY_BUS_WIDTH")
        mem_clock_mhz = g("MEMORY_CLOCK_RATE") / 1000
        base = next((p for p in PROFILES.values() if p.cc == cc and p.sms and p.name.split()[1] in name), None)
        cores_per_sm = {(9, 0): 128, (8, 0): 64, (8, 6): 128, (8, 9): 128, (7, 0): 64, (7, 5): 64}.get(cc, 64)
        prof = DeviceProfile(
            name=name, cc=cc, sms=sms,
            max_threads_per_block=g("MAX_THREADS_PER_BLOCK"),
            max_threads_per_sm=g("MAX_THREADS_PER_MULTIPROCESSOR"),
            max_blocks_per_sm=g("MAX_BLOCKS_PER_MULTIPROCESSOR", 32),
            shared_per_sm=g("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            shared_per_block=g("MAX_SHARED_MEMORY_PER_BLOCK"),
            shared_per_block_optin=g("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            regs_per_sm=g("MAX_REGISTERS_PER_MULTIPROCESSOR"),
            max_regs_per_thread=255, warp_size=g("WARP_SIZE"), l2_bytes=g("L2_CACHE_SIZE"),
            clock_mhz=clock_mhz, mem_bus_bits=bus,
            dram_gbs=2 * mem_clock_mhz * 1e6 * bus / 8 / 1e9,   # double data rate
            fp32_tflops=2 * cores_per_sm * sms * clock_mhz * 1e6 / 1e12,
            tensor_tflops=dict(base.tensor_tflops) if base else {},
            source="cudaGetDeviceProperties via numba" + (f"; tensor peaks from profile {base.name}" if base else ""))
    return prof


def current_or(name: str | None) -> DeviceProfile:
    """A named profile, or the GPU in use when name is None."""
    return profile(name) if name else query()


def measure_copy_bandwidth(nbytes: int = 2 * 2**30, repeats: int = 10) -> float:
    """Device-to-device copy, counting bytes read plus written, GB/s (median)."""
    import torch

    from ..timing import time_calls
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = time_calls(lambda: dst.copy_(src), batches=repeats, warmup=3)
    return 2 * nbytes / (ms * 1e-3) / 1e9


# -- what the kernels' choices depend on, per device ---------------------------------------------------

@dataclass(frozen=True)
class DeviceProperties:
    """One device as the dispatchers see it (torch.cuda.get_device_properties(index))."""
    index: int
    name: str
    capability: tuple[int, int]
    num_sms: int
    smem_per_block_optin: int        # bytes of shared memory one block may opt in to
    l2_bytes: int = 0
    total_memory: int = 0
    emulated: bool = False           # the Triton interpreter's stand-in for a small GPU


def emulated(index: int = 0) -> DeviceProperties:
    """The stand-in for a small GPU the interpreter runs on: 4 SMs, no shared-memory limit,
    capability (0, 0) (no Hopper paths)."""
    return DeviceProperties(index, "emulation (Triton interpreter)", (0, 0), 4, 1 << 30, emulated=True)


_known: dict[int, DeviceProperties] = {}
_fakes: dict[int, DeviceProperties] = {}
_lock = threading.Lock()


def properties(index: int) -> DeviceProperties:
    """Device ``index``'s properties, read once per index and process (or a fake, see ``fake``)."""
    if _fakes:
        f = _fakes.get(index)
        if f is not None:
            return f
    p = _known.get(index)
    if p is None:
        with _lock:
            p = _known.get(index)
            if p is None:
                p = _known[index] = _read(index)
    return p


def _read(index: int) -> DeviceProperties:
    from .._backend import emulating
    if emulating():
        return emulated(index)
    import torch
    p = torch.cuda.get_device_properties(index)
    return DeviceProperties(index, p.name, (p.major, p.minor), p.multi_processor_count,
                            getattr(p, "shared_memory_per_block_optin", 0), getattr(p, "L2_cache_size", 0),
                            p.total_memory)


@contextlib.contextmanager
def fake(index: int, description: "DeviceProperties | DeviceProfile"):
    """Within the block, ``properties(index)`` describes another device (tests: choices on GPUs
    that are not here). ``description``: DeviceProperties, or a DeviceProfile (e.g.
    ``PROFILES["h100"]``). Process-wide, not per thread; restores what was there."""
    if isinstance(description, DeviceProfile):
        description = DeviceProperties(index, description.name, tuple(description.cc), description.sms,
                                       description.shared_per_block_optin, description.l2_bytes)
    with _lock:
        before = _fakes.get(index)
        _fakes[index] = description
    try:
        yield description
    finally:
        with _lock:
            if before is None:
                _fakes.pop(index, None)
            else:
                _fakes[index] = before


__all__ = ["DeviceProfile", "PROFILES", "profile", "query", "current_or", "measure_copy_bandwidth",
           "DeviceProperties", "properties", "fake", "emulated"]
