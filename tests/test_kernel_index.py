"""tiledmm's kernel index (``_adapter.index_key / remember_compiled / load_compiled``): a
specialisation compiled in one process is found in the next without Triton's JIT.

On the CPU these run with stand-ins: a JIT-function-like object, a temporary Triton cache holding a
fake compiled kernel's group, Triton's real ``CompiledKernel`` constructor with its device handles
stubbed, and the index switched on as if on a GPU with a checked Triton."""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
import triton
from triton.compiler import compiler
from triton.runtime.cache import get_cache_manager

from tiledmm import _adapter
from tiledmm.kernels.block import fastlaunch

HASH = "0123456789abcdef" * 4
NAME = "toy_kernel"
TARGET = ("cuda", 90, 32)


def _toy(x_ptr, n, BLOCK):   # the stand-in kernel's Python signature
    pass


class FakeJit:
    """What FastKernel and the index read of a JITFunction; ``fn[grid](...)`` is Triton's JIT."""

    def __init__(self, compiled=None):
        self.fn, self.__name__, self.arg_names = _toy, NAME, ["x_ptr", "n", "BLOCK"]
        self.cache_key, self.debug = "source-key-1", False
        self.jit_calls, self.compiled = 0, compiled

    def __getitem__(self, grid):
        def run(*args, num_warps, num_stages):
            self.jit_calls += 1
            if self.compiled is None:
                raise AssertionError("Triton's JIT consulted")
            return self.compiled
        return run


@pytest.fixture
def index(tmp_path, monkeypatch):
    """The index on (as on a GPU with a checked Triton), tiledmm's and Triton's caches in tmp_path,
    a fake compiled kernel in Triton's cache; returns the JIT stand-in's compiled kernel."""
    monkeypatch.setenv("TILEDMM_CACHE_DIR", str(tmp_path / "tiledmm"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.delenv("TILEDMM_KERNEL_INDEX", raising=False)
    monkeypatch.setattr(_adapter._backend, "emulating", lambda: False)
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", (triton.__version__,))
    monkeypatch.setattr(_adapter, "gpu_target", lambda: TARGET)
    monkeypatch.setattr(_adapter, "triton_direct", lambda: True)
    monkeypatch.setattr(compiler.CompiledKernel, "_init_handles",
                        lambda self: setattr(self, "_run", "launcher") or setattr(self, "function", 7))
    cache = get_cache_manager(HASH)
    meta = {"name": NAME, "hash": HASH, "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
            "num_warps": 4, "num_ctas": 1, "shared": 0, "cluster_dims": [1, 1, 1], "launch_pdl": False,
            "launch_cooperative_grid": False, "global_scratch_size": 0, "global_scratch_align": 1,
            "profile_scratch_size": 0, "profile_scratch_align": 1, "tensordesc_meta": None}
    group = {f"{NAME}.json": cache.put(json.dumps(meta), f"{NAME}.json", binary=False),
             f"{NAME}.cubin": cache.put(b"not a real cubin", f"{NAME}.cubin", binary=True)}
    cache.put_group(f"{NAME}.json", group)
    fn = FakeJit()
    src = compiler.ASTSource(fn, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(2,): 64},
                             {(0,): [["tt.divisibility", 16]]})
    return types.SimpleNamespace(hash=HASH, name=NAME, src=src, group=group, cache_dir=tmp_path / "tiledmm",
                                 triton_dir=tmp_path / "triton")


def _args():
    return (torch.zeros(64), 100)


def test_remember_then_load_in_a_new_process_without_the_jit(index, monkeypatch):
    launched = []
    monkeypatch.setattr(_adapter, "run_compiled", lambda ck, *rest: launched.append((ck, rest)))
    monkeypatch.setattr(fastlaunch, "ensure_allocator", lambda: None)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 0)
    monkeypatch.setattr(fastlaunch, "emulating", lambda: False)

    first = FakeJit(compiled=index)                      # process 1: the JIT compiles, the index records
    fk = fastlaunch.FastKernel(first, {"BLOCK": 64}, 4, 3)
    assert fk((2,), *_args()) is index and first.jit_calls == 1
    assert len(list((index.triton_dir / "tiledmm-index").glob("*.json"))) == 1

    second = FakeJit(compiled=None)                      # process 2: fresh objects; the JIT would raise
    fk2 = fastlaunch.FastKernel(second, {"BLOCK": 64}, 4, 3)
    ck = fk2((2,), *_args())
    assert second.jit_calls == 0
    assert isinstance(ck, compiler.CompiledKernel) and ck.hash == HASH and ck.name == NAME
    assert ck.src.fn is second and ck.src.signature == index.src.signature
    assert ck.src.constants == {(2,): 64} and ck.kernel == b"not a real cubin"
    assert [c for c, _ in launched] == [ck]              # launched directly, on its first call
    assert launched[0][1][:4] == (2, 1, 1, 0)


