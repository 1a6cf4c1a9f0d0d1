"""Issue 22: how fast can a process's first out-of-core call page-lock its staging buffers?

Each case runs in a fresh process (the first allocations are the cost that matters; later runs
reuse the pool): the CUDA context is made first, then ``count`` buffers of ``MiB`` are made by
``threads`` threads at once, one of these ways:

  torch      torch.empty(n, dtype=torch.uint8, pin_memory=True) (cudaHostAlloc: the old runner's way)
  torch+reg  the same under PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True,
             pinned_num_register_threads:8 (torch's own fault-in-then-register)
  register   tiledmm.outofcore.cudart.pin_host: a mapping faulted in by the thread, then cudaHostRegister
  huge       the same with transparent huge pages advised
  pageable   the mapping faulted in, not registered (what faulting alone costs; copies are not async)

then the H2D and D2H rates of copies from/to those buffers (one stream, CUDA events, best of 3).
The old runner made 26 x 32 MiB on the main thread (10 staging + 16 result buffers); the new one
makes 20 x 8 MiB (8 staging threads, 8 unstaging threads: ring of threads + 2 each).

  PYTHONPATH=src python3 scripts/pin_probe.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MiB = 1 << 20
WAYS = ("torch", "torch+reg", "register", "huge", "pageable")
CONFIGS = ((32, 26, 1), (8, 26, 1), (8, 20, 1), (8, 20, 10))     # (MiB, count, threads)


def case(way: str, mib: int, count: int, threads: int) -> dict:
    """In this (fresh) process: make the buffers, time it, then time copies through them."""
    import numpy as np
    import torch
    from tiledmm.outofcore import cudart
    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    n = mib * MiB

    def make(_):
        if way == "pageable":
            arr = np.frombuffer(mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE), dtype=np.uint8)
            arr[::mmap.PAGESIZE] = 0
            return torch.from_numpy(arr)
        if way.startswith("torch"):
            return torch.empty(n, dtype=torch.uint8, pin_memory=True)
        return cudart.pin_host(n, dev, how=way)
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        bufs = list(ex.map(make, range(count)))
    alloc_s = time.perf_counter() - t
    out = {"way": way, "MiB": mib, "count": count, "threads": threads, "alloc_s": alloc_s,
           "pinned": sum(b.is_pinned() for b in bufs),
           "registered": sum(b.data_ptr() in cudart._registered for b in bufs)}
    d = torch.empty(n, dtype=torch.uint8, device=dev)
    s = torch.cuda.Stream(dev)
    for kind in ("h2d", "d2h"):
        best = float("inf")
        for _ in range(3):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(s):
                e0.record(s)
                for b in bufs:
                    (d.copy_(b, non_blocking=True) if kind == "h2d" else b.copy_(d, non_blocking=True))
                e1.record(s)
            e1.synchronize()
            best = min(best, e0.elapsed_time(e1) * 1e-3)
        out[f"{kind}_GBs"] = count * n / best / 1e9
    for b in bufs:
        cudart.release_host(b)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        way, mib, count, threads = args.case.split(",")
        print("PINPROBE " + json.dumps(case(way, int(mib), int(count), int(threads))), flush=True)
        return
    rows = []
    for mib, count, threads in CONFIGS:
        for way in WAYS:
            env = dict(os.environ)
            env.pop("TILEDMM_OOC_PIN", None)
            if way == "torch+reg":
                env["PYTORCH_CUDA_ALLOC_CONF"] = "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", f"{way},{mib},{count},{threads}"],
                               capture_output=True, text=True, env=env)
            line = next((x for x in p.stdout.splitlines() if x.startswith("PINPROBE ")), None)
            if line is None:
                print(f"{way} {count}x{mib} MiB: failed (rc {p.returncode})\n{p.stderr[-2000:]}", flush=True)
                continue
            rows.append(json.loads(line[len("PINPROBE "):]))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "pin_probe.json"), "w") as f:
            json.dump(rows, f, indent=1)
    print(f"\n{'way':<10} {'buffers':>12} {'threads':>7} {'alloc s':>8} {'GB/s pinned':>11} {'pinned':>6} "
          f"{'registered':>10} {'H2D GB/s':>8} {'D2H GB/s':>8}")
    for r in rows:
        total = r["count"] * r["MiB"] * MiB
        print(f"{r['way']:<10} {str(r['count']) + ' x ' + str(r['MiB']) + ' MiB':>12} {r['threads']:>7} "
              f"{r['alloc_s']:>8.3f} {total / r['alloc_s'] / 1e9:>11.2f} {r['pinned']:>6} {r['registered']:>10} "
              f"{r['h2d_GBs']:>8.1f} {r['d2h_GBs']:>8.1f}")


if __name__ == "__main__":
    main()
