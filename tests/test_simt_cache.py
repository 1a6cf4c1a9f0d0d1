"""The SIMT kernels' disk cache (kernels/simt_cache.py, _adapter.numba_disk_cache) and rung 11 as a
default pick once its kernel is on disk (dispatch._fastest_on_disk).

numba's simulator (emulation) compiles nothing, so the CPU tests build numba's *real* dispatchers in a
child process that tiledmm is told is a GPU process (nothing is launched or compiled there): the tags,
the cache attached to each factory's kernel and where it writes, its index and data files across
processes, damage read as a miss. The GPU tests compile, and check a second process's cache hit."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import GPU
from tiledmm.kernels import simt_cache as _diskcache

ROOT = Path(__file__).resolve().parents[1]

# a child process with numba's real CUDA target and tiledmm deciding "gpu" without asking the driver
_REAL_NUMBA = """
import importlib.util, json, os, sys
SRC = {src!r}
spec = importlib.util.spec_from_file_location("tiledmm", SRC + "/tiledmm/__init__.py",
                                              submodule_search_locations=[SRC + "/tiledmm"])
pkg = importlib.util.module_from_spec(spec)
sys.modules["tiledmm"] = pkg
import tiledmm._backend as backend
backend._mode = "gpu"
spec.loader.exec_module(pkg)
import numba
assert not numba.config.ENABLE_CUDASIM
from tiledmm import registry
from tiledmm.kernels import simt_cache as _diskcache
from tiledmm.kernels.simt import k10_autotune, k11_async
"""


def _child(body: str, cache: Path, **env) -> dict:
    code = _REAL_NUMBA.format(src=str(ROOT / "src")) + textwrap.dedent(body)
    e = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET",
                                                          "TILEDMM_EMULATE", "NUMBA_CACHE_DIR")}
    e.update(TILEDMM_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH")))), **env)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_tags_name_the_factory_its_arguments_and_the_sources():
    t1 = _diskcache.tag_of("k11_async.make_async", "128x128x16-w32x64-t8x8-s3-m2", "float32", True, True)
    assert t1 == _diskcache.tag_of("k11_async.make_async", "128x128x16-w32x64-t8x8-s3-m2", "float32", True, True)
    others = [_diskcache.tag_of("k11_async.make_async", "128x128x16-w32x64-t8x8-s3-m1", "float32", True, True),
              _diskcache.tag_of("k11_async.make_async", "128x128x16-w32x64-t8x8-s3-m2", "float64", True, True),
              _diskcache.tag_of("k11_async.make_async", "128x128x16-w32x64-t8x8-s3-m2", "float32", False, True),
              _diskcache.tag_of("tiled", 16, "float32")]
    assert len({t1, *others}) == 5
    assert t1.startswith(_diskcache.source_digest() + "|")


def test_the_source_digest_covers_every_kernel_file(tmp_path, monkeypatch):
    here = _diskcache.SIMT
    names = sorted(p.name for p in here.glob("*.py"))
    assert {"k11_async.py", "k09_unsigned.py", "_tiles.py", "_launch.py"} <= set(names)
    for p in here.glob("*.py"):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    monkeypatch.setattr(_diskcache, "SIMT", tmp_path)
    _diskcache.source_digest.cache_clear()
    try:
        same = _diskcache.source_digest()
        (tmp_path / "_tiles.py").write_text((tmp_path / "_tiles.py").read_text() + "\n# edited\n")
        _diskcache.source_digest.cache_clear()
        assert _diskcache.source_digest() != same
    finally:
        monkeypatch.undo()
        _diskcache.source_digest.cache_clear()


def test_the_cache_folder_is_numbas_if_named_else_tiledmms(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "t"))
    assert _diskcache.root() == tmp_path / "t" / "numba"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "n"))
    assert _diskcache.root() == tmp_path / "n"


def test_the_check_imports_neither_the_simt_kernels_nor_numba():
    code = ("import sys, tiledmm; from tiledmm.kernels import simt_cache;"
            "simt_cache.async_ready('64x128x16-w32x64-t8x8-s3-m4', 'float32', True, (9, 0));"
            "print(sorted(m for m in ('numba', 'tiledmm.kernels.simt') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH"))))))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[-2] == "[]"


def test_emulation_kernels_are_left_alone():
    from tiledmm import registry
    if GPU:
        pytest.skip("emulation only")
    k = registry.get("tiled").make(4, "float32")
    assert not getattr(k, "_tiledmm_tag", None)
    assert not _diskcache.ready("tiled", 4, "float32", capability=(9, 0))


@pytest.mark.slow
def test_every_rungs_kernel_gets_a_tagged_cache_in_tiledmms_folder(tmp_path):
    body = """
    out = {}
    kernels = {"async": k11_async.make_async(k11_async.CANDIDATES["float32"][0], "float32"),
               "async2": k11_async.make_async(k11_async.CANDIDATES["float32"][1], "float32"),
               "autotuned": k10_autotune.make_tuned(k10_autotune.CANDIDATES["float32"][0], "float32")}
    for name in registry.names():
        spec = registry.get(name)
        if spec.family == "simt" and name not in ("async", "autotuned"):
            kernels[name] = spec.make(spec.default_tile or (spec.tiles or (None,))[0], "float32")
    for name, k in kernels.items():
        out[name] = {"cache": type(k._cache).__name__, "path": k._cache.cache_path, "tag": k._tiledmm_tag,
                     "index": k._cache._cache_file._index_path}
    print(json.dumps(out))
    """
    runs = [_child(body, tmp_path), _child(body, tmp_path)]
    assert runs[0] == runs[1]                                    # the same tags and files in a new process
    got = runs[0]
    assert {v["cache"] for v in got.values()} == {"TaggedCache"}
    assert all(v["path"].startswith(str(tmp_path / "numba" / "kernels")) for v in got.values())
    assert len({v["tag"] for v in got.values()}) == len(got) and len({v["index"] for v in got.values()}) == len(got)
    assert "'128x128x16-w32x64-t8x8-s3-m2'|'float32'|True|True" in got["async"]["tag"]
    assert {"naive", "tiled", "unsigned", "warp-tile"} <= set(got)
    user = _child(body, tmp_path / "other", NUMBA_CACHE_DIR=str(tmp_path / "mine"))
    assert all(v["path"].startswith(str(tmp_path / "mine")) for v in user.values())
    off = _child("print(json.dumps(type(registry.get('tiled').make(16, 'float32')._cache).__name__))",
                 tmp_path / "off", TILEDMM_SIMT_CACHE="off")
    assert off == "NullCache"


def test_entries_survive_processes_and_damage_is_a_miss(tmp_path):
    write = """
    k = k11_async.make_async(k11_async.CANDIDATES["float32"][0], "float32")
    f = k._cache._cache_file
    for i in range(3):
        f.save(("key", i), {"payload": i})
    print(json.dumps(sorted(os.listdir(k._cache.cache_path))))
    """
    files = _child(write, tmp_path)
    assert sum(n.endswith(".nbc") for n in files) == 3 and sum(n.endswith(".nbi") for n in files) == 1
    read = """
    from numba import types
    k = k11_async.make_async(k11_async.CANDIDATES["float32"][0], "float32")
    f = k._cache._cache_file
    got = [f.load(("key", i)) for i in range(4)]
    index = f._index_path
    open(index, "wb").write(b"not a pickle")                    # damaged: numba's own reader raises here
    sig = (types.float32[:, ::1],) * 3
    miss = k._cache.load_overload(sig, k.targetctx)             # ... which the cache reads as a miss
    f.save(("key", 9), {"payload": 9})                          # and a save starts the index again
    print(json.dumps({"got": got, "miss": miss, "after": f.load(("key", 9))}))
    """
    got = _child(read, tmp_path)
    assert got == {"got": [{"payload": 0}, {"payload": 1}, {"payload": 2}, None], "miss": None,
                   "after": {"payload": 9}}


def test_ready_marks_are_per_tag_and_gpu_architecture(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_diskcache, "emulating", lambda: False)
    tag = _diskcache.tag_of(_diskcache.ASYNC, "64x128x16-w32x64-t8x8-s3-m4", "float32", True, True)
    assert not _diskcache.async_ready("64x128x16-w32x64-t8x8-s3-m4", "float32", True, (9, 0))
    mark = _diskcache._mark(tag, (9, 0))
    mark.parent.mkdir(parents=True)
    mark.write_text(tag)
    assert _diskcache.async_ready("64x128x16-w32x64-t8x8-s3-m4", "float32", True, (9, 0))
    assert not _diskcache.async_ready("64x128x16-w32x64-t8x8-s3-m4", "float32", True, (10, 0))
    assert not _diskcache.async_ready("64x128x16-w32x64-t8x8-s3-m4", "float32", False, (9, 0))
    monkeypatch.setenv("TILEDMM_SIMT_CACHE", "off")
    assert not _diskcache.async_ready("64x128x16-w32x64-t8x8-s3-m4", "float32", True, (9, 0))


# -- the default pick -----------------------------------------------------------------------------------

def test_the_tables_fastest_is_the_default_once_its_kernel_is_on_disk(monkeypatch, tmp_path):
    """A table entry whose fastest candidate's variant compiles anew in every process (rung 11) names the
    default-eligible one as its variant and the winner in ``fastest``: the default takes the winner once
    ``Variant.on_disk`` says its kernel is compiled on disk, the entry's variant before."""
    import dataclasses

    import torch

    from tiledmm import _backend, tuning
    from tiledmm.analysis.device import properties
    from tiledmm.kernels.block import configs as C
    from tiledmm.kernels.block import dispatch as bm
    from tiledmm.kernels.block import shipped
    from tiledmm.kernels.block import variants as V
    if GPU:
        pytest.skip("emulation's blocked configs stand in for rung 11 here; the GPU test below uses rung 11")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEDMM_TABLE", raising=False)
    monkeypatch.setattr(shipped, "TABLES", tmp_path / "tables")
    shipped._load.cache_clear()
    tuning.forget()
    bm._forget_plans()
    bm.forget_choices()
    dev = _backend.torch_device()
    a, b = torch.randn(45, 21, device=dev), torch.randn(21, 70, device=dev)
    c = torch.empty(45, 70, device=dev)
    entry_cfg, fast_cfg = C.EMULATION_CHOICES
    on_disk = []
    slow = dataclasses.replace(V.BLOCKED, kernel="blocked-jit", configs=lambda kind: [fast_cfg],
                               traits=dataclasses.replace(V.BLOCKED.traits, compiles_per_process=True),
                               emulation=(), on_disk=lambda cfg, a, b, c: bool(on_disk))
    monkeypatch.setattr(V, "ALL", [*V.ALL, slow])
    layout, cls = shipped.split_key(bm.plan_key(a, b, c, "ieee", 1.0, 0.0))
    e = shipped.entry(layout, cls, "blocked", entry_cfg, 2.0, None, None, rotated=True)
    e.update(fastest=bm.candidate_name("blocked-jit", fast_cfg), fastest_ms=1.0)
    p = properties(0)
    shipped.write(tmp_path / "tables" / f"{shipped.slug(p.name)}.json", p.name, p.num_sms, [e], {})

    def chosen():
        import tiledmm
        bm._forget_plans()
        got = tiledmm.matmul(a, b, kernel="triton")
        assert torch.allclose(got, a @ b, atol=1e-4)
        return bm.choices()[bm.plan_key(a, b, c, "ieee", 1.0, 0.0)]
    try:
        ch = chosen()
        assert (ch["source"], ch["variant"], ch["config"]) == ("table", "blocked", entry_cfg)
        on_disk.append(True)
        ch = chosen()
        assert (ch["source"], ch["variant"], ch["config"]) == ("table", "blocked-jit", fast_cfg)
    finally:
        shipped._load.cache_clear()
        tuning.forget()
        bm._forget_plans()
        bm.forget_choices()


