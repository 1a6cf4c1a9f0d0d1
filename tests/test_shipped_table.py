"""The shipped per-GPU tables (kernels/block/shipped.py): lookup by nearest class, the order
store > table > model, the table off, writing one, and the tables the package ships."""
import json
from pathlib import Path

import pytest
import torch

from tiledmm import _backend, api, tuning
from tiledmm.analysis.device import properties
from tiledmm.kernels.block import configs as C
from tiledmm.kernels.block import heuristics as H
from tiledmm.kernels.block import dispatch as bm
from tiledmm.kernels.block import rules as R
from tiledmm.kernels.block import shipped
from tiledmm.kernels.block import variants as V


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty store and no plans; the table folder is tmp_path/'tables' (empty until a test writes)."""
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEDMM_TABLE", raising=False)
    monkeypatch.setattr(shipped, "TABLES", tmp_path / "tables")
    shipped._load.cache_clear()
    tuning.forget()
    _forget()
    bm.forget_choices()
    yield tmp_path / "tables"
    tuning.forget()
    _forget()
    bm.forget_choices()
    shipped._load.cache_clear()


def _forget():
    """No plan and no bound short-path launch left (the next call of a class resolves afresh)."""
    bm._forget_plans()
    api._fast_plans.clear()


def _call(m, k, n):
    dev = _backend.torch_device()
    g = torch.Generator().manual_seed(m * 7 + n)
    a, b = torch.randn(m, k, generator=g).to(dev), torch.randn(k, n, generator=g).to(dev)
    return a, b, torch.empty(m, n, device=dev)


def _other_than_model(a, b, c):
    """A blocked config the model does not pick for this call (the emulation choices are two)."""
    cands = bm.candidates(a, b, c, "ieee", 1.0, 0.0)
    model = H.pick(cands, bm._problem(a, b, c, "ieee"), bm.device(None))
    other = next(cfg for cfg in C.EMULATION_CHOICES if cfg != model.config)
    return model, other


def _write_table(folder, a, b, c, config, shift=(0, 0, 0)):
    key = bm.plan_key(a, b, c, "ieee", 1.0, 0.0)
    layout, cls = shipped.split_key(key)
    cls = tuple(x + s for x, s in zip(cls, shift))
    p = properties(0)
    shipped.write(folder / f"{shipped.slug(p.name)}.json", p.name, p.num_sms,
                  [shipped.entry(layout, cls, "blocked", config, 1.0, "model", 2.0, rotated=True)], {"test": True})
    return key


def _chosen_timed(a, b, c):
    """``_chosen`` with tuning on (the class's candidates timed), tuning off again after."""
    tuning.set_mode("on")
    try:
        return _chosen(a, b, c)
    finally:
        tuning.set_mode("off")


def _altered(v: V.Variant, traits: dict | None = None, **changes) -> V.Variant:
    """A copy of variant ``v`` with ``changes`` (name, ...) and its traits changed by ``traits``."""
    import dataclasses
    return dataclasses.replace(v, traits=dataclasses.replace(v.traits, **(traits or {})), **changes)


def _compiled_per_process(v: V.Variant, **changes) -> V.Variant:
    """A copy of variant ``v`` whose kernels compile anew in every process (as rung 11's)."""
    return _altered(v, {"compiles_per_process": True}, **changes)


def _chosen(a, b, c):
    import tiledmm
    got = tiledmm.matmul(a, b, kernel="triton")
    assert torch.allclose(got, a @ b, atol=1e-4)
    return bm.choices()[bm.plan_key(a, b, c, "ieee", 1.0, 0.0)]


def test_the_table_wins_over_the_model_and_times_nothing(fresh, monkeypatch):
    import tiledmm.timing as T
    a, b, c = _call(45, 21, 70)
    model, other = _other_than_model(a, b, c)
    _write_table(fresh, a, b, c, other)
    timed = []
    monkeypatch.setattr(bm, "device_and_host", lambda *x, **k: timed.append(1) or T.device_and_host(*x, **k))
    ch = _chosen(a, b, c)
    assert ch["source"] == "table" and ch["config"] == other != model.config, ch
    assert timed == []


def test_a_neighbour_class_one_bucket_away_uses_it_two_do_not(fresh):
    a, b, c = _call(45, 21, 70)
    model, other = _other_than_model(a, b, c)
    _write_table(fresh, a, b, c, other, shift=(1, 0, 0))        # M's bucket one up
    assert _chosen(a, b, c)["source"] == "table"
    _forget()
    shipped._load.cache_clear()
    _write_table(fresh, a, b, c, other, shift=(2, 0, 0))        # replaces nothing: another class, 2 away
    (fresh / f"{shipped.slug(properties(0).name)}.json").unlink()
    _write_table(fresh, a, b, c, other, shift=(2, 0, 0))
    assert _chosen(a, b, c)["source"] == "model"


def test_another_layout_or_another_gpu_does_not_match(fresh):
    a, b, c = _call(45, 21, 70)
    _, other = _other_than_model(a, b, c)
    _write_table(fresh, a, b, c, other)
    bt = b.t().contiguous().t()                                 # B column-major: another layout key
    assert _chosen(a, bt, c)["source"] == "model"
    p = properties(0)
    assert shipped.table_for(p.name, p.num_sms + 1) is None     # same name, other SM count
    assert shipped.table_for(p.name + " 2", p.num_sms) is None


def test_the_store_wins_over_the_table(fresh):
    a, b, c = _call(45, 21, 70)
    model, other = _other_than_model(a, b, c)
    _write_table(fresh, a, b, c, other)
    tkey = tuning.key_of("triton", *(str(k) for k in bm.plan_key(a, b, c, "ieee", 1.0, 0.0)[:-1]))
    tuning._memory[tkey] = model.name
    ch = _chosen(a, b, c)
    assert ch["source"] == "store" and ch["config"] == model.config


def test_table_off_leaves_the_model(fresh, monkeypatch):
    a, b, c = _call(45, 21, 70)
    model, other = _other_than_model(a, b, c)
    _write_table(fresh, a, b, c, other)
    monkeypatch.setenv("TILEDMM_TABLE", "off")
    ch = _chosen(a, b, c)
    assert ch["source"] == "model" and ch["config"] == model.config


def test_an_entry_whose_variant_cannot_run_is_skipped(fresh):
    a, b, c = _call(45, 21, 70)
    key = bm.plan_key(a, b, c, "ieee", 1.0, 0.0)
    layout, cls = shipped.split_key(key)
    p = properties(0)
    shipped.write(fresh / f"{shipped.slug(p.name)}.json", p.name, p.num_sms,
                  [shipped.entry(layout, cls, "tma", C.TMA["ieee"][0] if C.TMA.get("ieee") else C.EMULATION,
                                 1.0, None, None, rotated=True),
                   shipped.entry(layout, (cls[0] + 1, cls[1], cls[2]), "no-such-variant", C.EMULATION, 1.0, None, None,
                                 rotated=True)],
                  {})
    assert _chosen(a, b, c)["source"] == "model"      # tma needs Hopper; the other name is unknown


def test_a_variant_compiled_in_every_process_is_not_the_default(fresh, monkeypatch):
    """The table's entry names a variant whose kernels compile anew in every process (rung 11's numba
    kernels: seconds on a first call): the no-timing default takes the model's pick instead;
    with tuning on the same entry's variant can still be timed and chosen."""
    a, b, c = _call(45, 21, 70)
    model, other = _other_than_model(a, b, c)
    _write_table(fresh, a, b, c, other)
    assert _chosen(a, b, c)["source"] == "table"       # the entry is taken while the variant loads fast
    _forget()
    bm.forget_choices()
    slow = [_compiled_per_process(v) if v.name == "blocked" else v for v in V.ALL]
    monkeypatch.setattr(V, "ALL", slow)
    ch = _chosen(a, b, c)
    assert ch["source"] == "model" and ch["config"] == model.config != other, ch
    assert V.SIMT_ASYNC.traits.compiles_per_process and not any(
        v.traits.compiles_per_process for v in V.ALL if v.name != "blocked" and v is not V.SIMT_ASYNC)


def test_a_variant_that_models_its_own_config_takes_it_for_the_call_the_table_names_the_variant(fresh, monkeypatch):
    """The Gluon kernel's case (Traits.own_config_by_shape): the table names the variant; the config is
    the model's for this call's size, not the one recorded at the class's representative size."""
    a, b, c = _call(45, 21, 70)
    model, other = _other_than_model(a, b, c)
    _write_table(fresh, a, b, c, other)
    got = []

    def launch(a, b, c, *, config, **kw):      # such a variant's launch picks its own config where given none
        got.append(config)
        V.BLOCKED.launch(a, b, c, config=config or model.config, **kw)
    own = [_altered(v, {"own_config_by_shape": True}, launch=launch) if v.name == "blocked" else v for v in V.ALL]
    monkeypatch.setattr(V, "ALL", own)
    ch = _chosen(a, b, c)
    assert ch["source"] == "table" and ch["variant"] == "blocked" and ch["config"] == model.config != other, ch
    # untimed: the plan binds no config, the variant's model takes each call's own size
    assert ch["by_shape"] is True and got == [None]
    assert V.GLUON.traits.own_config_by_shape


def test_a_variant_that_models_its_own_config_keeps_a_timed_config(fresh, monkeypatch):
    """A stored or timed choice of such a variant is bound with its config (not the model's per call)."""
    a, b, c = _call(45, 21, 70)
    got = []

    def launch(a, b, c, *, config, **kw):
        got.append(config)
        V.BLOCKED.launch(a, b, c, config=config, **kw)
    monkeypatch.setattr(V, "ALL", [_altered(V.BLOCKED, {"own_config_by_shape": True}, launch=launch)])
    ch = _chosen_timed(a, b, c)
    assert ch["source"] == "timed" and ch["variant"] == "blocked" and ch["by_shape"] is False
    assert got[-1] == ch["config"] and None not in got


def test_entries_timed_on_one_operand_set_count_only_where_l2_cannot_hold_them():
    """A table entry timed without rotated operands (session 8's first H100 table) stands only for
    classes whose operands exceed L2 or that are compute-bound; rotated entries always do."""
    small = {"class": [5, 12, 12]}                 # 32 x 4096 x 4096 bf16: 33.8 MB < 50 MB, memory-bound
    wide = {"class": [5, 13, 13]}                  # 32 x 8192 x 8192: 134 MB of operands
    square = {"class": [10, 10, 10]}               # 1024^3: in L2, but compute-bound
    l2 = 50 * 2 ** 20
    assert not shipped.trusted(small, 2, l2) and shipped.trusted(dict(small, rotated=True), 2, l2)
    assert shipped.trusted(wide, 2, l2) and shipped.trusted(square, 2, l2)
    assert shipped.trusted(small, 4, l2)           # fp32: 67.6 MB
    table = {"index": {"L": [dict(small, layout="L"), dict(wide, layout="L")]}}
    key = ("L",) * 10 + ((5, 12, 13),) + ("L",) * 3 + (0,)
    table["index"] = {shipped.split_key(key)[0]: [dict(small), dict(wide)]}
    assert [e["class"] for e in shipped.nearest(table, key, 2, l2)] == [[5, 13, 13]]


def test_timed_choices_become_entries(fresh, monkeypatch):
    """With tuning on, the choice timed for a class is an entry with its time and the model's."""
    a, b, c = _call(45, 21, 70)
    ch = _chosen_timed(a, b, c)
    assert ch["source"] == "timed"
    (e,) = bm.table_entries()
    layout, cls = shipped.split_key(bm.plan_key(a, b, c, "ieee", 1.0, 0.0))
    assert e["layout"] == layout and tuple(e["class"]) == cls and e["variant"] == ch["variant"]
    assert e["timed_ms"] > 0 and e["model_ms"] >= e["timed_ms"] and e["rotated"] is True
    n = shipped.write(fresh / "t.json", "gpu", 4, [e], {})
    assert n == 1 and json.loads((fresh / "t.json").read_text())["entries"][0]["config"] == ch["config"]


def test_a_timed_winner_compiled_in_every_process_leaves_the_entry_to_the_next_fastest(fresh, monkeypatch):
    """The table is what the no-timing default may take: where the fastest timed candidate's variant
    compiles anew in every process (rung 11), the entry holds the fastest other candidate and names
    the overall winner in ``fastest``; the tuned process itself runs the winner."""
    jit = _compiled_per_process(V.BY_NAME["blocked"], kernel="blocked-jit")
    monkeypatch.setattr(V, "ALL", [*V.ALL, jit])
    bound = []
    real_bind = bm._bind
    monkeypatch.setattr(bm, "_bind", lambda v, *a: bound.append(v) or real_bind(v, *a))
    # the timer binds its candidate, then times it: 1 ms for the per-process variant, 2 ms and up for the others
    monkeypatch.setattr(bm, "device_and_host",
                        lambda calls: (1.0 if bound[-1] is jit else 2.0 + len(bound) / 100, 0.0))
    a, b, c = _call(45, 21, 70)
    ch = _chosen_timed(a, b, c)
    assert ch["source"] == "timed" and ch["variant"] == "blocked-jit"
    (e,) = bm.table_entries()
    times = tuning.timings(ch["tuning_key"])
    others = {n: t for n, t in times.items() if not n.startswith("blocked-jit:")}
    assert e["variant"] == "blocked" and e["timed_ms"] == min(others.values())
    assert e["config"] == next(cd.config for cd in bm.candidates(a, b, c, "ieee", 1.0, 0.0)
                               if bm.candidate_name("blocked", cd.config) == min(others, key=others.get))
    assert e["fastest"] == bm.candidate_name("blocked-jit", ch["config"]) and e["fastest_ms"] == 1.0


def test_a_choice_the_store_answered_gives_no_entry(fresh):
    """A class timed by an earlier run (``scripts/build_tables.py`` runs one ``tiledmm tune`` per suite over one
    store) is answered by the store in the next run: no times of its own here, so no entry, which would replace
    the earlier run's timed one (and, where rung 11 had won, name a variant the default may not take)."""
    a, b, c = _call(45, 21, 70)
    assert _chosen_timed(a, b, c)["source"] == "timed" and len(bm.table_entries()) == 1
    tuning.forget()              # a new process: the store's file stays, the times do not
    _forget()
    bm.forget_choices()
    ch = _chosen_timed(a, b, c)
    assert tuning.timings(ch["tuning_key"]) is None and bm.table_entries() == []


def test_an_entry_the_lookup_would_drop_is_refused_and_the_table_kept(fresh):
    """The lookup ignores a whole table holding one entry not of its form; writing such an entry raises (naming
    it) and leaves the table as it was, instead of a file whose next merge drops every earlier entry."""
    from tiledmm._cachefile import Damaged
    path = fresh / "t.json"
    good = shipped.entry("L", (10, 10, 10), "blocked", {"BLOCK_M": 64}, 1.0, "model", 2.0, rotated=True)
    assert shipped.write(path, "gpu", 4, [good], {}) == 1
    before = path.read_text()
    bad = shipped.entry("L", (11, 10, 10), "simt-async", {"BLOCK_M": 64, "name": "64x128x16"}, 1.0, "m", 2.0)
    with pytest.raises(Damaged, match="config"):
        shipped.write(path, "gpu", 4, [bad], {})
    assert path.read_text() == before
    shipped._load.cache_clear()
    assert [e["class"] for e in shipped._load(str(path))["index"]["L"]] == [[10, 10, 10]]


def test_shipped_tables_name_runnable_choices():
    """Every table in the package: its GPU's name, and entries naming a variant that exists with a
    config the variant offers (or a config that fits the GPU's shared memory), in a known layout."""
    files = sorted(shipped.TABLES.glob("*.json"))
    assert [f.stem for f in files] == ["nvidia-h100-80gb-hbm3", "nvidia-h200"]         # the GPUs measured so far
    for f in files:
        doc = json.loads(f.read_text())
        assert shipped._table(doc) is doc, f         # of the form the lookup reads (else it ignores the file)
        assert doc["format"] == shipped.FORMAT and shipped.slug(doc["gpu"]) == f.stem
        assert doc["entries"], f
        for e in doc["entries"]:
            v = V.BY_NAME[e["variant"]]
            assert v in V.ALL, e
            assert len(e["class"]) == 3 and len(e["layout"].split("|")) == 13, e
            kind = {"none": "16bit"}.get(e["layout"].split("|")[2], e["layout"].split("|")[2])
            offered = v.configs(kind) + (v.few_rows(kind) if v.few_rows else [])
            cfg = e["config"]
            assert cfg in offered or ("BLOCK_M" in cfg and H.smem_bytes(cfg, 2, 2, v.traits.tma_store) <= 232448), e


@pytest.mark.parametrize("copied", [0, 4096])
def test_a_policy_entry_with_nothing_to_copy_runs_its_kernel_as_given(fresh, monkeypatch, copied):
    """tma-copy (the TMA kernel under the COPY policy) on operands it need not copy is the tma kernel with an
    unbound host path (H100: 48-140 us a call): the table's tma-copy entry is taken as the same kernel's
    AS_IS variant, tma, same config, where that runs the call; an entry whose call does copy stays tma-copy.
    (Stand-ins: the blocked kernel under the kernel name 'tma', as given and with the COPY policy.)"""
    from tiledmm.kernels.block.policies import COPY
    blocked = V.BY_NAME["blocked"]
    fakes = {"tma-copy": _altered(blocked, {"copies": lambda *a: copied}, kernel="tma", policy=COPY),
             "tma": _altered(blocked, kernel="tma")}
    assert {n: (v.name, v.kernel) for n, v in fakes.items()} == {"tma-copy": ("tma-copy", "tma"), "tma": ("tma", "tma")}
    monkeypatch.setattr(V, "ALL", [fakes.get(v.name, v) for v in V.ALL])
    a, b, c = _call(45, 21, 70)
    model, other = _other_than_model(a, b, c)
    key = bm.plan_key(a, b, c, "ieee", 1.0, 0.0)
    layout, cls = shipped.split_key(key)
    p = properties(0)
    shipped.write(fresh / f"{shipped.slug(p.name)}.json", p.name, p.num_sms,
                  [shipped.entry(layout, cls, "tma-copy", other, 1.0, "model", 2.0, rotated=True)], {"test": True})
    ch = _chosen(a, b, c)
    assert ch["source"] == "table" and ch["config"] == other
    assert ch["variant"] == ("tma" if copied == 0 else "tma-copy"), ch


def _gluon_options():
    gl = H.Candidate("gluon-ws:x", dict(C.EMULATION_CHOICES[0]), V.GLUON.traits, 0, V.GLUON, True)
    other = H.Candidate("blocked:y", dict(C.EMULATION_CHOICES[1]), V.BY_NAME["blocked"].traits, 0,
                        V.BY_NAME["blocked"], True)
    return gl, other, {gl.name: gl, other.name: other}


def test_large_16bit_calls_that_the_gluon_kernel_takes_are_its_own(fresh):
    """``rules.RULES``: a 16-bit, unbatched call of M >= GLUON_OWNS_FROM_M and M*N*K >= GLUON_OWNS_FROM_MACS
    with a Gluon candidate is the rules' -- the Gluon kernel, its own config -- and the shipped table is not
    asked; fewer rows, less work, tf32, a batch or no Gluon candidate leave the choice to the table and the
    model."""
    a, b, c = _call(45, 21, 70)
    dev = bm.device(None)
    gl, other, opts = _gluon_options()
    p = H.Problem(R.GLUON_OWNS_FROM_M, 2 ** 13, R.GLUON_OWNS_FROM_MACS // R.GLUON_OWNS_FROM_M // 2 ** 13)
    assert R.ruling(p, opts, dev) == (gl.name, frozenset())
    assert bm.untimed_choices(None, a, b, c, "none", 1.0, 0.0, p, dict(opts)) == (gl.name, None)
    import dataclasses
    for q in (dataclasses.replace(p, M=R.GLUON_OWNS_FROM_M - 1), dataclasses.replace(p, kind="tf32", esize=4),
              dataclasses.replace(p, K=p.K - 1)):
        assert R.ruling(q, opts, dev) == (None, frozenset()), q
    assert R.ruling(p, {other.name: other}, dev) == (None, frozenset())


def test_batches_the_gluon_kernel_owns_and_those_it_is_not_offered(fresh, monkeypatch):
    """A batch of >= GLUON_OWNS_FROM_MACS multiply-adds is the Gluon kernel's in tf32 at any K and in 16-bit
    from K = GLUON_BATCH_FROM_K; any other batch leaves the Gluon kernel out of the model's pick (its 16-bit
    tiles of a few K-steps and its products of K or N = 64 ran at 0.41-0.70x torch)."""
    import dataclasses
    a, b, c = _call(45, 21, 70)
    # a Hopper's properties: the model may rank the Gluon kernel (capability 9.0) first
    dev = dataclasses.replace(bm.device(None), capability=(9, 0), sms=132, smem=232448, bandwidth=3.35e6)
    monkeypatch.setattr(bm, "device", lambda idx=None: dev)
    gl, other, opts = _gluon_options()
    k = R.GLUON_BATCH_FROM_K
    p = H.Problem(512, 512, k, R.GLUON_OWNS_FROM_MACS // (512 * 512 * k))
    left_out = frozenset({gl.variant.name})
    assert p.batch > 1 and R.ruling(p, opts, dev) == (gl.name, frozenset())
    assert R.ruling(dataclasses.replace(p, batch=p.batch - 1), opts, dev) == (None, left_out)   # too little work
    short = dataclasses.replace(p, K=k // 2, batch=2 * p.batch)
    assert R.ruling(short, opts, dev) == (None, left_out)
    assert R.ruling(dataclasses.replace(short, kind="tf32", esize=4), opts, dev)[0] == gl.name
    # not owned: the model picks among the others even where it would rank the Gluon kernel first
    assert H.pick([gl, other], short, dev) is gl
    pick, _ = bm.untimed_choices(None, a, b, c, "none", 1.0, 0.0, short, dict(opts))
    assert pick == other.name
    one = dataclasses.replace(short, batch=1, K=512)      # one product (not owned: too little work): offered
    assert H.pick([gl, other], one, dev) is gl and R.ruling(one, opts, dev) == (None, frozenset())
    assert bm.untimed_choices(None, a, b, c, "none", 1.0, 0.0, one, dict(opts))[0] == gl.name


def _old_gluon_owns(p) -> bool:
    """The conditions the dispatcher tested in code before they were rows of ``rules.RULES``: one 16-bit
    product of at least 64 rows and 2^32 multiply-adds; a batch of at least 2^32 in tf32, or from K = 512."""
    if p.batch > 1:
        return p.batch * p.M * p.N * p.K >= 2 ** 32 and (p.kind == "tf32" or p.K >= 512)
    return p.kind == "16bit" and p.M >= 64 and p.M * p.N * p.K >= 2 ** 32


def test_the_rules_are_a_table_that_decides_as_the_branches_did():
    """The rules are data: every row names a registered variant and one of the two verdicts, with the
    measurement behind it; read for random calls (sizes around every bound, each kind, one product or a
    batch) they own exactly the calls the former branches gave the Gluon kernel, and leave it out of
    every other batch."""
    import random
    print("\n".join(map(str, R.RULES)))
    assert R.RULES and all(isinstance(r, R.Rule) and r.variant in V.BY_NAME and r.does in (R.OWNS, R.NOT_OFFERED)
                           and r.why for r in R.RULES)
    dev = bm.device(None)
    gl, other, opts = _gluon_options()
    rng = random.Random(4)
    owned = 0
    for _ in range(3000):
        batch = rng.choice([1, 1, 2, 16, 64])
        dims = [rng.choice([1, 31, 63, 64, 65, 256, 511, 512, 513, 2048, 4096, 8192, 16384]) for _ in range(3)]
        kind = rng.choice(["16bit", "tf32", "ieee"])
        p = H.Problem(*dims, batch, kind, 2 if kind == "16bit" else 4, 2 if kind == "16bit" else 4)
        pick, left_out = R.ruling(p, opts, dev)
        assert (pick == gl.name) == _old_gluon_owns(p), p
        assert left_out == (frozenset({gl.variant.name}) if batch > 1 and pick is None else frozenset()), p
        owned += pick is not None
    assert 100 < owned < 2900


def test_the_first_source_that_answers_decides(fresh, monkeypatch):
    """dispatch.SOURCES, in order: a source that answers None passes the choice on, the first name given
    is the plan's and its source is recorded as the choice's."""
    assert bm.SOURCES == ("store", "timed", "rules", "table", "model")
    a, b, c = _call(45, 21, 70)
    names = [cd.name for cd in bm.candidates(a, b, c, "ieee", 1.0, 0.0)]
    assert len(names) >= 2
    for i, source in enumerate(bm.SOURCES):
        for j, other in enumerate(bm.SOURCES):
            answer = names[j % len(names)] if j >= i else None
            monkeypatch.setattr(bm._Sources, other, lambda self, n=answer: n)
        _forget()
        bm.forget_choices()
        ch = _chosen(a, b, c)
        assert ch["source"] == source, (source, ch)
        assert bm.candidate_name(ch["variant"], ch["config"]) == names[i % len(names)], (source, ch)


def test_each_hopper_gpu_gets_its_own_table_by_name(fresh):
    """The table is chosen by the GPU's name (and SM count): an H200 reads an H200 table where one ships,
    never the H100's, and an H100 never reads the H200's; with none of its own, the H200 runs on the model."""
    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    package = Path(shipped.__file__).parent / "tables"
    assert shipped.table_for(h100, 132, folder=package)["gpu"] == h100     # each ships its own
    assert shipped.table_for(h200, 132, folder=package)["gpu"] == h200
    assert shipped.table_for(h200, 132, folder=fresh) is None          # an H200 without its own: the model
    e = shipped.entry("L", (10, 10, 10), "blocked", {"BLOCK_M": 64}, 1.0, "model", 2.0, rotated=True)
    shipped.write(fresh / f"{shipped.slug(h200)}.json", h200, 132, [e], {"test": True})
    assert shipped.slug(h200) == "nvidia-h200"
    t = shipped.table_for(h200, 132, folder=fresh)
    assert t is not None and t["gpu"] == h200
    assert shipped.table_for(h100, 132, folder=fresh) is None    # the H100 does not read the H200's
    assert shipped.table_for(h200, 114, folder=fresh) is None    # another SM count (a cut-down part): not its table
