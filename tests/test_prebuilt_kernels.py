"""The compiled kernels shipped in the package (``_adapter``: ``IndexKey.shipped``, ``export_compiled``, the
lookup in ``load_compiled``): a hit compiles nothing; another Triton version falls back to the JIT with
one warning; a GPU the store does not cover, a damaged file: the JIT, quietly.

On the CPU with the kernel index's stand-ins (tests/test_kernel_index.py): a JIT-function-like object
whose JIT raises if consulted, a fake compiled kernel's files in a temporary Triton cache, Triton's real
``CompiledKernel`` with its device handles stubbed. The GPU test checks a fresh process's first calls
against the store scripts/build_kernels.py writes."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import sysconfig
import warnings
from pathlib import Path

import pytest
import torch
import triton
from triton.compiler import compiler
from triton.runtime.cache import get_cache_manager

from tests.conftest import GPU
from tests.test_kernel_index import HASH, NAME, TARGET, FakeJit, _args, index  # noqa: F401  (the fixture)
from tiledmm import _adapter
from tiledmm._adapter import store_build
from tiledmm.kernels.block import fastlaunch

ROOT = Path(__file__).resolve().parents[1]
MODULE_KEY = "ab" * 32      # a compiled C module's key in Triton's cache: its source's hash
LAUNCHER = f"__triton_launcher{sysconfig.get_config_var('EXT_SUFFIX')}"


@pytest.fixture
def store(index, tmp_path, monkeypatch):
    """The fake kernel compiled and remembered by a "build machine", exported into a store in tmp_path; then
    a "fresh machine": another Triton cache (empty), another tiledmm cache, the store as the package's."""
    monkeypatch.setattr(_adapter, "run_compiled", lambda ck, *rest: None)
    monkeypatch.setattr(fastlaunch, "ensure_allocator", lambda: None)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 0)
    monkeypatch.setattr(fastlaunch, "emulating", lambda: False)
    monkeypatch.setattr(_adapter, "_prebuilt_warned", False)
    monkeypatch.delenv("TILEDMM_PREBUILT", raising=False)
    monkeypatch.setattr(_adapter, "prebuilt_dir", lambda: tmp_path / "no-store")   # the package's own store
    _adapter._prebuilt_store.cache_clear()        # (another Triton version's, on CI) must not warn in the build
    _adapter._other_versions.cache_clear()
    build = FakeJit(compiled=index)
    assert fastlaunch.FastKernel(build, {"BLOCK": 64}, 4, 3)((2,), *_args()) is index and build.jit_calls == 1
    get_cache_manager(MODULE_KEY).put(b"not a real launcher", LAUNCHER, binary=True)   # as Triton's host compiler
    monkeypatch.setattr(store_build, "_modules_done", False)
    out = tmp_path / "prebuilt"
    report = _adapter.export_compiled(out)
    monkeypatch.setattr(_adapter, "prebuilt_dir", lambda: out)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "fresh-triton"))
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "fresh-tiledmm"))
    _adapter._prebuilt_store.cache_clear()
    _adapter._other_versions.cache_clear()
    yield out, report
    _adapter._prebuilt_store.cache_clear()
    _adapter._other_versions.cache_clear()


def _first_call():
    """A new process's first launch of the kernel: (its CompiledKernel, the JIT stand-in)."""
    fn = FakeJit(compiled=None)          # the JIT raises if consulted
    return fastlaunch.FastKernel(fn, {"BLOCK": 64}, 4, 3)((2,), *_args()), fn


