"""The Triton family's dispatcher: which variant, with which config, for this call.

The kernels are in ``kernels.py``, their configs in ``configs.py``, one launch function
per variant in ``variants.py``. Here a call is reduced to a *plan key* -- dtype,
precision, layout (which strides are unit, whether every base and row is 16-byte
aligned, whether every row is a multiple of 128 bytes), shape class (log2 buckets of
M, N, K), batch, alpha == 1, beta == 0, device index -- and the key resolves, once, to a launch: by default the variant and config the
analytic model picks (``heuristics.py``: microseconds, nothing timed); a choice in the
tuning store wins over it; with ``TILEDMM_TUNE=on`` a key the store lacks is tuned by
timing the candidates on the caller's own operands (``tiledmm.tuning``: remembered on
disk) -- never during CUDA-graph capture. Later calls with the same key only read shapes
and strides and launch.
"""
from __future__ import annotations

import functools
import threading
from typing import Callable

from ... import invariance, tuning
from ..._arrays import TiledmmError
from ..._backend import emulating
from ...timing import device_and_host, rotation_for
from . import check_precision
from . import configs as C
from . import heuristics as H
from . import shipped
from . import tma_copy
from . import variants as V
from ._vcommon import device, index_of, kind_of

VARIANTS = tuple(V.BY_NAME)

_plans: dict[tuple, Callable] = {}   # written under _lock; read without (a dict read is atomic)
_lock = threading.RLock()
# plan key -> how its launch was chosen: {"source": store|timed|table|model, "variant", "config", "model",
# "tuning_key"} (for reports and for writing a shipped table)
_choices: dict[tuple, dict] = {}


def _forget_plans() -> None:
    with _lock:
        _plans.clear()


def forget_choices() -> None:
    """Drop the record of how plans were chosen (``choices``; a mode change keeps it: tune --table
    writes what was timed after turning tuning off again)."""
    with _lock:
        _choices.clear()


tuning.on_mode_change(_forget_plans)   # plans resolved under the other mode are resolved again


def _aligned(a, b, c) -> bool:
    """Every base address and every leading stride 16-byte aligned (TMA's rule)."""
    e = a.element_size()
    return (a.data_ptr() | b.data_ptr() | c.data_ptr()) % 16 == 0 and \
        all((s * e) % 16 == 0 for t in (a, b, c) for s in t.stride()[-2:] if s != 1)


def _rows128(a, b, c) -> bool:
    """Every row stride a multiple of 128 bytes (the Gluon kernel's loads: heuristics.gluon_speed)."""
    e = a.element_size()
    return all((s * e) % 128 == 0 for t in (a, b, c) for s in t.stride()[-2:] if s != 1)


def class_key(index, sa, sb, st_a, st_b, st_c, pa: int, pb: int, pc: int, m: int, alpha, beta) -> tuple:
    """A call's *class*, from the values the short path holds (shapes ``sa``, ``sb``, strides, data
    pointers, ``m`` = 16 // A's element size): device index, ranks, bit lengths of M, N, K, which of the
    six strides of the last two dimensions are unit, each stride modulo 16 bytes, each pointer's 16-byte
    residue, alpha == 1, beta == 0, whether every stride that is not unit is a multiple of 128 bytes
    (``m << 3`` elements). The short path keys its bound launches by it (a compiled kernel's
    specialisation depends on the residues); ``plan_key`` is computed from it (``plan_of``), so one
    class is one plan key, one choice, by construction."""
    r = m << 3
    return (index, len(sa), len(sb), sa[-2].bit_length(), sb[-1].bit_length(), sa[-1].bit_length(),
            st_a[-2] == 1, st_a[-1] == 1, st_b[-2] == 1, st_b[-1] == 1, st_c[-2] == 1, st_c[-1] == 1,
            st_a[-2] % m, st_a[-1] % m, st_b[-2] % m, st_b[-1] % m, st_c[-2] % m, st_c[-1] % m,
            pa & 15, pb & 15, pc & 15, alpha == 1, beta == 0,
            (st_a[-2] == 1 or st_a[-2] % r == 0) and (st_a[-1] == 1 or st_a[-1] % r == 0)
            and (st_b[-2] == 1 or st_b[-2] % r == 0) and (st_b[-1] == 1 or st_b[-1] % r == 0)
            and (st_c[-2] == 1 or st_c[-2] % r == 0) and (st_c[-1] == 1 or st_c[-1] % r == 0))


