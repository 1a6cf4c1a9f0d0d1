"""The Triton GEMM's variants: each a kernel under an operand policy, one launch function each.

A variant is a kernel (``Variant.kernel``: "blocked", "tma", "splitk", ...) under an operand
policy (``Variant.policy``, ``policies.py``: the operands as given, K-major copies made in the call,
aligned copies of what the kernel cannot take, a cached K-major B); its name, which ``variant=``
takes and the tables store, is derived from the two ("tma", "tma-kmajor", "tma-copy",
"tma-kcache"). Every variant has the same interface, so ``dispatch.py`` can choose among them
(and among their configs) per shape class; a variant joins by ``register`` (the registry at the
end of this module: a new kernel family is its module and a line there):

    applicable(a, b, c, precision, alpha, beta) -> bool
    configs(kind) -> list[dict]                  candidate configs (``configs.py``)
    launch(a, b, c, *, precision, alpha, beta, config) -> None
        enqueue c = alpha * a @ b + beta * c on torch's current stream: no host sync,
        no allocation but torch's (so a CUDA graph can capture it); a variant whose
        ``epilogue`` is True also takes bias=, bias_mode=, act= (c = act(... + bias))

a (M, K) or (B, M, K); b (K, N) or (B, K, N) (batch 1 broadcasts); c (M, N) or (B, M, N):
torch tensors on the kernels' device with any strides (``tma`` takes fewer, see ``applicable``).

Everything the dispatcher and the no-timing model need to know of a variant is an attribute
of its ``Variant`` (``traits`` for the model, ``few_rows``, ``splits_batch``, ``emulation``,
``own_config``, ``epilogue``): the dispatcher never tests a variant's name.

Each variant is kept because something picks it (``scripts/variant_picks.py``: the shipped H100
table's 338 entries over every layout it holds; the no-timing default's picks -- rules > table >
model -- and the model's alone over tiledmm.bench's square, irregular, transformer and llm suites,
80 shapes x bf16, fp16, tf32, fp32 = 320, on a stand-in H100, and on a stand-in A100):

    variant          table  default  model  A100   kept because
    gluon-ws           155      186    151     0   16-bit and tf32 products on Hopper (the rules' own)
    splitk              89       86     81    91   few output tiles and deep K; 77 of 80 exact fp32 shapes
    blocked             39       37     36   188   any strides, any GPU; 16-bit products of 1-32 rows
    tma                 17        2     24     0   exact fp32 on Hopper (every pick of it is fp32)
    tma-copy            27        4      3     0   rows not 16-byte aligned (4097 x 4093 x 4095)
    tma-kmajor           8        5     23     0   tf32 with a row-major B at 8192 rows (Hopper)
    splitk-kmajor        3        0      2     3   tf32, row-major B, few output tiles (127 x 8191 x 127)
    blocked-kmajor       0        0      0    38   tf32 with a row-major B off Hopper
    simt-async           0        0      0     0   timed fastest in 26 exact-fp32 entries (``fastest``):
                                                    the default takes it where its kernel is on disk
    batched-small        0        0      0     0   batches of tiny products (no suite has them):
                                                    1.27-7.31x torch from 10,000 products of up to 32^3
    tma-kcache           -        -      -     -   opt-in (a reused weight's K-major copy kept):
                                                    4096^3 tf32 0.97-1.07x torch vs 0.74-0.77x copying
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..._backend import emulating
from . import configs as C
from . import batched_small, gluon_gemm, kmajor_cache, splitk, tma_copy
from .policies import AS_IS, KMAJOR, OPT_IN as OPT_IN_POLICIES, variant_name
from . import heuristics as H
from ._vcommon import capability, cdiv, hopper, index_of, tma_ok
from ._vcommon import fast as _fast
from .heuristics import Traits
from .fastlaunch import WORKSPACE
from .transpose import k_major
from .kernels import matmul_kernel
from .tma_persistent import applicable as tma_applicable
from .tma_persistent import launch as _tma_launch

MAX_GRID_YZ = 65535   # CUDA's limit on gridDim.y and gridDim.z
FORCED_DEFAULT = "blocked"    # what a forced config= without variant= runs (masked tiles, any strides)
# the end of the error a forced variant that cannot run the call raises (dispatch._forced)
FORCED_HINT = ("'tma' needs a Hopper GPU, 2-D inputs, unit inner strides and 16-byte aligned rows; "
               "see kernels/block/variants.py for the others")


@dataclass(frozen=True)
class Variant:
    kernel: str          # the kernel it runs; with ``policy``, its name (``name``)
    applicable: Callable[..., bool]
    configs: Callable[[str], list]
    launch: Callable[..., None]
    # how fastlaunch.replay may bind repeat calls: True -- one FastKernel launch on (a, b, c) and nothing
    # else; WORKSPACE -- FastKernel launches and private buffers only; or a function (a, b, c) -> either
    replayable: object = False
    # prune(configs, M, N, K, sms, batch) -> the configs worth timing; None: the wave model (configs.prune)
    prune: Callable[..., list] | None = None
    # how it runs, for the no-timing model (heuristics.py): persistence, split, speed, copies
    traits: Traits = Traits()
    # it picks its own config when the caller forces it without one (the module variants)
    own_config: Callable[..., dict] | None = None
    # few_rows(kind) -> extra configs offered when the shape class has at most configs.FEW_ROWS rows
    few_rows: Callable[[str], list] | None = None
    # its launch splits a batch over gridDim.y's 65,535 limit (the others are not offered beyond it)
    splits_batch: bool = False
    # the configs the dispatcher offers in the interpreter (none: not chosen there, only forced)
    emulation: tuple = ()
    # its launch also takes the fused epilogue's keywords bias=, bias_mode=, act= (matmul_kernel's
    # BIAS and ACT): tiledmm.ops runs bias and activation in it instead of two more passes over C
    epilogue: bool = False
    # class_launch(a, b, c, alpha, beta, precision=, config=) -> after a launch of (a, b, c), the
    # short path's launch for the whole shape class (fastlaunch.bind's protocol), or None: for a
    # variant whose launches are not FastKernel's (the Gluon kernel binds its own)
    class_launch: Callable[..., object] | None = None
    # invariant(configs) -> those of its configs whose launches compute each row of C from that row of A,
    # B and the config alone: no split of K that follows M, no atomics, nothing inside the launch chosen by M
    # (a TAIL config's split of the last wave: its plain twin). None: the batch-invariant mode never takes it
    # (tiledmm.invariance; kernels/block/invariant.py)
    invariant: Callable[[list], list] | None = None
    # on_disk(config, a, b, c) -> whether a variant whose traits say ``compiles_per_process`` has this call's
    # kernel compiled on disk already (a first call loads it in milliseconds): the no-timing default may then
    # take it where the shipped table timed it fastest (dispatch._shipped_pick)
    on_disk: Callable[..., bool] | None = None
    # how the kernel is given its operands (policies.py)
    policy: str = AS_IS

    @property
    def name(self) -> str:
        """The public name: the kernel's, with the policy's after a hyphen unless AS_IS (policies.variant_name)."""
        return variant_name(self.kernel, self.policy)


def _dims(a, b):
    """(batch, M, K, N) and the batch strides (0 for a broadcast or 2-D operand)."""
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = a.shape[0] if a.dim() == 3 else (b.shape[0] if b.dim() == 3 else 1)
    sa = a.stride(0) if a.dim() == 3 and a.shape[0] > 1 else 0
    sb = b.stride(0) if b.dim() == 3 and b.shape[0] > 1 else 0
    return batch, M, K, N, sa, sb


def _upcast(a) -> bool:   # emulation only: the interpreter's bf16 tl.dot returns garbage (triton 3.9)
    return emulating() and str(a.dtype) == "torch.bfloat16"


# -- blocked: masked tiles, any strides, batch on grid axis 1 ------------------------------------

def _blocked_launch(a, b, c, *, precision, alpha, beta, config, bias=None, bias_mode=0, act="none"):
    """``bias_mode``/``act``: the fused epilogue (``matmul_kernel``'s BIAS and ACT; bias a 1-D tensor)."""
    batch, M, K, N, sa, sb = _dims(a, b)
    flags = (("PRECISION", precision), ("HAS_BETA", beta != 0.0), ("ALPHA_ONE", alpha == 1.0),
             ("UPCAST", _upcast(a)), ("SWAP", config.get("SWAP", 0)), ("BIAS", bias_mode), ("ACT", act))
    if bias_mode:
        extra = (bias, bias.stride(0))
    else:      # no bias: its two parameters fixed like the constexprs, so every runtime parameter is
        flags += (("bias_ptr", None), ("stride_bias", 0))   # one a class launch computes (fastlaunch._ENV)
        extra = ()
    fk = _fast(matmul_kernel, tuple(config.items()), flags)
    tiles = cdiv(M, config["BLOCK_M"]) * cdiv(N, config["BLOCK_N"])
    sc = c.stride(-3) if c.dim() >= 3 else 0
    for b0 in range(0, batch, MAX_GRID_YZ):    # gridDim.y is at most 65535: more batches, more launches
        nb = min(MAX_GRID_YZ, batch - b0)
        fk((tiles, nb), a if b0 == 0 or not sa else a[b0:], b if b0 == 0 or not sb else b[b0:],
           c if b0 == 0 else c[b0:], M, N, K, sa, a.stride(-2), a.stride(-1),
           sb, b.stride(-2), b.stride(-1), sc, c.stride(-2), c.stride(-1), float(alpha), float(beta), *extra)


BLOCKED = Variant("blocked", lambda a, b, c, p, al, be: True, lambda kind: C.BLOCKED[kind], _blocked_launch, True,
                  traits=Traits(speed=splitk.TRAITS.speed), few_rows=lambda kind: C.BLOCKED_FEW_ROWS[kind],
                  splits_batch=True, emulation=C.EMULATION_CHOICES,
                  epilogue=True, invariant=list)   # split-K runs the blocked kernel's pieces


# -- TMA, persistent (Hopper): tma_persistent.py, the kernel in kernels.py ----------------------------

def _tma_speed(p, cfg) -> float:
    """The model's throughput of a config: the half-tile epilogue (EPI_SPLIT 2) is the reference;
    a whole-tile one 0.95 (the H100 tuner's report: the same tiles without it measured ~5 % slower)."""
    return 1.0 if cfg.get("EPI_SPLIT", 1) == 2 else 0.95


def _tma_prune(configs: list, M: int, N: int, K: int, sms: int, batch: int = 1) -> list:
    """The wave model with each tile's operand reuse counted (configs.prune's ``reuse``): one program
    per SM runs every tile at its tile's speed, so 63 waves of 128 x 128 tiles (8192 x 16384) do not
    beat 32 of 128 x 256 (tma_persistent.heuristic, measured: 128 x 256 once its tiles fill the SMs)."""
    return C.prune(configs, M, N, K, sms, batch, keep=2, reuse=True)


TMA = Variant("tma", tma_applicable, lambda kind: C.TMA[kind], _tma_launch, True, prune=_tma_prune,
              traits=Traits(persistent=True, tma_store=True, speed=_tma_speed, capability=(9, 0)), epilogue=True,
              invariant=list)


# -- tf32 with K-major operands ------------------------------------------------------------------

def _tma_takes_kmajor(a, b, c) -> bool:
    """Whether the TMA kernel takes the operands the KMAJOR policy gives it: alignment judged on what
    it will read, the operand kept (already K-major) or a fresh K-major copy."""
    if a.dim() != 2 or b.dim() != 2 or c.dim() != 2 or not hopper(a) or 0 in a.shape or 0 in b.shape:
        return False
    fresh = (a.shape[1] * 4) % 16 == 0
    return a.dtype == b.dtype == c.dtype and tma_ok(c) and (tma_ok(a) if a.stride(1) == 1 else fresh) \
        and (tma_ok(b.T) if b.stride(0) == 1 else fresh)


def with_kmajor(v: Variant, takes: Callable[..., bool] | None = None) -> Variant:
    """Kernel ``v`` under the KMAJOR policy: run on K-major copies of A and B (made inside the call, so
    their cost counts). ``takes(a, b, c)``: whether the kernel takes the copies it would be given
    (a kernel with alignment rules: the TMA kernel's); None: ``v``'s own rules on the operands as given."""
    def operands(a, b):
        return k_major(a, -1), k_major(b, -2)

    def applicable(a, b, c, precision, alpha, beta):
        if precision != "tf32" or emulating() or (a.stride(-1) == 1 and b.stride(-2) == 1):
            return False
        if takes is not None:
            return takes(a, b, c)
        return v.applicable(a, b, c, precision, alpha, beta)

    def launch(a, b, c, *, precision, alpha, beta, config, **epilogue):
        """``epilogue``: the fused epilogue's keywords, passed on (where ``v.epilogue``)."""
        ka, kb = operands(a, b)
        v.launch(ka, kb, c, precision=precision, alpha=alpha, beta=beta, config=config, **epilogue)

    def replayable(a, b, c):
        """Bound (fastlaunch.replay) where the copy is tiledmm's transpose kernel into a private
        buffer: a 2-D row-major B and a K-contiguous A (else torch copies, which a replay would skip)."""
        return WORKSPACE if v.replayable and a.stride(-1) == 1 and b.dim() == 2 else False

    def copies(a, b, c, precision) -> int:
        return (a.numel() * a.element_size() if a.stride(-1) != 1 else 0) + \
            (b.numel() * b.element_size() if b.stride(-2) != 1 else 0)

    t = v.traits
    traits = replace(t, speed=lambda p, cfg: t.speed(replace(p, b_kmajor=True), cfg), copies=copies)
    return Variant(v.kernel, applicable, v.configs, launch, replayable, v.prune, traits, v.own_config,
                   v.few_rows, v.splits_batch, v.emulation, v.epilogue, invariant=v.invariant, policy=KMAJOR)


# -- exact float32 on the SIMT ladder's rung 11 ----------------------------------------------------
# Exact fp32 cannot use the tensor cores, so the lectures' own kernel family competes here: for
# large plain products the dispatcher times rung 11 (numba, cp.async ring) against Triton's FMA
# kernels per shape class and keeps the faster. Only by timing: the model never picks it.

SIMT_FROM = 1024     # smallest M, N and K offered to rung 11 (its numba launch costs tens of microseconds)


def _simt_applicable(a, b, c, precision, alpha, beta) -> bool:
    if precision != "ieee" or emulating() or a.dim() != 2 or b.dim() != 2 or alpha != 1.0 or beta != 0.0:
        return False
    if c.dtype != a.dtype or min(a.shape[0], a.shape[1], b.shape[1]) < SIMT_FROM:
        return False
    import torch
    return not torch.cuda.is_current_stream_capturing() and min(a.stride() + b.stride() + c.stride()) >= 0


def _simt_launch(a, b, c, *, precision, alpha, beta, config):
    from ...registry import get
    get("async").launch(a, b, c, tile=None, opts={"config": config["name"]} if config else {})


def _simt(bm: int, bn: int, bk: int, stages: int, name: str) -> dict:
    """A rung-11 config: its tile and ring depth for the model's tables, its name for the rung."""
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_stages": stages, "name": name}


def _simt_on_disk(config: dict, a, b, c) -> bool:
    """Rung 11's kernel for ``config`` and this call in the SIMT kernels' disk cache (kernels/simt_cache.py)."""
    from ..simt_cache import async_ready
    vec_b = b.stride(-1) == 1 and (b.stride(-2) * b.element_size()) % 16 == 0 and b.data_ptr() % 16 == 0
    return async_ready(config["name"], str(c.dtype).replace("torch.", ""), vec_b, capability(index_of(c)))


SIMT_ASYNC = Variant("simt-async", _simt_applicable,
                     lambda kind: [_simt(64, 128, 16, 3, "64x128x16-w32x64-t8x8-s3-m4"),
                                   _simt(128, 128, 16, 3, "128x128x16-w32x64-t8x8-s3-m2")] if kind == "ieee" else [],
                     _simt_launch, traits=Traits(modelled=False, compiles_per_process=True), on_disk=_simt_on_disk)


# -- every variant the dispatcher chooses among ----------------------------------------------------

def from_module(mod) -> Variant:
    """A variant module (NAME, applicable, CONFIGS, launch, heuristic; REPLAYABLE, prune, TRAITS,
    class_launch where it has them; KERNEL and POLICY where it is a policy of another kernel, else its
    NAME is its kernel's, as given) as a Variant, whose derived name must be the module's NAME."""
    v = Variant(getattr(mod, "KERNEL", mod.NAME), mod.applicable, lambda kind: mod.CONFIGS.get(kind, []), mod.launch,
                getattr(mod, "REPLAYABLE", False), getattr(mod, "prune", None), getattr(mod, "TRAITS", Traits()),
                mod.heuristic, class_launch=getattr(mod, "class_launch", None), policy=getattr(mod, "POLICY", AS_IS))
    if v.name != mod.NAME:
        raise ValueError(f"{mod.__name__}: kernel {v.kernel!r} under policy {v.policy!r} is {v.name!r}, not {mod.NAME!r}")
    return v


# -- the warp-specialised Gluon kernel (Hopper, gluon_gemm.py) --------------------------------------
# Not replayable by fastlaunch (its launches are not FastKernel's): repeat calls are bound by gluon_gemm
# itself (the compiled kernel's C launch, tensor maps kept per pointer and shape): 10-24 us of host time
# through gluon_gemm.launch, 25-27 us through tiledmm.matmul's plan on the H100
# (95-153 us through Gluon's own JIT launcher); 34 us
# through the plan (torch 21) where the short path calls the variant's launch each
# time: its class launch (gluon_gemm.class_launch) now takes the bound specialisation directly, 15-18 us
# (torch 17; H100), so the model and the tuner count its repeat calls as bound
# (dispatch._repeats_bound): host_us below is the floor only where a call is not (CuPy, numba arrays). Its host
# floor is the worst of those in the model's units (the model's GPU times assume the tensor cores' peak;
# the kernels reach ~0.79 of it: 27.4 x 0.79 = 22). Fused epilogue (bias, activation). Never in
# the interpreter (Gluon does not run there). Listed last: where the model ties it with an earlier
# variant (8192^3 16-bit, heuristics.gluon_speed), the earlier one is kept.

def _gluon_prune(configs: list, M: int, N: int, K: int, sms: int, batch: int = 1) -> list:
    """gluon_gemm.heuristic's config for this shape (its own measured-rate wave model), if offered;
    for tf32 its configs at both rates (both operands from shared memory; one from registers): the
    layout is not known here, the model's ``gluon_speed`` (which knows B's) ranks the two."""
    kind = "tf32" if any(c in gluon_gemm.CONFIGS["tf32"] for c in configs) else "16bit"
    out = []
    for reg in ((False, True) if kind == "tf32" else (False,)):
        h = gluon_gemm.heuristic(M, N, K, kind, sms, 4 if kind == "tf32" else 2, reg, batch)
        if h in configs and h not in out:
            out.append(h)
    return out or configs[:1]


def _gluon_split(M, N, K, batch, config, sms) -> tuple:
    s = config.get("SPLIT_K", 1)
    return s, cdiv(K, s)


def _gluon_invariant(configs: list) -> list:
    """The Gluon kernel's configs that split nothing: SPLIT_K 1 (its split-K adds partials in arrival
    order), a TAIL config as its plain twin (the tail split depends on how many tiles M makes)."""
    out = []
    for c in configs:
        plain = dict(c, TAIL=0)
        if c.get("SPLIT_K", 1) == 1 and plain not in out:
            out.append(plain)
    return out


GLUON = replace(from_module(gluon_gemm), prune=_gluon_prune, epilogue=True, invariant=_gluon_invariant,
                traits=Traits(persistent=True, tma_store=True, split=_gluon_split, speed=H.gluon_speed,
                              capability=(9, 0), host_us=22.0, own_config_by_shape=True))

SPLITK = replace(from_module(splitk), invariant=splitk.invariant)


# -- the registry: every variant, in the order the dispatcher offers them (the model's ties go to the
# earlier one; the batch-invariant mode's too) -----------------------------------------------------

ALL: list[Variant] = []       # what the dispatcher chooses among
OPT_IN: list[Variant] = []    # run only where forced (variant=): their policy is opt-in (policies.OPT_IN)
BY_NAME: dict[str, Variant] = {}


def register(v: Variant) -> Variant:
    """Add ``v`` to the registry (``OPT_IN`` where its policy is opt-in, else ``ALL``, last); a name
    registered already is an error."""
    if v.name in BY_NAME:
        raise ValueError(f"variant {v.name!r} is registered already")
    (OPT_IN if v.policy in OPT_IN_POLICIES else ALL).append(v)
    BY_NAME[v.name] = v
    return v


for _v in (BLOCKED, with_kmajor(BLOCKED), TMA, with_kmajor(TMA, _tma_takes_kmajor), SPLITK, with_kmajor(SPLITK),
           from_module(tma_copy), SIMT_ASYNC, replace(from_module(batched_small), splits_batch=True), GLUON,
           # its cache of K-major copies trusts torch's version counter, which writes from outside torch
           # (CuPy, numba, a raw pointer) do not move: opt-in (policies.KCACHE)
           from_module(kmajor_cache)):
    register(_v)
del _v
