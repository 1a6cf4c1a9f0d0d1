#!/usr/bin/env python3
"""Build the compiled Triton kernels tiledmm ships (``src/tiledmm/kernels/block/prebuilt/``), on a GPU.

    PYTHONPATH=src python3 scripts/build_kernels.py [--jobs 8] [--budget-s 420]
        [--parts table,suites,rows,linear,invariant] [--merge] [--out DIR] [--plan] [--collect-only]

A new process looks a kernel it has not compiled up in the package's store, by a key that is the same on
every machine with this tiledmm and this Triton version (``_adapter.IndexKey.shipped``): a hit compiles
nothing. This script fills the store for the installed Triton version and this GPU's target (sm_90 on an
H100 or H200): it runs the calls below through tiledmm's public API with an empty Triton cache and
kernel index (``TILEDMM_PREBUILT=off``, ``TILEDMM_TUNE`` off: the default picks), in ``--jobs`` worker
processes that share that cache, then copies every kernel the index recorded
into the store (``_adapter.export_compiled``: metadata and cubin, each distinct file once, gzipped) and
prints the size report. The store is keyed by the kernels' sources: build it from the code you ship.

The calls (``--plan`` lists their number per part without a GPU):

* table: one call per entry of this GPU's shipped table (``kernels/block/tables``), synthesised to the
  entry's layout key and shape class (2^class sizes, adjusted to its alignment flags; a misaligned
  layout with a one-element offset), so every tabled choice is compiled;
* suites: the bench suites (square, irregular, transformer, llm) in bf16, fp16, tf32 and fp32, with B
  row-major and transposed (x @ W.T);
* rows: the llm suite's (N, K) at every M class 1 .. 8192 (the random-M loop's classes), bf16 / fp16 /
  tf32 / fp32, B row-major and transposed;
* linear: ``tiledmm.nn.functional.linear`` (bias; none, gelu, silu) at M 16, 512, 4096 in bf16 and fp16,
  and a forward + backward at M 4096 (the backward products' layouts);
* invariant: the same llm shapes in batch-invariant mode (its own picks) at M 1 and 4096.

``--collect-only``: run nothing; export what the current Triton cache's index holds (after your own
runs). ``--merge``: keep the store's entries for this Triton version (default: replace them). Kernels of
other shapes' specialisations (another divisibility of N or K by 16, other strides) compile on first use.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PARTS = ("table", "suites", "rows", "linear", "invariant")
DTYPES = (("bfloat16", "none"), ("float16", "none"), ("float32", "tf32"), ("float32", "ieee"))
LLM = ((4096, 4096), (11008, 4096), (4096, 11008), (8192, 8192), (28672, 8192), (8192, 28672))   # (N, K)
MAX_BYTES = 6 << 30          # a call's operands at most (8 workers share one GPU)
H100 = "NVIDIA H100 80GB HBM3"


def _elem(dtype: str) -> int:
    return 2 if dtype in ("bfloat16", "float16") else 4


def _pt(part: str, dtype: str, precision: str, M: int, N: int, K: int, **kw) -> dict:
    return {"part": part, "dtype": dtype, "out": kw.pop("out", dtype), "precision": precision, "M": M, "N": N,
            "K": K, "batch": kw.pop("batch", 0), "a": kw.pop("a", "n"), "b": kw.pop("b", "n"),
            "c": kw.pop("c", "n"), "offset": kw.pop("offset", 0), "alpha": kw.pop("alpha", 1.0),
            "beta": kw.pop("beta", 0.0), "api": kw.pop("api", "matmul"), "act": kw.pop("act", "none"),
            "bias": kw.pop("bias", False), "invariant": kw.pop("invariant", False), **kw}


def _sized(cls: int, esize: int, aligned: bool, rows128: bool) -> int:
    """A size in log2 bucket ``cls`` whose rows (in elements of ``esize`` bytes) meet the layout's flags."""
    n = 2 ** cls
    if not aligned:
        return n + 1 if cls >= 1 else n
    if not rows128 and cls >= 7:
        return n + 16 // esize                  # 16-byte aligned, not a multiple of 128 bytes
    return n


def table_points(table: dict) -> list[dict]:
    """One call per table entry, synthesised to its layout key (``matmul.plan_key`` less the class and the
    device): a.dtype, c.dtype, precision, a.dim, b.dim, a unit last, b unit last, b unit second, c unit last,
    aligned, alpha == 1, beta == 0, rows128."""
    out = []
    for entries in table["index"].values():
        for e in entries:
            f = e["layout"].split("|")
            if len(f) != 13 or e["variant"].startswith("simt"):
                continue
            dtype, odt, prec = f[0].replace("torch.", ""), f[1].replace("torch.", ""), f[2]
            adim, bdim = int(f[3]), int(f[4])
            a_n, b_n, b_t, c_n, aligned, alpha1, beta0, rows128 = (x == "True" for x in f[5:9] + f[9:13])
            cm, cn, ck = e["class"]
            es = _elem(dtype)
            M, N, K = 2 ** cm, _sized(cn, es, aligned, rows128), _sized(ck, es, aligned, rows128)
            if not aligned and a_n and b_n:
                K = 2 ** ck + 1 if ck >= 1 else 1
            out.append(_pt("table", dtype, prec, M, N, K, out=odt, batch=8 if adim == 3 else 0,
                           a="n" if a_n else "t", b="n" if b_n else ("t" if b_t else "s"), c="n" if c_n else "t",
                           offset=0, alpha=1.0 if alpha1 else 0.5, beta=0.0 if beta0 else 1.0, layout=e["layout"],
                           cls=e["class"]))
    return out


