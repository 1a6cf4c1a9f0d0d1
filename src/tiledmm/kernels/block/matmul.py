"""The fast path: the lectures' tiling one level up, in Triton.

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

GEMM form: C = alpha * A @ B + beta * C, any strides, optional batch dimension.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

from ..._backend import emulating, mode, torch_device
from ...registry import KernelSpec, register, shape_class

mode()  # decide GPU or emulation (TRITON_INTERPRET) before triton is imported
import triton  # noqa: E402  (after _backend: it sets TRITON_INTERPRET in emulation)
import triton.language as tl  # noqa: E402

BLOCK_DTYPES = ("float32", "float16", "bfloat16", "float64")
PRECISIONS = {"float32": ("ieee", "tf32"), "float16": (None,), "bfloat16": (None,)}


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
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_ab, stride_am, stride_ak,
                  stride_bb, stride_bk, stride_bn,
                  stride_cb, stride_cm, stride_cn,
                  alpha, beta,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, PRECISION: tl.constexpr, HAS_BETA: tl.constexpr,
                  ALPHA_ONE: tl.constexpr, UPCAST: tl.constexpr = False,
                  K_PER_SPLIT=None, stride_cs=0):
    pid_m, pid_n = _tile_id(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    batch = tl.program_id(1).to(tl.int64)
    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * stride_cb
    # split-K: program (.., .., s) sums the K range [s*K_PER_SPLIT, (s+1)*K_PER_SPLIT) into its own
    # fp32 slice of a workspace, added up afterwards. Without split-K, K_PER_SPLIT = K and s = 0.
    # (k_len is a new name: Triton may have specialised K to the constant 1.)
    split = tl.program_id(2)
    k0 = split * K_PER_SPLIT
    a_ptr += k0.to(tl.int64) * stride_ak
    b_ptr += k0.to(tl.int64) * stride_bk
    c_ptr += split.to(tl.int64) * stride_cs
    k_len = tl.minimum(K - k0, K_PER_SPLIT)

    # Row and Col of the lectures' kernel, now vectors of BLOCK_M rows / BLOCK_N columns
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None].to(tl.int64) * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :].to(tl.int64) * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for phase in range(0, tl.cdiv(k_len, BLOCK_K)):
        k_left = k_len - phase * BLOCK_K
        # the M test and the N test differ, as the slides stress: rows/k for A, k/cols for B
        a = tl.load(a_tile, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(ks[:, None] < k_left) & (cols[None, :] < N), other=0.0)
        if UPCAST:  # emulation only: the Triton interpreter's bf16 tl.dot returns garbage (triton 3.9)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if PRECISION == "none":
            acc = tl.dot(a, b, acc)
        else:
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk

    if not ALPHA_ONE:
        acc = acc * alpha
    c_tile = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    if HAS_BETA:
        acc += beta * tl.load(c_tile, mask=inside, other=0.0).to(tl.float32)
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=inside)


@triton.jit
def matmul_tma_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_bn, stride_cm,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                 GROUP_M: tl.constexpr, PRECISION: tl.constexpr, B_KMAJOR: tl.constexpr,
                                 NUM_SMS: tl.constexpr):
    """Hopper's own path: one program per SM walks tiles (persistent), and the tiles
    arrive through the tensor memory accelerator (TMA) into shared memory. The TMA
    zero-fills reads outside the matrix and clips writes -- the lectures' two
    boundary rules, done by the copy engine. Needs 16-byte-aligned row strides."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_KMAJOR:   # B stored K-contiguous (column-major): describe B^T, N x K
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_tiles = ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_id(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for phase in range((K + BLOCK_K - 1) // BLOCK_K):
            a = a_desc.load([off_m, phase * BLOCK_K])
            if B_KMAJOR:
                b = b_desc.load([off_n, phase * BLOCK_K]).T
            else:
                b = b_desc.load([phase * BLOCK_K, off_n])
            if PRECISION == "none":
                acc = tl.dot(a, b, acc)
            else:
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
        c_desc.store([off_m, off_n], acc.to(c_ptr.dtype.element_ty))


# ---------------------------------------------------------------------------------------------
# Autotuning: a small space, keyed by dtype/precision and a shape class (log2 buckets of M, N,
# K), so a new shape in a known class reuses the tuned choice instead of re-tuning.

def _cfg(bm, bn, bk, g, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g},
                         num_warps=warps, num_stages=stages)


CONFIGS_16BIT = [
    _cfg(128, 256, 64, 8, 8, 3), _cfg(128, 128, 64, 8, 4, 4), _cfg(128, 256, 64, 8, 8, 4),
    _cfg(256, 128, 64, 8, 8, 3), _cfg(128, 128, 64, 8, 8, 3), _cfg(64, 128, 64, 8, 4, 4),
    _cfg(64, 64, 64, 8, 4, 4), _cfg(128, 64, 64, 8, 4, 4),
]
CONFIGS_TF32 = [
    _cfg(128, 256, 32, 8, 8, 3), _cfg(128, 128, 32, 8, 4, 4), _cfg(128, 128, 32, 8, 8, 3),
    _cfg(128, 128, 64, 8, 8, 3), _cfg(256, 128, 32, 8, 8, 4), _cfg(128, 256, 32, 8, 8, 4),
    _cfg(256, 128, 32, 8, 8, 3), _cfg(64, 128, 32, 8, 4, 4), _cfg(128, 64, 32, 8, 4, 4),
    _cfg(64, 64, 32, 8, 4, 4),
]
CONFIGS_IEEE = [  # tl.dot needs BLOCK_K >= 16
    _cfg(128, 128, 16, 8, 8, 3), _cfg(128, 128, 32, 8, 8, 2), _cfg(256, 128, 16, 8, 8, 2),
    _cfg(128, 256, 16, 8, 8, 2), _cfg(64, 128, 16, 8, 4, 3), _cfg(128, 64, 16, 8, 4, 3),
    _cfg(64, 64, 32, 8, 4, 3),
]
SPLITK_CONFIG_16BIT = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}
SPLITK_CONFIG_32BIT = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}
EMULATION_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4}