def test_rung_11_reports_its_kernels_on_disk_through_the_variant(monkeypatch):
    import torch

    from tiledmm.kernels.block import variants as V
    seen = []
    monkeypatch.setattr(_diskcache, "async_ready", lambda *args: seen.append(args) or True)
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    cfg = V.SIMT_ASYNC.configs("ieee")[0]
    assert V.SIMT_ASYNC.on_disk(cfg, a, b, torch.empty(4, 4))
    assert seen[0][:3] == (cfg["name"], "float32", True)
    assert all(cand.get("name") for cand in V.SIMT_ASYNC.configs("ieee"))


# -- GPU: compiled once, loaded by the next process --------------------------------------------------------

_GPU_CHILD = """
import json, time, torch, tiledmm
from tiledmm.kernels.simt import k11_async
from tiledmm.kernels import simt_cache as _diskcache
a = torch.randn(1024, 1024, device="cuda"); b = torch.randn(1024, 1024, device="cuda")
t = time.perf_counter()
c = tiledmm.matmul(a, b, kernel="async", config="64x128x16-w32x64-t8x8-s3-m4")
torch.cuda.synchronize()
first = time.perf_counter() - t
k = k11_async.make_async(k11_async.Config.parse("64x128x16-w32x64-t8x8-s3-m4"), "float32", True)
st = k.stats
err = float((c.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm())
print(json.dumps({"first_s": first, "hits": sum(st.cache_hits.values()), "misses": sum(st.cache_misses.values()),
                  "err": err, "ready": _diskcache.async_ready("64x128x16-w32x64-t8x8-s3-m4", "float32", True,
                                                             torch.cuda.get_device_capability())}))
"""


