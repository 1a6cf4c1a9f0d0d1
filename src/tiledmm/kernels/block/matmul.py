"""The Triton family's dispatcher: which variant, with which config, for this call.

The kernels are in ``kernels.py``, their configs in ``configs.py``, one launch function
per variant in ``variants.py``. Here a call is reduced to a *plan key* -- dtype,
precision, layout (which strides are unit, whether every base and row is 16-byte
aligned), shape class (log2 buckets of M, N, K), batch, alpha == 1, beta == 0 -- and
the key resolves, once, to a launch: the variant and config chosen by timing the
candidates on the caller's own operands (``tiledmm.tuning``: remembered on disk), or
by the wave model when tuning is off or a CUDA graph is being captured. Later calls
with the same key only read shapes and strides and launch.
"""
from __future__ import annotations

import functools
import threading
from typing import Callable

from ... import tuning
from ..._arrays import TiledmmError
from ..._backend import emulating
from ...registry import KernelSpec, register, shape_class
from ...timing import device_and_host
from . import configs as C
from . import variants as V

BLOCK_DTYPES = ("float32", "float16", "bfloat16")
PRECISIONS = {"float32": ("ieee", "tf32"), "float16": (None,), "bfloat16": (None,)}
VARIANTS = tuple(V.BY_NAME)

_plans: dict[tuple, Callable] = {}
_lock = threading.Lock()
tuning.on_mode_change(_plans.clear)   # plans resolved under the other mode are resolved again


def check_precision(dtype: str, precision: str | None) -> str:
    allowed = PRECISIONS.get(dtype, (None,))
    if precision is None:
        return allowed[0] or "none"
    if precision not in allowed or allowed == (None,):
        raise TiledmmError(f"precision {precision!r} is not available for {dtype} inputs "
                           f"(float32 takes 'ieee' or 'tf32'; bfloat16/float16 take none)")
    return precision


def _aligned(a, b, c) -> bool:
    """Every base address and every leading stride 16-byte aligned (TMA's rule)."""
    e = a.element_size()
    return (a.data_ptr() | b.data_ptr() | c.data_ptr()) % 16 == 0 and \
        all((s * e) % 16 == 0 for t in (a, b, c) for s in t.stride()[-2:] if s != 1)


def plan_key(a, b, c, precision: str, alpha: float, beta: float) -> tuple:
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    return (a.dtype, c.dtype, precision, a.dim(), b.dim(), a.stride(-1) == 1, b.stride(-1) == 1,
            b.stride(-2) == 1, c.stride(-1) == 1, _aligned(a, b, c), shape_class(M, N, K),
            alpha == 1.0, beta == 0.0)


def launch(a, b, c, *, precision: str, alpha: float = 1.0, beta: float = 0.0, variant: str | None = None,
           config: dict | None = None) -> None:
    """c = alpha * a @ b + beta * c with the chosen (or the forced) variant and config."""
    if variant is not None or config is not None:
        return _forced(a, b, c, precision, alpha, beta, variant, config)
    resolved(a, b, c, precision, alpha, beta)(a, b, c, alpha=alpha, beta=beta)


def resolved(a, b, c, precision: str, alpha: float, beta: float) -> Callable:
    """The launch for this call's plan key, ``f(a, b, c, alpha=, beta=)`` (chosen on first use)."""
    key = plan_key(a, b, c, precision, alpha, beta)
    fn = _plans.get(key)
    return fn if fn is not None else _resolve(key, a, b, c, precision, alpha, beta)


def _bind(v: V.Variant, precision: str, config: dict) -> Callable:
    fn = functools.partial(v.launch, precision=precision, config=config)
    fn.replayable = v.replayable     # type: ignore[attr-defined]  (read by fastlaunch.replay)
    return fn


def _forced(a, b, c, precision, alpha, beta, variant, config) -> None:
    v = V.BY_NAME.get(variant or "blocked")
    if v is None:
        raise TiledmmError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    if not v.applicable(a, b, c, precision, alpha, beta):
        raise TiledmmError(
            f"variant {v.name!r} cannot run this call (a {tuple(a.shape)} strides {a.stride()}, "
            f"b {tuple(b.shape)} strides {b.stride()}, precision {precision}, alpha {alpha}, beta {beta}); "
            "'tma' needs a Hopper GPU, 2-D inputs without alpha/beta, unit inner strides and 16-byte "
            "aligned rows; see kernels/block/variants.py for the others")
    own = v.name in ("blocked", "blocked-kmajor", "tma", "tma-kmajor")   # the module variants pick their own
    if config is None and own:
        M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
        config = C.EMULATION if emulating() else C.heuristic(_configs(v, C.kind_of(precision), a, c), M, N, K,
                                                             V.num_sms())
    elif config is not None and own:
        config = {**C.EMULATION, **config} if emulating() else {"num_warps": 4, "num_stages": 3, **config}
    _bind(v, precision, dict(config) if config else None)(a, b, c, alpha=alpha, beta=beta)


