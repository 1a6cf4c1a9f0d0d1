"""gluon_gemm's launch path on the CPU (issue 24): the lazy import of the device code, and the
bound launch -- the first call of a specialisation through Gluon's launcher, later calls through its
C launch with tensor maps kept per (pointer, shape, strides) -- with Gluon's launcher and the
adapter's ``tensordesc_launch`` replaced by recorders: what is keyed on what, the arguments the C
launch gets, threads, bounded caches, refusals. On the GPU: tests/test_gluon.py."""
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch

from tiledmm.kernels.block import gluon_gemm as G

BF16 = torch.bfloat16


def _mats(M, N, K, dtype=BF16, a_t=False, b_t=False):
    a = torch.randn((K, M) if a_t else (M, K)).to(dtype)
    b = torch.randn((N, K) if b_t else (K, N)).to(dtype)
    return (a.t() if a_t else a), (b.t() if b_t else b), torch.empty(M, N, dtype=dtype)


def test_importing_the_variants_imports_no_gluon():
    """The dispatcher's side (variants, gluon_gemm) without triton.experimental.gluon (~0.12 s)."""
    code = ("import sys; import tiledmm.kernels.block.variants as V; from tiledmm.kernels.block import gluon_gemm as G; "
            "G.heuristic(512, 4096, 4096, '16bit'); print(sorted(m for m in sys.modules if 'gluon' in m))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(["src", os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout
    mods = eval(out.strip().splitlines()[-1])
    assert "tiledmm.kernels.block.gluon_gemm" in mods
    assert not [m for m in mods if m.startswith("triton.experimental")] and "tiledmm.kernels.block.gluon_kernel" not in mods


class _Fake:
    """gluon_gemm.launch on CPU tensors: Gluon's own launch (``_public``) and the adapter's
    ``tensordesc_launch`` replaced by recorders."""

    def __init__(self, monkeypatch, direct=True, decided=True, params=None):
        self.public, self.expanded, self.c = [], [], []
        self.lock = threading.Lock()
        kmod = G._kernel()

        class CK:
            pass

        def public(a, b, c, M, N, K, config, *rest):
            with self.lock:
                self.public.append((M, N, K, dict(config)) + rest)
            time.sleep(0.01)            # a compile: long enough for other threads to queue up
            return CK(), ["da", "db", "dc"]

        def expand(i, ptr, shape, strides):
            with self.lock:
                self.expanded.append((i, ptr, shape, strides))
            return [("map", i, ptr), *shape, *strides]

        def raw(*args):
            with self.lock:
                self.c.append(args)

        metas = [{"swizzle": 128, "desc": i} for i in range(3)]
        monkeypatch.setattr(G, "_public", public)
        monkeypatch.setattr(G, "_from_index", lambda *a, **k: None)   # (tests/test_kernel_index.py: the index)
        td = G._adapter.TensorDescLaunch(raw, False, False, "fn", "packed", expand, metas,
                                         params or G.PARAMS)
        monkeypatch.setattr(G._adapter, "tensordesc_launch", lambda ck, descs: td if direct else None)
        monkeypatch.setattr(G._adapter, "decided", lambda: decided)
        monkeypatch.setattr(G, "_bound", {})
        monkeypatch.setattr(G, "_descs", {})
        monkeypatch.setattr(G, "_warned", False)
        monkeypatch.setattr(G, "_num_sms", lambda dev=None: 132)
        monkeypatch.setattr(G, "current_stream", lambda: 7)
        monkeypatch.setattr(G, "_SCRATCH", {k: (torch.zeros(1), torch.zeros(1024, dtype=torch.int32))
                                            for k in (-1, (-1, 7), (-1, 9))})   # per device; per stream (7, 9)
        monkeypatch.setattr(G, "_WS", {})
        self.kept = []          # the split workspaces kept (fastlaunch.keep's, on the CPU here)

        def keep(nbytes, dev):
            self.kept.append(torch.empty(nbytes, dtype=torch.int8))
            return self.kept[-1]
        monkeypatch.setattr(G, "keep", keep)


CFG = G._c(64, 128, 64, 4, 6)


def _env(x, y, z, alpha=1.0, beta=0.0):
    """The class launch's ``env`` of a call on (x, y, z) (fastlaunch's own)."""
    from tiledmm.kernels.block import fastlaunch
    return fastlaunch._env(x, y, z, alpha, beta)


def test_repeat_calls_take_the_c_launch_with_kept_descriptors(monkeypatch):
    f = _Fake(monkeypatch)
    a, b, c = _mats(300, 520, 264)
    G.launch(a, b, c, precision="none", config=CFG)
    assert len(f.public) == 1 and not f.c                 # the first call: Gluon's launch, then bound
    G.launch(a, b, c, precision="none", config=CFG, alpha=1, beta=0)
    assert len(f.public) == 1 and len(f.c) == 1 and len(f.expanded) == 3
    args = f.c[0]
    tiles = -(-300 // 64) * -(-520 // 128)
    assert args[:13] == (min(132, tiles), 1, 1, 7, "fn", False, False, None, None, "packed", None, None, None)
    da, db, dc = args[13:18], args[18:23], args[23:28]
    assert da == (("map", 0, a.data_ptr()), 300, 264, 264, 1) and db == (("map", 1, b.data_ptr()), 264, 520, 520, 1)
    assert dc == (("map", 2, c.data_ptr()), 300, 520, 520, 1)
    ws, cnt = G._SCRATCH[-1]
    assert args[28:45] == (c.data_ptr(), 520, c.data_ptr(), 0, ws.data_ptr(), cnt.data_ptr(), 300, 520, 264,
                           1, 0, 0, 0,                    # one product: no batch steps
                           tiles, 1, 1.0, 0.0)            # tail_at = every tile, tail_split 1: nothing split
    assert args[45:] == (6, False, False, 8, 132, False, True, 1, 1, 0, 1, G.LOADER_REGS, 0, "none", 4)   # PARTS 1
    G.launch(a, b, c, precision="none", config=CFG)
    assert len(f.expanded) == 3 and f.c[1] == f.c[0]      # same tensors: no descriptor filled again
    a2 = a.clone()
    G.launch(a2, b, c, precision="none", config=CFG)      # a new pointer: only A's descriptor is new
    assert f.expanded[3:] == [(0, a2.data_ptr(), (300, 264), (264, 1))]
    a3, _, c3 = _mats(77, 520, 264)                       # another M: the same compiled kernel
    G.launch(a3, b, c3, precision="none", config=CFG)
    assert len(f.public) == 1 and f.c[-1][0] == -(-77 // 64) * -(-520 // 128) and f.c[-1][34:37] == (77, 520, 264)


def test_the_class_launch_takes_the_bound_specialisation_for_any_size_of_the_class(monkeypatch):
    """The short path's class launch (gluon_gemm.class_launch, fastlaunch.bind's protocol): after one
    launch, a call of another size with the same layout goes straight to the C launch on the stream it
    is given (no Gluon launcher, no new specialisation); another layout, a C row stride Triton
    specialises otherwise, a batch or different alpha/beta flags launch nothing (False)."""
    f = _Fake(monkeypatch)
    a, b, c = _mats(300, 520, 264)
    G.launch(a, b, c, precision="none", config=CFG)
    cls = G.class_launch(a, b, c, 1.0, 0.0, precision="none", config=CFG)
    assert isinstance(cls, G._ClassLaunch) and len(f.public) == 1 and not f.c

    a2, _, c2 = _mats(77, 520, 264)
    assert cls(99, _env(a2, b, c2)) is True
    args = f.c[-1]
    assert args[0] == -(-77 // 64) * -(-520 // 128) and args[3] == 99 and args[34:37] == (77, 520, 264)
    assert args[13:16] == (("map", 0, a2.data_ptr()), 77, 264) and args[28] == c2.data_ptr()
    assert len(f.public) == 1 and len(G._bound) == 1
    at, _, _ = _mats(77, 520, 264, a_t=True)
    wide = torch.empty(77, 528, dtype=BF16)[:, :520]      # row stride 528 (a multiple of 16) where 520 is not
    assert cls(99, _env(at, b, c2)) is False and cls(99, _env(a2, b, wide)) is False
    assert cls(99, _env(a2, b, c2, alpha=2.0)) is False and cls(99, _env(a2, b, c2, beta=1.0)) is False
    assert cls(99, _env(a2, b, c2)[:-1] + (2,)) is False
    assert len(f.c) == 1
    # not bound (Gluon's launcher for good): no class launch
    G._bound[next(iter(G._bound))] = G._PUBLIC
    assert G.class_launch(a, b, c, 1.0, 0.0, precision="none", config=CFG) is None


def test_a_class_launch_without_a_config_takes_the_models_config_for_each_size(monkeypatch):
    """The dispatcher's untimed plans bind no config (dispatch._resolve, ``by_shape``): the class launch then
    runs each call with the model's config for that call's own size. 256x8192x8192 and 256x4096x4096 share a
    short-path class but not a config (128x128 and 64x128): the second size's first call returns False (its
    config is not bound yet), the variant's launch -- picking the same -- binds it, and from then on each
    size launches its own specialisation through the class launch."""
    f = _Fake(monkeypatch)

    big, small = (256, 8192, 8192), (256, 4096, 4096)
    tiles = {s: (G.heuristic(*s, "16bit")["BLOCK_M"], G.heuristic(*s, "16bit")["BLOCK_N"]) for s in (big, small)}
    assert tiles[big] == (128, 128) and tiles[small] == (64, 128)
    mats = {s: _lazy(*s) for s in (big, small)}
    a, b, c = mats[big]
    G.launch(a, b, c, precision="none")
    cls = G.class_launch(a, b, c, 1.0, 0.0, precision="none")
    assert isinstance(cls, G._ClassLaunch) and len(f.public) == 1
    assert cls(5, _env(a, b, c)) is True and f.c[-1][0] == 2 * 64    # 128x128 tiles of 256x8192
    a2, b2, c2 = mats[small]
    assert cls(5, _env(a2, b2, c2)) is False and len(f.c) == 1      # 64x128 is not bound yet: nothing launched
    G.launch(a2, b2, c2, precision="none")                        # the variant's launch binds it
    assert len(f.public) == 2 and f.public[-1][3]["BLOCK_M"] == 64
    assert cls(5, _env(a2, b2, c2)) is True and f.c[-1][0] == 4 * 32   # its own tiles: 64x128 of 256x4096
    assert cls(5, _env(a, b, c)) is True and f.c[-1][0] == 2 * 64
    # with a config (a stored or timed choice) the class keeps it for every size (its plain build here: a TAIL
    # config's split build would be bound by the first call whose last wave splits, as below)
    fixed = G.class_launch(a, b, c, 1.0, 0.0, precision="none", config=dict(G.heuristic(*big, "16bit"), TAIL=0))
    assert fixed.by_shape is None and fixed(5, _env(a2, b2, c2)) is True and f.c[-1][0] == 2 * 32


def test_a_class_launch_repeats_a_calls_arguments_and_a_split_launchs_on_its_stream(monkeypatch):
    """The same call values again: the kept arguments (no descriptor looked up, the same C-launch arguments
    on the call's stream); a TAIL launch that splits its last wave names its stream's counters and kept
    workspace, so its arguments are repeated on that stream only."""
    f = _Fake(monkeypatch)

    a, b, c = _lazy(300, 520, 264)
    G.launch(a, b, c, precision="none", config=CFG)
    cls = G.class_launch(a, b, c, 1.0, 0.0, precision="none", config=CFG)
    assert cls(5, _env(a, b, c)) is True and len(cls.ready) == 1
    calls = []
    monkeypatch.setattr(G._Bound, "desc", lambda *x: calls.append(x))    # a lookup now would fail the test
    assert cls(6, _env(a, b, c)) is True and not calls
    assert f.c[-1][3] == 6 and f.c[-1][4:] == f.c[-2][4:] and f.c[-1][:3] == f.c[-2][:3]
    monkeypatch.undo()

    f = _Fake(monkeypatch)
    tail = G._c(128, 256, 64, 8, 4, group=16, epi=2, tail=1)
    a, b, c = _lazy(600, 4096, 4096)        # 80 tiles of 128x256 on 132 SMs: no split; 1100 rows: 144, split
    a2, b2, c2 = _lazy(1100, 4096, 4096)
    for x, y, z in ((a, b, c), (a2, b2, c2)):
        G.launch(x, y, z, precision="none", config=tail)
    cls = G.class_launch(a2, b2, c2, 1.0, 0.0, precision="none", config=tail)
    assert cls(7, _env(a2, b2, c2)) is True and cls(7, _env(a, b, c)) is True
    split = f.c[-2]
    ws7, cnt7 = G._WS[(-1, 7)], G._SCRATCH[(-1, 7)][1]
    tail_at, tail_split = G.tail_plan(9 * 16, 64, 132)
    assert split[3] == 7 and split[32:34] == (ws7.data_ptr(), cnt7.data_ptr()) and split[42] == tail_split > 1
    assert ws7.numel() >= (144 - tail_at) * tail_split * 128 * 256
    assert f.c[-1][32] == G._SCRATCH[-1][0].data_ptr()      # the unsplit launch: the stand-in, never read
    desc = G._Bound.desc
    monkeypatch.setattr(G._Bound, "desc", lambda *x: calls.append(x))
    for _ in range(2):                      # again on stream 7: both from the kept arguments
        assert cls(7, _env(a2, b2, c2)) is True and cls(7, _env(a, b, c)) is True
    assert not calls and f.c[-2] == split and len(f.kept) == 1
    monkeypatch.setattr(G._Bound, "desc", desc)
    assert cls(9, _env(a2, b2, c2)) is True and cls(9, _env(a, b, c)) is True   # stream 9: its own for the split
    assert f.c[-2][3] == 9 and f.c[-2][32:34] == (G._WS[(-1, 9)].data_ptr(), G._SCRATCH[(-1, 9)][1].data_ptr())
    assert f.c[-2][32] != split[32] and f.c[-1][4:] == f.c[-3][4:]     # the unsplit one: the same arguments


def _lazy(M, N, K):
    """(a, b, c) of these sizes in bf16 without filling them (the fake launches read only shapes and pointers)."""
    return torch.empty(M, K, dtype=BF16), torch.empty(K, N, dtype=BF16), torch.empty(M, N, dtype=BF16)


def test_fastlaunch_bind_takes_a_variants_own_class_launch():
    from tiledmm.kernels.block import fastlaunch
    ran, made = [], object()

    def fn(a, b, c, alpha, beta):
        ran.append((a, b, c, alpha, beta))
    fn.class_launch = lambda a, b, c, alpha, beta: made
    assert fastlaunch.bind(fn, 1, 2, 3, 1.0, 0.0) == (made, None) and ran == [(1, 2, 3, 1.0, 0.0)]
    fn.class_launch = lambda *x: None
    assert fastlaunch.bind(fn, 1, 2, 3, 1.0, 0.0) == (None, None) and len(ran) == 2


def test_transposed_operands_are_described_by_their_transposes(monkeypatch):
    f = _Fake(monkeypatch)
    a, b, c = _mats(300, 520, 264, a_t=True, b_t=True)
    for _ in range(2):
        G.launch(a, b, c, precision="none", config=CFG)
    args = f.c[0]
    assert args[13:18] == (("map", 0, a.data_ptr()), 264, 300, 300, 1)       # A^T: (K, M), row stride M
    assert args[18:23] == (("map", 1, b.data_ptr()), 520, 264, 264, 1)       # B^T: (N, K)
    assert args[45:48] == (6, True, True)


def test_what_triton_compiles_separately_is_bound_separately(monkeypatch):
    f = _Fake(monkeypatch)
    a, b, c = _mats(64, 128, 64)
    bias32 = torch.zeros(128)
    wide = torch.empty(64, 136, dtype=BF16)[:, :128]      # C's row stride 136: not a multiple of 16
    calls = [dict(), dict(alpha=2.0), dict(beta=1.0), dict(bias=bias32, bias_mode=1),
             dict(bias=bias32.to(BF16), bias_mode=1), dict(bias=torch.zeros(64), bias_mode=2), dict(act="gelu"),
             dict(config=G._c(64, 64, 64, 4, 8)), dict(c=wide), dict(a=a.t().contiguous().t())]
    for kw in calls:
        kw = {"a": a, "b": b, "c": c, "config": CFG, **kw}
        G.launch(kw.pop("a"), kw.pop("b"), kw.pop("c"), precision="none", **kw)
    assert len(f.public) == len(calls) == len(G._bound) and not f.c
    for kw in calls:                                      # each again (new values where not specialised)
        kw = {"a": a, "b": b, "c": c, "config": CFG, **kw}
        kw = {k: (v * 3 if k in ("alpha", "beta") else v) for k, v in kw.items()}
        G.launch(kw.pop("a"), kw.pop("b"), kw.pop("c"), precision="none", **kw)
    assert len(f.public) == len(calls) and len(f.c) == len(calls)
    assert f.c[1][43] == 6.0 and f.c[2][44] == 3.0           # alpha, beta: the call's values


def test_split_k_takes_its_streams_kept_workspace_and_counters(monkeypatch):
    f = _Fake(monkeypatch)
    cfg = G._c(64, 128, 64, 4, 6, split=4)
    a, b, c = _mats(300, 520, 264)
    for _ in range(3):      # (the first through Gluon's own launch)
        G.launch(a, b, c, precision="none", config=cfg)
    tiles = -(-300 // 64) * -(-520 // 128)
    args = f.c[0]
    assert args[0] == min(132, tiles * 4) and args[33] == G._SCRATCH[(-1, 7)][1].data_ptr()   # the stream's counters
    ws7 = G._WS[(-1, 7)]
    assert args[32] == ws7.data_ptr() != G._SCRATCH[-1][0].data_ptr() and args[53] == 4
    assert ws7.numel() == tiles * 4 * 64 * 128 and len(f.kept) == 1 and f.c[1][32] == args[32]   # kept, not made again
    monkeypatch.setattr(G, "current_stream", lambda: 9)
    G.launch(a, b, c, precision="none", config=cfg)
    assert f.c[-1][33] == G._SCRATCH[(-1, 9)][1].data_ptr() != args[33]     # another stream: other counters
    assert f.c[-1][32] == G._WS[(-1, 9)].data_ptr() != args[32] and len(f.kept) == 2   # and workspace
    monkeypatch.setattr(G, "current_stream", lambda: 7)
    a2, b2, c2 = _mats(600, 520, 264)       # twice the tiles: the stream's workspace doubles; the old one stays kept
    G.launch(a2, b2, c2, precision="none", config=cfg)
    assert G._WS[(-1, 7)].numel() == 2 * ws7.numel() and f.c[-1][32] == G._WS[(-1, 7)].data_ptr()
    assert len(f.kept) == 3 and any(k.data_ptr() == ws7.data_ptr() for k in f.kept)


def test_a_split_launchs_workspace_is_alive_when_its_launch_is_queued(monkeypatch):
    """The workspace a split launch's arguments point at is still held when the C launch runs (through the
    bound launch and the class launch alike): freed before, its memory could go to another tensor first
    (compute-sanitizer's memcheck saw the kernel write a freed workspace: session 15)."""
    import weakref
    f = _Fake(monkeypatch)
    monkeypatch.setattr(G, "keep", lambda nbytes, dev: None)    # nothing kept (a capture, the kept total full)
    made = []
    workspace = G._workspace

    def tracked(dev, stream, n, where):
        ws, hold = workspace(dev, stream, n, where)
        assert hold is ws and not G._WS       # made for the call
        made.append(weakref.ref(ws))
        return ws, hold
    monkeypatch.setattr(G, "_workspace", tracked)
    alive = []
    raw = f.c.append

    def launch(*args):
        alive.append(any(r() is not None and r().data_ptr() == args[32] for r in made))
        raw(args)
    monkeypatch.setattr(G._adapter, "tensordesc_launch", lambda ck, descs: G._adapter.TensorDescLaunch(
        launch, False, False, "fn", "packed", lambda i, ptr, shape, strides: [("map", i, ptr), *shape, *strides],
        [{"desc": i} for i in range(3)], G.PARAMS))
    cfg = G._c(64, 128, 64, 4, 6, split=4)
    a, b, c = _mats(300, 520, 264)
    for _ in range(3):
        G.launch(a, b, c, precision="none", config=cfg)
    cl = G.class_launch(a, b, c, precision="none", config=cfg)
    assert cl(7, _env(a, b, c)) and cl(7, _env(a, b, c))
    assert len(alive) == 4 and all(alive), alive


def test_class_launch_serves_batches_stacked(monkeypatch):
    """A batch's class launch: each call's products stacked (descriptors of batch x rows, the row steps and
    the batch among the kernel's arguments), another batch size too; a batch whose M is no tile multiple,
    or whose operand is not one matrix a batch stride, launches nothing (the variant's launch decides)."""
    f = _Fake(monkeypatch)
    cfg = G._c(64, 64, 64, 4, 8)
    B, M, K, N = 3, 128, 64, 192
    a, b, c = torch.randn(B, M, K).to(BF16), torch.randn(B, K, N).to(BF16), torch.empty(B, M, N, dtype=BF16)
    G.launch(a, b, c, precision="none", config=cfg)
    cl = G.class_launch(a, b, c, precision="none", config=cfg)
    assert cl is not None and cl(7, _env(a, b, c))
    args = f.c[-1]
    assert args[0] == min(132, B * 2 * 3)
    assert args[13:16] == (("map", 0, a.data_ptr()), B * M, K) and args[18:21] == (("map", 1, b.data_ptr()), B * K, N)
    assert args[23:26] == (("map", 2, c.data_ptr()), B * M, N)
    assert args[34:41] == (M, N, K, B, M, K, M)          # M, N, K, batch and the three row steps
    a5, b5, c5 = torch.randn(5, M, K).to(BF16), torch.randn(5, K, N).to(BF16), torch.empty(5, M, N, dtype=BF16)
    assert cl(7, _env(a5, b5, c5)) and f.c[-1][37] == 5
    n = len(f.c)
    odd = torch.randn(B, 96, K).to(BF16), b, torch.empty(B, 96, N, dtype=BF16)
    assert cl(7, _env(*odd)) is False
    loose = torch.randn(M, B, K).to(BF16).permute(1, 0, 2), b, c    # products interleaved row by row
    assert cl(7, _env(*loose)) is False and len(f.c) == n


@pytest.mark.parametrize("tiles, k_steps, expect", [
    (144, 64, (132, 8)),     # 12 tiles past one wave: each split 8 ways, 96 units in the last round
    (160, 64, (132, 4)),     # 28 past: 4 ways (8 would need 224 units)
    (192, 64, (132, 2)),     # 60 past: 2 ways
    (200, 64, (200, 1)),     # 68 past: even 2 ways overflow the round: nothing split
    (264, 64, (264, 1)),     # whole waves
    (32, 64, (0, 4)),        # less than one wave: every tile split
    (32, 5, (0, 2)),         # few K-steps: each unit keeps >= 2
    (32, 3, (32, 1)),
])
def test_tail_plan_splits_only_the_last_partial_wave(tiles, k_steps, expect):
    tail_at, split = G.tail_plan(tiles, k_steps, 132)
    assert (tail_at, split) == expect
    assert tail_at + (tiles - tail_at) * split - tail_at <= 132      # the split units fit in one round


def test_a_tail_config_launches_its_split_units_with_a_workspace(monkeypatch):
    f = _Fake(monkeypatch)
    cfg = G._c(128, 128, 64, 8, 4, tail=1)
    a, b, c = _mats(1100, 4096, 256)                      # 9 x 32 = 288 tiles: 24 past two whole waves
    for _ in range(2):
        G.launch(a, b, c, precision="none", config=cfg)
    args = f.c[0]
    assert args[0] == 132 and args[41:43] == (264, 2)     # tail_at, tail_split: 4 K-steps allow 2 ways, not 4
    plan = G.descriptor_plan(a, b, c, cfg)
    assert (plan["tail_at"], plan["tail_split"], plan["workspace"], plan["counters"]) == (264, 2, 48 * 128 * 128, 24)


def test_an_undecided_adapter_binds_later_and_a_declining_one_never(monkeypatch):
    f = _Fake(monkeypatch, direct=False, decided=False)     # a capture under way: not decided
    a, b, c = _mats(64, 128, 64)
    G.launch(a, b, c, precision="none", config=CFG)
    assert G._bound == {}
    f2 = _Fake(monkeypatch, direct=False, decided=True)
    monkeypatch.setattr(G._adapter, "triton_direct", lambda: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for cfg in (CFG, CFG, G._c(64, 64, 64, 4, 8)):
            G.launch(a, b, c, precision="none", config=cfg)
    assert len(f2.public) == 3 and not f2.c and set(G._bound.values()) == {G._PUBLIC}
    assert len([w for w in caught if "Gluon kernel's launcher" in str(w.message)]) == 1


def test_a_compiled_signature_not_the_kernels_keeps_gluons_launcher(monkeypatch):
    f = _Fake(monkeypatch, params=("a_desc", "b_desc"))
    monkeypatch.setattr(G._adapter, "triton_direct", lambda: True)
    a, b, c = _mats(64, 128, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            G.launch(a, b, c, precision="none", config=CFG)
    assert len(f.public) == 3 and not f.c and list(G._bound.values()) == [G._PUBLIC]
    assert len([w for w in caught if "Gluon kernel's launcher" in str(w.message)]) == 1


def test_descriptor_cache_is_bounded(monkeypatch):
    f = _Fake(monkeypatch)
    monkeypatch.setattr(G, "MAX_DESCS", 4)
    b, c = _mats(64, 128, 64)[1:]
    for _ in range(6):
        a = torch.randn(64, 64).to(BF16)
        G.launch(a, b, c, precision="none", config=CFG)
        G.launch(a, b, c, precision="none", config=CFG)
    assert len(G._descs) <= 4 and len(f.c) == 11


def test_threads_compile_once_and_share_the_bound_launch(monkeypatch):
    f = _Fake(monkeypatch)
    b, c = _mats(64, 128, 64)[1:]
    ops = [torch.randn(64, 64).to(BF16) for _ in range(8)]
    start = threading.Barrier(8)

    def work(a):
        start.wait()
        for _ in range(5):
            G.launch(a, b, c, precision="none", config=CFG)

    threads = [threading.Thread(target=work, args=(a,)) for a in ops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(f.public) == 1 and len(f.c) == 39 and len(G._bound) == 1
    assert {args[13][2] for args in f.c} == {a.data_ptr() for a in ops}


def test_a_thread_without_a_cuda_context_gets_one_then_fills_the_map(monkeypatch):
    f = _Fake(monkeypatch)
    a, b, c = _mats(64, 128, 64)
    G.launch(a, b, c, precision="none", config=CFG)
    bound = G._bound[next(iter(G._bound))]
    fills = []

    def expand(i, ptr, shape, strides):
        fills.append(i)
        if len(fills) == 1:
            raise RuntimeError("Triton Error [CUDA]: Failed to create tensor map descriptor: invalid device context")
        return [("map", i, ptr), *shape, *strides]

    monkeypatch.setattr(bound, "expand", expand)
    made = []
    monkeypatch.setattr(G._adapter, "ensure_context", lambda dev: made.append(dev) or True)
    G.launch(a, b, c, precision="none", config=CFG)
    assert made == [-1] and fills == [0, 0, 1, 2] and len(f.c) == 1
    monkeypatch.setattr(G, "_descs", {})
    fills.clear()
    monkeypatch.setattr(G._adapter, "ensure_context", lambda dev: False)    # a context was there: the error stands
    with pytest.raises(RuntimeError, match="tensor map"):
        G.launch(a, b, c, precision="none", config=CFG)


@pytest.mark.parametrize("kw, expect", [
    (dict(act="tanh"), "activation 'tanh'"),
    (dict(bias_mode=3), "bias_mode 3"),
    (dict(bias_mode=1), "got None"),
    (dict(bias=torch.zeros(64), bias_mode=1), "128 elements"),
    (dict(bias=torch.zeros(128, dtype=torch.float64), bias_mode=1), "torch.float64"),
    (dict(bias=torch.zeros(2, 64), bias_mode=2), "shape (2, 64)"),
])
def test_bad_epilogue_is_a_one_line_error(monkeypatch, kw, expect):
    import tiledmm
    f = _Fake(monkeypatch)
    a, b, c = _mats(64, 128, 64)
    with pytest.raises(tiledmm.TiledmmError, match="gluon-ws") as e:
        G.launch(a, b, c, precision="none", config=CFG, **kw)
    assert expect in str(e.value) and "\n" not in str(e.value) and not f.public