def test_a_changed_fingerprint_or_target_misses(index, monkeypatch):
    fn = FakeJit()
    key = _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",))
    _adapter.remember_compiled(key, index)
    assert _adapter.load_compiled(key, fn) is not None
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",)) == key        # stable
    for change in ({"BLOCK": 128}, 8):                    # other meta, other warps
        meta, warps = (change, 4) if isinstance(change, dict) else ({"BLOCK": 64}, change)
        assert _adapter.load_compiled(_adapter.index_key(fn, meta, warps, 3, ("spec",)), fn) is None
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("other spec",)) != key
    monkeypatch.setattr(_adapter, "gpu_target", lambda: ("cuda", 80, 32))
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",)) != key
    monkeypatch.setattr(_adapter, "gpu_target", lambda: TARGET)
    monkeypatch.setattr(triton, "__version__", "9.9.9")  # another Triton: another fingerprint
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", ("9.9.9",))
    monkeypatch.setattr(_adapter, "_fingerprint", None)
    other = _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",))
    assert other is not None and other != key and _adapter.load_compiled(other, fn) is None
    monkeypatch.setattr(_adapter, "TRITON_CHECKED", ("3.0.0",))                   # an unchecked Triton: off
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",)) is None


def test_notes_are_required_and_a_source_stub_stands_for_the_function(index):
    """An entry's notes (``remember_compiled(**notes)``) gate ``load_compiled(require=...)``; a
    ``SourceStub`` (name and parameter names) builds the kernel without its JIT function; a string
    source key (a file's hash) keys like a JIT function's ``cache_key``."""
    key = _adapter.index_key("file-hash-1", {"BLOCK": 64}, 4, 3, ("spec",))
    assert key is not None and key != _adapter.index_key("file-hash-2", {"BLOCK": 64}, 4, 3, ("spec",))
    stub = _adapter.SourceStub(NAME, ["x_ptr", "n", "BLOCK"])
    _adapter.remember_compiled(key, index)                                 # no notes
    assert _adapter.load_compiled(key, stub, require={"bound": True}) is None
    _adapter.remember_compiled(key, index, bound=False)
    assert _adapter.load_compiled(key, stub, require={"bound": True}) is None
    _adapter.remember_compiled(key, index, bound=True)
    ck = _adapter.load_compiled(key, stub, require={"bound": True})
    assert isinstance(ck, compiler.CompiledKernel) and ck.hash == HASH and ck.name == NAME
    assert type(ck.src) is compiler.ASTSource and ck.src.fn is stub and ck.src.name == NAME
    assert ck.src.signature == index.src.signature and ck.src.constants == {(2,): 64}
    assert stub.launch_metadata is None                  # what CompiledKernel reads for launch hooks