def _configs(v: V.Variant, kind: str, a, c, rows: int | None = None) -> list[dict]:
    """The variant's candidate configs that fit the device's shared memory for these dtypes
    (the TMA kernels stage the C tile for the copy engine too); for the blocked kernel and
    at most ``C.FEW_ROWS`` rows (the class's), the swapped few-row configs too."""
    tma = v.name in ("tma", "tma-kmajor")
    table = v.configs(kind)
    if v is V.BLOCKED and rows is not None and rows <= C.FEW_ROWS:
        table = table + C.BLOCKED_FEW_ROWS[kind]
    return C.fitting(table, a.element_size(), c.element_size(), tma, V.smem_limit()) or table


def _cfg_name(c: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in sorted(c.items()))


def _resolve(key: tuple, a, b, c, precision, alpha, beta) -> Callable:
    """Variant and config for a new plan key: the candidates of every applicable variant
    (configs pruned by the wave model at the class's representative size), timed on the
    caller's operands into a scratch output, the fastest kept."""
    if emulating():
        fn = _bind(V.BLOCKED, precision, C.EMULATION)
        _plans[key] = fn
        return fn
    import torch
    kind = C.kind_of(precision)
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    rM, rN, rK = (2 ** e for e in key[10])       # the class's representative: candidates depend on the key alone
    sms = V.num_sms()
    options: dict[str, tuple[V.Variant, dict]] = {}
    for v in V.ALL:
        if batch > V.MAX_GRID_YZ and v is not V.BLOCKED:   # only the blocked launch splits the batch over launches
            continue
        if v.applicable(a, b, c, precision, alpha, beta):
            table = _configs(v, kind, a, c, rM)
            picked = v.prune(table, rM, rN, rK, sms, batch) if v.prune else \
                C.prune(table, rM, rN, rK, sms, batch, keep=3 if v is V.BLOCKED else 2)
            for cfg in picked:
                options[f"{v.name}:{_cfg_name(cfg)}"] = (v, cfg)
    pick = _model_pick(options, M, N, K, batch, sms)
    capturing = torch.cuda.is_current_stream_capturing()

    def timer(v, cfg):
        def run() -> float:
            scratch = torch.empty_strided(c.shape, c.stride(), dtype=c.dtype, device=c.device)
            if beta != 0.0:
                scratch.copy_(c)
            f = _bind(v, precision, cfg)
            # what a repeat call costs: the GPU's time, and for a variant whose repeat calls are not
            # one bound launch (fastlaunch.replay) its host time too, whichever is longer
            gpu, host = device_and_host(lambda: f(a, b, scratch, alpha=alpha, beta=beta))
            return gpu if v.replayable else max(gpu, host)
        return run

    tkey = tuning.key_of("triton", *(str(k) for k in key))
    name = tuning.choose(tkey, {n: timer(*vc) for n, vc in options.items()}, pick, timeable=not capturing)
    fn = _bind(*options[name][:1], precision, options[name][1])
    if not capturing or tuning.lookup(tkey) is not None:
        _plans[key] = fn
    return fn


def _model_pick(options: dict, M: int, N: int, K: int, batch: int, sms: int) -> str:
    """Without timing: TMA-persistent when it fills the machine, split-K when few tiles
    and a long K, else the blocked kernel; the wave model's config for it."""
    by_variant: dict[str, dict[str, dict]] = {}
    for name, (v, cfg) in options.items():
        by_variant.setdefault(v.name, {})[name] = cfg
    for vn in ("tma-persistent", "tma-copy", "tma", "tma-kmajor", "splitk", "blocked-kmajor", "blocked"):
        named = by_variant.get(vn)
        if not named:
            continue
        best = C.heuristic(list(named.values()), M, N, K, sms, batch)
        if vn.startswith("tma") and C.tiles(M, N, best, batch) < sms:
            continue
        return next(n for n, cfg in named.items() if cfg is best)
    return next(iter(options))


def plans() -> dict:
    """Resolved plan keys -> chosen launches (for reports)."""
    return {str(k): str(getattr(f, "keywords", f)) for k, f in _plans.items()}


def tuned_configs() -> dict:
    """The Triton choices made or read so far: {tuning key: "variant:config"} (for reports)."""
    return {k: v for k, v in tuning.remembered().items() if k.startswith("triton|")}


variant_choices = plans


def _launch_spec(a, b, c, *, tile, opts, alpha=1.0, beta=0.0) -> None:
    precision = check_precision(str(a.dtype).replace("torch.", ""), opts.get("precision"))
    launch(a, b, c, precision=precision, alpha=alpha, beta=beta, variant=opts.get("variant"),
           config=opts.get("config"))


SPEC: KernelSpec = register(KernelSpec(
    name="triton", family="block",
    summary="Triton block-tiled GEMM: masked (zero-fill) tiles, tensor cores, TMA-persistent and split-K "
            "variants, chosen per shape class",
    dtypes=BLOCK_DTYPES, launch=_launch_spec, batched=True, epilogue=True,
    options=("precision", "variant", "config"), emulation_limit=2 ** 24, order=50,
    block_tile=lambda tile: (tile or 128, tile or 128)))

__all__ = ["SPEC", "launch", "check_precision", "plans", "VARIANTS"]
