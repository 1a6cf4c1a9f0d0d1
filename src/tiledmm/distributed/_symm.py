"""torch's symmetric memory (``torch.distributed._symmetric_memory``, a private torch interface),
in one guarded place: a buffer every rank of a group allocates alike and every other rank of the
group can read and write (NVLink peers of one node), its barrier, and torch's fused all-gather-matmul
and matmul-reduce-scatter (the anchor the tensor-parallel patterns are compared with).

Copies between a rank's memory and a peer's symmetric buffer are plain ``copy_`` calls of contiguous
tensors: the copy engines move them, no SM is taken from the local products (NCCL's kernels need SMs,
which a persistent GEMM holds). NVLink multicast stays off (FORCED_ENV of the dist command).

``available(group)`` says whether it runs here and, if not, why (one line), so a caller can skip it.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
import torch.distributed as dist

from .._arrays import TiledmmError

BARRIER_TIMEOUT_MS = 120_000   # a rank that never arrives ends the process, not hangs it
_why: dict = {}            # group name -> "" (works) or the reason it does not
_spaces: dict = {}         # (group name, device index, tag) -> _Space


def _module():
    from .. import _adapter
    return _adapter.symmetric_memory()


def group_name(group) -> str:
    g = group if group is not None else dist.group.WORLD
    return g.group_name


def available(group=None) -> str:
    """'' when symmetric memory works for ``group`` on this rank, else why not (one line). The first
    call for a group allocates and exchanges a small buffer: a collective over the group."""
    if not dist.is_initialized():
        return "torch.distributed is not initialised"
    if dist.get_backend(group) != "nccl" or not torch.cuda.is_available():
        return "needs CUDA GPUs and the nccl backend"
    name = group_name(group)
    if name in _why:
        return _why[name]
    try:
        symm_mem = _module()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
            if enable is not None:           # needed by older torch, a deprecated no-op by newer
                enable(name)
        t = symm_mem.empty(64, dtype=torch.uint8, device=torch.device("cuda", torch.cuda.current_device()))
        h = symm_mem.rendezvous(t, name)
        h.barrier(channel=0, timeout_ms=BARRIER_TIMEOUT_MS)
        torch.cuda.current_stream().synchronize()
        _why[name] = ""
    except Exception as e:                   # noqa: BLE001  (any failure: the engine is skipped, said why)
        _why[name] = f"torch symmetric memory unavailable: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return _why[name]


def check_device(device: torch.device) -> None:
    """A TiledmmError unless ``device`` can hold symmetric memory (a CUDA device)."""
    if device.type != "cuda":
        raise TiledmmError(f"engine 'symm' needs CUDA tensors, not {device.type} ones (on the CPU: engine 'nccl', "
                           "which runs gloo)")


class _Space:
    """A symmetric buffer of ``nbytes`` on every rank of the group and its handle."""

    def __init__(self, group, nbytes: int, device: torch.device):
        symm_mem = _module()
        self.nbytes = nbytes
        self.buf = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
        self.handle = symm_mem.rendezvous(self.buf, group_name(group))
        self.rank, self.world = self.handle.rank, self.handle.world_size

    def view(self, rank: int, offset_bytes: int, shape, dtype) -> torch.Tensor:
        """A contiguous ``shape`` tensor at ``offset_bytes`` of rank ``rank``'s buffer (this rank's own
        or a peer's)."""
        esize = torch.empty((), dtype=dtype).element_size()
        if offset_bytes % esize:
            raise TiledmmError(f"symmetric buffer offset {offset_bytes} is not a multiple of {esize}")
        n = 1
        for s in shape:
            n *= int(s)
        if offset_bytes + n * esize > self.nbytes:
            raise TiledmmError(f"symmetric buffer of {self.nbytes} bytes is too small for {tuple(shape)} "
                               f"{dtype} at {offset_bytes}")
        if rank == self.rank:
            return self.buf[offset_bytes:offset_bytes + n * esize].view(dtype).view(*shape)
        return self.handle.get_buffer(rank, tuple(int(s) for s in shape), dtype, offset_bytes // esize)

    def barrier(self, channel: int = 0) -> None:
        """Every rank of the group reaches this point of its current stream (a GPU-side barrier)."""
        self.handle.barrier(channel=channel, timeout_ms=BARRIER_TIMEOUT_MS)


def space(group, nbytes: int, device: torch.device, tag: str = "") -> _Space:
    """The symmetric buffer kept for (group, device, tag), at least ``nbytes`` (grown when a call needs
    more: a collective over the group; every rank asks for the same size, computed from the whole
    problem's shape)."""
    why = available(group)
    if why:
        raise TiledmmError(why)
    key = (group_name(group), device.index, tag)
    s = _spaces.get(key)
    if s is None or s.nbytes < nbytes:
        if s is not None:
            torch.cuda.current_stream(device).synchronize()
        s = _spaces[key] = _Space(group, max(int(nbytes), 256), device)
    return s


def align(n: int, to: int = 256) -> int:
    return -(-n // to) * to


def fused_allgather_matmul(a_shard: torch.Tensor, b: torch.Tensor, group=None) -> torch.Tensor:
    """torch's fused all-gather-matmul: all_gather(a_shard) @ b, pipelined over symmetric memory."""
    _, outs = torch.ops.symm_mem.fused_all_gather_matmul(a_shard, [b], 0, group_name(group), return_A=False)
    return outs[0]


def fused_matmul_reducescatter(a: torch.Tensor, b: torch.Tensor, group=None) -> torch.Tensor:
    """torch's fused matmul-reduce-scatter: reduce_scatter(a @ b) over rows, pipelined over symmetric
    memory."""
    return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, group_name(group))


def forget(group=None) -> Optional[str]:
    """Drop what is kept for ``group`` (its buffers go when no call holds them)."""
    name = group_name(group)
    for key in [k for k in _spaces if k[0] == name]:
        del _spaces[key]
    return _why.pop(name, None)