def plan_of(a_dtype, c_dtype, precision: str, cls: tuple) -> tuple:
    """The plan key of a call of class ``cls`` (``class_key``) with these dtypes and precision: the dtypes,
    precision, ranks, which strides are unit (A's, B's two, C's inner), whether every base and every stride
    that is not unit is 16-byte aligned (TMA's rule), the shape class (``registry.shape_class``'s log2
    buckets: bit length less one), alpha == 1, beta == 0, whether those strides are multiples of 128 bytes
    (the Gluon kernel's loads: heuristics.gluon_speed), the device index."""
    (index, nda, ndb, bits_m, bits_n, bits_k, am1, ak1, bk1, bn1, cm1, cn1, am, ak, bk, bn, cm, cn,
     pa, pb, pc, alpha1, beta0, rows128) = cls
    aligned = not (pa | pb | pc) and (am1 or not am) and (ak1 or not ak) and (bk1 or not bk) \
        and (bn1 or not bn) and (cm1 or not cm) and (cn1 or not cn)
    return (a_dtype, c_dtype, precision, nda, ndb, ak1, bn1, bk1, cn1, aligned,
            (max(bits_m - 1, 0), max(bits_n - 1, 0), max(bits_k - 1, 0)), alpha1, beta0, rows128, index)


def plan_key(a, b, c, precision: str, alpha: float, beta: float) -> tuple:
    """The call's plan key (``plan_of`` its class): what its launch is chosen by, once."""
    return plan_of(a.dtype, c.dtype, precision,
                   class_key(index_of(c), a.shape, b.shape, a.stride(), b.stride(), c.stride(), a.data_ptr(),
                             b.data_ptr(), c.data_ptr(), max(1, 16 // a.element_size()), alpha, beta))


def launch(a, b, c, *, precision: str, alpha: float = 1.0, beta: float = 0.0, variant: str | None = None,
           config: dict | None = None) -> None:
    """c = alpha * a @ b + beta * c with the chosen (or the forced) variant and config."""
    if variant is not None or config is not None:
        return _forced(a, b, c, precision, alpha, beta, variant, config)
    resolved(a, b, c, precision, alpha, beta)(a, b, c, alpha=alpha, beta=beta)


def resolved(a, b, c, precision: str, alpha: float, beta: float, passes: int = 0) -> Callable:
    """The launch for this call's plan key, ``f(a, b, c, alpha=, beta=)`` (chosen on first use).
    ``passes``: elementwise passes over C the caller makes after a variant without a fused epilogue
    (``Variant.epilogue``: a bias, an activation; tiledmm.ops asks with them), charged to those
    variants by the model; a key of its own. In batch-invariant mode: ``invariant.resolved``'s plan."""
    if invariance.get():
        return _invariant().resolved(a, b, c, precision, alpha, beta, passes)
    key = plan_key(a, b, c, precision, alpha, beta)
    if passes:
        key = (*key[:-1], passes, key[-1])
    fn = _plans.get(key)
    if fn is None:
        with _lock:     # one thread resolves a key; the others then read its plan
            fn = _plans.get(key) or _resolve(key, a, b, c, precision, alpha, beta, passes)
    return fn


@functools.lru_cache(maxsize=None)
def _invariant():
    """The batch-invariant mode's planner (``invariant.py``), imported by name on first use: it imports
    this module, not the reverse."""
    import importlib
    return importlib.import_module(".invariant", __package__)


def _bind(v: V.Variant, precision: str, config: dict) -> Callable:
    fn = functools.partial(v.launch, precision=precision, config=config)
    fn.replayable = v.replayable     # type: ignore[attr-defined]  (read by fastlaunch.replay)
    fn.epilogue = v.epilogue         # type: ignore[attr-defined]  (read by tiledmm.ops: bias=, bias_mode=, act=)
    fn.class_launch = functools.partial(v.class_launch, precision=precision, config=config) \
        if v.class_launch else None  # type: ignore[attr-defined]  (read by fastlaunch.bind)
    return fn


def _forced(a, b, c, precision, alpha, beta, variant, config) -> None:
    v = V.BY_NAME.get(variant or "blocked")
    if v is None:
        raise TiledmmError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    if not v.applicable(a, b, c, precision, alpha, beta):
        raise TiledmmError(
            f"variant {v.name!r} cannot run this call (a {tuple(a.shape)} strides {a.stride()}, "
            f"b {tuple(b.shape)} strides {b.stride()}, precision {precision}, alpha {alpha}, beta {beta}); "
            "'tma' needs a Hopper GPU, 2-D inputs, unit inner strides and 16-byte "
            "aligned rows; see kernels/block/variants.py for the others")
    if v.own_config is None:            # the module variants pick their own config and fill in a partial one
        if config is None:
            dev = device(index_of(c))
            table = _configs(v, kind_of(precision), a.element_size(), c.element_size(), dev)
            config = C.EMULATION if emulating() else H.best_config(table, _problem(a, b, c, precision), v.traits, dev)
        else:
            config = {**C.EMULATION, **config} if emulating() else {"num_warps": 4, "num_stages": 3, **config}
    _bind(v, precision, dict(config) if config else None)(a, b, c, alpha=alpha, beta=beta)


def _configs(v: V.Variant, kind: str, esize: int, out_esize: int, dev: H.Device, rows: int | None = None) -> list[dict]:
    """The variant's candidate configs that fit ``dev``'s shared memory for these element sizes
    (a variant that stages C for the copy engine needs room for it too); for the blocked kernel
    and at most ``C.FEW_ROWS`` rows (the class's), the variant's few-row configs too."""
    if emulating():   # the interpreter: the variants' small-tile configs (warps and stages ignored)
        return list(v.emulation)
    table = v.configs(kind)
    if v.few_rows and rows is not None and rows <= C.FEW_ROWS:
        table = table + v.few_rows(kind)
    return C.fitting(table, esize, out_esize, v.traits.tma_store, dev.smem) or table


def _problem(a, b, c, precision: str, shape: tuple | None = None) -> H.Problem:
    M, K, N = shape or (a.shape[-2], a.shape[-1], b.shape[-1])
    batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    return H.Problem(M, N, K, batch, kind_of(precision), a.element_size(), c.element_size(),
                     b.stride(-2) == 1 and b.stride(-1) != 1, _aligned(a, b, c), _rows128(a, b, c))


def _cfg_name(c: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in sorted(c.items()))


def candidate_name(variant: str, config: dict) -> str:
    """A candidate's name, "variant:config" (the tuning store's and the timings' key)."""
    return f"{variant}:{_cfg_name(config)}"


def _runnable(a, b, c, precision: str, alpha: float, beta: float, batch: int) -> list:
    """The variants (``V.ALL``) that can run this call: applicable, and within gridDim.y's batch
    limit unless they split the batch themselves."""
    return [v for v in V.ALL if (batch <= V.MAX_GRID_YZ or v.splits_batch)
            and v.applicable(a, b, c, precision, alpha, beta)]


def candidates(a, b, c, precision: str, alpha: float, beta: float, key: tuple | None = None,
               passes: int = 0) -> list[H.Candidate]:
    """Every (variant, config) that may run this call (``model_candidates`` of the applicable
    variants, at the class's representative M -- its least, 2 ** floor(log2 M) -- and the call's own
    N and K: a layer's weight gives the same N and K call after call while M, the tokens, varies,
    and the best tile for a wave of 132 SMs moves within a class: 11008 columns are 43 tiles of 256
    where the class's 8192 are 32); a variant without a fused epilogue is charged ``passes`` reads
    and writes of C. The plan key's first call fixes them for its class."""
    key = key or plan_key(a, b, c, precision, alpha, beta)
    p = _problem(a, b, c, precision)
    vs = _runnable(a, b, c, precision, alpha, beta, p.batch)
    copies = {v.name: v.traits.copies(a, b, c, precision) for v in vs if v.traits.copies}
    if passes:
        for v in vs:
            if not v.epilogue:
                copies[v.name] = copies.get(v.name, 0) + passes * c.numel() * c.element_size()
    unbound = {v.name for v in vs if not _repeats_bound(v, a, b, c)}
    rM = 2 ** key[10][0]
    return model_candidates(vs, _problem(a, b, c, precision, (rM, p.K, p.N)), device(index_of(c)), copies, unbound)


def model_candidates(variants, p: H.Problem, dev: H.Device, copies: dict | None = None,
                     unbound: set | frozenset = frozenset()) -> list[H.Candidate]:
    """The configs of ``variants`` that fit ``dev``, each variant's pruned by the wave model
    for ``p`` (its own ``prune`` where it has one), as candidates; ``copies``: variant name ->
    bytes it copies for this call; ``unbound``: names of variants whose repeat calls are not
    one bound launch."""
    out: list[H.Candidate] = []
    for v in variants:
        # a config marked ODD_ROWS is for rows that are not 16-byte aligned only (splitk.CONFIGS says why)
        table = [c for c in _configs(v, p.kind, p.esize, p.out_esize, dev, p.M)
                 if not (p.aligned and c.get("ODD_ROWS"))]
        if not table:
            continue
        picked = v.prune(table, p.M, p.N, p.K, dev.sms, p.batch) if v.prune else \
            C.prune(table, p.M, p.N, p.K, dev.sms, p.batch, keep=3 if v.few_rows else 2)
        out += [H.Candidate(candidate_name(v.name, cfg), cfg, v.traits, (copies or {}).get(v.name, 0), v,
                            v.name not in unbound) for cfg in picked]
    return out


def _repeats_bound(v: V.Variant, a, b, c) -> bool:
    """Whether the short path repeats a call of ``v`` as one bound launch: replayable by fastlaunch, or
    the variant's own class launch (the Gluon kernel's); else its launch runs on every call."""
    return bool(v.class_launch or (v.replayable(a, b, c) if callable(v.replayable) else v.replayable))


def _shipped_pick(key: tuple, a, b, c, precision, alpha, beta, p: H.Problem, options: dict) -> str | None:
    """The shipped table's choice for ``key`` (``shipped.py``: this GPU model's table, the nearest
    class with this layout whose variant runs the call, does not compile anew in every process
    (``Traits.compiles_per_process``: a first call would wait seconds for it) and whose config
    fits), added to ``options`` if the class's own candidates lack it; None where there is none. An
    entry's ``fastest`` that compiles anew in every process is taken where its kernel is on disk
    (``_fastest_on_disk``: rung 11 after its first compile on this machine). For a
    variant whose config is its own model's (``Traits.own_config_by_shape``) the table gives the variant
    and the candidate of this call's size its config (the table's was the model's at the class's
    representative size, up to 2x off in N and K)."""
    if not shipped.enabled():
        return None
    from ...analysis.device import properties
    idx = index_of(c)
    props = properties(idx if idx is not None else c.device.index or 0)
    table = shipped.table_for(props.name, props.num_sms)
    if table is None:
        return None
    dev = device(idx)
    runnable = {v.name: v for v in _runnable(a, b, c, precision, alpha, beta, p.batch)}
    for e in shipped.nearest(table, key, esize=a.element_size(), l2_bytes=props.l2_bytes or 50 * 2 ** 20):
        fast = _fastest_on_disk(e, runnable, a, b, c, precision)
        if fast is not None:       # the entry's fastest (rung 11), whose kernel a first call loads from disk
            options.setdefault(fast.name, fast)
            return fast.name
        v = runnable.get(e["variant"])
        if e["variant"] == tma_copy.NAME and v is not None and v.traits.copies(a, b, c, precision) == 0 \
                and V.TMA.name in runnable:
            v = runnable[V.TMA.name]    # tma-copy with nothing to copy: the same kernel, whose repeat calls are bound
        if v is None or dev.capability < v.traits.capability or v.traits.compiles_per_process:
            continue
        if v.traits.own_config_by_shape:      # the table's variant, its own model's config for this call
            own = _own_pick(options, v.name, p, dev)
            if own:
                return own
        cfg = e["config"]
        if "BLOCK_M" in cfg and not C.fitting([cfg], a.element_size(), c.element_size(), v.traits.tma_store, dev.smem):
            continue
        name = candidate_name(v.name, cfg)
        if name not in options:
            options[name] = H.Candidate(name, dict(cfg), v.traits, 0, v, True)
        return name
    return None


def _fastest_on_disk(e: dict, runnable: dict, a, b, c, precision) -> H.Candidate | None:
    """A table entry's ``fastest`` (the candidate timed fastest, where the entry's own is the fastest the
    default could take: rung 11, compiled anew in every process) as a candidate, where its variant runs the
    call and has this call's kernel compiled on disk already (``Variant.on_disk``); else None."""
    name = e.get("fastest")
    v = runnable.get(name.partition(":")[0]) if name else None
    if v is None or v.on_disk is None:
        return None
    cfg = next((cf for cf in v.configs(kind_of(precision)) if candidate_name(v.name, cf) == name), None)
    if cfg is None or not v.on_disk(cfg, a, b, c):
        return None
    return H.Candidate(name, dict(cfg), v.traits, 0, v, _repeats_bound(v, a, b, c))


# 16-bit products the Gluon kernel takes, of at least GLUON_OWNS_FROM_M rows and GLUON_OWNS_FROM_MACS
# multiply-adds, are its own: the model's pick is the Gluon kernel with its own config, over the shipped
# table. The table's 16-bit entries were timed before the kernel's tail split, and where they name a
# Triton-level variant there it ran at 0.86-0.93x torch on shapes the Gluon kernel ran at 0.97-1.08x
# (8192^3, 3000x2000x4000, 2048x11008x4096; H100, docs/history.md). Below either bound the
# table stands: at 32-48 rows its few-row kernels ran the random-M loop at 0.90-0.92x torch against the
# Gluon kernel's 0.60-0.62x, and products of a few microseconds are host-bound, where the table's timings
# (which count host time) are the better guide.
GLUON_OWNS_FROM_M = 64
GLUON_OWNS_FROM_MACS = 2 ** 32
# A batch (every product's M a tile multiple: gluon_gemm.batch_fits) of at least GLUON_OWNS_FROM_MACS
# multiply-adds is the Gluon kernel's own in tf32, and in 16-bit from GLUON_BATCH_FROM_K on: one launch over
# all products' tiles. Measured (H100, docs/history.md) against the table's blocked kernel,
# x torch: tf32 64x512^3 0.53 -> 1.03, 16x1024^3 0.44 -> 1.10; 16-bit 16x1024^3 0.89 -> 0.99 (bf16),
# 0.92 -> 1.11 (fp16); products with K or N = 64 at 0.41-0.68 against the blocked kernel's 1.3: other batches
# do not offer the Gluon kernel to the no-timing pick at all (timing still may take it). K from 512, not
# 1024 (an earlier build of the kernel ran 64x512^3 bf16 at 0.70): through
# tiledmm.matmul, two alternating rounds, 64x512^3 0.82-0.85 -> 1.00-1.01, 32x512^3 0.84-1.01 -> 0.99-1.11,
# 128x512x768x512 0.83-0.85 -> 0.95-0.97, bf16 and fp16 (docs/history.md).
GLUON_OWNS_BATCHES = True
GLUON_BATCH_FROM_K = 512


def _gluon_batch(p: H.Problem) -> bool:
    """A batch the Gluon kernel owns (see GLUON_OWNS_BATCHES)."""
    return GLUON_OWNS_BATCHES and p.batch * p.M * p.N * p.K >= GLUON_OWNS_FROM_MACS and \
        (p.kind == "tf32" or p.K >= GLUON_BATCH_FROM_K)


def _gluon_owns(p: H.Problem, options: dict, dev) -> str | None:
    """The Gluon kernel's candidate where the call is one of its own (see GLUON_OWNS_FROM_M), else None."""
    if p.batch > 1:
        if not _gluon_batch(p):
            return None
    elif p.kind != "16bit" or p.M < GLUON_OWNS_FROM_M or p.M * p.N * p.K < GLUON_OWNS_FROM_MACS:
        return None
    return _own_pick(options, V.GLUON.name, p, dev)


def _own_pick(options: dict, variant: str, p: H.Problem, dev) -> str | None:
    """The model's pick among ``variant``'s candidates in ``options``, or None where it has none."""
    own = [cd for cd in options.values() if cd.variant is not None and cd.variant.name == variant]
    return H.pick(own, p, dev).name if own else None


def untimed_choices(key: tuple, a, b, c, precision, alpha, beta, p: H.Problem, options: dict) -> tuple:
    """(the model's pick, the shipped table's pick or None) among ``options`` (the table's may be added to
    them): without a stored or timed choice, the table's is taken, else the model's. A call the Gluon
    kernel owns (``_gluon_owns``) is the model's: the Gluon kernel, no table pick; a batch it does not
    own is not offered to the model (GLUON_OWNS_BATCHES)."""
    dev = device(index_of(c))
    owned = _gluon_owns(p, options, dev)
    if owned is not None:
        return owned, None
    cands = [cd for cd in options.values()
             if p.batch == 1 or cd.variant is None or cd.variant.name != V.GLUON.name]
    pick = H.pick(cands, p, dev).name
    return pick, _shipped_pick(key, a, b, c, precision, alpha, beta, p, options)


def _resolve(key: tuple, a, b, c, precision, alpha, beta, passes: int = 0) -> Callable:
    """Variant and config for a new plan key (called under _lock): the store's choice where it
    has one; with tuning on, the fastest candidate timed on the caller's operands into a scratch
    output; else the shipped table's choice (``shipped.py``) or the model's pick."""
    import torch
    options = {cd.name: cd for cd in candidates(a, b, c, precision, alpha, beta, key, passes)}
    p = _problem(a, b, c, precision)
    pick, table_pick = untimed_choices(key, a, b, c, precision, alpha, beta, p, options)
    capturing = not emulating() and torch.cuda.is_current_stream_capturing()

    sets: list = []

    def operands() -> list:
        """The caller's operands and copies of them, rotated so that together they do not fit in L2
        (timing.py's method: a product whose operands stay in L2 would time the cache, not HBM)."""
        if not sets:
            n = rotation_for((p.batch, p.M, p.K, p.N), str(a.dtype).replace("torch.", ""))
            if (a.data_ptr() | b.data_ptr()) % 16:
                n = 1           # copies would be aligned: another specialisation than the caller's
            sets.append((a, b))
            for _ in range(n - 1):
                sets.append(tuple(t.clone() if t.is_contiguous() or t.mT.is_contiguous() else t for t in (a, b)))
        return sets

    def timer(cd: H.Candidate):
        def run() -> float:
            scratch = torch.empty_strided(c.shape, c.stride(), dtype=c.dtype, device=c.device)
            if beta != 0.0:
                scratch.copy_(c)
            f = _bind(cd.variant, precision, cd.config)
            # what a repeat call costs: the GPU's time, and for a variant whose repeat calls are not
            # one bound launch (fastlaunch.replay) its host time too, whichever is longer
            gpu, host = device_and_host([lambda x=x, y=y: f(x, y, scratch, alpha=alpha, beta=beta)
                                         for x, y in operands()])
            return gpu if _repeats_bound(cd.variant, a, b, c) else max(gpu, host)
        return run

    tkey = tuning.key_of("triton", *(str(k) for k in key[:-1]))
    stored = tuning.lookup(tkey)
    name = tuning.choose(tkey, {n: timer(cd) for n, cd in options.items()}, table_pick or pick,
                         timeable=not capturing)
    source = "store" if stored == name else ("timed" if tuning.timings(tkey) and tuning.lookup(tkey) == name
                                             else ("table" if name == table_pick else "model"))
    chosen = options[name]
    # the variant's own model's config (not a stored or timed one): the variant takes its model's config
    # for each call's own size (the class's was the model's at the class's least M and the first call's
    # N and K; a class spans up to 2x in each)
    by_shape = source in ("model", "table") and chosen.variant.traits.own_config_by_shape
    fn = _bind(chosen.variant, precision, None if by_shape else chosen.config)
    if not capturing or tuning.lookup(tkey) is not None:
        _plans[key] = fn
        _choices[key] = {"source": source, "variant": chosen.variant.name, "config": chosen.config,
                         "model": pick, "tuning_key": tkey, "by_shape": by_shape}
        if source == "timed":
            d = _default_eligible(options, tuning.timings(tkey) or {}, name)
            _choices[key]["default"] = {"name": d, "variant": options[d].variant.name, "config": options[d].config}
    return fn


def _default_eligible(options: dict, times: dict, fastest: str) -> str:
    """Of the timed candidates, the fastest the no-timing default may take (its variant does not
    compile anew in every process, ``Traits.compiles_per_process``): what a shipped-table entry
    records. ``fastest`` itself where it may, or where no other was timed."""
    ok = [n for n in times if n in options and not options[n].variant.traits.compiles_per_process]
    if fastest in ok or not ok:
        return fastest
    return min(ok, key=times.__getitem__)


def choices() -> dict:
    """Resolved plan keys -> how each launch was chosen (``_choices``: source, variant, config, the
    model's pick, the tuning key)."""
    with _lock:
        return dict(_choices)


def table_entries() -> list[dict]:
    """The choices timed in this process as shipped-table entries (``shipped.entry``), each with
    its timed ms and the model's pick and its ms from the same timing. An entry holds the fastest
    candidate the no-timing default may take (``_default_eligible``); where the fastest of all was
    another (rung 11: compiled in every process), it is named in the entry's ``fastest``."""
    out = []
    for key, ch in choices().items():
        if ch["source"] != "timed":
            continue
        times = tuning.timings(ch["tuning_key"]) or {}
        best = candidate_name(ch["variant"], ch["config"])
        d = ch.get("default") or {"name": best, "variant": ch["variant"], "config": ch["config"]}
        layout, cls = shipped.split_key(key)
        e = shipped.entry(layout, cls, d["variant"], d["config"], times.get(d["name"]), ch["model"],
                          times.get(ch["model"]), rotated=True)
        if d["name"] != best:
            e.update(fastest=best, fastest_ms=times.get(best))
        out.append(e)
    return out


def plans() -> dict:
    """Resolved plan keys -> chosen launches (for reports)."""
    with _lock:
        snapshot = dict(_plans)
    return {str(k): str(getattr(f, "keywords", f)) for k, f in snapshot.items()}


def tuned_configs() -> dict:
    """The Triton choices made or read so far: {tuning key: "variant:config"} (for reports)."""
    return {k: v for k, v in tuning.remembered().items() if k.startswith("triton|")}


def launch_spec(a, b, c, *, tile, opts, alpha=1.0, beta=0.0) -> None:
    """The ``triton`` KernelSpec's launch (``kernels/block/__init__.py`` puts it there on load)."""
    precision = check_precision(str(a.dtype).replace("torch.", ""), opts.get("precision"))
    launch(a, b, c, precision=precision, alpha=alpha, beta=beta, variant=opts.get("variant"),
           config=opts.get("config"))


__all__ = ["launch_spec", "launch", "check_precision", "plans", "tuned_configs", "candidates", "choices", "table_entries",
           "VARIANTS"]
