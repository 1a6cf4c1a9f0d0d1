"""A K-major copy of an operand: the transposing copy tf32 needs before wgmma.

wgmma reads 32-bit operands from shared memory only K-major, so tf32 with a row-major B
first copies B to K-major (``variants.with_kmajor``, ``tma_copy``). torch's strided copy
does that transposition element by element; here one program moves a TILE x TILE block:
read along the source's rows (coalesced), transposed in registers / shared memory, written
along the destination's rows (coalesced) -- the lectures' corner-turning, used for a copy.
"""
from __future__ import annotations

from ..._backend import emulating, mode

mode()
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._vcommon import cdiv  # noqa: E402
from .fastlaunch import Launcher  # noqa: E402


@triton.jit
def transpose_kernel(src, dst, R, C, s_r, s_c, d_c, d_r, TILE_R: tl.constexpr, TILE_C: tl.constexpr):
    """dst[c, r] = src[r, c] for the TILE_R x TILE_C block of this program (masked at the edges)."""
    rows = tl.program_id(0) * TILE_R + tl.arange(0, TILE_R)
    cols = tl.program_id(1) * TILE_C + tl.arange(0, TILE_C)
    inside = (rows[:, None] < R) & (cols[None, :] < C)
    block = tl.load(src + rows[:, None].to(tl.int64) * s_r + cols[None, :].to(tl.int64) * s_c, mask=inside)
    t_inside = (cols[:, None] < C) & (rows[None, :] < R)
    tl.store(dst + cols[:, None].to(tl.int64) * d_c + rows[None, :].to(tl.int64) * d_r, tl.trans(block),
             mask=t_inside)


_launch = Launcher(transpose_kernel)


def k_major(t, k_dim: int):
    """``t`` (a ... x K operand for k_dim=-1, K x ... for k_dim=-2) with its K dimension the
    contiguous one: ``t`` itself where it already is, else a copy."""
    if k_dim == -1:
        return t if t.stride(-1) == 1 else t.contiguous()
    return t if t.stride(-2) == 1 else _kmajor_b(t)


def _kmajor_b(t):
    """(..., K, N) -> the same values with K contiguous: a (..., N, K) row-major buffer, viewed back."""
    if t.dim() != 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    import torch
    out = torch.empty((t.shape[1], t.shape[0]), device=t.device, dtype=t.dtype)
    transpose_into(t, out)
    return out.T


def transpose_into(src, dst) -> None:
    """dst = src.T for 2-D tensors on one device (dst may be a padded view): the tiled kernel
    on the GPU, torch's copy in emulation."""
    R, C = src.shape
    if emulating() or not src.is_cuda:
        dst.copy_(src.T)
        return
    if R and C:
        tile = 64 if src.element_size() >= 4 else 128
        _launch((cdiv(R, tile), cdiv(C, tile)),
                (src, dst, R, C, src.stride(0), src.stride(1), dst.stride(0), dst.stride(1)),
                {"TILE_R": tile, "TILE_C": tile}, 4, 1)