def test_the_export_ships_each_kernel_once_with_its_binary_and_metadata(store):
    out, report = store
    doc = json.loads((out / f"triton-{triton.__version__}.json").read_text())
    assert doc["format"] == 2 and doc["triton"] == triton.__version__ and doc["targets"] == [list(TARGET)]
    (entry,) = doc["kernels"].values()
    assert entry["hash"] == HASH and entry["name"] == NAME and set(entry["files"]) == {f"{NAME}.json",
                                                                                     f"{NAME}.cubin"}
    blobs = sorted(p.name for p in (out / "blobs").iterdir())
    assert blobs == sorted([*entry["files"].values(), *doc["modules"][MODULE_KEY].values()])
    assert gzip.decompress((out / "blobs" / entry["files"][f"{NAME}.cubin"]).read_bytes()) == b"not a real cubin"
    assert report["kernels"] == 1 and report["files"] == 3 and report["cubins"] == 1 and report["added"] == 1
    assert report["modules"] == 1 and list(doc["modules"]) == [MODULE_KEY] and doc["host"] == store_build._host_key()
    assert report["raw_bytes"] > 0 and report["stored_bytes"] > 0 and report["by_name"] == {NAME: 1}
    again = _adapter.export_compiled(out)                 # idempotent: nothing added, nothing duplicated
    assert again["kernels"] == 1 and again["added"] == 0 and sorted(p.name for p in (out / "blobs").iterdir()) == blobs


def test_a_hit_compiles_nothing_and_the_next_process_finds_it_in_its_own_index(store, tmp_path, index):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ck, fn = _first_call()
    assert fn.jit_calls == 0
    # the launch passes arguments in the signature's order: the store must keep it (the JSON is key-sorted)
    assert list(ck.src.signature.items()) == list(index.src.signature.items()) != sorted(index.src.signature.items())
    assert isinstance(ck, compiler.CompiledKernel) and ck.hash == HASH and ck.kernel == b"not a real cubin"
    local = list((tmp_path / "fresh-triton" / "tiledmm-index").glob("*.json"))
    assert len(local) == 1 and json.loads(local[0].read_text())["hash"] == HASH
    out, _ = store
    for p in (out / "blobs").iterdir():                   # the store gone: the local index and cache serve
        p.unlink()
    _adapter._prebuilt_store.cache_clear()
    ck2, fn2 = _first_call()
    assert fn2.jit_calls == 0 and ck2.kernel == b"not a real cubin"


def test_another_triton_version_falls_back_to_the_jit_with_one_warning(store, index, monkeypatch):
    out, _ = store
    (out / f"triton-{triton.__version__}.json").rename(out / "triton-0.0.1.json")
    doc = json.loads((out / "triton-0.0.1.json").read_text())
    doc["triton"] = "0.0.1"
    (out / "triton-0.0.1.json").write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match=r"built with Triton 0\.0\.1; this is Triton") as caught:
        fn = FakeJit(compiled=index)
        assert fastlaunch.FastKernel(fn, {"BLOCK": 64}, 4, 3)((2,), *_args()) is index
        fn2 = FakeJit(compiled=index)
        fastlaunch.FastKernel(fn2, {"BLOCK": 32}, 4, 3)((2,), *_args())      # another kernel: no second warning
    assert fn.jit_calls == 1 and fn2.jit_calls == 1
    assert len([w for w in caught if "compiled kernels" in str(w.message)]) == 1