def plan(parts, table: dict | None) -> list[dict]:
    from tiledmm.bench import SUITES
    pts: list[dict] = []
    if "table" in parts and table is not None:
        pts += table_points(table)
    if "suites" in parts:
        for suite in ("square", "irregular", "transformer", "llm"):
            for shape in SUITES[suite]:
                *batch, m, k, n = shape
                for dtype, prec in DTYPES:
                    for b in (("n",) if batch else ("n", "t")):
                        pts.append(_pt("suites", dtype, prec, m, n, k, batch=batch[0] if batch else 0, b=b))
    if "rows" in parts:
        for n, k in LLM:
            for c in range(14):
                for dtype, prec in DTYPES:
                    for b in ("n", "t"):
                        pts.append(_pt("rows", dtype, prec, 2 ** c, n, k, b=b))
    if "linear" in parts:
        for n, k in LLM:
            for dtype in ("bfloat16", "float16"):
                for m in (16, 512, 4096):
                    for act, bias in (("none", False), ("none", True), ("gelu", True), ("silu", True)):
                        pts.append(_pt("linear", dtype, "none", m, n, k, b="t", api="linear", act=act, bias=bias))
                pts.append(_pt("linear", dtype, "none", 4096, n, k, b="t", api="linear_bwd", act="gelu", bias=True))
    if "invariant" in parts:
        for n, k in LLM:
            for m in (1, 4096):
                for dtype, prec in (DTYPES[0], DTYPES[2], DTYPES[3]):
                    for b in ("n", "t"):
                        pts.append(_pt("invariant", dtype, prec, m, n, k, b=b, invariant=True))
    return [p for p in pts if _bytes(p) <= MAX_BYTES]


def _bytes(p: dict) -> int:
    nb = max(p["batch"], 1)
    return nb * (p["M"] * p["K"] + p["K"] * p["N"] + p["M"] * p["N"]) * _elem(p["dtype"])


def operands(torch, p: dict, device: str = "cuda"):
    """(a, b, out or None) of a matmul point: uninitialised, in the point's layouts (``n`` row-major,
    ``t`` column-major, ``s`` every other column of a wider matrix), A offset by ``offset`` elements."""
    dt, odt = getattr(torch, p["dtype"]), getattr(torch, p["out"])
    M, N, K, nb = p["M"], p["N"], p["K"], p["batch"]

    def mat(rows, cols, order, offset=0, dtype=dt):
        lead = (nb,) if nb else ()
        if order == "s":
            return torch.empty(*lead, rows, 2 * cols, dtype=dtype, device=device)[..., ::2]
        shape = (*lead, rows, cols) if order == "n" else (*lead, cols, rows)
        count = 1
        for s in shape:
            count *= s
        t = torch.empty(count + offset, dtype=dtype, device=device)[offset:].view(shape)
        return t if order == "n" else t.mT
    a = mat(M, K, p["a"], p["offset"])
    b = mat(K, N, p["b"])
    c = mat(M, N, p["c"], dtype=odt) if (p["c"] != "n" or p["out"] != p["dtype"] or p["beta"]) else None
    if c is not None:
        c.zero_()
    return a, b, c


def layout_of(torch, p: dict, a, b, c) -> tuple[str, list]:
    """The (layout key, class) the dispatcher sees for a point's operands (``shipped.split_key``)."""
    from tiledmm.kernels.block import matmul as bm
    from tiledmm.kernels.block import shipped
    cc = c if c is not None else torch.empty(a.shape[:-1] + b.shape[-1:], dtype=a.dtype, device=a.device)
    layout, cls = shipped.split_key(bm.plan_key(a, b, cc, p["precision"], p["alpha"], p["beta"]))
    return layout, list(cls)


