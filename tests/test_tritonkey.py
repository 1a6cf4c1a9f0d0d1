"""Triton's cache key remembered across processes (kernels/block/tritonkey.py)."""
import importlib

import pytest

triton = pytest.importorskip("triton")


@pytest.fixture
def fresh(monkeypatch):
    from triton.runtime import cache
    from tiledmm.kernels.block import tritonkey
    monkeypatch.setattr(cache, "triton_key", lambda: "%s-computed" % triton.__version__)
    return cache, tritonkey


def test_the_key_is_computed_once_stored_and_then_read_back(fresh, tmp_path):
    cache, tritonkey = fresh
    calls = []
    cache.triton_key = lambda: calls.append(1) or f"{triton.__version__}-computed"
    assert tritonkey.install(tmp_path) == "computing"
    assert cache.triton_key() == cache.triton_key() == f"{triton.__version__}-computed" and len(calls) == 1
    assert tritonkey.install(tmp_path) == "kept"
    cache.triton_key = lambda: calls.append(1) or "not used"         # a new process: Triton's own function
    assert tritonkey.install(tmp_path) == "stored"
    assert cache.triton_key() == f"{triton.__version__}-computed" and len(calls) == 1


def test_a_changed_triton_install_computes_again(fresh, tmp_path, monkeypatch):
    cache, tritonkey = fresh
    assert tritonkey.install(tmp_path) == "computing"
    cache.triton_key()
    monkeypatch.setattr(tritonkey, "stamp", lambda root: "another install")
    cache.triton_key = lambda: f"{triton.__version__}-new"
    assert tritonkey.install(tmp_path) == "computing" and cache.triton_key() == f"{triton.__version__}-new"
    (tmp_path / "triton-key.json").write_text("not json")
    cache.triton_key = lambda: f"{triton.__version__}-again"
    assert tritonkey.install(tmp_path) == "computing" and cache.triton_key() == f"{triton.__version__}-again"


def test_the_stamp_follows_the_files_triton_hashes(tmp_path):
    from tiledmm.kernels.block import tritonkey
    import os
    root = os.path.dirname(os.path.abspath(triton.__file__))
    first = tritonkey.stamp(root)
    assert first == tritonkey.stamp(root)
    fake = tmp_path / "triton"
    for sub in ("runtime", "_C", "compiler", "backends", "language"):
        (fake / sub).mkdir(parents=True)
    import sysconfig
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    (fake / "runtime" / "cache.py").write_text("x")
    (fake / "_C" / f"libtriton.{ext}").write_bytes(b"lib")
    (fake / "compiler" / "a.py").write_text("1")
    s1 = tritonkey.stamp(str(fake))
    (fake / "compiler" / "a.py").write_text("12")
    s2 = tritonkey.stamp(str(fake))
    (fake / "language" / "b.py").write_text("1")
    assert len({s1, s2, tritonkey.stamp(str(fake))}) == 3
    importlib.import_module("tiledmm.kernels.block")       # installed on import of the family
    from triton.runtime import cache
    assert cache.triton_key.tiledmm and cache.triton_key().startswith(triton.__version__)
