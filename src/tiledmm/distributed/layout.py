"""The process grid and block layouts of distributed GEMMs: as-even-as-possible block ranges,
a pr x pc grid with its row and column groups, and helpers that scatter whole matrices into
blocks or shards and gather them back (for checks and examples)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.distributed as dist

from .._arrays import TiledmmError


def block_range(n: int, parts: int, idx: int) -> tuple[int, int]:
    """Rows [start, stop) of part idx when n is split into parts as evenly as possible."""
    q, r = divmod(n, parts)
    start = idx * q + min(idx, r)
    return start, start + q + (1 if idx < r else 0)


def grid_shape(world: int) -> tuple[int, int]:
    """pr x pc = world with pr <= pc, as square as possible (2 -> 1x2, 4 -> 2x2, 8 -> 2x4)."""
    pr = int(math.isqrt(world))
    while world % pr:
        pr -= 1
    return pr, world // pr


_groups: dict = {}


@dataclass
class Grid:
    """The process grid of ``group`` (default: the world): rank = row * pc + col. Its row and column
    groups are communicators of their own (A's panels travel on the row's, B's on the column's)."""
    pr: int
    pc: int
    rank: int                  # rank within the group
    ranks: tuple               # global ranks of the group, in group order
    row_group: object
    col_group: object
    group: object = None       # the grid's whole group (None: the world)

    @property
    def row(self) -> int:
        return self.rank // self.pc

    @property
    def col(self) -> int:
        return self.rank % self.pc

    def global_rank(self, row: int, col: int) -> int:
        return self.ranks[row * self.pc + col]

    def blocks(self, m: int, k: int, n: int, row=None, col=None) -> dict:
        """Index ranges of the A, B and C blocks a grid position holds."""
        r = self.row if row is None else row
        c = self.col if col is None else col
        mi, nj = block_range(m, self.pr, r), block_range(n, self.pc, c)
        return {"a": (mi, block_range(k, self.pc, c)), "b": (block_range(k, self.pr, r), nj), "c": (mi, nj)}

    def local_blocks(self, a: torch.Tensor, b: torch.Tensor) -> tuple:
        """This rank's SUMMA blocks (contiguous copies) of the whole A (M x K) and B (K x N) that every rank
        holds (checks and benchmarks; ``scatter_summa`` sends them from one rank instead)."""
        blk = self.blocks(a.shape[0], a.shape[1], b.shape[1])
        (r0, r1), (c0, c1) = blk["a"]
        (s0, s1), (d0, d1) = blk["b"]
        return a[r0:r1, c0:c1].contiguous(), b[s0:s1, d0:d1].contiguous()

    @classmethod
    def make(cls, group=None, shape: Optional[tuple] = None, *, ranks: Optional[Sequence[int]] = None,
             max_ctas: Optional[int] = None) -> Optional["Grid"]:
        """The grid of ``group`` (this rank must belong to it; every rank of the world calls this
        together the first time a grid is made, since its row and column groups are new groups), or of
        the global ``ranks`` (every rank of the world calls it; those outside get None). shape: (pr, pc),
        default ``grid_shape``. max_ctas: NCCL's most CTAs (SMs) for the row and column communicators."""
        if ranks is not None:
            ranks = tuple(sorted(int(r) for r in ranks))     # a new group numbers its ranks in this order
            if group is not None:
                raise TiledmmError("Grid.make: give a group or ranks, not both")
            if len(set(ranks)) != len(ranks) or not ranks or not all(0 <= r < dist.get_world_size() for r in ranks):
                raise TiledmmError(f"Grid.make: ranks {list(ranks)} are not distinct ranks of the world")
            world = len(ranks)
        else:
            world = dist.get_world_size(group)
            ranks = tuple(dist.get_process_group_ranks(group) if group is not None else range(world))
        pr, pc = shape or grid_shape(world)
        if pr * pc != world:
            raise TiledmmError(f"process grid {pr}x{pc} does not match {world} processes")
        key = (ranks, pr, pc, max_ctas)
        if key not in _groups:            # every rank creates every group, in the same order
            opts = _nccl_options(max_ctas)
            kw = {"pg_options": opts} if opts is not None else {}
            rows = [dist.new_group([ranks[r * pc + c] for c in range(pc)], **kw) for r in range(pr)]
            cols = [dist.new_group([ranks[r * pc + c] for r in range(pr)], **kw) for c in range(pc)]
            whole = group
            if group is None and ranks != tuple(range(dist.get_world_size())):
                whole = dist.new_group(list(ranks))
            _groups[key] = (rows, cols, whole)
        rows, cols, whole = _groups[key]
        me = dist.get_rank()
        if me not in ranks:
            return None
        rank = ranks.index(me)
        return cls(pr, pc, rank, ranks, rows[rank // pc], cols[rank % pc], whole)


def _nccl_options(max_ctas: Optional[int]):
    """NCCL options capping the CTAs a communicator's kernels take (None: NCCL's own choice)."""
    if max_ctas is None or dist.get_backend() != "nccl":
        return None
    opts = dist.ProcessGroupNCCL.Options()
    opts.config.max_ctas = int(max_ctas)
    return opts


def _full(x: Optional[torch.Tensor], shape, dtype, device, src: int, group) -> torch.Tensor:
    """The whole matrix on every rank (``x`` given on ``src``)."""
    if dist.get_rank() == src:
        t = x.to(device=device, dtype=dtype).contiguous()
    else:
        t = torch.empty(shape, dtype=dtype, device=device)
    dist.broadcast(t, src=src, group=group)
    return t


def scatter_summa(a: Optional[torch.Tensor], b: Optional[torch.Tensor], shape: tuple, *, dtype=None, device=None,
                  grid: Optional[Grid] = None, src: int = 0, group=None) -> tuple:
    """A and B (given on rank ``src``) -> this rank's SUMMA blocks (a_local, b_local), contiguous.
    For checks and examples: every rank briefly holds the whole matrices."""
    m, k, n = shape
    grid = grid or Grid.make(group)
    dtype = dtype or (a.dtype if a is not None else torch.float32)
    device = device or _device()
    blk = grid.blocks(m, k, n)
    A = _full(a, (m, k), dtype, device, src, group)
    (r0, r1), (c0, c1) = blk["a"]
    a_loc = A[r0:r1, c0:c1].contiguous()
    del A
    B = _full(b, (k, n), dtype, device, src, group)
    (r0, r1), (c0, c1) = blk["b"]
    return a_loc, B[r0:r1, c0:c1].contiguous()


def gather_summa(c_local: torch.Tensor, m: int, n: int, *, grid: Optional[Grid] = None, group=None) -> torch.Tensor:
    """Every rank's C block -> the whole C on every rank (padded all-gather)."""
    grid = grid or Grid.make(group)
    bm, bn = -(-m // grid.pr), -(-n // grid.pc)
    pad = torch.zeros(bm, bn, dtype=c_local.dtype, device=c_local.device)
    pad[:c_local.shape[0], :c_local.shape[1]] = c_local
    parts = [torch.empty_like(pad) for _ in range(grid.pr * grid.pc)]
    dist.all_gather(parts, pad, group=group)
    C = torch.empty(m, n, dtype=c_local.dtype, device=c_local.device)
    for idx, p in enumerate(parts):
        (r0, r1), (c0, c1) = grid.blocks(m, 1, n, row=idx // grid.pc, col=idx % grid.pc)["c"]
        C[r0:r1, c0:c1] = p[:r1 - r0, :c1 - c0]
    return C


def shard_rows(x: torch.Tensor, group=None) -> torch.Tensor:
    """This rank's row block of a matrix every rank holds."""
    r0, r1 = block_range(x.shape[0], dist.get_world_size(group), dist.get_rank(group))
    return x[r0:r1].contiguous()


def shard_cols(x: torch.Tensor, group=None) -> torch.Tensor:
    c0, c1 = block_range(x.shape[1], dist.get_world_size(group), dist.get_rank(group))
    return x[:, c0:c1].contiguous()


def gather_rows(x_local: torch.Tensor, rows: int, group=None) -> torch.Tensor:
    """Row shards (uneven allowed) -> the whole matrix on every rank."""
    w = dist.get_world_size(group)
    mm = -(-rows // w)
    pad = torch.zeros((mm,) + tuple(x_local.shape[1:]), dtype=x_local.dtype, device=x_local.device)
    pad[:x_local.shape[0]] = x_local
    parts = [torch.empty_like(pad) for _ in range(w)]
    dist.all_gather(parts, pad, group=group)
    return torch.cat([p[:block_range(rows, w, i)[1] - block_range(rows, w, i)[0]] for i, p in enumerate(parts)])


def _device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")

