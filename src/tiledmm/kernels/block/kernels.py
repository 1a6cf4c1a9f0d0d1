"""The Triton kernels: the lectures' tiling one level up.

Each *program* (a thread block) computes a BLOCK_M x BLOCK_N tile of P, walking
K in BLOCK_K-wide phases exactly as the lectures' kernel walks TILE_WIDTH-wide
phases. The loads are masked with ``other=0`` -- the slides' "write 0 for missing
elements" -- and the store is masked -- their "threads outside P store nothing".
What Triton adds: the tile product ``tl.dot`` runs on the tensor cores (wgmma on
Hopper) or as FMAs for exact float32, loads are software-pipelined over
``num_stages`` shared-memory buffers, and programs are visited in groups of
GROUP_M tile-rows so neighbouring programs share A and B tiles in L2.

Precisions (float32 inputs): ``ieee`` -- exact IEEE float32 products, no
tensor cores; ``tf32`` -- tensor cores with 10-bit mantissa products.
bfloat16 / float16 inputs always use the tensor cores. All accumulate in fp32.

Kernels only: configurations are in ``configs.py``, one launch function per
variant in ``variants.py``, the choice among them in ``dispatch.py``.
"""
from __future__ import annotations

from ..._backend import mode

mode()  # decide GPU or emulation (TRITON_INTERPRET) before triton is imported
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _tile_id(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M tile-rows are swept column by column, so the
    programs resident at one time reuse the same A rows and B columns from L2."""
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _tf32_bits(x):
    """x with the 13 low mantissa bits cleared: the value a tf32 tensor-core product reads
    anyway. An operation on the operand after its load, so Triton feeds it to wgmma from
    registers (A operand) instead of shared memory."""
    return (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)


@triton.jit
def _tile_product(a_tile, b_tile, rows, cols, M, N, k_len, stride_ak, stride_bk,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  PRECISION: tl.constexpr, UPCAST: tl.constexpr, SWAP: tl.constexpr):
    """The phase loop: acc = A[rows, :k_len] @ B[:k_len, cols] in fp32, BLOCK_K-wide phases,
    ``a_tile``/``b_tile`` pointing at phase 0 (rows x ks, ks x cols).

    SWAP = 1 computes the transposed product, acc^T = B^T @ A^T, and returns its transpose:
    the tensor core's M dimension is then BLOCK_N (at least 64 for wgmma) and its N
    dimension BLOCK_M (as small as 16), which suits few rows of A. SWAP = 2 (tf32): also
    B^T goes to the tensor core from registers -- wgmma reads 32-bit operands from shared
    memory only K-major, which a row-major B is not, while A^T, read from A's K-contiguous
    rows, is; so a row-major B needs no copy."""
    ks = tl.arange(0, BLOCK_K)
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)   # acc^T until the end
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for phase in range(0, tl.cdiv(k_len, BLOCK_K)):
        k_left = k_len - phase * BLOCK_K
        # the M test and the N test differ, as the slides stress: rows/k for A, k/cols for B
        a = tl.load(a_tile, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        if UPCAST:  # emulation only: the Triton interpreter's bf16 tl.dot returns garbage (triton 3.9)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if SWAP:    # the tensor core's operands: (B^T, A^T) or (A, B)
            x = tl.trans(b)
            y = tl.trans(a)
            if SWAP == 2:
                x = _tf32_bits(x)
        else:
            x = a
            y = b
        if PRECISION == "none":
            acc = tl.dot(x, y, acc)
        else:
            acc = tl.dot(x, y, acc, input_precision=PRECISION)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    if SWAP:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _activation(x, ACT: tl.constexpr):
    """x through the fused activation ("none", "relu", "gelu" (erf), "gelu_tanh", "silu"), in fp32.
    gelu_tanh: 0.5 x (1 + tanh(u)) written as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    if ACT == "relu":
        x = tl.maximum(x, 0.0)
    elif ACT == "gelu":
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif ACT == "gelu_tanh":
        x = x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
    elif ACT == "silu":
        x = x * tl.sigmoid(x)
    return x


@triton.jit
def _epilogue_act(c_tile, acc, inside, alpha, beta, bias, ALPHA_ONE: tl.constexpr, HAS_BETA: tl.constexpr,
                  HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """The fused epilogue: C = act(alpha * acc + beta * C + bias) where ``inside`` (``bias``: a loaded
    row or column of the tile, broadcast over the other dimension); with beta == 0 C is never
    read (NaN in it cannot leak)."""
    if not ALPHA_ONE:
        acc = acc * alpha
    if HAS_BETA:
        acc += beta * tl.load(c_tile, mask=inside, other=0.0).to(tl.float32)
    if HAS_BIAS:
        acc += bias
    acc = _activation(acc, ACT)
    tl.store(c_tile, acc.to(c_tile.dtype.element_ty), mask=inside)


@triton.jit
def _epilogue(c_tile, acc, inside, alpha, beta, ALPHA_ONE: tl.constexpr, HAS_BETA: tl.constexpr):
    """The GEMM epilogue: C = alpha * acc + beta * C where ``inside``; with beta == 0 C is never
    read (NaN in it cannot leak)."""
    _epilogue_act(c_tile, acc, inside, alpha, beta, 0.0, ALPHA_ONE, HAS_BETA, False, "none")


# Triton compiles a kernel per "specialisation" of its integer arguments: == 1 (made a constant)
# and divisible by 16 (an alignment hint for vector loads). M varies from call to call (tokens,
# batch rows) and its divisibility feeds no vector access of a row-major operand (rows are not
# the contiguous dimension), so M is not specialised: one compiled kernel serves every M of a
# shape class. N and K keep Triton's rule: their divisibility decides vector loads along rows,
# a real choice (and fixed by the weights in the usual loop over M).
NO_SPECIALISE = ["M"]


@triton.jit(do_not_specialize=NO_SPECIALISE)
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_ab, stride_am, stride_ak,
                  stride_bb, stride_bk, stride_bn,
                  stride_cb, stride_cm, stride_cn,
                  alpha, beta,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, PRECISION: tl.constexpr, HAS_BETA: tl.constexpr,
                  ALPHA_ONE: tl.constexpr, UPCAST: tl.constexpr = False, SWAP: tl.constexpr = 0,
                  bias_ptr=None, stride_bias=0, BIAS: tl.constexpr = 0, ACT: tl.constexpr = "none"):
    """C = act(alpha * A @ B + beta * C + bias): ``BIAS`` 0 -- none, 1 -- one value per column
    (``bias_ptr[n * stride_bias]``, along N), 2 -- one per row (along M); ``ACT`` as ``_activation``."""
    pid_m, pid_n = _tile_id(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    batch = tl.program_id(1).to(tl.int64)
    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * stride_cb

    # Row and Col of the lectures' kernel, now vectors of BLOCK_M rows / BLOCK_N columns
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None].to(tl.int64) * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :].to(tl.int64) * stride_bn
    acc = _tile_product(a_tile, b_tile, rows, cols, M, N, K, stride_ak, stride_bk,
                        BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, UPCAST, SWAP)

    c_tile = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    if BIAS == 1:
        bias = tl.load(bias_ptr + cols * stride_bias, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    elif BIAS == 2:
        bias = tl.load(bias_ptr + rows * stride_bias, mask=rows < M, other=0.0).to(tl.float32)[:, None]
    else:
        bias = 0.0
    _epilogue_act(c_tile, acc, (rows[:, None] < M) & (cols[None, :] < N), alpha, beta, bias, ALPHA_ONE, HAS_BETA,
                  BIAS != 0, ACT)


@triton.jit
def _tma_epilogue(c_desc, acc, off_m, off_n, M, N, alpha, beta, bias_ptr, stride_bias,
                  BM: tl.constexpr, BN: tl.constexpr, ALPHA_ONE: tl.constexpr, HAS_BETA: tl.constexpr,
                  BIAS: tl.constexpr, ACT: tl.constexpr):
    """One BM x BN piece of the fused epilogue through the copy engine: C = act(alpha * acc + beta * C
    + bias) at (off_m, off_n), C read (beta != 0 only) and written by ``c_desc`` -- the TMA zero-fills
    the read and clips the write at the matrix's edges; the bias (``matmul_kernel``'s BIAS) is a
    masked ``tl.load``."""
    if not ALPHA_ONE:
        acc = acc * alpha
    if HAS_BETA:
        acc += beta * c_desc.load([off_m, off_n]).to(tl.float32)
    if BIAS == 1:
        cols = off_n + tl.arange(0, BN)
        acc += tl.load(bias_ptr + cols * stride_bias, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    elif BIAS == 2:
        rows = off_m + tl.arange(0, BM)
        acc += tl.load(bias_ptr + rows * stride_bias, mask=rows < M, other=0.0).to(tl.float32)[:, None]
    acc = _activation(acc, ACT)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit(do_not_specialize=["M", "N", "K"])   # descriptors do the bounds: sizes only count tiles
def matmul_tma_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_bn, stride_cm,
                                 alpha, beta,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                 GROUP_M: tl.constexpr, PRECISION: tl.constexpr, B_KMAJOR: tl.constexpr,
                                 HAS_BETA: tl.constexpr, ALPHA_ONE: tl.constexpr, NUM_SMS: tl.constexpr,
                                 EPI_SPLIT: tl.constexpr = 1, WS: tl.constexpr = False,
                                 bias_ptr=None, stride_bias=0, BIAS: tl.constexpr = 0, ACT: tl.constexpr = "none"):
    """Hopper's own path, C = act(alpha * A @ B + beta * C + bias) (the epilogue of ``matmul_kernel``):
    one program per SM walks the tiles in the grouped order (persistent), and the tiles arrive
    through the tensor memory accelerator (TMA) into shared memory. The TMA zero-fills reads outside
    the matrix and clips writes -- the lectures' two boundary rules, done by the copy engine. Needs
    unit inner strides and 16-byte-aligned bases and row strides.

    The descriptors are built here, on the device (``tl.make_tensor_descriptor``: global scratch from
    the launcher), so the kernel takes plain pointers and a repeat call is one bound C launch
    (fastlaunch). B_KMAJOR: B stored K-contiguous (column-major), described as B^T (N x K) -- wgmma
    reads 32-bit operands K-major only, so tf32 needs it. The tile loop is flattened with the K loop
    (``flatten``: the next tile's loads start while this tile's epilogue runs), and the epilogue
    keeps its own tile counter ``tile_c`` (a small live set across the flattened loop). EPI_SPLIT = 2
    writes (and reads, beta != 0) C in two BLOCK_N / 2 halves: half the staging shared memory, so one
    more pipeline stage fits. WS: ``warp_specialize`` on the tile loop, then not flattened -- the
    combination tutorial 09 runs on Hopper with device-side descriptors (it keeps flattening for
    Blackwell only)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_KMAJOR:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // EPI_SPLIT])
    start = tl.program_id(0)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=not WS, warp_specialize=WS):
        pid_m, pid_n = _tile_id(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if B_KMAJOR:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            if PRECISION == "none":
                acc = tl.dot(a, b, acc)
            else:
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
        tile_c += NUM_SMS
        pid_m, pid_n = _tile_id(tile_c, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if EPI_SPLIT == 2:
            acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            _tma_epilogue(c_desc, acc0, off_m, off_n, M, N, alpha, beta, bias_ptr, stride_bias,
                          BLOCK_M, BLOCK_N // 2, ALPHA_ONE, HAS_BETA, BIAS, ACT)
            _tma_epilogue(c_desc, acc1, off_m, off_n + BLOCK_N // 2, M, N, alpha, beta, bias_ptr, stride_bias,
                          BLOCK_M, BLOCK_N // 2, ALPHA_ONE, HAS_BETA, BIAS, ACT)
        else:
            _tma_epilogue(c_desc, acc, off_m, off_n, M, N, alpha, beta, bias_ptr, stride_bias,
                          BLOCK_M, BLOCK_N, ALPHA_ONE, HAS_BETA, BIAS, ACT)