@pytest.mark.gpu
def test_gpu_a_second_process_loads_rung_11_from_disk(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(TILEDMM_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH")))))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", _GPU_CHILD], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["misses"] >= 1 and first["ready"] and first["err"] < 1e-5
    assert second["hits"] >= 1 and second["misses"] == 0 and second["err"] < 1e-5
    assert list((tmp_path / "numba" / "kernels").rglob("*.nbc"))
    print(f"rung 11 first call: compiled {first['first_s']:.2f} s, loaded from disk {second['first_s']:.2f} s")


@pytest.mark.gpu
def test_gpu_rung_11_is_the_default_where_the_table_timed_it_fastest_once_on_disk(tmp_path):
    """2048^3 exact fp32: the H100 table's entry names rung 11 as fastest. A fresh cache: the default takes
    the entry's own variant (rung 11 would compile); after rung 11 ran once, a new process takes rung 11."""
    code = """
import json, torch, tiledmm
from tiledmm.kernels.block import dispatch as bm
a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(2048, 2048, device="cuda")
c = tiledmm.matmul(a, b)
ch = bm.choices()[bm.plan_key(a, b, c, "ieee", 1.0, 0.0)]
tiledmm.matmul(a, b, kernel="async", config="{cfg}")      # rung 11 compiled (and kept on disk)
print(json.dumps({{"variant": ch["variant"], "source": ch["source"], "config": ch["config"]}}))
"""
    import torch

    from tiledmm.analysis.device import properties
    from tiledmm.kernels.block import dispatch as bm
    from tiledmm.kernels.block import shipped
    p = properties(0)
    table = shipped.table_for(p.name, p.num_sms)
    if table is None:
        pytest.skip(f"no shipped table for {p.name}")
    x = torch.empty(2048, 2048, device="cuda")
    layout, cls = shipped.split_key(bm.plan_key(x, x, torch.empty_like(x), "ieee", 1.0, 0.0))
    fastest = [e for e in table["index"].get(layout, ()) if e["class"] == list(cls) and "fastest" in e]
    if not fastest:
        pytest.skip("the table names no rung-11 winner at 2048^3 fp32")
    cfg = fastest[0]["fastest"].split("name=")[1].split("-num_stages")[0]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(TILEDMM_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH")))))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code.format(cfg=cfg)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["variant"] != "simt-async"
    assert runs[1]["variant"] == "simt-async" and runs[1]["source"] == "table" and runs[1]["config"]["name"] == cfg