def run_point(torch, tiledmm, p: dict) -> str | None:
    """One call as the point says; the plan key's layout when it differs from a table entry's, else None."""
    dt = getattr(torch, p["dtype"])
    M, N, K = p["M"], p["N"], p["K"]
    prec = p["precision"] if p["dtype"] == "float32" else None
    if p["api"] == "matmul":
        a, b, c = operands(torch, p)
        with tiledmm.batch_invariant(p["invariant"]):
            tiledmm.matmul(a, b, out=c, alpha=p["alpha"], beta=p["beta"], precision=prec)
        if p.get("layout"):
            got = layout_of(torch, p, a, b, c)
            if got != (p["layout"], list(p["cls"])):
                return f"{got[0]} {got[1]}"
        return None
    from tiledmm.nn.functional import linear
    x = torch.randn(M, K, dtype=dt, device="cuda")
    w = torch.randn(N, K, dtype=dt, device="cuda")
    bias = torch.randn(N, dtype=dt, device="cuda") if p["bias"] else None
    act = None if p["act"] == "none" else p["act"]
    if p["api"] == "linear":
        with torch.no_grad():
            linear(x, w, bias, activation=act)
    else:
        x.requires_grad_(True)
        w.requires_grad_(True)
        linear(x, w, bias, activation=act).float().square().mean().backward()
    return None


def worker(points: list[dict], shard: int, jobs: int) -> None:
    """Run this shard's share of the points (every ``jobs``-th from ``shard``); a failure is printed and
    the next point goes on."""
    import torch

    import tiledmm
    for p in points[shard::jobs]:
        try:
            why = run_point(torch, tiledmm, p)
            torch.cuda.synchronize()
            if why:
                print(f"[worker {shard}] table layout {p['layout']} {p['cls']} synthesised as {why}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"[worker {shard}] {p}: {type(e).__name__}: {str(e)[:200]}", flush=True)


def run_workers(args, seconds: float) -> None:
    """``args.jobs`` copies of this script as workers on the shared Triton cache, for at most ``seconds``."""
    import subprocess
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--shard", str(i), "--jobs", str(args.jobs),
                               "--parts", args.parts, "--triton-cache", args.triton_cache]) for i in range(args.jobs)]
    for pr in procs:
        try:
            pr.wait(timeout=max(10.0, seconds - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()
            print("# a worker ran out of time (killed): its remaining calls compile on first use", flush=True)
    print(f"# calls run in {time.time() - t0:.1f} s by {args.jobs} workers", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--out", default=None, help="the store (default: the package's)")
    ap.add_argument("--merge", action="store_true", help="keep this Triton version's entries already there")
    ap.add_argument("--plan", action="store_true", help="print the number of calls per part and exit (no GPU)")
    ap.add_argument("--collect-only", action="store_true", help="run nothing: export the current index")
    ap.add_argument("--jobs", type=int, default=8, help="worker processes (they share the GPU and Triton's cache)")
    ap.add_argument("--triton-cache", default=None, help=argparse.SUPPRESS)   # the workers' shared cache
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    parts = [x for x in args.parts.split(",") if x]

    if not args.collect_only and not args.plan:
        # an empty Triton cache and index shared with the workers, the defaults' picks, the store not read
        if args.triton_cache is None:
            args.triton_cache = tempfile.mkdtemp(prefix="tiledmm-build-triton-")
        os.environ["TRITON_CACHE_DIR"] = args.triton_cache
        os.environ.setdefault("TILEDMM_CACHE_DIR", args.triton_cache + "-tiledmm")
        os.environ["TILEDMM_PREBUILT"] = "off"
        os.environ["TILEDMM_TUNE"] = "off"
        os.environ.pop("TILEDMM_BATCH_INVARIANT", None)
    import tiledmm
    from tiledmm import _adapter
    from tiledmm.analysis.device import properties
    from tiledmm.kernels.block import shipped
    if args.plan or tiledmm.emulating():
        table = shipped.table_for(H100, 132)
    else:
        pr = properties(0)
        table = shipped.table_for(pr.name, pr.num_sms)
    points = plan(parts, table)
    if args.plan:
        for part in parts:
            print(f"{part:10s} {sum(p['part'] == part for p in points)}")
        print(f"{len(points)} calls planned")
        return 0
    if tiledmm.emulating():
        print("build_kernels: needs a CUDA GPU (--plan runs without one)", file=sys.stderr)
        return 2
    if args.worker:
        worker(points, args.shard, args.jobs)
        return 0
    t0 = time.time()
    if not args.collect_only:
        if args.jobs <= 1:
            worker(points, 0, 1)
        else:
            run_workers(args, args.budget_s - 60)
    from triton import knobs
    index = Path(knobs.cache.dir) / "tiledmm-index"
    report = _adapter.export_compiled(args.out, index=index, fresh=not args.merge and not args.collect_only)
    import torch
    report.update(gpu=torch.cuda.get_device_name(), calls=len(points), parts=parts,
                  seconds=round(time.time() - t0, 1), index=str(index))
    print(json.dumps(report, indent=1))
    mb = 1 << 20
    print(f"\ncompiled kernels for Triton {report['triton']} on {report['gpu']} (targets {report['targets']}): "
          f"{report['kernels']} kernels, {report['cubins']} distinct cubins, {report['raw_bytes'] / mb:.1f} MB raw, "
          f"{report['stored_bytes'] / mb:.1f} MB in the package; {len(points)} calls in {report['seconds']} s")
    return 0 if report["kernels"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
