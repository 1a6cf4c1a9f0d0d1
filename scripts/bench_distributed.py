"""Multi-GPU GEMM on torch.distributed: measure the interconnect, then SUMMA and the tensor-parallel
patterns against their baselines and torch's fused versions, each next to the scaling model's
prediction (parameters fitted from this run's own bandwidth sweep and one-GPU GEMM rates).

  torchrun --nproc_per_node 4 scripts/bench_distributed.py [--quick] [--out $OUT]
  torchrun --nproc_per_node 4 scripts/bench_distributed.py --cpu      # gloo, toy sizes: the control flow only

Phases (a case that fails prints why and the run goes on; results are saved after every case):
  1. collective bandwidth per size on SUMMA's own groups: broadcasts on the grid's row groups, on its
     column groups, both at once (A's and B's), all-gather and reduce-scatter on all ranks and on a pair,
     copy-engine reads of a peer's symmetric memory; the first broadcast on fresh groups (communicator
     set-up); a latency + bandwidth fit per pattern.
  2. one-GPU GEMM rates: the whole SUMMA product (the baseline of its speed-up) and a panel product with
     beta = 0 and beta = 1 (the pass over C that every panel after the first costs), tiledmm and torch.
  3. SUMMA S^3 bf16 (S = 32768; quick 8192) on all GPUs (2x2 on 4) and on the first two (1x2, a subgroup,
     same run): the old schedule (whole K blocks), the model's schedule with NCCL and with the
     symmetric-memory engine, torch's GEMM. A per-panel timeline (when each transfer is issued, starts,
     ends; when each product starts, ends and what it waited for), printed compactly and saved; the
     GPU's own kernel intervals (torch.profiler) of one product (--skip profile: not).
  4. all-gather-matmul and matmul-reduce-scatter, per-rank 8192^2 blocks (quick 2048), on all GPUs and on
     a pair: the plain collective-then-GEMM, the overlapped nccl and symm versions, torch's fused
     symmetric-memory ops; cuBLAS and tiledmm local GEMMs.
  5. more SUMMA variants: prepared (panel-major) operands, depth 3, the schedule of the model fitted to
     this run, SM margins (TILEDMM_SM_MARGIN, re-planned in process: --sm-margins) and NCCL capped to few
     CTAs (--nccl-ctas), the 1x2 old schedule.
Cases start while the run is inside --budget seconds (default 300); the rest are skipped and said so.
Every result is checked against float64 first (sampled rows for big ones), then timed with
tiledmm.timing.time_calls (the same call count on every rank, the slowest rank's median).
$OUT/bench_distributed.json holds everything; the summary table is printed last.
"""
from __future__ import annotations

import os

from tiledmm.cli.dist import FORCED_ENV

os.environ.update(FORCED_ENV)          # NVLink multicast off, before NCCL starts

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tiledmm  # noqa: E402,F401
from tiledmm import distributed as D  # noqa: E402
from tiledmm.cli.dist import gemm_for, time_collective  # noqa: E402
from tiledmm.distributed import _symm  # noqa: E402
from tiledmm.distributed import model as M  # noqa: E402

MiB = 2 ** 20
R = {"rank": 0, "world": 1, "gpu": True, "t0": time.perf_counter(), "out": ".", "doc": {}, "budget": 1e9}


def say(*a):
    if R["rank"] == 0:
        print(*a, flush=True)


def stamp() -> str:
    return f"[{time.perf_counter() - R['t0']:.0f} s]"


def save():
    if R["rank"] == 0:
        os.makedirs(R["out"], exist_ok=True)
        with open(os.path.join(R["out"], "bench_distributed.json"), "w") as f:
            json.dump(R["doc"], f, indent=1, default=str)


def dev():
    return torch.device("cuda", torch.cuda.current_device()) if R["gpu"] else torch.device("cpu")


def sync():
    if R["gpu"]:
        torch.cuda.synchronize()


def case(name: str, members, fn, results: list):
    """Run ``fn()`` on the ranks in ``members`` (None: every rank), then a barrier; an exception prints
    and the run goes on. fn returns a dict (rank 0's is kept) or None."""
    me = dist.get_rank()
    res = None
    late = torch.tensor([float(time.perf_counter() - R["t0"] > R["budget"])], device=dev())
    dist.broadcast(late, src=0)             # rank 0's clock decides for every rank: the collectives stay matched
    if late.item():
        res = {"case": name, "skipped": f"over the time budget ({R['budget']:.0f} s; --budget)"}
        if me == 0:
            results.append(res)
        return res
    if members is None or me in members:
        try:
            res = fn()
        except Exception as e:          # noqa: BLE001
            res = {"case": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
            if me == (members[0] if members else 0):
                print(f"  {name}: FAILED {res['error']}", flush=True)
                traceback.print_exc(limit=3)
    sync()
    dist.barrier()
    if me == 0 and res is not None:
        res.setdefault("case", name)
        results.append(res)
        save()
    return res


# -- timing ------------------------------------------------------------------------------------------------
def time_ops(fn, iters: int, group=None, repeats: int = 3) -> float:
    """Seconds per call of fn (enqueues one op), ``iters`` back to back between two events, median of
    ``repeats``, the slowest rank of ``group``."""
    fn()
    fn()
    sync()
    ts = []
    for _ in range(repeats):
        if R["gpu"]:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(iters):
                fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e-3 / iters)
        else:
            h = time.perf_counter()
            for _ in range(iters):
                fn()
            ts.append((time.perf_counter() - h) / iters)
    t = torch.tensor([statistics.median(ts)], dtype=torch.float64, device=dev())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t[0])


