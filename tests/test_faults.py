"""Faults a user's machine meets: a damaged or unwritable cache never stops a call.

Every file tiledmm reads back -- the tuning store, the per-GPU tables, the kernel index's entries and the
kept self-test beside them -- is read through ``tiledmm._cachefile``: whatever is wrong with it (bytes
that are not UTF-8, a truncated or empty file, JSON of another form, a folder where the file should be,
a file where its folder should be) is a miss with one warning naming the file, the call still gives the
right answer, and the next write replaces the file. An unusable Triton cache folder (under a file,
read-only, full) is found before the first compile: the process compiles into a private temporary folder,
with one warning naming TRITON_CACHE_DIR (``_adapter.triton_cache_ready``).

On the CPU the store and the table are read by real calls (``tiledmm.matmul`` in emulation, each case with
its own folders and fresh plans); the index and the self-test are off in emulation, so their cases run the
index's stand-ins of test_kernel_index.py and the adapter's decision with its self-test stubbed. One case
runs in a fresh process (the files damaged before tiledmm is imported), one compiles a real kernel through
Triton with an unusable cache folder. The GPU tests run the same faults through ``tiledmm.matmul`` in
fresh processes on the device.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import tiledmm
from tiledmm import _adapter, _backend, _cachefile, api, tuning
from tiledmm._arrays import TiledmmError
from tiledmm.analysis.device import properties
from tiledmm.kernels.block import configs as C
from tiledmm.kernels.block import fastlaunch
from tiledmm.kernels.block import heuristics as H
from tiledmm.kernels.block import dispatch as bm
from tiledmm.kernels.block import shipped

from .test_kernel_index import FakeJit, _args, index  # noqa: F401  (index: the stand-ins' fixture)

FAULTS = ("garbage", "truncated", "empty", "wrong_shape", "directory", "file_for_folder")
GARBAGE = b"\xff\xfe\x00\x9c{\"tiledmm\xc3\x28"          # not UTF-8 (a disk error, another program's file)
SRC = str(Path(tiledmm.__file__).parents[1])


def damage(path: Path, fault: str, good: bytes, wrong_shape: bytes) -> None:
    """Put ``fault`` where the file ``path`` (whose right content is ``good``) is read from."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if fault == "file_for_folder":
        if path.parent.is_dir():
            shutil.rmtree(path.parent)
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        path.parent.write_bytes(b"a file where the folder should be")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if fault == "directory":
        path.mkdir()
        return
    path.write_bytes({"garbage": GARBAGE, "truncated": good[:len(good) // 2], "empty": b"",
                      "wrong_shape": wrong_shape}[fault])


def one_warning_naming(caught, path: Path) -> None:
    """Exactly one warning of any kind, the cache's, and it names ``path``."""
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert issubclass(caught[0].category, _cachefile.CacheWarning) and str(path) in str(caught[0].message)


# -- the tuning store and the GPU table: read by the call --------------------------------------------------

@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Empty folders for the store and the tables, no plans, tuning off; returns tmp_path."""
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILEDMM_TABLE", raising=False)
    monkeypatch.setattr(shipped, "TABLES", tmp_path / "tables")

    def forget():
        shipped._load.cache_clear()
        tuning.forget()
        bm._forget_plans()
        bm.forget_choices()
        api._fast_plans.clear()
    forget()
    yield tmp_path
    tuning.set_mode("off")
    forget()


def _operands(m: int, k: int, n: int):
    g = torch.Generator().manual_seed(m * 131 + n)
    dev = _backend.torch_device()
    return torch.randn(m, k, generator=g).to(dev), torch.randn(k, n, generator=g).to(dev)


def _right(a, b) -> bool:
    """tiledmm.matmul(a, b) into an output poisoned with NaN, against float64."""
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device=a.device)
    got = tiledmm.matmul(a, b, out=out)
    ref = a.double() @ b.double()
    return bool(torch.isfinite(got).all()) and float((got.double() - ref).norm() / ref.norm()) < 1e-5


def _plan(a, b):
    """The call's plan key, its tuning key and the blocked config the model does not pick."""
    c = torch.empty(a.shape[0], b.shape[1], device=a.device)
    key = bm.plan_key(a, b, c, "ieee", 1.0, 0.0)
    model = H.pick(bm.candidates(a, b, c, "ieee", 1.0, 0.0), bm._problem(a, b, c, "ieee"), bm.device(None))
    other = next(cfg for cfg in C.EMULATION_CHOICES if cfg != model.config)
    return key, tuning.key_of("triton", *(str(k) for k in key[:-1])), other


@pytest.mark.parametrize("fault", FAULTS)
def test_a_damaged_tuning_store_is_a_miss_and_the_next_choice_replaces_it(fresh, fault):
    a, b = _operands(45, 21, 70)
    key, tkey, _ = _plan(a, b)
    path = tuning.store_path()
    good = json.dumps({tkey: "blocked:BLOCK_K=16-BLOCK_M=16-BLOCK_N=64-GROUP_M=1-num_stages=1-num_warps=4"})
    damage(path, fault, good.encode(), json.dumps({tkey: ["blocked"]}).encode())   # right key, wrong type
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _right(a, b)
        assert _right(*_operands(300, 21, 70))            # another class: the store is not read again
    one_warning_naming(caught, path)
    assert bm.choices()[key]["source"] == "model"
    tuning.set_mode("on")                                 # the next tuned choice: the store written anew
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tuning.choose("k|faults", {"slow": lambda: 2.0, "fast": lambda: 1.0}, "slow") == "fast"
    assert not caught                                     # (that file was warned about already)
    if fault == "file_for_folder":                        # TILEDMM_CACHE_DIR is a file: never removed
        assert path.parent.is_file()
    else:
        assert json.loads(path.read_text()) == {"k|faults": "fast"}


def _table_path(folder: Path) -> Path:
    return folder / f"{shipped.slug(properties(0).name)}.json"


def _write_table(path: Path, key, config) -> None:
    p = properties(0)
    layout, cls = shipped.split_key(key)
    shipped.write(path, p.name, p.num_sms, [shipped.entry(layout, cls, "blocked", config, 1.0, "model", 2.0, True)],
                  {"test": True})


@pytest.mark.parametrize("fault", FAULTS)
def test_a_damaged_gpu_table_is_a_miss_the_model_picks(fresh, fault):
    a, b = _operands(45, 21, 70)
    key, _, other = _plan(a, b)
    path = _table_path(fresh / "tables")
    _write_table(path, key, other)
    good = path.read_bytes()
    doc = json.loads(good)
    doc["entries"][0].pop("config")                       # what the lookup reads of an entry: missing
    damage(path, fault, good, json.dumps(doc).encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _right(a, b)
        assert _right(*_operands(300, 21, 70))
    one_warning_naming(caught, path)
    assert bm.choices()[key]["source"] == "model"
    if fault != "file_for_folder":                        # `tiledmm tune --table PATH` replaces it
        _write_table(path, key, other)
        shipped._load.cache_clear()
        assert shipped.table_for(properties(0).name, properties(0).num_sms) is not None


@pytest.mark.parametrize("kind", ["store", "table"])
def test_the_undamaged_file_is_used(fresh, kind):
    """The control: the damage above is what made those calls miss."""
    if kind == "store" and not _backend.emulating():
        pytest.skip("the stored name is one of emulation's candidates")
    a, b = _operands(45, 21, 70)
    key, tkey, other = _plan(a, b)
    if kind == "table":
        _write_table(_table_path(fresh / "tables"), key, other)
    else:
        tuning.store_path().parent.mkdir(parents=True)
        tuning.store_path().write_text(json.dumps({tkey: bm.candidate_name("blocked", other)}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _right(a, b)
    assert not caught and bm.choices()[key]["source"] == kind and bm.choices()[key]["config"] == other


# -- the kernel index and the kept self-test (off in emulation: the stand-ins) -----------------------------

@pytest.mark.parametrize("fault", FAULTS)
def test_a_damaged_kernel_index_entry_is_a_miss_and_rewritten(index, monkeypatch, fault):
    """A FastKernel's first launch in a new process whose index entry is damaged takes Triton's JIT
    (one warning), rewrites the entry, and the process after finds the kernel without the JIT."""
    monkeypatch.setattr(_adapter, "_cache_ready", True)
    monkeypatch.setattr(_adapter, "run_compiled", lambda ck, *rest: None)
    monkeypatch.setattr(fastlaunch, "ensure_allocator", lambda: None)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 0)
    monkeypatch.setattr(fastlaunch, "current_device", lambda: 0, raising=False)   # (where the cache is per device)
    monkeypatch.setattr(fastlaunch, "emulating", lambda: False)
    fastlaunch.FastKernel(FakeJit(compiled=index), {"BLOCK": 64}, 4, 3)((2,), *_args())
    [path] = (index.triton_dir / "tiledmm-index").glob("*.json")
    good = path.read_bytes()
    damage(path, fault, good, json.dumps({**json.loads(good), "constants": {"2": 64}}).encode())
    jit = FakeJit(compiled=index)                          # a new process: the JIT compiles (a cache hit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fastlaunch.FastKernel(jit, {"BLOCK": 64}, 4, 3)((2,), *_args()) is index
    one_warning_naming(caught, path)
    assert jit.jit_calls == 1 and path.read_bytes() == good   # rewritten
    later = FakeJit(compiled=None)                         # the process after: no JIT, no warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ck = fastlaunch.FastKernel(later, {"BLOCK": 64}, 4, 3)((2,), *_args())
    assert not caught and later.jit_calls == 0 and ck.hash == index.hash


@pytest.fixture
def deciding(monkeypatch, tmp_path):
    """The adapter about to decide as in a fresh process on a GPU with a checked Triton; its self-test
    stubbed (passes, counted) and its verdict kept at tmp_path/triton/tiledmm-index/selftest-x.json."""
    import triton
    path = tmp_path / "triton" / "tiledmm-index" / "selftest-x.json"
    tested = []
    monkeypatch.setattr(_adapter, "_direct", None)
    monkeypatch.setattr(_adapter, "_why_not", "")
    monkeypatch.setattr(_adapter, "_cache_ready", True)
    monkeypatch.setattr(_adapter._backend, "emulating", lambda: False)
    monkeypatch.setattr(_adapter, "_capturing", lambda: False)
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", (triton.__version__,))
    monkeypatch.setattr(_adapter, "_verdict_path", lambda: path)
    monkeypatch.setattr(_adapter, "_self_test", lambda: tested.append(1) or "")
    yield path, tested
    monkeypatch.setattr(_adapter, "_direct", None)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_damaged_kept_self_test_is_a_miss_the_test_runs_and_replaces_it(deciding, monkeypatch, fault):
    path, tested = deciding
    damage(path, fault, b"passed", b'{"passed": true}')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _adapter.triton_direct() is True
    one_warning_naming(caught, path)
    assert len(tested) == 1 and path.read_text() == "passed"
    monkeypatch.setattr(_adapter, "_direct", None)         # the process after: the kept pass, no test
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _adapter.triton_direct() is True
    assert not caught and len(tested) == 1


# -- a fresh process ---------------------------------------------------------------------------------------

_FRESH_CHILD = r"""
import json, sys, warnings
from pathlib import Path
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, tiledmm
    from tiledmm.kernels.block import shipped
    shipped.TABLES = Path(sys.argv[1])
    ok = []
    for m, k, n in ((45, 21, 70), (45, 21, 70), (300, 40, 9)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        ok.append(bool(torch.allclose(tiledmm.matmul(a, b), a @ b, atol=1e-4)))
        if len(ok) == 1:
            first = [str(w.message) for w in caught]
print(json.dumps({"ok": ok, "first": first, "all": [str(w.message) for w in caught]}))
"""


def test_a_fresh_process_with_a_damaged_store_and_table_calls_right_with_one_warning_each(tmp_path, monkeypatch):
    """The files damaged before tiledmm is imported: nothing kept in a process hides the fault."""
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "cache"))
    store_file = tuning.store_path()
    env = dict(os.environ, TILEDMM_QUIET="1",
               PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    table_file = _table_path(tmp_path / "tables")
    for path in (store_file, table_file):
        damage(path, "garbage", b"", b"")
    r = subprocess.run([sys.executable, "-c", _FRESH_CHILD, str(tmp_path / "tables")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] == [True, True, True]
    assert len(out["first"]) == 2 and len(out["all"]) == 2, out
    assert any(str(store_file) in w for w in out["first"]) and any(str(table_file) in w for w in out["first"])


# -- an unusable cache folder: tiledmm's own and Triton's ---------------------------------------------------

def test_an_unwritable_tuning_store_keeps_choices_in_the_process_with_one_warning(fresh, monkeypatch):
    f = fresh / "file"
    f.write_text("x")
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(f / "sub"))      # a folder under a file: cannot be made
    tuning.forget()
    tuning.set_mode("on")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tuning.choose("k|a", {"a": lambda: 3.0, "b": lambda: 1.0}, "a") == "b"
        assert tuning.choose("k|b", {"a": lambda: 1.0, "b": lambda: 3.0}, "b") == "a"
        assert _right(*_operands(45, 21, 70))
    one_warning_naming(caught, tuning.store_path())
    assert tuning.lookup("k|a") == "b" and tuning.lookup("k|b") == "a"


def test_a_read_only_tuning_store_folder_warns_once(fresh, monkeypatch):
    def refuse(path, text, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    monkeypatch.setattr(tuning, "write_atomic", refuse)
    tuning.set_mode("on")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in ("k|a", "k|b"):
            assert tuning.choose(key, {"a": lambda: 3.0, "b": lambda: 1.0}, "a") == "b"
    one_warning_naming(caught, tuning.store_path())
    assert "cannot be written" in str(caught[0].message) and "TILEDMM_CACHE_DIR" in str(caught[0].message)


def test_folder_fault_finds_a_file_in_the_way_a_read_only_and_a_full_disk(tmp_path, monkeypatch):
    assert _cachefile.folder_fault(tmp_path / "new" / "folder") is None and (tmp_path / "new" / "folder").is_dir()
    assert list((tmp_path / "new" / "folder").iterdir()) == []          # the probe is removed
    (tmp_path / "file").write_text("x")
    assert "file" in _cachefile.folder_fault(tmp_path / "file")
    assert "file" in _cachefile.folder_fault(tmp_path / "file" / "sub")
    import tempfile
    real = tempfile.mkstemp

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert "Read-only" in _cachefile.folder_fault(tmp_path / "ro")
    monkeypatch.setattr(tempfile, "mkstemp", real)
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    why = _cachefile.folder_fault(tmp_path / "full")
    monkeypatch.setattr(os, "write", real_write)
    assert "No space" in why and list((tmp_path / "full").iterdir()) == []


def test_triton_cache_ready_does_nothing_in_emulation(monkeypatch):
    if not _backend.emulating():
        pytest.skip("emulation only")
    monkeypatch.setattr(_adapter, "_cache_ready", False)
    monkeypatch.setattr(_adapter, "_settle_triton_cache", lambda: pytest.fail("looked at Triton's cache"))
    _adapter.triton_cache_ready()
    assert _adapter._cache_ready


def test_no_writable_folder_at_all_is_one_tiledmm_error_naming_the_setting(monkeypatch, tmp_path):
    import tempfile
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "file" / "sub"))
    monkeypatch.setattr(_cachefile, "folder_fault", lambda folder: "Read-only file system")
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **k: str(tmp_path / "private"))
    with pytest.raises(TiledmmError) as e:
        _adapter._settle_triton_cache()
    assert "TRITON_CACHE_DIR" in str(e.value) and str(tmp_path / "file" / "sub") in str(e.value)
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "file" / "sub")   # nothing changed