def test_a_gpu_the_store_does_not_cover_compiles_quietly(store, index, monkeypatch):
    out, _ = store
    (out / f"triton-{triton.__version__}.json").rename(out / "triton-0.0.1.json")
    monkeypatch.setattr(_adapter, "gpu_target", lambda: ("cuda", 80, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = FakeJit(compiled=index)
        assert fastlaunch.FastKernel(fn, {"BLOCK": 64}, 4, 3)((2,), *_args()) is index
    assert fn.jit_calls == 1


@pytest.mark.parametrize("damage", ["blob", "index", "truncated"])
def test_a_damaged_store_is_a_miss(store, index, damage):
    out, _ = store
    doc_path = out / f"triton-{triton.__version__}.json"
    if damage == "index":
        doc_path.write_text("{not json")
    else:
        (entry,) = json.loads(doc_path.read_text())["kernels"].values()
        blob = out / "blobs" / entry["files"][f"{NAME}.cubin"]
        blob.write_bytes(gzip.compress(b"another cubin") if damage == "blob" else blob.read_bytes()[:10])
    fn = FakeJit(compiled=index)
    assert fastlaunch.FastKernel(fn, {"BLOCK": 64}, 4, 3)((2,), *_args()) is index
    assert fn.jit_calls == 1


def test_the_store_off_the_shipped_key_and_what_it_is_made_of(store, index, monkeypatch):
    fn = FakeJit()
    key = _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",))
    assert isinstance(key, _adapter.IndexKey) and key.shipped and key.shipped != key
    monkeypatch.setattr(_adapter, "_fingerprint", "another install of the same Triton")
    other = _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",))
    assert other != key and other.shipped == key.shipped          # the local key moves, the shipped one not
    real = triton.__version__
    monkeypatch.setattr(triton, "__version__", "0.0.1")
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", ("0.0.1",))
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",)).shipped != key.shipped
    monkeypatch.setattr(triton, "__version__", real)
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", (real,))
    monkeypatch.setenv("TILEDMM_PREBUILT", "off")
    fn2 = FakeJit(compiled=index)
    assert fastlaunch.FastKernel(fn2, {"BLOCK": 64}, 4, 3)((2,), *_args()) is index and fn2.jit_calls == 1


def test_the_package_data_includes_the_store():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"kernels/block/prebuilt/*.json"' in text and '"kernels/block/prebuilt/blobs/*.gz"' in text


def test_the_build_plan_covers_the_table_the_suites_and_the_layers():
    from tiledmm.kernels.block import build_calls, shipped
    table = shipped.table_for(build_calls.H100, 132)
    points = build_calls.plan(build_calls.PARTS, table)
    parts = {part: sum(p["part"] == part for p in points) for part in build_calls.PARTS}
    assert parts["table"] == len(build_calls.table_points(table))
    assert min(parts.values()) > 50 and all(build_calls._bytes(p) <= build_calls.MAX_BYTES for p in points)
    assert {p["api"] for p in points} == {"matmul", "linear", "linear_bwd"} and any(p["invariant"] for p in points)


def test_the_plan_forces_the_choices_of_other_tables_of_the_target(monkeypatch):
    """An H100 builds the store the H200 loads too (one sm_90 cubin): the H200 table's entries are planned with
    their variant and config forced (the H100's default would not choose them), and a worker passes them on."""
    import contextlib
    import types
    import torch
    from tiledmm.kernels.block import build_calls, shipped
    from tiledmm.kernels.block import variants as V
    h100 = shipped.table_for(build_calls.H100, 132)
    h200 = shipped.table_for("NVIDIA H200", 132)
    assert h100["target"] == h200["target"] == "sm_90" == shipped.target((9, 0))   # as the tune CLI writes it
    assert [t["gpu"] for t in shipped.tables() if t is not h100 and t["target"] == "sm_90"] == ["NVIDIA H200"]
    own = build_calls.plan(("table",), h100)
    both = build_calls.plan(("table",), h100, [h200])
    forced = [p for p in both if p.get("variant")]
    assert not any(p.get("variant") for p in own) and both[:len(own)] == own
    assert len(forced) == len(build_calls.table_points(h200, forced=True)) == len(both) - len(own)
    assert {(p["layout"], tuple(p["cls"])) for p in forced} == \
        {(e["layout"], tuple(e["class"])) for es in h200["index"].values() for e in es}
    for p in forced:
        v = V.BY_NAME[p["variant"]]
        assert (p["config"] is None) == v.traits.own_config_by_shape
    seen = []
    stand_in = types.SimpleNamespace(matmul=lambda a, b, **kw: seen.append(kw),
                                     batch_invariant=lambda on: contextlib.nullcontext())
    p = next(p for p in forced if p["config"])
    monkeypatch.setattr(build_calls, "operands", lambda torch, q: (None, None, None))
    assert build_calls.run_point(torch, stand_in, p) is None
    assert seen[0]["kernel"] == "triton" and seen[0]["variant"] == p["variant"] and seen[0]["config"] == p["config"]


def test_the_rows_part_compiles_both_specialisations_of_m_in_every_class():
    """A token loop's M is mostly not a multiple of 16, which Triton compiles as its own specialisation: each
    M class from 16 up is built with an M divisible by 16 and one that is not (and M = 1, its own)."""
    from tiledmm._adapter.launch import int_key
    from tiledmm.kernels.block import build_calls
    from tiledmm.registry import shape_class
    rows = [p for p in build_calls.plan(("rows",), None) if p["part"] == "rows"]
    for n, k in build_calls.LLM:
        ms = {p["M"] for p in rows if (p["N"], p["K"]) == (n, k) and p["dtype"] == "bfloat16"}
        assert 1 in ms
        for c in range(4, 14):
            keys = {int_key(m) for m in ms if shape_class(m, 1, 1)[0] == c}
            if 2 ** c * k * 2 <= build_calls.MAX_BYTES // 2:
                assert keys == {0, 2}, (n, k, c, keys)


def test_the_classes_part_builds_every_class_with_m_n_k_on_and_off_16():
    """Triton specialises M, N and K (and so the rows' strides) on divisibility by 16: an odd-sized product's first
    call compiled where the store had its class only at multiples of 16. Each class, dtype and B layout of the part
    comes in all eight combinations, each combination in the class of its multiple-of-16 point."""
    from tiledmm._adapter.launch import int_key
    from tiledmm.kernels.block import build_calls
    from tiledmm.registry import shape_class
    pts = [p for p in build_calls.plan(("classes",), None) if p["part"] == "classes"]
    seen = {}
    for p in pts:
        base = tuple(16 * round(x / 16) for x in (p["M"], p["N"], p["K"]))   # the nearest multiple of 16
        assert shape_class(*base) == shape_class(p["M"], p["N"], p["K"]), p
        seen.setdefault((base, p["dtype"], p["precision"], p["b"]), set()).add(
            tuple(int_key(x) for x in (p["M"], p["N"], p["K"])))
    assert seen and all(len(combos) == 8 for combos in seen.values())


def test_the_table_part_builds_each_entrys_class_with_m_on_and_off_16():
    """The first call of 1519x1536x1536 fp32 on an H200 compiled for 0.87 s where 1536^3 found its kernel: the table
    part built each entry at M = 2^c only (a multiple of 16 from c = 4), and Triton compiles M off 16 apart."""
    from tiledmm._adapter.launch import int_key
    from tiledmm.kernels.block import build_calls, shipped
    for gpu in (build_calls.H100, "NVIDIA H200"):
        seen = {}
        for p in build_calls.table_points(shipped.table_for(gpu, 132), forced=gpu != build_calls.H100):
            seen.setdefault((p["layout"], tuple(p["cls"]), p["a"] + p["c"]), set()).add(int_key(p["M"]))
        assert seen and any(orders == "nn" and cls[0] >= 4 for _, cls, orders in seen)
        for (layout, cls, orders), keys in seen.items():
            both = cls[0] >= 4 and orders == "nn"      # (else M is a row pitch: the layout key has its alignment)
            assert keys == ({0, 2} if both else {1} if cls[0] == 0 else {int_key(2 ** cls[0])}), (gpu, layout, cls)


def test_the_table_calls_have_their_entries_layout_and_class():
    """Every shipped-table entry's synthesised call (scripts/build_kernels.py runs them) has the entry's layout
    key and shape class as the dispatcher computes them (operands made on the CPU, empty: nothing is run)."""
    from tiledmm.kernels.block import build_calls, shipped
    points = build_calls.table_points(shipped.table_for(build_calls.H100, 132))
    assert len(points) >= 300
    wrong = []
    for p in points:
        if build_calls._bytes(p) > (1 << 30):
            continue              # (not made here: the CPU's memory)
        a, b, c = build_calls.operands(torch, p, "cpu")
        got = build_calls.layout_of(torch, p, a, b, c)
        if got != (p["layout"], list(p["cls"])):
            wrong.append((p["layout"], p["cls"], got))
    assert wrong == []


# -- GPU: a fresh process's first calls find the package's kernels --------------------------------------------

_FRESH = """
import json, time, torch, triton, triton.compiler
from triton.compiler import compiler
compiled = []
real = compiler.compile
counted = lambda *a, **k: compiled.append(1) or real(*a, **k)
compiler.compile = triton.compiler.compile = counted      # (JIT functions bind it on their first run)
import tiledmm
out = {}
for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    a = torch.randn(4096, 4096, device="cuda", dtype=dt); b = torch.randn(4096, 4096, device="cuda", dtype=dt)
    torch.cuda.synchronize()
    t = time.perf_counter(); tiledmm.matmul(a, b); torch.cuda.synchronize()
    out[name] = time.perf_counter() - t
out["compiles"] = len(compiled)
print(json.dumps(out))
"""


@pytest.mark.gpu
def test_gpu_a_fresh_process_compiles_nothing_where_the_store_has_its_kernels(tmp_path):
    if _adapter._prebuilt_store(triton.__version__) is None:
        pytest.skip(f"no compiled kernels shipped for Triton {triton.__version__} (scripts/build_kernels.py)")
    env = {k: v for k, v in os.environ.items() if k not in ("TILEDMM_PREBUILT",)}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton"), TILEDMM_CACHE_DIR=str(tmp_path / "tiledmm"),
               PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-c", _FRESH], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"fresh process, empty caches: first 4096^3 call bf16 {got['bf16']:.3f} s, fp32 {got['fp32']:.3f} s, "
          f"{got['compiles']} Triton compiles")
    assert got["compiles"] == 0


def test_the_store_installs_tritons_compiled_launchers_only_on_a_host_like_the_builds(store, tmp_path, monkeypatch):
    """Triton builds each launcher with the host's C compiler on a cold cache (about half a second each): a new
    process's first call finds the store's installed (tiledmm readies Triton's cache folder before its first
    lookup), where the host's platform key and extension suffix are the build's; on any other host Triton
    builds its own."""
    monkeypatch.setattr(_adapter, "_settle_triton_cache", lambda: "")
    monkeypatch.setattr(_adapter, "_cache_ready", False)         # a new process
    monkeypatch.setattr(store_build, "_modules_done", False)
    assert get_cache_manager(MODULE_KEY).get_file(LAUNCHER) is None       # the fresh machine's cache
    ck, fn = _first_call()
    installed = Path(get_cache_manager(MODULE_KEY).get_file(LAUNCHER))
    assert fn.jit_calls == 0 and installed.read_bytes() == b"not a real launcher"
    installed.unlink()
    monkeypatch.setattr(_adapter, "_cache_ready", False)         # another new process, on another host
    monkeypatch.setattr(store_build, "_modules_done", False)
    monkeypatch.setattr(store_build, "_host_key", lambda: ["arm64,Darwin,64bit,", ".so"])
    for p in (tmp_path / "fresh-triton" / "tiledmm-index").glob("*.json"):
        p.unlink()                              # a miss in the local index again: the store is consulted
    ck, fn = _first_call()
    assert fn.jit_calls == 0 and not installed.exists()


def test_the_launchers_are_installed_before_tritons_driver_is_made(store, monkeypatch):
    """Triton's driver builds its helpers when it is first made (the first ``gpu_target``): the store's are in
    its cache by then -- installed when tiledmm first readies Triton's cache folder, before any lookup."""
    monkeypatch.setattr(_adapter, "_cache_ready", False)
    monkeypatch.setattr(_adapter, "_settle_triton_cache", lambda: "")
    monkeypatch.setattr(store_build, "_modules_done", False)
    assert get_cache_manager(MODULE_KEY).get_file(LAUNCHER) is None
    _adapter.triton_cache_ready()
    assert Path(get_cache_manager(MODULE_KEY).get_file(LAUNCHER)).read_bytes() == b"not a real launcher"