_tuners: dict[str, Any] = {}


def _tuned(kind: str):
    """One autotuner per precision family (its cache holds the choice per shape class)."""
    if kind not in _tuners:
        configs = {"16bit": CONFIGS_16BIT, "tf32": CONFIGS_TF32, "ieee": CONFIGS_IEEE}[kind]
        _tuners[kind] = triton.autotune(configs=configs, key=["M_CLASS", "N_CLASS", "K_CLASS"],
                                        restore_value=["c_ptr"])(_entry)
    return _tuners[kind]


@triton.jit
def _entry(a_ptr, b_ptr, c_ptr, M, N, K,
           stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
           stride_cb, stride_cm, stride_cn, alpha, beta, K_PER_SPLIT, M_CLASS, N_CLASS, K_CLASS,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           GROUP_M: tl.constexpr, PRECISION: tl.constexpr, HAS_BETA: tl.constexpr,
           ALPHA_ONE: tl.constexpr):
    matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_ab, stride_am, stride_ak,
                  stride_bb, stride_bk, stride_bn, stride_cb, stride_cm, stride_cn,
                  alpha, beta, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PRECISION, HAS_BETA, ALPHA_ONE,
                  False, K_PER_SPLIT, 0)


TMA_CONFIGS = {
    "ieee": [_cfg(128, 128, 32, 8, 8, 3), _cfg(64, 128, 32, 8, 4, 3), _cfg(128, 64, 32, 8, 4, 4),
             _cfg(64, 64, 32, 8, 4, 3), _cfg(128, 128, 16, 8, 8, 4)],
    "16bit": [_cfg(128, 256, 64, 8, 8, 3), _cfg(128, 128, 64, 8, 4, 4), _cfg(128, 256, 64, 8, 8, 4),
              _cfg(128, 128, 64, 8, 8, 4), _cfg(256, 128, 64, 8, 8, 3)],
    "tf32": [_cfg(128, 256, 32, 8, 8, 3), _cfg(128, 128, 32, 8, 4, 4), _cfg(128, 128, 32, 8, 8, 4),
             _cfg(256, 128, 32, 8, 8, 3), _cfg(128, 256, 32, 8, 8, 4)],
}


def _tuned_tma(kind: str):
    name = "tma-" + kind
    if name not in _tuners:
        _tuners[name] = triton.autotune(configs=TMA_CONFIGS[kind], key=["M_CLASS", "N_CLASS", "K_CLASS"])(_tma_entry)
    return _tuners[name]


