"""Host cost per call of tiledmm's PyTorch operator layers, next to torch eager (issue 23).

Timed: ``tiledmm.enable()``'s routing (addmm with a bias, F.linear, matmul; forward, forward with
a graph recorded, forward + backward), ``tiledmm.nn.functional.linear`` with gelu, and a torch op
the mode does not route, each next to torch eager doing the same.

On a GPU the kernels run for real on small tensors (the GPU work is shorter than the host's, so
the wall time per queued call is the host's cost). With ``--stub`` (the default without a GPU) the
GEMM itself is replaced by a stub that computes nothing and writes zeros -- ``tiledmm.api.matmul``
returns a zero result (its ``out`` zeroed), the fused-epilogue launch ``ops._impl._fused`` zeroes
the output and reports done (``--unfused``: reports not done, so the torch epilogue after the
product runs) -- so what is timed is tiledmm's Python layers (plus one zero fill of a toy tensor,
about a microsecond; zeros, not uninitialised memory, keep the activations' time steady). The
stubbed results are not checked.
Without the stub every tiledmm result is checked against torch's first.

Timing: tiledmm.timing.wall_us_per_call (calls queued n times, synchronised at the end, median of
5 repeats), microseconds per call. A short table is printed last.

  PYTHONPATH=src python3 scripts/bench_op_overhead.py                       # GPU: real kernels, bf16
  PYTHONPATH=src python3 scripts/bench_op_overhead.py --stub                # GPU or CPU: layers only
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
os.environ.setdefault("TILEDMM_QUIET", "1")

import tiledmm  # noqa: E402  (decides GPU or emulation first)
from tiledmm import _backend  # noqa: E402


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stub", action="store_true", help="replace the GEMM by a stub (forced without a GPU)")
    p.add_argument("--unfused", action="store_true", help="with --stub: the fused epilogue is refused")
    p.add_argument("--m", type=int, default=None, help="rows of x (default: 64 on a GPU, 8 in emulation)")
    p.add_argument("--k", type=int, default=None, help="in features (default 256 / 16)")
    p.add_argument("--n", type=int, default=None, help="out features (default 256 / 16)")
    p.add_argument("--dtype", default=None, help="default bfloat16 on a GPU, float32 in emulation")
    p.add_argument("--calls", type=int, default=200, help="calls per timed repeat")
    a = p.parse_args(argv)
    gpu = not _backend.emulating()
    a.stub = a.stub or not gpu
    a.m, a.k, a.n = a.m or (64 if gpu else 8), a.k or (256 if gpu else 16), a.n or (256 if gpu else 16)
    a.dtype = a.dtype or ("bfloat16" if gpu else "float32")
    return a


def install_stub(torch, unfused: bool) -> None:
    """The lowest launches compute nothing: api.matmul returns zeros (in out, or new), _fused zeroes
    out and says whether it 'did' the call. Both are looked up at call time by the layers above."""
    from tiledmm import api
    from tiledmm.ops import _impl

    def matmul(a, b, *, out=None, **_):
        if out is not None:
            return out.zero_()
        sa, sb = a.shape, b.shape
        if len(sa) == 2 and len(sb) == 2:
            return a.new_zeros((sa[0], sb[1]))
        x, y = sa[:-2], sb[:-2]
        n = max(len(x), len(y))
        x, y = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(y)) + tuple(y)
        batch = tuple(q if p == 1 else p for p, q in zip(x, y))
        return a.new_zeros(batch + tuple(sa[-2:-1]) + (tuple(sb[-1:]) if len(sb) > 1 else ()))

    api.matmul = matmul
    tiledmm.matmul = matmul
    _impl._fused = lambda a, b, out, *args: False if unfused else out.zero_() is out


def cases(torch, a) -> list:
    """(name, tiledmm call under enable() or tiledmm.nn, the same in torch eager)."""
    import torch.nn.functional as F
    from tiledmm.nn.functional import linear as tl
    dev = "cpu" if _backend.emulating() else "cuda"
    dt = getattr(torch, a.dtype)
    g = torch.Generator(device="cpu").manual_seed(0)

    def r(*s, grad=False):
        return (torch.randn(*s, generator=g) / s[-1] ** 0.5).to(device=dev, dtype=dt).requires_grad_(grad)
    x, w, bias, wt = r(a.m, a.k), r(a.n, a.k), r(a.n), None
    wt = w.detach().t().contiguous()
    xg, wg, bg = r(a.m, a.k, grad=True), r(a.n, a.k, grad=True), r(a.n, grad=True)
    gy = r(a.m, a.n)

    def enabled(f):
        f.under_mode = True          # timed inside one ``with tiledmm.enable():``
        return f

    def fb(f):
        def call():
            f().backward(gy)
        return call
    return [
        ("addmm(bias, x, W) fwd", enabled(lambda: torch.addmm(bias, x, wt)), lambda: torch.addmm(bias, x, wt)),
        ("F.linear(x, W, b) fwd", enabled(lambda: F.linear(x, w, bias)), lambda: F.linear(x, w, bias)),
        ("matmul(x, W) fwd", enabled(lambda: torch.matmul(x, wt)), lambda: torch.matmul(x, wt)),
        ("F.linear fwd (grad)", enabled(lambda: F.linear(xg, wg, bg)), lambda: F.linear(xg, wg, bg)),
        ("matmul fwd (grad)", enabled(lambda: torch.matmul(xg, wg.t())), lambda: torch.matmul(xg, wg.t())),
        ("F.linear fwd+bwd", enabled(fb(lambda: F.linear(xg, wg, bg))), fb(lambda: F.linear(xg, wg, bg))),
        ("addmm fwd+bwd", enabled(fb(lambda: torch.addmm(bg, xg, wg.t()))), fb(lambda: torch.addmm(bg, xg, wg.t()))),
        ("matmul fwd+bwd", enabled(fb(lambda: torch.matmul(xg, wg.t()))), fb(lambda: torch.matmul(xg, wg.t()))),
        ("nn.linear gelu fwd+bwd", fb(lambda: tl(xg, wg, bg, "gelu")), fb(lambda: F.gelu(F.linear(xg, wg, bg)))),
        ("torch.add (not routed)", enabled(lambda: torch.add(x, x)), lambda: torch.add(x, x)),
    ]


def check(torch, todo) -> None:
    """Without the stub: every forward's result equals torch's (bf16/fp16 tolerance)."""
    for name, ours, theirs in todo:
        if "bwd" in name:
            continue
        with tiledmm.enable() if getattr(ours, "under_mode", False) else contextlib.nullcontext():
            got = ours()
        want = theirs()
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2 * want.abs().max().item())


def main(argv=None) -> None:
    a = parse(argv)
    import torch

    from tiledmm.timing import wall_us_per_call
    if _backend.emulating():
        torch.set_num_threads(1)        # toy CPU tensors: no OpenMP pool spinning against the timed thread
    if a.stub:
        install_stub(torch, a.unfused)
    todo = cases(torch, a)
    if not a.stub:
        check(torch, todo)
    rows = []
    for name, ours, theirs in todo:
        with tiledmm.enable() if getattr(ours, "under_mode", False) else contextlib.nullcontext():
            t = wall_us_per_call(ours, n=a.calls)
        ref = wall_us_per_call(theirs, n=a.calls)
        rows.append((name, t, ref))
        print(f"{name:26s} tiledmm {t:8.1f} us   torch {ref:8.1f} us", flush=True)
    where = "emulation (CPU)" if _backend.emulating() else torch.cuda.get_device_name()
    print(f"\nhost us per call, {where}, {a.dtype} x {a.m}x{a.k} W {a.n}x{a.k}, "
          f"{'stubbed GEMM (' + ('unfused' if a.unfused else 'fused') + ')' if a.stub else 'real kernels'}")
    print(f"{'case':26s} {'tiledmm':>9s} {'torch':>9s} {'diff':>9s}")
    for name, t, ref in rows:
        print(f"{name:26s} {t:9.1f} {ref:9.1f} {t - ref:+9.1f}")


if __name__ == "__main__":
    main()