_TRITON_CHILD = r"""
import json, os, sys, warnings
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton import knobs


@triton.jit
def fill(x_ptr, n, BLOCK: tl.constexpr):        # compiled, not interpreted: defined before tiledmm is imported
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs, mask=offs < n)


def compile_fill():
    src = ASTSource(fill, {"x_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}, {(2,): 64})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


try:
    compile_fill()
    before = "compiled"
except OSError as e:          # Triton's own error without tiledmm's look (what a user met)
    before = type(e).__name__
except RuntimeError as e:
    before = "no ptxas" if "ptxas" in str(e).lower() else repr(e)
from tiledmm import _adapter
_adapter._backend.emulating = lambda: False     # triton_cache_ready looks on a GPU only
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _adapter.triton_cache_ready()
    _adapter.triton_cache_ready()
    ck = compile_fill()
private = knobs.cache.dir
print(json.dumps({"before": before, "warnings": [str(w.message) for w in caught if "tiledmm" in str(w.message)],
                  "private": private, "env": os.environ["TRITON_CACHE_DIR"], "kept": sorted(os.listdir(private)),
                  "name": ck.name}))
"""


def test_an_unwritable_triton_cache_compiles_into_a_private_folder_with_one_warning(tmp_path):
    """TRITON_CACHE_DIR under a file: Triton's own compile fails; after ``triton_cache_ready`` a real
    kernel compiles (sm_90, on the CPU) into a private folder, one warning naming TRITON_CACHE_DIR, and
    the folder is removed at exit."""
    (tmp_path / "file").write_text("x")
    bad = str(tmp_path / "file" / "triton")
    script = tmp_path / "child.py"              # (a file: Triton's JIT reads the kernel's source)
    script.write_text(_TRITON_CHILD)
    env = dict(os.environ, TRITON_CACHE_DIR=bad, TILEDMM_QUIET="1",
               PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    env.pop("TRITON_INTERPRET", None)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if out["before"] == "no ptxas":
        pytest.skip("this Triton cannot compile for sm_90 here (no ptxas)")
    assert out["before"] == "NotADirectoryError"
    assert len(out["warnings"]) == 1 and "TRITON_CACHE_DIR" in out["warnings"][0] and bad in out["warnings"][0]
    assert out["private"] != bad and out["env"] == out["private"] and out["kept"] and out["name"] == "fill"
    assert not os.path.exists(out["private"])                        # removed at exit


# -- on the GPU: the same faults through tiledmm.matmul in fresh processes -----------------------------------

_GPU_CALLS = r"""
import json, sys, warnings
from pathlib import Path
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, tiledmm
    from tiledmm.kernels.block import shipped
    if sys.argv[1] != "-":
        shipped.TABLES = Path(sys.argv[1])
    # fp32 and bf16 through the Triton kernels; "all": a large bf16 product through the Gluon kernel too
    calls = [(256, 128, 192, torch.float32), (200, 64, 96, torch.bfloat16), (256, 128, 192, torch.float32)]
    if sys.argv[2] == "all":
        calls.insert(2, (1024, 4096, 1024, torch.bfloat16))
    ok = []
    for m, k, n, dtype in calls:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        got = tiledmm.matmul(a, b, out=out)
        ref = a.double() @ b.double()
        ok.append(bool(torch.isfinite(got).all()) and float((got.double() - ref).norm() / ref.norm()) < 1e-2)
print(json.dumps({"ok": ok, "cache": [str(w.message) for w in caught if w.category.__name__ == "CacheWarning"],
                  "others": sorted({f"{w.category.__name__}: {w.message}" for w in caught
                                    if w.category.__name__ != "CacheWarning"})}))
"""


def _gpu_child(env_over: dict, tables: str = "-", calls: str = "all") -> dict:
    """``_GPU_CALLS`` in a fresh process with ``env_over``'s cache folders: whether each call was right,
    the cache warnings, and the other warnings."""
    env = dict(os.environ, TILEDMM_QUIET="1", **env_over,
               PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    env.pop("TILEDMM_KERNEL_INDEX", None)
    r = subprocess.run([sys.executable, "-c", _GPU_CALLS, tables, calls], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """Triton's cache (with tiledmm's index and the kept self-test) as a first process on this GPU leaves
    it, a copy of this GPU's shipped table (where there is one), and the warnings that process gave that
    are not the caches' (the baseline: the fault processes must give no others)."""
    root = tmp_path_factory.mktemp("warm")
    out = _gpu_child({"TRITON_CACHE_DIR": str(root / "triton"), "TILEDMM_CACHE_DIR": str(root / "tiledmm")})
    assert all(out["ok"]) and not out["cache"], out
    (root / "tables").mkdir()
    table = shipped.TABLES / f"{shipped.slug(torch.cuda.get_device_name())}.json"
    if table.exists():
        shutil.copy(table, root / "tables" / table.name)
    return root, out["others"]


@pytest.mark.gpu
@pytest.mark.parametrize("fault", FAULTS)
def test_gpu_damaged_index_store_and_table_never_stop_a_call(warm, tmp_path, monkeypatch, fault):
    """Every file under tiledmm-index/ (kernel entries, the kept self-test), the tuning store and the
    table damaged: a fresh process's calls are right, with at most one warning per damaged file, each
    naming one; the index is rewritten, so the process after warns only about the files no call writes
    (the store with tuning off, the table)."""
    warm_root, baseline = warm
    root = tmp_path / "caches"
    shutil.copytree(warm_root, root)
    index = root / "triton" / "tiledmm-index"
    entries = sorted(index.glob("*.json"))
    assert len(entries) >= 3, "the first process left no index entries"      # the probe's and the calls'
    env = {"TRITON_CACHE_DIR": str(root / "triton"), "TILEDMM_CACHE_DIR": str(root / "tiledmm")}
    monkeypatch.setenv("TILEDMM_CACHE_DIR", env["TILEDMM_CACHE_DIR"])
    store = tuning.store_path()                                     # (this GPU's and versions')
    tables = root / "tables"
    table = _table_path(tables) if list(tables.iterdir()) else None
    damaged = [store] + ([table] if table else [])
    if fault == "file_for_folder":                                  # the index's folder: one file
        shutil.rmtree(index)
        index.write_bytes(b"not a folder")
        damaged.append(index)
        for path in damaged[:-1]:
            damage(path, "garbage", b"", b"")
    else:
        for path in entries:
            good = path.read_bytes()
            damage(path, fault, good, b'{"passed": true}' if good == b"passed" else b'{"hash": 5, "name": []}')
        damaged += entries
        damage(store, fault, b'{"k": "v"}', b'{"k": ["v"]}')
        if table:
            damage(table, fault, table.read_bytes(), b'{"format": 1, "gpu": 5, "entries": {}}')
    out = _gpu_child(env, str(tables))
    assert all(out["ok"]), out
    assert out["others"] == baseline, out                           # nothing else warned
    assert len(out["cache"]) == len(set(out["cache"])) <= len(damaged), out["cache"]
    for w in out["cache"]:
        assert any(str(p) in w for p in damaged), w
    assert any(str(index) in w for w in out["cache"])               # the index's damage was met
    after = _gpu_child(env, str(tables))
    assert all(after["ok"]), after
    assert not [w for w in after["cache"] if str(index) in w], after["cache"]   # the index was rewritten


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["under_a_file", "read_only"])
def test_gpu_an_unwritable_triton_cache_still_calls_right_with_one_warning(warm, tmp_path, where):
    if where == "under_a_file":
        (tmp_path / "file").write_text("x")
        folder = tmp_path / "file" / "triton"
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        if os.access(folder, os.W_OK):
            folder.chmod(0o755)
            pytest.skip("running as root: a read-only folder is still writable")
    try:
        out = _gpu_child({"TRITON_CACHE_DIR": str(folder), "TILEDMM_CACHE_DIR": str(tmp_path / "tiledmm")},
                         calls="small")
    finally:
        if folder.exists():
            folder.chmod(0o755)
    assert all(out["ok"]), out
    assert len(out["cache"]) == 1 and "TRITON_CACHE_DIR" in out["cache"][0] and str(folder) in out["cache"][0], out
    assert set(out["others"]) <= set(warm[1]), out