@triton.jit
def _tma_entry(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_bn, stride_cm, M_CLASS, N_CLASS, K_CLASS,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               PRECISION: tl.constexpr, B_KMAJOR: tl.constexpr, NUM_SMS: tl.constexpr):
    matmul_tma_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_bn, stride_cm,
                                 BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PRECISION, B_KMAJOR, NUM_SMS)


def tuned_configs() -> dict:
    """What the autotuners chose so far: {family: {key: config}} (for reports)."""
    return {kind: {str(k): str(v) for k, v in t.cache.items()} for kind, t in _tuners.items()}


# ---------------------------------------------------------------------------------------------

def _k_major(t, row_dim: int):  # row_dim: 0 for A (K is its last dim), 1 for B (K is its first)
    """A copy of t whose K dimension is the contiguous one (wgmma reads 32-bit
    operands only K-major: tf32 with a row-major B would fall off the wgmma path)."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2) if row_dim else t.contiguous()


@dataclass
class TritonLaunch:
    a: Any
    b: Any
    c: Any
    precision: str
    alpha: float
    beta: float
    host_out: Any = None   # the caller's host Operand, when the result must be copied back
    config: dict | None = None
    compiled: Any = None   # the last CompiledKernel (its .asm holds ptx / cubin / sass)

    variant: str | None = None   # None: choose (and remember) per shape class; or one of VARIANTS

    def run(self) -> None:
        variant = self.variant or (_choose_variant(self) if not emulating() else "blocked")
        if emulating() and variant == "splitk":   # the interpreter runs it at a toy config
            return self._run_splitk(*self.operands(variant), self.c)
        a, b = self.operands(variant)
        if variant == "tma":
            self._run_tma(a, b, self.c)
        elif variant == "splitk":
            self._run_splitk(a, b, self.c)
        else:
            self._run_blocked(a, b, self.c)

    def _run_splitk(self, a, b, c) -> None:
        """Few output tiles, long K: cut K into S slices so that S times more programs run;
        each writes an fp32 partial tile, and the partials are summed (in fp32) after."""
        import torch
        a3, b3, c3 = (x if x.dim() == 3 else x.unsqueeze(0) for x in (a, b, c))
        B, M, K = a3.shape
        N = b3.shape[-1]
        tiles = B * triton.cdiv(M, 64) * triton.cdiv(N, 64)
        splits = max(1, min(triton.cdiv(2 * _num_sms(), tiles), triton.cdiv(K, 256)))
        k_per = triton.cdiv(triton.cdiv(K, splits), 64) * 64
        splits = triton.cdiv(K, k_per)
        ws = torch.empty((splits, B, M, N), device=c.device, dtype=torch.float32)
        args = (a3, b3, ws, M, N, K, a3.stride(0), a3.stride(1), a3.stride(2),
                b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2),
                ws.stride(1), ws.stride(2), ws.stride(3), 1.0, 0.0)
        cfg = SPLITK_CONFIG_16BIT if self.precision == "none" else SPLITK_CONFIG_32BIT
        extra = {}
        if emulating():
            cfg, extra = EMULATION_CONFIG, {"UPCAST": a.dtype == torch_dtype("bfloat16")}
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), B, splits)
        self.compiled = matmul_kernel[grid](*args, **cfg, **extra, PRECISION=self.precision, HAS_BETA=False,
                                            ALPHA_ONE=True, K_PER_SPLIT=k_per, stride_cs=ws.stride(0),
                                            num_warps=4, num_stages=4)
        total = ws.sum(0)
        total = total if c.dim() == 3 else total[0]
        if self.alpha != 1.0:
            total.mul_(self.alpha)
        if self.beta != 0.0:
            total.add_(c.float(), alpha=self.beta)
        c.copy_(total)

    def operands(self, variant: str):
        """A and B as the variant reads them. wgmma reads 32-bit operands K-major only, so
        for tf32 a row-major B (or column-major A) is re-laid as a K-major copy -- here, inside
        the timed call, so its cost counts -- unless the variant is 'blocked-nocopy'."""
        a, b = self.a, self.b
        if self.precision == "tf32" and not emulating() and variant != "blocked-nocopy":
            if a.stride(-1) != 1:
                a = _k_major(a, 0)
            if b.stride(-2) != 1:
                b = _k_major(b, 1)
        return a, b

    def candidates(self) -> list[str]:
        out = ["blocked"]
        M, K, N = self.a.shape[-2], self.a.shape[-1], self.b.shape[-1]
        batch = self.a.shape[0] if self.a.dim() == 3 else 1
        if batch * triton.cdiv(M, 128) * triton.cdiv(N, 128) < _num_sms() and K >= 1024:
            out.append("splitk")
        if self.precision == "tf32" and self.b.stride(-2) != 1:
            out.append("blocked-nocopy")
        a, b = self.operands("tma")
        if _tma_ok(a, b, self.c, self.alpha, self.beta):
            out.append("tma")
        return out

    def _run_blocked(self, a, b, c) -> None:
        a3, b3, c3 = (x if x.dim() == 3 else x.unsqueeze(0) for x in (a, b, c))
        B, M, K = a3.shape
        N = b3.shape[-1]
        args = (a3, b3, c3, M, N, K, a3.stride(0), a3.stride(1), a3.stride(2),
                b3.stride(0) if b3.shape[0] > 1 else 0, b3.stride(1), b3.stride(2),
                c3.stride(0), c3.stride(1), c3.stride(2), self.alpha, self.beta)
        flags = dict(PRECISION=self.precision, HAS_BETA=self.beta != 0.0, ALPHA_ONE=self.alpha == 1.0)
        if emulating():
            flags["UPCAST"] = a.dtype == torch_dtype("bfloat16")
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), B)  # noqa: E731
        if self.config is not None or emulating():
            cfg = dict(self.config or EMULATION_CONFIG)
            warps, stages = cfg.pop("num_warps", 4), cfg.pop("num_stages", 3)
            self.compiled = matmul_kernel[grid(cfg)](*args, **cfg, **flags, K_PER_SPLIT=K, num_warps=warps,
                                                     num_stages=stages)
            return
        kind = "16bit" if self.precision == "none" else self.precision
        key = ("blocked", kind, str(a.dtype), str(c.dtype), shape_class(M, N, K), B > 1)
        self.compiled = _launch_tuned(key, _tuned(kind), matmul_kernel, grid, args, (K, *shape_class(M, N, K)),
                                      dict(K_PER_SPLIT=K), flags)

    def _run_tma(self, a, b, c) -> None:
        _ensure_allocator()
        M, K = a.shape
        N = b.shape[-1]
        sms = _num_sms()
        kind = "16bit" if self.precision == "none" else self.precision
        grid = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa: E731
        kmajor = b.stride(0) == 1 and b.stride(1) != 1
        args = (a, b, c, M, N, K, a.stride(0), b.stride(0), b.stride(1), c.stride(0))
        flags = dict(PRECISION=self.precision, B_KMAJOR=kmajor, NUM_SMS=sms)
        key = ("tma", kind, str(a.dtype), str(c.dtype), shape_class(M, N, K), kmajor)
        self.compiled = _launch_tuned(key, _tuned_tma(kind), matmul_tma_persistent_kernel, grid, args,
                                      shape_class(M, N, K), {}, flags)

    def finish(self) -> None:
        if self.host_out is not None:
            self.host_out.assign_from_torch(self.c)


def _tma_ok(a, b, c, alpha: float, beta: float) -> bool:
    """The TMA path: a Hopper GPU, 2-D, plain C = A @ B, unit inner strides and 16-byte
    aligned row strides and bases (the copy engine's rules)."""
    if emulating() or a.dim() != 2 or alpha != 1.0 or beta != 0.0 or _capability()[0] < 9:
        return False
    esize = a.element_size()
    b_lead = b.stride(0) if b.stride(1) == 1 else (b.stride(1) if b.stride(0) == 1 else None)
    if a.stride(1) != 1 or c.stride(1) != 1 or b_lead is None:
        return False
    return all((x * esize) % 16 == 0 for x in (a.stride(0), b_lead, c.stride(0))) and \
        all(t.data_ptr() % 16 == 0 for t in (a, b, c))


VARIANTS = ("blocked", "blocked-nocopy", "tma", "splitk")
_variant_choice: dict[tuple, str] = {}
_best: dict[tuple, Any] = {}


def _launch_tuned(key, tuner, kernel, grid, args, tuner_args, kernel_kw, flags):
    """Autotune once per key (the tuner's entry takes ``*args, *tuner_args``); afterwards launch
    the plain kernel with the chosen config and ``kernel_kw``, skipping the autotuner's per-call
    Python work."""
    cfg = _best.get(key)
    if cfg is None:
        compiled = tuner[grid](*args, *tuner_args, **flags)
        _best[key] = tuner.best_config
        return compiled
    kw = cfg.kwargs
    return kernel[grid(kw)](*args, **kernel_kw, **kw, **flags, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _choose_variant(launch: "TritonLaunch") -> str:
    """Time each applicable variant once per (dtype, precision, layout, shape class, batch);
    keep the fastest."""
    a, b = launch.a, launch.b
    key = (str(a.dtype), launch.precision, b.stride(-2) == 1, a.dim() == 3,
           shape_class(a.shape[-2], b.shape[-1], a.shape[-1]))
    if key not in _variant_choice:
        cands = launch.candidates()
        times = {}
        saved = launch.c.clone()   # benchmarking runs in place: with beta != 0 each run would read the last
        for v in cands:
            launch.variant = v
            launch.run()  # autotunes on first use
            times[v] = triton.testing.do_bench(launch.run, warmup=10, rep=50, return_mode="median")
            launch.c.copy_(saved)
        launch.variant = None
        _variant_choice[key] = min(times, key=times.get)
    return _variant_choice[key]


def variant_choices() -> dict:
    return {str(k): v for k, v in _variant_choice.items()}


_allocator_set = False


def _ensure_allocator() -> None:
    """Device-side TMA descriptors need a little global scratch memory from the caller."""
    global _allocator_set
    if not _allocator_set:
        import torch
        triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
        _allocator_set = True


@functools.lru_cache(maxsize=None)
def _num_sms() -> int:
    if emulating():
        return 4   # the interpreter stands in for a small GPU
    import torch
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


@functools.lru_cache(maxsize=None)
def _capability() -> tuple:
    import torch
    return torch.cuda.get_device_capability()


def torch_dtype(name: str):
    import torch
    return getattr(torch, name)


def check_precision(dtype: str, precision: str | None) -> str:
    from ..._arrays import TiledmmError
    allowed = PRECISIONS.get(dtype, (None,))
    if precision is None:
        return allowed[0] or "none"
    if precision not in allowed or allowed == (None,):
        raise TiledmmError(f"precision {precision!r} is not available for {dtype} inputs "
                           f"(float32 takes 'ieee' or 'tf32'; bfloat16/float16 take none)")
    return precision


_warned_fp64 = False


def _prepare(a, b, out, tile, opts):
    global _warned_fp64
    if a.dtype == "float64":  # no float64 tensor-core path worth having: use the SIMT kernel
        from ...registry import get
        if not _warned_fp64:
            warnings.warn("tiledmm: kernel 'triton' has no float64 path; using the SIMT kernel 'tiled' (tile 32)",
                          stacklevel=4)
            _warned_fp64 = True
        if len(a.shape) == 3 or opts.get("alpha", 1.0) != 1.0 or opts.get("beta", 0.0) != 0.0:
            from ..._arrays import TiledmmError
            raise TiledmmError("float64 runs on the SIMT kernel, which takes 2-D inputs without alpha/beta")
        return get("tiled").prepare(a, b, out, 32 if not emulating() else 8, {})
    precision = check_precision(a.dtype, opts.get("precision"))
    dev = torch_device()
    ta, tb = a.torch_view(dev), b.torch_view(dev)
    tc = out.torch_view(dev)
    variant = opts.get("variant")
    if variant not in (None, *VARIANTS):
        from ..._arrays import TiledmmError
        raise TiledmmError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    launch = TritonLaunch(ta, tb, tc, precision, float(opts.get("alpha", 1.0)), float(opts.get("beta", 0.0)),
                          out if out.on_host and dev != "cpu" else None, opts.get("config"))
    if variant == "tma" and "tma" not in launch.candidates():
        from ..._arrays import TiledmmError
        raise TiledmmError("variant 'tma' needs a Hopper GPU, 2-D inputs without alpha/beta, unit inner strides "
                           f"and 16-byte aligned rows; got a {tuple(ta.shape)} strides {ta.stride()}, "
                           f"b {tuple(tb.shape)} strides {tb.stride()}")
    launch.variant = variant
    return launch


SPEC: KernelSpec = register(KernelSpec(
    name="triton", family="block",
    summary="Triton block-tiled GEMM: masked (zero-fill) tiles, tensor cores, grouped order, autotuned",
    dtypes=BLOCK_DTYPES, prepare=_prepare, batched=True,
    options=("precision", "alpha", "beta", "out_dtype", "config", "variant"), emulation_limit=2 ** 24, order=50))