def test_the_gluon_kernels_index_key_needs_no_gluon_import():
    """gluon-ws's lookup (its source key: the file's hash) imports neither its device code nor Gluon."""
    import subprocess
    import sys
    code = ("import sys; from tiledmm.kernels.block import gluon_gemm as G; k = G._source_key(); "
            "G._index_key((('BLOCK_M', 128),) + (0,) * 14 + (132,), {'num_warps': 8, 'num_stages': 4}); "
            "print(k.startswith('gluon_kernel.py:'), 'tiledmm.kernels.block.gluon_kernel' in sys.modules, "
            "'triton.experimental.gluon' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-3:] == ["True", "False", "False"]
    # the key hashes gluon_kernel.py alone: the kernel must call nothing of tiledmm's from another file
    import re
    from tiledmm.kernels.block import gluon_gemm as G
    text = Path(G.__file__).with_name("gluon_kernel.py").read_text()
    assert not re.search(r"^\s*(from\s+\.|from\s+tiledmm|import\s+tiledmm)", text, re.M)


def test_a_corrupt_entry_or_a_lost_cache_group_misses(index):
    fn = FakeJit()
    key = _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",))
    _adapter.remember_compiled(key, index)
    path = index.triton_dir / "tiledmm-index" / f"{key}.json"
    good = path.read_text()
    for bad in ("{not json", "[]", json.dumps({**json.loads(good), "source": ["os", "system"]}),
                json.dumps({**json.loads(good), "hash": "f" * 64})):
        path.write_text(bad)
        assert _adapter.load_compiled(key, fn) is None
    path.write_text(good)
    assert _adapter.load_compiled(key, fn) is not None
    for p in index.group.values():                       # Triton's cache cleared: a miss, not an error
        __import__("os").remove(p)
    assert _adapter.load_compiled(key, fn) is None


def test_an_entry_json_cannot_hold_is_not_remembered(index):
    fn = FakeJit()
    key = _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",))
    odd = types.SimpleNamespace(hash=HASH, name=NAME, src=compiler.ASTSource(
        fn, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {(2,): object()}))
    _adapter.remember_compiled(key, odd)
    assert not (index.triton_dir / "tiledmm-index" / f"{key}.json").exists()


def test_off_in_emulation_and_by_the_switch(index, monkeypatch):
    fn = FakeJit()
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",)) is not None
    monkeypatch.setenv("TILEDMM_KERNEL_INDEX", "off")
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",)) is None
    monkeypatch.delenv("TILEDMM_KERNEL_INDEX")
    monkeypatch.setattr(_adapter._backend, "emulating", lambda: True)
    assert _adapter.index_key(fn, {"BLOCK": 64}, 4, 3, ("spec",)) is None
    assert _adapter.load_compiled(None, fn) is None


def test_emulated_fastkernel_never_consults_the_index():
    """In a child process: Triton's interpreter leaves triton.language patched after this launch, which
    breaks later Gluon compiles in the same process (test_gluon's sm_90 compiles on the CPU)."""
    if not _adapter._backend.emulating():
        pytest.skip("emulation only")
    import subprocess
    import sys
    code = ("import torch, pytest; from tiledmm import _adapter; from tiledmm.kernels.block import fastlaunch\n"
            "def never(*a): raise AssertionError('index consulted or written')\n"
            "_adapter.load_compiled = _adapter.remember_compiled = never\n"
            "from tiledmm._adapter_probe import probe_kernel\n"
            "x = torch.zeros(10, dtype=torch.int32)\n"
            "fastlaunch.FastKernel(probe_kernel, {'BLOCK': 16}, 1, 1)((1,), x, 10, 3)\n"
            "print(torch.equal(x, torch.arange(10, dtype=torch.int32) + 3))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-1] == "True"


_COUNT_JIT = r"""
import json, sys, torch, triton, tiledmm
from triton.runtime import jit
from triton.runtime.cache import triton_key
runs = [0]
real = jit.JITFunction.run
def counted(self, *a, **k):
    runs[0] += 1
    return real(self, *a, **k)
jit.JITFunction.run = counted
"""

_GPU_CHILD = _COUNT_JIT + r"""
from tiledmm import _adapter
from tiledmm._adapter_probe import probe_kernel
from tiledmm.kernels.block.fastlaunch import FastKernel
x = torch.zeros(1000, dtype=torch.int32, device="cuda")
FastKernel(probe_kernel, {"BLOCK": 128}, 4, 2)((8,), x, 1000, 11)
torch.cuda.synchronize()
ok = torch.equal(x, torch.arange(1000, dtype=torch.int32, device="cuda") + 11)
print(json.dumps(dict(ok=ok, jit_runs=runs[0], triton_key=triton_key.cache_info().currsize > 0,
                      direct=_adapter.triton_direct())))
"""


def _twice(tmp_path, child: str) -> list:
    """``child`` run in two fresh processes sharing one empty Triton cache: their last JSON lines. The package's
    store of compiled kernels is off (``TILEDMM_PREBUILT``): the first process compiles, the second finds its
    kernels through the index the first wrote (tests/test_prebuilt_kernels.py tests the store)."""
    import os
    import subprocess
    import sys
    import tiledmm
    src = str(__import__("pathlib").Path(tiledmm.__file__).parents[1])
    env = dict(os.environ, TILEDMM_CACHE_DIR=str(tmp_path / "tiledmm"), TILEDMM_QUIET="1",
               TRITON_CACHE_DIR=str(tmp_path / "triton"), TILEDMM_PREBUILT="off",
               PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    env.pop("TILEDMM_KERNEL_INDEX", None)
    rows = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return rows


@pytest.mark.gpu
def test_a_second_process_launches_without_the_jit(tmp_path):
    if triton.__version__ not in _adapter.TRITON_CHECKED:
        pytest.skip(f"direct launches (and the index) are off on Triton {triton.__version__}")
    first, second = _twice(tmp_path, _GPU_CHILD)
    assert first["ok"] and first["direct"] and first["jit_runs"] >= 1
    assert second == dict(ok=True, jit_runs=0, triton_key=False, direct=True)


_GLUON_CHILD = _COUNT_JIT + r"""
from tiledmm.kernels.block import gluon_gemm
ok = True
for M in (512, 300):                 # the second call: the bound launch, another M
    a = torch.randn(M, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 384, device="cuda", dtype=torch.bfloat16)
    c = torch.full((M, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
    gluon_gemm.launch(a, b, c, precision="none", config=gluon_gemm.heuristic(M, 384, 256, "16bit"))
    ref = a.double() @ b.double()
    ok = ok and bool(((c.double() - ref).norm() / ref.norm()) < 1e-2)
print(json.dumps(dict(ok=ok, jit_runs=runs[0], triton_key=triton_key.cache_info().currsize > 0,
                      gluon="triton.experimental.gluon" in sys.modules)))
"""


@pytest.mark.gpu
def test_the_gluon_kernel_in_a_second_process_launches_without_the_jit(tmp_path):
    """gluon-ws's first call in a new process finds its kernel through the index too (Gluon's JIT
    would compute triton_key: ~0.45 s), and launches it bound, right, without importing Gluon."""
    from tiledmm.kernels.block import gluon_gemm
    if triton.__version__ not in _adapter.TRITON_CHECKED or not gluon_gemm._is_hopper():
        pytest.skip("the index and gluon-ws: Triton 3.6 on a Hopper GPU")
    first, second = _twice(tmp_path, _GLUON_CHILD)
    assert first["ok"] and first["jit_runs"] >= 1 and first["gluon"]
    assert second == dict(ok=True, jit_runs=0, triton_key=False, gluon=False)   # not even imported