def check(c_block, A, B, rows, cols, group, sample=256, seed=3) -> float:
    """Relative error of this rank's C block against float64 (sampled rows), over the ranks of group."""
    r0, r1 = rows
    c0, c1 = cols
    sel = torch.arange(r1 - r0, device=A.device)
    if r1 - r0 > sample:
        g = torch.Generator(device="cpu").manual_seed(seed + dist.get_rank())
        sel = torch.randperm(r1 - r0, generator=g)[:sample].sort().values.to(A.device)
    ref = A[r0:r1][sel].double() @ B[:, c0:c1].double()
    got = c_block[sel].double()
    err2 = torch.tensor(float("inf"), device=A.device, dtype=torch.float64) if torch.isnan(got).any() \
        else (got - ref).pow(2).sum()
    acc = torch.stack([err2, ref.pow(2).sum()]).to(torch.float64)
    dist.all_reduce(acc, group=group)
    return float((acc[0] / acc[1].clamp_min(1e-300)).sqrt())


TOL = {torch.bfloat16: 1.5e-2, torch.float32: 2e-5, torch.float64: 1e-10}


# -- 1. bandwidth --------------------------------------------------------------------------------------------
def bandwidth(grid, pair_grid, sizes, results) -> dict:
    """Per pattern: [(bytes, seconds)] and the fitted link; printed as a table. Every time is the slowest
    rank's, so every rank fits the same links."""
    sweep = {}
    row_src = grid.global_rank(grid.row, 0)
    col_src = grid.global_rank(0, grid.col)
    side = [torch.cuda.Stream() for _ in range(2)] if R["gpu"] else [None, None]
    d = dev()
    buf = torch.empty(max(sizes) // 2 * 2 + 2 * MiB, dtype=torch.uint8, device=d)
    buf2 = torch.empty_like(buf)

    def on(i):
        return torch.cuda.stream(side[i]) if R["gpu"] else _null()

    patterns = {}
    if grid.pc > 1:
        patterns["bcast row"] = lambda n: dist.broadcast(buf[:n], src=row_src, group=grid.row_group)
    if grid.pr > 1:
        patterns["bcast col"] = lambda n: dist.broadcast(buf2[:n], src=col_src, group=grid.col_group)
    if grid.pc > 1 and grid.pr > 1:
        def both(n):
            cur = torch.cuda.current_stream() if R["gpu"] else None
            hs = []
            for i, (b, s, g) in enumerate(((buf, row_src, grid.row_group), (buf2, col_src, grid.col_group))):
                if R["gpu"]:
                    side[i].wait_stream(cur)
                with on(i):
                    hs.append(dist.broadcast(b[:n], src=s, group=g, async_op=True))
            for h in hs:
                h.wait()
            if R["gpu"]:
                for s in side:
                    cur.wait_stream(s)
        patterns["bcast row+col"] = both
    w = dist.get_world_size()
    if R["gpu"]:
        patterns[f"allgather {w}"] = lambda n: dist.all_gather_into_tensor(buf[:n // w * w], buf2[:n // w], group=None)
        patterns[f"reducescatter {w}"] = lambda n: dist.reduce_scatter_tensor(
            buf[:n // w // 2 * 2].view(torch.bfloat16), buf2[:n // w // 2 * 2 * w].view(torch.bfloat16))
    for name, fn in patterns.items():
        pts = []
        for n in sizes:
            iters = max(3, min(20, (256 * MiB) // n))
            t = time_ops(lambda: fn(n), iters)
            pts.append((n, t))
        sweep[name] = pts
    pair = sweep_pair(pair_grid, sizes, buf, buf2) if w > 2 else {}
    sweep.update(pair)
    if R["gpu"]:
        try:
            sweep.update(sweep_copy(grid, sizes))
        except Exception as e:     # noqa: BLE001  (the NCCL patterns' fits stand without it)
            say(f"  copy-engine reads FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    fits = {}
    for name, pts in sweep.items():
        q = int(name.split()[-1]) if name.split()[-1].isdigit() else 2
        per_step = [(b / q if name.startswith(("allgather", "reducescatter")) else b,
                     t / (q - 1) if name.startswith(("allgather", "reducescatter")) and q > 1 else t) for b, t in pts]
        try:
            fits[name] = M.fit_link(per_step)
        except ValueError:
            pass
    rows = []
    for name, pts in sweep.items():
        f = fits.get(name)
        rows.append({"pattern": name, "points": [(b, t * 1e3) for b, t in pts],
                     "gbs_at": {str(b // MiB) + "MiB": b / t / 1e9 for b, t in pts},
                     "fit_gbs": f.gbs if f else None, "fit_lat_us": f.lat_us if f else None})
    say("\n== 1. collective bandwidth (GB/s = bytes moved per rank / time; all-gather, reduce-scatter: whole "
        "buffer; fit: latency + bandwidth per step) " + stamp())
    hdr = f"{'pattern':<18}" + "".join(f"{f'{b / MiB:g} MiB':>10}" for b in sizes) + f"{'fit GB/s':>10}{'lat us':>8}"
    say(hdr)
    for r in rows:
        say(f"{r['pattern']:<18}" + "".join(f"{v:>10.1f}" for v in r["gbs_at"].values()) +
            f"{r['fit_gbs'] or 0:>10.1f}{r['fit_lat_us'] or 0:>8.1f}")
    results.append({"case": "bandwidth", "rows": rows})
    save()
    return fits


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def sweep_pair(pair_grid, sizes, buf, buf2) -> dict:
    """All-gather and reduce-scatter on ranks 0 and 1 only (the 2-GPU subset); others wait."""
    out = {}
    me = dist.get_rank()
    if R["gpu"] and pair_grid is not None and me in (0, 1):
        g = pair_grid.group
        for name, fn in (("allgather 2", lambda n: dist.all_gather_into_tensor(buf[:n // 2 * 2], buf2[:n // 2],
                                                                                 group=g)),
                         ("reducescatter 2", lambda n: dist.reduce_scatter_tensor(
                             buf[:n // 4 * 2].view(torch.bfloat16), buf2[:n // 4 * 4].view(torch.bfloat16), group=g))):
            out[name] = [(n, time_ops(lambda: fn(n), max(3, min(20, (256 * MiB) // n)), group=g)) for n in sizes]
    sync()
    dist.barrier()
    objs = [None] * dist.get_world_size()
    dist.all_gather_object(objs, out)
    return objs[0] or {}


def sweep_copy(grid, sizes) -> dict:
    """Copy-engine reads of a peer's symmetric buffer: from the row peer, and from the row and column
    peers at once (A's and B's panels with engine symm)."""
    why = _symm.available(grid.group)
    if why:
        say(f"  copy-engine reads skipped: {why}")
        return {}
    d = dev()
    space = _symm.space(grid.group, 2 * max(sizes), d, "bench")
    me = grid.rank
    row_peer = grid.row * grid.pc + (grid.col + 1) % grid.pc
    col_peer = ((grid.row + 1) % grid.pr) * grid.pc + grid.col
    dst = torch.empty(2 * max(sizes), dtype=torch.uint8, device=d)
    side = torch.cuda.Stream()
    out = {}
    space.barrier(0)

    def read_row(n):
        dst[:n].copy_(space.view(row_peer, 0, (n,), torch.uint8))

    def read_both(n):
        cur = torch.cuda.current_stream()
        side.wait_stream(cur)
        dst[:n].copy_(space.view(row_peer, 0, (n,), torch.uint8))
        with torch.cuda.stream(side):
            dst[max(sizes):max(sizes) + n].copy_(space.view(col_peer, max(sizes), (n,), torch.uint8))
        cur.wait_stream(side)
    pats = {}
    if grid.pc > 1:
        pats["copy-engine read"] = read_row
    if grid.pc > 1 and grid.pr > 1:
        pats["copy-engine row+col"] = read_both
    for name, fn in pats.items():
        out[name] = [(n, time_ops(lambda: fn(n), max(3, min(20, (256 * MiB) // n)), group=grid.group))
                     for n in sizes]
    space.barrier(0)
    del me
    return out


# -- 2. one-GPU rates ----------------------------------------------------------------------------------------
def gemm_rates(S, grid, dtype, gemms, results) -> dict:
    """One GPU: the whole S^3 product and one panel product (grid's block, width S/8) with beta 0 and 1."""
    from tiledmm.timing import time_calls
    d = dev()
    out = {}
    A = torch.randn(S, S, device=d, dtype=torch.float32).to(dtype)
    B = torch.randn(S, S, device=d, dtype=torch.float32).to(dtype)
    C = torch.empty(S, S, device=d, dtype=dtype)
    mr, nc = -(-S // grid.pr), -(-S // grid.pc)
    w = max(1, S // 8)
    for name in gemms:
        gm = gemm_for(name, str(dtype).replace("torch.", ""))
        try:
            whole = time_calls(lambda: gm(A, B, C, 1.0, 0.0), batches=3, per_batch=1 if R["gpu"] else None, warmup=1)
            a, b, c = A[:mr, :w].contiguous(), B[:w, :nc].contiguous(), torch.zeros(mr, nc, device=d, dtype=dtype)
            p0 = time_calls(lambda: gm(a, b, c, 1.0, 0.0), batches=3, warmup=1)
            p1 = time_calls(lambda: gm(a, b, c, 1.0, 1.0), batches=3, warmup=1)
        except Exception as e:       # noqa: BLE001
            say(f"  {name}: FAILED {type(e).__name__}: {e}")
            whole = p0 = p1 = -1.0
        t = torch.tensor([whole, p0, p1], dtype=torch.float64, device=d)
        dist.broadcast(t, src=0)            # every rank goes on with rank 0's numbers (or none)
        whole, p0, p1 = (float(x) for x in t)
        if whole <= 0:
            continue
        c_bytes = mr * nc * A.element_size()
        out[name] = {"whole_ms": whole, "tflops": 2 * S ** 3 / (whole * 1e-3) / 1e12, "panel": [mr, w, nc],
                     "panel_beta0_ms": p0, "panel_beta1_ms": p1,
                     "c_pass_gbs": c_bytes / max((p1 - p0) * 1e-3, 1e-9) / 1e9 if p1 > p0 else None}
    say(f"\n== 2. one GPU {stamp()}")
    for name, r in out.items():
        say(f"{name:<8} {S}^3 {r['whole_ms']:.3f} ms ({r['tflops']:.0f} TFLOP/s); "
            f"panel {'x'.join(map(str, r['panel']))}"
            f" beta=0 {r['panel_beta0_ms']:.3f} ms, beta=1 {r['panel_beta1_ms']:.3f} ms -> C pass "
            f"{r['c_pass_gbs'] or float('inf'):.0f} GB/s")
    results.append({"case": "one GPU", **out})
    save()
    return out


# -- 3. SUMMA --------------------------------------------------------------------------------------------------
def panel_rows(tl) -> list:
    """Per panel of a SUMMA timeline: A's and B's transfer (issued, start, end), the product (start, end)
    and how long the compute stream waited before it."""
    by = {}
    prev_end = None
    for s, what, issued, a, b, after in sorted(tl, key=lambda r: r[3]):
        if s == "compute":
            key = what.split("K")[-1]
            r = by.setdefault(key, {"panel": key})
            r["gemm"] = (round(a, 3), round(b, 3))
            r["waited_ms"] = round(max(0.0, a - (prev_end if prev_end is not None else 0.0)), 3)
            r["waited_for"] = after
            prev_end = b
        else:
            key = what.split()[0][1:]
            r = by.setdefault(key, {"panel": key})
            r[what[0]] = (round(issued, 3), round(a, 3), round(b, 3))
    return list(by.values())


def print_panels(name, rows, limit=12):
    say(f"  timeline {name} (ms from the call's start; A/B: issued by the host, started, ended on the GPU; "
        "gemm: start-end; wait: compute stream idle before it)")
    for r in rows[:limit]:
        a = r.get("A")
        b = r.get("B")
        g = r.get("gemm", (0, 0))
        say(f"    K{r['panel']:<14} A {'-' if not a else f'{a[0]:.2f}/{a[1]:.2f}-{a[2]:.2f}':<20} "
            f"B {'-' if not b else f'{b[0]:.2f}/{b[1]:.2f}-{b[2]:.2f}':<20} gemm {g[0]:.2f}-{g[1]:.2f} "
            f"wait {r.get('waited_ms', 0):.2f} for {','.join(x.split('[')[0] for x in r.get('waited_for', [])) or '-'}")
    if len(rows) > limit:
        say(f"    ... {len(rows) - limit} more panels in the JSON")


def summa_case(label, grid, S, A, B, dtype, gm_name, results, *, engine="nccl", panel=None, depth=2,
               prepared=False, timeline=False, profile=False, margin=None, members=None):
    """One SUMMA case on ``grid`` (None on ranks outside it; every rank calls this): check, time, and
    optionally the timeline and the kernel profile. members: the grid's global ranks (default: all)."""
    me = dist.get_rank()
    members = list(members) if members is not None else list(range(dist.get_world_size()))

    def run():
        gm = gemm_for(gm_name, str(dtype).replace("torch.", ""))
        if engine == "symm":
            why = _symm.available(grid.group)
            if why:
                return {"skipped": why}
        blk = grid.blocks(S, S, S)
        a_loc, b_loc = grid.local_blocks(A, B)
        if prepared:
            a_loc, b_loc = D.prepare_summa(a_loc, b_loc, (S, S, S), grid=grid, panel=panel, depth=depth,
                                           engine=engine), None
        panels = D.summa_panels((S, S, S), grid, panel, dtype=dtype, depth=depth, engine=engine)

        def fn(st=None, out=None):
            return D.summa(a_loc, b_loc, (S, S, S), grid=grid, gemm=gm, panel=panel, depth=depth, engine=engine,
                           stats=st, out=out)
        poisoned = torch.full((blk["c"][0][1] - blk["c"][0][0], blk["c"][1][1] - blk["c"][1][0]), float("nan"),
                              dtype=dtype, device=dev())
        c = fn(out=poisoned)
        sync()
        rel = check(c, A, B, blk["c"][0], blk["c"][1], grid.group)
        del poisoned, c
        ms = time_collective(fn, R["gpu"], group=grid.group, batches=3)
        r = {"case": label, "gpus": len(members), "grid": [grid.pr, grid.pc], "gemm": gm_name, "engine": engine,
             "panel": str(panel or "auto"), "depth": depth, "prepared": prepared, "margin": margin,
             "panels": panels, "rel_err": rel, "ok": rel <= TOL[dtype], "ms": ms}
        if timeline:
            st = {}
            fn(st)
            sync()
            objs = [None] * len(members)
            dist.all_gather_object(objs, {k: st.get(k) for k in ("timeline", "span_ms", "compute_ms", "comm_ms",
                                                                 "compute_wait_ms", "first_compute_ms")},
                                   group=grid.group)
            r["timelines"] = objs
            worst = max(range(len(objs)), key=lambda i: objs[i]["span_ms"] or 0)
            r["worst_rank"] = worst
            for key in ("span_ms", "compute_ms", "comm_ms", "compute_wait_ms"):
                r[key] = objs[worst].get(key)
            r["panel_rows"] = panel_rows(objs[worst]["timeline"])
        if profile and R["gpu"]:
            r["profile"] = kernel_profile(fn, grid)
        return r
    res = case(label, members, run, results)
    if me == 0 and res is not None and "ms" in res:
        say(f"  {label:<44} {res['ms']:9.3f} ms  rel err {res['rel_err']:.1e} {'ok' if res['ok'] else 'WRONG'}  "
            f"panels {len(res['panels'])}" + (f"  exposed {res['span_ms'] - res['compute_ms']:.2f} ms (span "
                                               f"{res['span_ms']:.2f}, compute {res['compute_ms']:.2f}, comm busy "
                                               f"{res.get('comm_ms') or 0:.2f}; rank {res['worst_rank']})"
                                               if res.get("span_ms") else "") + f" {stamp()}")
        if res.get("panel_rows"):
            print_panels(label, res["panel_rows"])
        if res.get("profile"):
            print_profile(res["profile"])
    elif me == 0 and res is not None and "skipped" in res:
        say(f"  {label:<44} skipped: {res['skipped']}")
    return res


def kernel_profile(fn, grid) -> dict:
    """The GPU's own kernel intervals of one product (torch.profiler): per stream, [name, start, end] in ms
    from the first kernel; NCCL and copy kernels, GEMMs. Rank 0 of the grid and the others gathered."""
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            sync()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        ev = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and
              e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        t0 = min((e["ts"] for e in ev), default=0)
        per = {}
        for e in ev:
            s = str(e.get("args", {}).get("stream", e.get("tid")))
            nm = e.get("name", "")
            short = "nccl " + nm.split("_")[1] if nm.startswith("ncclDevKernel") or nm.startswith("ncclKernel") else \
                ("memcpy" if e["cat"] == "gpu_memcpy" else nm[:40])
            per.setdefault(s, []).append([short, round((e["ts"] - t0) / 1e3, 3),
                                          round((e["ts"] + e["dur"] - t0) / 1e3, 3)])
        mine = {"streams": per}
    except Exception as e:       # noqa: BLE001
        mine = {"error": f"{type(e).__name__}: {e}"}
    objs = [None] * len(grid.ranks)
    dist.all_gather_object(objs, mine, group=grid.group)
    return {"ranks": objs}


def print_profile(p, limit=8):
    r0 = p["ranks"][0]
    if "error" in r0:
        say(f"    profile: {r0['error']}")
        return
    say("    GPU kernels of rank 0 (profiler; ms from the first kernel), per stream:")
    for s, ks in r0["streams"].items():
        ks = sorted(ks, key=lambda k: k[1])
        busy = sum(b - a for _, a, b in ks)
        say(f"      stream {s}: {len(ks)} kernels, busy {busy:.2f} ms: " +
            "; ".join(f"{n} {a:.2f}-{b:.2f}" for n, a, b in ks[:limit]) + (" ..." if len(ks) > limit else ""))


def set_sm_margin(m: int) -> str:
    """TILEDMM_SM_MARGIN in this process: the setting, then the kernels' SM count and plans forgotten
    (tiledmm's own caches; what was reset is said)."""
    os.environ["TILEDMM_SM_MARGIN"] = str(m)
    reset = []
    try:
        try:                                   # the device-facts module, where there is one
            from tiledmm import _device
            _device.sm_margin.cache_clear()
            reset.append("device facts")
        except ImportError:
            pass
        from tiledmm.kernels.block import _vcommon
        _vcommon._sm_margin.cache_clear()
        reset.append("margin")
        from tiledmm.kernels.block import dispatch
        dispatch._forget_plans()
        reset.append("plans")
        try:
            from tiledmm.kernels.block import gluon_gemm
            gluon_gemm._num_sms.cache_clear()
            reset.append("gluon SMs")
        except Exception:       # noqa: BLE001
            pass
        return f"SMs planned {_vcommon.num_sms()} ({', '.join(reset)} reset)"
    except Exception as e:     # noqa: BLE001
        return f"margin not applied in process ({type(e).__name__}: {e}); set TILEDMM_SM_MARGIN at launch"


# -- 4. tensor-parallel patterns ----------------------------------------------------------------------------
def tp_cases(group_ranks, group, P, dtype, gemms, results, fused=True):
    w = len(group_ranks)
    me = dist.get_rank()
    d = dev()
    out = []
    for algo in ("allgather", "reducescatter"):
        m, k, n = (P * w, P, P * w) if algo == "allgather" else (P * w, P * w, P)
        if me in group_ranks:
            g = torch.Generator(device=d).manual_seed(11)
            A = torch.randn(m, k, generator=g, device=d, dtype=torch.float32).to(dtype)
            B = torch.randn(k, n, generator=g, device=d, dtype=torch.float32).to(dtype)
            gr = group_ranks.index(me)
            if algo == "allgather":
                a_loc, b_loc = D.shard_rows(A, group), D.shard_cols(B, group)
                rows, cols = (0, m), D.block_range(n, w, gr)
            else:
                a_loc, b_loc = D.shard_cols(A, group), D.shard_rows(B, group)
                rows, cols = D.block_range(m, w, gr), (0, n)
        variants = []
        for gm_name in gemms:
            variants.append(("baseline", gm_name, "nccl", None))
            variants.append(("overlap", gm_name, "nccl", None))
            if "symm-tp" not in R["skip"]:
                variants.append(("overlap", gm_name, "symm", None))
            if not R["quick"]:
                variants.append(("overlap", gm_name, "nccl", 4))
        if fused and R["gpu"] and "symm-tp" not in R["skip"]:
            variants.append(("torch fused", "torch", "symm", None))
        for kind, gm_name, engine, chunks in variants:
            label = f"{algo} {w} GPUs {kind} {gm_name}" + (f" {engine}" if kind == "overlap" else "") + \
                (f" chunks {chunks}" if chunks else "")

            def run():
                gm = gemm_for(gm_name, str(dtype).replace("torch.", ""))
                if engine == "symm":
                    why = _symm.available(group)
                    if why:
                        return {"skipped": why}
                if kind == "baseline":
                    fn = (lambda st=None: D.allgather_then_matmul(a_loc, b_loc, m, group=group, gemm=gm, stats=st)) \
                        if algo == "allgather" else \
                        (lambda st=None: D.matmul_then_reducescatter(a_loc, b_loc, group=group, gemm=gm, stats=st))
                elif kind == "torch fused":
                    fn = (lambda st=None: _symm.fused_allgather_matmul(a_loc, b_loc, group)) if algo == "allgather" \
                        else (lambda st=None: _symm.fused_matmul_reducescatter(a_loc, b_loc, group))
                else:
                    fn = (lambda st=None: D.allgather_matmul(a_loc, b_loc, m, group=group, gemm=gm, chunks=chunks,
                                                             engine=engine, stats=st)) if algo == "allgather" else \
                        (lambda st=None: D.matmul_reducescatter(a_loc, b_loc, group=group, gemm=gm, chunks=chunks,
                                                                engine=engine, stats=st))
                c = fn()
                sync()
                rel = check(c, A, B, rows, cols, group)
                ms = time_collective(fn, R["gpu"], group=group, batches=5)
                r = {"case": label, "algo": algo, "kind": kind, "gpus": w, "gemm": gm_name, "engine": engine,
                     "shape": [m, k, n], "rel_err": rel, "ok": rel <= TOL[dtype], "ms": ms}
                if kind == "overlap":
                    st = {}
                    fn(st)
                    sync()
                    r.update({k_: st.get(k_) for k_ in ("chunks", "span_ms", "compute_ms", "comm_ms", "timeline")})
                return r
            res = case(label, group_ranks, run, results)
            if me == 0 and res is not None:
                if "ms" in res:
                    extra = f" chunks {res['chunks']}, span {res['span_ms']:.2f} compute {res['compute_ms']:.2f} " \
                            f"comm {res.get('comm_ms') or 0:.2f}" if res.get("span_ms") else ""
                    say(f"  {label:<48} {res['ms']:8.3f} ms  rel err {res['rel_err']:.1e} "
                        f"{'ok' if res['ok'] else 'WRONG'}{extra} {stamp()}")
                elif "skipped" in res:
                    say(f"  {label:<48} skipped: {res['skipped']}")
                out.append(res)
        if me in group_ranks:
            del A, B, a_loc, b_loc
    return out


def fitted_panels(S, grid, dtype, fits, rates):
    """The panel schedule the model picks with this run's fitted links and GEMM rate (tiledmm); None when
    the fits are missing. Computed alike on every rank (the fits and rates were shared)."""
    panels = None
    if dist.get_rank() == 0:
        mach = machine_for({"gemm": "tiledmm", "engine": "nccl", "gpus": grid.pr * grid.pc}, fits, rates, dtype)
        if mach is not None:
            elem = torch.empty((), dtype=dtype).element_size()
            panels = M.summa_panels(S, S, S, grid.pr, grid.pc, elem=elem, machine=mach)
    box = [panels]
    dist.broadcast_object_list(box, src=0)       # one schedule on every rank
    return box[0]


# -- 5. the model next to the measurements ---------------------------------------------------------------------
def machine_for(res, fits, rates, dtype) -> M.Machine | None:
    gm = rates.get(res.get("gemm"))
    if not gm:
        return None
    pass_gbs = gm.get("c_pass_gbs") or 1e6
    sms = R["doc"].get("environment", {}).get("sms") or 0
    rate = gm["tflops"] * ((sms - res["margin"]) / sms if res.get("margin") and sms else 1.0)   # SMs left to NCCL
    base = M.Machine(gemm_tflops=rate, c_pass_gbs=pass_gbs, gpus_per_node=max(8, R["world"]))
    algo = res.get("algo", "summa")
    w = res["gpus"]
    if algo == "summa":
        if res["engine"] == "symm":
            lk, both = fits.get("copy-engine read"), fits.get("copy-engine row+col")
            if not lk:
                return None
            return base.with_(copy=lk, ingress_gbs=(both.gbs * 2 if both else lk.gbs))
        lk = fits.get("bcast row") or fits.get("bcast col")
        both = fits.get("bcast row+col")
        if not lk:
            return None
        return base.with_(nvlink=lk, ingress_gbs=(both.gbs * 2 if both else lk.gbs))
    if res["engine"] == "symm" or res.get("kind") == "torch fused":
        lk = fits.get("copy-engine read")
        return base.with_(copy=lk) if lk else None
    lk = fits.get(f"{algo} {w}")
    return base.with_(nvlink=lk) if lk else None


def predict_for(res, fits, rates, dtype, S):
    mach = machine_for(res, fits, rates, dtype)
    if mach is None or "ms" not in res:
        return None
    elem = torch.empty((), dtype=dtype).element_size()
    if res.get("algo", "summa") == "summa" and "panels" in res:
        return M.summa_time(S, S, S, res["gpus"], machine=mach, elem=elem, depth=res["depth"], engine=res["engine"],
                            panels=[tuple(p) for p in res["panels"]]).ms
    m, k, n = res["shape"]
    w = res["gpus"]
    engine = "symm" if res.get("kind") == "torch fused" else res["engine"]
    overlap = res["kind"] != "baseline"
    chunks = res.get("chunks") or 1
    if res["algo"] == "allgather":
        return M.allgather_matmul_time(m, k, -(-n // w), w, chunks=chunks, machine=mach, elem=elem, engine=engine,
                                       overlap=overlap).ms
    return M.matmul_reducescatter_time(m, k, n, w, chunks=chunks, machine=mach, elem=elem, engine=engine,
                                       overlap=overlap).ms


def summary(results, fits, rates, dtype, S, P):
    say("\n" + "=" * 100)
    say(f"SUMMARY {R['doc']['environment'].get('device')} x{R['world']}  (ms: slowest rank's median; pred: the "
        "model with this run's fitted links and GEMM rates; err = pred/ms - 1, target |err| <= 15 %)")
    say("bandwidth: " + "; ".join(f"{k} {v.gbs:.0f} GB/s {v.lat_us:.0f} us" for k, v in fits.items()))
    for name, r in rates.items():
        say(f"one GPU {name}: {S}^3 {r['whole_ms']:.2f} ms ({r['tflops']:.0f} TFLOP/s); beta=1 panel pass "
            f"{r['c_pass_gbs'] or float('inf'):.0f} GB/s")
    say(f"{'case':<48} {'ms':>8} {'x base':>7} {'eff':>5} {'pred':>8} {'err':>6} {'exposed':>8} {'check':>6}")
    base_tp = {}
    fused = {}
    for r in results:
        if r.get("kind") == "baseline" and "ms" in r:
            base_tp[(r["algo"], r["gpus"], r["gemm"])] = r["ms"]
        if r.get("kind") == "torch fused" and "ms" in r:
            fused[(r["algo"], r["gpus"])] = r["ms"]
    for r in results:
        if r.get("ms") is None or r.get("case") in ("bandwidth", "one GPU"):
            if r.get("error") or r.get("skipped"):
                say(f"{r['case']:<48} {'-':>8} {r.get('error') or 'skipped: ' + r['skipped']}"[:160])
            continue
        pred = predict_for(r, fits, rates, dtype, S)
        err = f"{(pred / r['ms'] - 1) * 100:+.0f}%" if pred else "-"
        if r.get("algo", "summa") == "summa" and "panels" in r:
            one = rates.get(r["gemm"], {}).get("whole_ms")
            sp = one / r["ms"] if one else None
            eff = sp / r["gpus"] if sp else None
            xb = f"{sp:.2f}" if sp else "-"
            eff_s = f"{eff:.2f}" if eff else "-"
        else:
            b = base_tp.get((r["algo"], r["gpus"], r["gemm"]))
            xb = f"{b / r['ms']:.3f}" if b else "-"
            f = fused.get((r["algo"], r["gpus"]))
            eff_s = f"{f / r['ms']:.2f}f" if f and r.get("kind") == "overlap" else "-"
        exp = f"{r['span_ms'] - r['compute_ms']:.2f}" if r.get("span_ms") and r.get("compute_ms") else "-"
        pred_s = f"{pred:.3f}" if pred else "-"
        say(f"{r['case'][:48]:<48} {r['ms']:>8.3f} {xb:>7} {eff_s:>5} {pred_s:>8} {err:>6} {exp:>8} "
            f"{'ok' if r['ok'] else 'WRONG':>6}")
    say("x base: SUMMA = one GPU (same kernel) / ms, TP = its plain collective-then-GEMM (same GEMM) / ms; eff: SUMMA "
        "speed-up / GPUs, TP 'f' = torch fused ms / ms; exposed = span - compute on the slowest rank's timeline")
    say("targets: SUMMA 4 GPUs x base >= 3.6 (eff >= 0.90), 2 GPUs >= 1.9; TP overlap x base >= 1.15 and >= torch "
        "fused (f >= 1); |err| <= 15 %")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="S = 8192, per-rank 2048")
    ap.add_argument("--cpu", action="store_true", help="gloo ranks on the CPU, toy sizes: the control flow only")
    ap.add_argument("--summa", type=int, default=None, help="SUMMA size S (S^3)")
    ap.add_argument("--per-rank", type=int, default=None, help="per-rank block for the TP patterns")
    ap.add_argument("--sm-margins", default="8,16", help="extra SUMMA runs with these TILEDMM_SM_MARGIN values")
    ap.add_argument("--nccl-ctas", type=int, default=4,
                    help="and with the row/column communicators capped to this many CTAs (where margin >= 2x)")
    ap.add_argument("--skip", action="append", default=[],
                    help="bandwidth, rates, summa, summa2, margins, tp, tp2, profile, symm-tp (the TP patterns' symmetric-memory "
                         "engine and torch's fused ops), summa-main (sections 3 and 3b: the main SUMMA cases)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=300.0,
                    help="seconds from the start after which the cases left are skipped (the summary still prints)")
    args = ap.parse_args()
    R["budget"] = args.budget
    R["skip"] = set(args.skip)
    R["gpu"] = not args.cpu
    R["quick"] = args.quick or args.cpu
    R["out"] = args.out
    if R["gpu"]:
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local),
                                timeout=datetime.timedelta(seconds=240))
    else:
        dist.init_process_group("gloo")
    w, rank = dist.get_world_size(), dist.get_rank()
    R["rank"], R["world"] = rank, w
    dtype = torch.bfloat16 if R["gpu"] else torch.float32
    S = args.summa or (64 if args.cpu else 8192 if args.quick else 32768)
    P = args.per_rank or (16 if args.cpu else 2048 if args.quick else 8192)
    env = {"date": datetime.date.today().isoformat(), "gpus": w, "torch": torch.__version__,
           "sm_margin_at_start": os.environ.get("TILEDMM_SM_MARGIN"), **{k: os.environ.get(k) for k in FORCED_ENV}}
    if R["gpu"]:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update({"device": p.name, "sms": p.multi_processor_count,
                    "nccl": ".".join(map(str, torch.cuda.nccl.version())), "cuda": torch.version.cuda})
    else:
        env["device"] = "CPU (gloo)"
    R["doc"] = {"environment": env, "args": vars(args), "results": []}
    results = R["doc"]["results"]
    say(json.dumps(env))
    # every group the run uses, made by every rank in one order (new groups are collectives of the world)
    t = time.perf_counter()
    grid = D.Grid.make()
    probe = torch.zeros(1, device=dev())
    if grid.pc > 1:
        dist.broadcast(probe, src=grid.global_rank(grid.row, 0), group=grid.row_group)
    if grid.pr > 1:
        dist.broadcast(probe, src=grid.global_rank(0, grid.col), group=grid.col_group)
    sync()
    first_ms = (time.perf_counter() - t) * 1e3
    pair = D.Grid.make(ranks=(0, 1)) if w > 2 else (grid if w == 2 else None)
    capped = None
    if R["gpu"] and "margins" not in args.skip:
        try:
            capped = D.Grid.make(max_ctas=args.nccl_ctas)
        except Exception as e:     # noqa: BLE001
            say(f"NCCL communicators capped to {args.nccl_ctas} CTAs not made: {type(e).__name__}: {e}")
    say(f"grid {grid.pr}x{grid.pc}; making its row and column communicators and their first broadcast: "
        f"{first_ms:.0f} ms (once per process) {stamp()}")
    results.append({"case": "first use", "ms": None, "first_broadcast_ms": first_ms})
    gemms = ("tiledmm", "torch")
    fits, rates = {}, {}
    if "bandwidth" not in args.skip:
        sizes = [MiB // 16, MiB, 8 * MiB] if args.cpu else \
            ([MiB, 8 * MiB, 64 * MiB] if args.quick else [MiB, 8 * MiB, 64 * MiB, 256 * MiB, 512 * MiB])
        try:
            fits = bandwidth(grid, pair, sizes, results)
        except Exception as e:     # noqa: BLE001
            say(f"bandwidth sweep FAILED: {type(e).__name__}: {e}")
        sync()
        dist.barrier()
    if "rates" not in args.skip:
        try:
            rates = gemm_rates(S, grid, dtype, gemms, results)
        except Exception as e:     # noqa: BLE001
            say(f"one-GPU rates FAILED: {type(e).__name__}: {e}")
        sync()
        dist.barrier()
    do4, do2 = "summa" not in args.skip, "summa2" not in args.skip and w > 2
    two = dict(members=(0, 1))
    prof = "profile" not in args.skip
    A = B = None
    if do4 or do2:
        g = torch.Generator(device=dev()).manual_seed(7)
        A = torch.randn(S, S, generator=g, device=dev(), dtype=torch.float32).to(dtype)
        B = torch.randn(S, S, generator=g, device=dev(), dtype=torch.float32).to(dtype)
    # the main cases first (a run over its --budget skips what is left, and the summary still prints)
    if do4 and "summa-main" not in args.skip:
        say(f"\n== 3. SUMMA {S}^3 {str(dtype)[6:]} on {w} GPUs ({grid.pr}x{grid.pc}) {stamp()}")
        summa_case(f"summa {w} old schedule (whole K blocks)", grid, S, A, B, dtype, "tiledmm", results,
                   panel="block", timeline=True)
        summa_case(f"summa {w} nccl", grid, S, A, B, dtype, "tiledmm", results, timeline=True, profile=prof)
        summa_case(f"summa {w} symm", grid, S, A, B, dtype, "tiledmm", results, engine="symm", timeline=True,
                   profile=prof)
        summa_case(f"summa {w} nccl torch GEMM", grid, S, A, B, dtype, "torch", results, timeline=True)
    if do2 and "summa-main" not in args.skip:
        say(f"\n== 3b. SUMMA {S}^3 on GPUs 0 and 1 (1x2, a subgroup of this run) {stamp()}")
        summa_case("summa 2 nccl", pair, S, A, B, dtype, "tiledmm", results, timeline=True, **two)
        summa_case("summa 2 symm", pair, S, A, B, dtype, "tiledmm", results, engine="symm", timeline=True, **two)
    if "tp" not in args.skip:
        say(f"\n== 4. tensor-parallel patterns, per-rank {P}x{P} blocks, {w} GPUs {stamp()}")
        tp_cases(list(range(w)), None, P, dtype, gemms, results)
    if "tp2" not in args.skip and w > 2:
        say(f"\n== 4b. tensor-parallel patterns on GPUs 0 and 1 {stamp()}")
        tp_cases([0, 1], pair.group if pair is not None else None, P, dtype, gemms, results)
    if do4:
        say(f"\n== 5. SUMMA {S}^3 on {w} GPUs, more variants {stamp()}")
        summa_case(f"summa {w} nccl prepared", grid, S, A, B, dtype, "tiledmm", results, prepared=True)
        summa_case(f"summa {w} symm prepared", grid, S, A, B, dtype, "tiledmm", results, engine="symm",
                   prepared=True)
        summa_case(f"summa {w} nccl depth 3", grid, S, A, B, dtype, "tiledmm", results, depth=3)
        fitted = fitted_panels(S, grid, dtype, fits, rates)
        if fitted and fitted != D.summa_panels((S, S, S), grid, None, dtype=dtype):
            summa_case(f"summa {w} nccl panels of the fitted model", grid, S, A, B, dtype, "tiledmm", results,
                       panel=[p1 - p0 for p0, p1 in fitted])
        summa_case(f"summa {w} symm torch GEMM", grid, S, A, B, dtype, "torch", results, engine="symm")
        if "margins" not in args.skip and R["gpu"]:
            for mg in [int(x) for x in args.sm_margins.split(",") if x.strip()]:
                say(f"  TILEDMM_SM_MARGIN={mg}: {set_sm_margin(mg)}")
                summa_case(f"summa {w} nccl SM margin {mg}", grid, S, A, B, dtype, "tiledmm", results,
                           margin=mg, timeline=True)
                if capped is not None and mg >= 2 * args.nccl_ctas:
                    summa_case(f"summa {w} nccl margin {mg} NCCL<={args.nccl_ctas} CTAs", capped, S, A, B,
                               dtype, "tiledmm", results, margin=mg, timeline=True)
            say(f"  TILEDMM_SM_MARGIN back to {env['sm_margin_at_start'] or 0}: "
                f"{set_sm_margin(int(env['sm_margin_at_start'] or 0))}")
    if do2:
        summa_case("summa 2 old schedule (whole K blocks)", pair, S, A, B, dtype, "tiledmm", results,
                   panel="block", timeline=True, **two)
        summa_case("summa 2 nccl torch GEMM", pair, S, A, B, dtype, "torch", results, **two)
    del A, B
    if rank == 0:
        try:
            import tiledmm.kernels.block.dispatch as block_dispatch
            R["doc"]["local_launches"] = str(block_dispatch.plans())
        except Exception:         # noqa: BLE001
            pass
        R["doc"]["fits"] = {k: {"gbs": v.gbs, "lat_us": v.lat_us} for k, v in fits.items()}
        R["doc"]["rates"] = rates
        for r in results:
            p = predict_for(r, fits, rates, dtype, S) if "ms" in r and r.get("ms") else None
            if p:
                r["predicted_ms"] = p
        save()
        summary(results, fits, rates, dtype, S, P)
    ok = all(r.get("ok", True) for r in results)
    sync()
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
