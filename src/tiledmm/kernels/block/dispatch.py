"""The Triton family's dispatcher: which variant, with which config, for this call.

The kernels are in ``kernels.py``, their configs in ``configs.py``, the variants (each a kernel
under an operand policy) registered in ``variants.py``. Here a call is reduced to a *plan key*
(``plan_key``, computed from the short path's class key: dtypes, precision, ranks, which strides
are unit, whether every base and stride is 16-byte aligned and every stride a multiple of 128
bytes, shape class -- log2 buckets of M, N, K --, alpha == 1, beta == 0, device index), and a key
resolves, once, to a launch. Its precedence, first to last:

    forced   ``variant=`` / ``config=``: run as asked, no plan (``launch``)
    store    a choice in the tuning store (``tiledmm tune``, an earlier TILEDMM_TUNE=on run)
    timed    with TILEDMM_TUNE=on, the candidates timed on the caller's own operands (remembered on
             disk; never during CUDA-graph capture)
    rules    a call a variant owns (``rules.RULES``: data, not branches)
    table    the shipped table's entry for this GPU and class (``shipped.py``)
    model    the analytic model's pick (``heuristics.py``: microseconds, nothing timed)

``SOURCES`` lists the plan's five in that order and ``_resolve`` takes the first that answers.
Variants are never named here: the dispatcher iterates the registry (``variants.ALL``). Later
calls with the same key only read shapes and strides and launch.
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
from . import rules as R
from . import shipped
from . import variants as V
from ._vcommon import device, index_of, kind_of
from .policies import AS_IS, variant_name

VARIANTS = tuple(V.BY_NAME)
# Where a new plan key's launch comes from: the first of these with an answer (``_Sources``' methods of
# these names) wins; the model always has one. A forced variant= or config= comes before them all
# (``launch`` runs it without a plan).
SOURCES = ("store", "timed", "rules", "table", "model")

_plans: dict[tuple, Callable] = {}   # written under _lock; read without (a dict read is atomic)
_lock = threading.RLock()
# plan key -> how its launch was chosen: {"source": one of SOURCES, "variant", "config", "model",
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
    v = V.BY_NAME.get(variant or V.FORCED_DEFAULT)
    if v is None:
        raise TiledmmError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    if not v.applicable(a, b, c, precision, alpha, beta):
        raise TiledmmError(
            f"variant {v.name!r} cannot run this call (a {tuple(a.shape)} strides {a.stride()}, "
            f"b {tuple(b.shape)} strides {b.stride()}, precision {precision}, alpha {alpha}, beta {beta}); "
            + V.FORCED_HINT)
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
    representative size, up to 2x off in N and K). An entry whose variant's policy copies nothing for
    this call is taken as its kernel's with the operands as given (``_as_given``)."""
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
        v = _as_given(runnable.get(e["variant"]), runnable, a, b, c, precision)
        if v is None or dev.capability < v.traits.capability or v.traits.compiles_per_process:
            continue
        if v.traits.own_config_by_shape:      # the table's variant, its own model's config for this call
            own = R.own_pick(options, v.name, p, dev)
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


def _as_given(v: V.Variant | None, runnable: dict, a, b, c, precision) -> V.Variant | None:
    """``v``, or where its operand policy copies nothing for this call (``Traits.copies`` 0: ``tma-copy`` on
    operands the TMA kernel takes as they are) the same kernel's AS_IS variant if it runs the call: one
    kernel, one config, but repeat calls one bound launch (H100: tma-copy's unbound host path 48-140 us a
    call) and the fused epilogue."""
    if v is None or v.policy == AS_IS or v.traits.copies is None or v.traits.copies(a, b, c, precision):
        return v
    plain = runnable.get(variant_name(v.kernel, AS_IS))
    return plain if plain is not None and plain.kernel == v.kernel else v


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


def _untimed(key: tuple, a, b, c, precision, alpha, beta, p: H.Problem, options: dict) -> tuple:
    """(the rules' pick, the shipped table's, the model's) among ``options`` (the table's may be added to
    them), each None where it has none: a call a rule gives a variant is asked of neither the table nor
    the model; a variant a rule leaves out is not in the model's pick."""
    dev = device(index_of(c))
    owned, left_out = R.ruling(p, options, dev)
    if owned is not None:
        return owned, None, None
    offered = [cd for cd in options.values() if cd.variant is None or cd.variant.name not in left_out]
    model = H.pick(offered, p, dev).name
    return None, _shipped_pick(key, a, b, c, precision, alpha, beta, p, options), model


def untimed_choices(key: tuple, a, b, c, precision, alpha, beta, p: H.Problem, options: dict) -> tuple:
    """(the rules' pick, else the model's; the shipped table's pick or None): what a plan takes without a
    stored or timed choice (``SOURCES``: rules, then table, then model)."""
    owned, table, model = _untimed(key, a, b, c, precision, alpha, beta, p, options)
    return owned or model, table


# -- the precedence: where a new plan key's launch comes from (SOURCES) --------------------------------

class _Sources:
    """A new plan key's sources (``SOURCES``), each a method answering a candidate's name or None. The
    untimed answers are found first: the shipped table's entry joins the candidates the store and the
    timing take (``_untimed``)."""

    def __init__(self, key: tuple, a, b, c, precision, alpha, beta, passes: int):
        import torch
        self.args = (a, b, c, precision, alpha, beta)
        self.options = {cd.name: cd for cd in candidates(a, b, c, precision, alpha, beta, key, passes)}
        self.p = p = _problem(a, b, c, precision)
        self.owned, self.table_pick, model = _untimed(key, a, b, c, precision, alpha, beta, p, self.options)
        self.model_pick = self.owned or model      # (recorded as the model's where a rule owns the call)
        self.capturing = not emulating() and torch.cuda.is_current_stream_capturing()
        self.tkey = tuning.key_of("triton", *(str(k) for k in key[:-1]))
        self._sets: list = []

    def store(self) -> str | None:
        """The tuning store's choice for the key (``tiledmm tune``, an earlier TILEDMM_TUNE=on run). With timing
        on, the timed source answers it instead (``tuning.choose`` looks the store up first: the same choice,
        and ``tiledmm tune`` sees it and reports it remembered)."""
        if tuning.mode() == "on":
            return None
        name = tuning.lookup(self.tkey)
        return name if name in self.options else None

    def timed(self) -> str | None:
        """With TILEDMM_TUNE=on (and not during a CUDA-graph capture), the fastest candidate timed on the
        caller's operands, remembered in the store; None where nothing was timed."""
        return tuning.choose(self.tkey, {n: self._timer(cd) for n, cd in self.options.items()}, None,
                             timeable=not self.capturing)

    def rules(self) -> str | None:
        """The variant that owns the call by ``rules.RULES``: the model's pick among its candidates."""
        return self.owned

    def table(self) -> str | None:
        """The shipped table's entry for the class (``_shipped_pick``)."""
        return self.table_pick

    def model(self) -> str:
        """The no-timing model's pick (heuristics.py) among the candidates the rules offer."""
        return self.model_pick

    def _operands(self) -> list:
        """The caller's operands and copies of them, rotated so that together they do not fit in L2
        (timing.py's method: a product whose operands stay in L2 would time the cache, not HBM)."""
        if not self._sets:
            a, b, p = self.args[0], self.args[1], self.p
            n = rotation_for((p.batch, p.M, p.K, p.N), str(a.dtype).replace("torch.", ""))
            if (a.data_ptr() | b.data_ptr()) % 16:
                n = 1           # copies would be aligned: another specialisation than the caller's
            self._sets.append((a, b))
            for _ in range(n - 1):
                self._sets.append(tuple(t.clone() if t.is_contiguous() or t.mT.is_contiguous() else t
                                        for t in (a, b)))
        return self._sets

    def _timer(self, cd: H.Candidate):
        import torch
        a, b, c, precision, alpha, beta = self.args

        def run() -> float:
            scratch = torch.empty_strided(c.shape, c.stride(), dtype=c.dtype, device=c.device)
            if beta != 0.0:
                scratch.copy_(c)
            f = _bind(cd.variant, precision, cd.config)
            # what a repeat call costs: the GPU's time, and for a variant whose repeat calls are not
            # one bound launch (fastlaunch.replay) its host time too, whichever is longer
            gpu, host = device_and_host([lambda x=x, y=y: f(x, y, scratch, alpha=alpha, beta=beta)
                                         for x, y in self._operands()])
            return gpu if _repeats_bound(cd.variant, a, b, c) else max(gpu, host)
        return run


def _resolve(key: tuple, a, b, c, precision, alpha, beta, passes: int = 0) -> Callable:
    """Variant and config for a new plan key (called under _lock): the first answer of ``SOURCES``."""
    ask = _Sources(key, a, b, c, precision, alpha, beta, passes)
    for source in SOURCES:
        name = getattr(ask, source)()
        if name is not None:
            break
    chosen, tkey = ask.options[name], ask.tkey
    # the variant's own model's config (not a stored or timed one): the variant takes its model's config
    # for each call's own size (the class's was the model's at the class's least M and the first call's
    # N and K; a class spans up to 2x in each)
    by_shape = source in ("rules", "table", "model") and chosen.variant.traits.own_config_by_shape
    fn = _bind(chosen.variant, precision, None if by_shape else chosen.config)
    if not ask.capturing or tuning.lookup(tkey) is not None:
        _plans[key] = fn
        _choices[key] = {"source": source, "variant": chosen.variant.name, "config": chosen.config,
                         "model": ask.model_pick, "tuning_key": tkey, "by_shape": by_shape}
        if source == "timed":
            d = _default_eligible(ask.options, tuning.timings(tkey) or {}, name)
            _choices[key]["default"] = {"name": d, "variant": ask.options[d].variant.name,
                                        "config": ask.options[d].config}
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


def timed_here(ch: dict) -> dict | None:
    """A choice's {candidate: ms} where it was timed in this process; None where the store answered it (with
    timing on, the store is asked first and its answer is labelled "timed": a class timed by an earlier run)."""
    return tuning.timings(ch["tuning_key"]) if ch["source"] == "timed" else None


def table_entries() -> list[dict]:
    """The choices timed in this process as shipped-table entries (``shipped.entry``), each with
    its timed ms and the model's pick and its ms from the same timing. An entry holds the fastest
    candidate the no-timing default may take (``_default_eligible``); where the fastest of all was
    another (rung 11: compiled in every process), it is named in the entry's ``fastest``. A choice the
    tuning store answered (timed by an earlier run, not here) gives no entry: its times are not known, and an
    entry of it would replace the earlier run's."""
    out = []
    for key, ch in choices().items():
        times = timed_here(ch)
        if not times:
            continue            # not timed in this process (a stored choice: timed by an earlier run)
        best = candidate_name(ch["variant"], ch["config"])
        d = ch.get("default") or {"name": best, "variant": ch["variant"], "config": ch["config"]}
        v = V.BY_NAME.get(d["variant"])
        if v is None or v.traits.compiles_per_process:
            continue            # no candidate the no-timing default may take was timed
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
           "timed_here", "VARIANTS"]
