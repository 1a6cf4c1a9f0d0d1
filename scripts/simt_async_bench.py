"""Rung 11 (cp.async ring) measured against rung 10 and cuBLAS SGEMM, in one device call.

    python3 scripts/simt_async_bench.py sass [CONFIG ...]     # no GPU: registers, spills, SASS mix (sm_90)
    python3 scripts/simt_async_bench.py sanitize [CONFIG ...] # run under compute-sanitizer: 2 shapes, + 1 float64
    python3 scripts/simt_async_bench.py ncu N CONFIG ...      # Nsight Compute: FMA pipe, issue slots, stalls
                                                              # (rung10:SHAPE for rung 10)
    python3 scripts/simt_async_bench.py bench [--sizes 2048,4096,8192] [--configs ...] [--out DIR]

``bench`` checks every timed kernel first (fresh normal inputs, NaN-poisoned output,
‖C - ref‖/‖ref‖ against float64 on the GPU), then times it with ``timing.time_calls``
(queued batches, two input sets rotated, median), cuBLAS SGEMM with TF32 off in the same
process, and prints a table last: rung, config, size, TFLOP/s, x cuBLAS, registers,
dynamic shared memory, rel. error.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

OP = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", re.M)
RUNG10 = "128x128x32-w32x64-t8x8"      # rung 10's choice at 2048^3 - 8192^3 (performance.md)


def cuobjdump() -> str:
    import shutil
    if shutil.which("cuobjdump"):
        return "cuobjdump"
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def sass(configs, dtype="float32"):
    """Compile rung 11 for sm_90 on this machine (libnvvm, ptxas, cuobjdump; no GPU)."""
    import tiledmm._backend as backend
    backend._mode = "gpu"
    import numba.cuda.dispatcher as dispatcher
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    import numba.cuda.cudadrv.nvrtc as nvrtc
    try:
        nvrtc.get_supported_ccs()
    except Exception:  # noqa: BLE001  no libnvrtc here: numba asks it only which archs exist
        nvrtc.get_supported_ccs = lambda: ((9, 0),)
        import numba.cuda.cuda_paths as paths
        paths._get_nvrtc_path = lambda: ("none", None)
    import numpy as np
    from numba import from_dtype
    from numba.cuda import compile_ptx

    from tiledmm.kernels.simt import k11_async
    for name in configs or [c.name for c in k11_async.CANDIDATES[dtype]]:
        cfg = k11_async.Config.parse(name)
        for vec in (True, False):
            k = k11_async.make_async(cfg, dtype, vec)
            arr = from_dtype(np.dtype(dtype))[:, :]
            ptx, _ = compile_ptx(k.py_func, (arr, arr, arr), cc=(9, 0),
                                 launch_bounds=k.targetoptions.get("launch_bounds"))
            out = tempfile.mkdtemp()
            base = os.path.join(out, "k")
            open(base + ".ptx", "w").write(ptx)
            r = subprocess.run(["ptxas", "-arch=sm_90", "-v", base + ".ptx", "-o", base + ".cubin"],
                               capture_output=True, text=True, check=True)
            res = " ".join(x.strip() for x in r.stderr.splitlines() if "registers" in x or "spill" in x)
            code = subprocess.run([cuobjdump(), "-sass", base + ".cubin"], capture_output=True, text=True,
                                  check=True).stdout
            open(f"/tmp/k11_{name}_{'vec' if vec else 'elem'}.sass", "w").write(code)
            whole = collections.Counter(OP.findall(code))
            print(f"== {name} {dtype} {'16-byte' if vec else 'element'} copies of N: {res}")
            print("   whole kernel:", dict(whole.most_common(14)))
            loop = main_loop(code)
            if loop:
                tot = sum(loop.values())
                ff = loop["FFMA"] + loop["DFMA"]
                print(f"   phase loop (both copy paths, one taken a phase): {tot} instructions, FFMA/DFMA {ff} "
                      f"({ff / max(tot, 1):.0%}):", dict(loop.most_common(12)))


def main_loop(code: str):
    """The instructions of the loop that holds the barrier: from the back branch's target to it."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", code)]
    bar = next((a for a, t in ins if "BAR.SYNC" in t), None)
    if bar is None:
        return None
    for a, t in ins:
        m = re.search(r"BRA (?:!?U?P\w+, )?0x([0-9a-f]+)", t)
        if m and a > bar and int(m.group(1), 16) <= bar:
            lo = int(m.group(1), 16)
            c = collections.Counter()
            for b, u in ins:
                if lo <= b <= a:
                    op = re.match(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", u)
                    c[op.group(1)] += 1
            return c
    return None


def rel_err(out, ref):
    import torch
    if torch.isnan(out).any():
        return float("nan")
    return ((out.double() - ref).norm() / ref.norm()).item()


def bench(sizes, configs, out_dir, rung10=True):
    import torch

    import tiledmm
    from tiledmm.kernels.simt import k11_async
    from tiledmm.timing import time_calls
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.cuda.get_device_name()
    import numba
    import numba_cuda
    print(f"device {dev}; torch {torch.__version__}; numba {numba.__version__}; "
          f"numba-cuda {getattr(numba_cuda, '__version__', '?')}; date 2026-11-22", flush=True)
    rows, log = [], []
    for n in sizes:
        g = torch.Generator(device="cuda").manual_seed(n)
        ins = [(torch.randn(n, n, device="cuda", generator=g), torch.randn(n, n, device="cuda", generator=g))
               for _ in range(2)]
        ref = ins[0][0].double() @ ins[0][1].double()
        flop = 2.0 * n ** 3
        outs = [torch.empty(n, n, device="cuda") for _ in ins]

        def timed(label, cfg, fn, extra=""):
            out0 = torch.full((n, n), float("nan"), device="cuda")
            fn(*ins[0], out0)
            torch.cuda.synchronize()
            err = rel_err(out0, ref)
            ok = err == err and err < 1e-5
            ms = time_calls([lambda a=a, b=b, o=o: fn(a, b, o) for (a, b), o in zip(ins, outs)]) if ok else float("nan")
            tf = flop / ms / 1e9 if ok else float("nan")
            rows.append(dict(rung=label, config=cfg, n=n, ms=ms, tflops=tf, err=err, extra=extra))
            print(f"  {label:8s} {cfg:34s} {n:5d}  {ms:8.3f} ms  {tf:6.2f} TFLOP/s  rel err {err:.1e} {extra}",
                  flush=True)

        timed("cuBLAS", "torch.matmul fp32 (TF32 off)", lambda a, b, o: torch.matmul(a, b, out=o))
        if rung10:
            timed("rung10", RUNG10, lambda a, b, o: tiledmm.matmul(a, b, kernel="autotuned", out=o, config=RUNG10))
        for name in configs:
            def fn(a, b, o, name=name):
                tiledmm.matmul(a, b, kernel="async", out=o, config=name)
            try:
                timed("rung11", name, fn)
            except Exception as e:       # noqa: BLE001  report and go on with the others
                print(f"  rung11 {name} {n}: FAILED {type(e).__name__}: {e}", flush=True)
                rows.append(dict(rung="rung11", config=name, n=n, ms=float("nan"), tflops=float("nan"),
                                 err=float("nan"), extra=f"failed: {e}"))
        del ins, ref, outs
        torch.cuda.empty_cache()
    # resources of every rung-11 variant that ran
    res = {}
    for name in configs:
        cfg = k11_async.Config.parse(name)
        k = k11_async.make_async(cfg, "float32", True)
        for ov in k.overloads.values():
            res[name] = (ov.regs_per_thread, cfg.smem_bytes("float32"), ov.local_mem_per_thread)
    cub = {r["n"]: r["tflops"] for r in rows if r["rung"] == "cuBLAS"}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        json.dump(dict(device=dev, rows=rows, resources=res), open(os.path.join(out_dir, "simt_async.json"), "w"),
                  indent=1)
    print("\nrung    config                              n      TFLOP/s  x cuBLAS  regs  smem B  local  rel.err")
    for r in rows:
        reg, sm, loc = res.get(r["config"], ("", "", ""))
        print(f"{r['rung']:7s} {r['config'][:34]:34s} {r['n']:5d}  {r['tflops']:7.2f}  {r['tflops'] / cub[r['n']]:7.3f}"
              f"  {reg!s:>4s}  {sm!s:>6s}  {loc!s:>5s}  {r['err']:.1e}")


def sanitize():
    """Small launches under compute-sanitizer (run this script under it): 2 shapes with edges."""
    import torch

    import tiledmm
    from tiledmm.kernels.simt import k11_async
    cfgs = [(n, "float32") for n in (sys.argv[2:] or [k11_async.ANALYSED.name])]
    cfgs.append((k11_async.CANDIDATES["float64"][0].name, "float64"))
    bad = 0
    for (m, k, n) in [(131, 77, 204), (256, 64, 257)]:      # N's rows: 16-byte copies, element copies
        for name, dt in cfgs:
            d = getattr(torch, dt)
            a = torch.randn(m, k, device="cuda", dtype=d)
            b = torch.randn(k, n, device="cuda", dtype=d)
            o = torch.full((m, n), float("nan"), device="cuda", dtype=d)
            tiledmm.matmul(a, b, kernel="async", out=o, config=name)
            err = rel_err(o, a.double() @ b.double())
            bad += not err < 1e-5
            print(f"sanitize {name} {dt} {m}x{k}x{n}: rel err {err:.1e}", flush=True)
    print("sanitize: all correct" if not bad else f"sanitize: {bad} wrong")


S = "smsp__average_warps_issue_stalled"
NCU_METRICS = ",".join([
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "gpu__time_duration.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
] + [f"{S}_{r}_per_issue_active.ratio" for r in ("not_selected", "math_pipe_throttle", "short_scoreboard",
                                                    "long_scoreboard", "barrier", "mio_throttle", "wait",
                                                    "dispatch_stall", "lg_throttle")])


def one(cfg: str, n: int) -> None:
    """Two launches of one configuration (``rung10:SHAPE`` for rung 10, ``cublas`` for cuBLAS SGEMM
    with TF32 off), for ncu."""
    import torch

    import tiledmm
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    for _ in range(2):
        if cfg == "cublas":
            torch.matmul(a, b)
        elif cfg.startswith("rung10:"):
            tiledmm.matmul(a, b, kernel="autotuned", config=cfg[7:])
        else:
            tiledmm.matmul(a, b, kernel="async", config=cfg)
    torch.cuda.synchronize()


def ncu(n: int, cfgs) -> None:
    """Nsight Compute on the second launch of each configuration: FMA pipe, issue slots, stalls."""
    import csv
    import io
    for cfg in cfgs:
        r = subprocess.run(["ncu", "--clock-control", "none", "--csv", "--metrics", NCU_METRICS,
                            "--kernel-name-base", "function", "--kernel-name", "regex:async_ring|unsigned|gemm|Kernel",
                            "--launch-skip", "1", "--launch-count", "1",
                            sys.executable, os.path.abspath(__file__), "one", cfg, str(n)],
                           capture_output=True, text=True)
        text = r.stdout
        if '"ID"' not in text:
            print(f"ncu {cfg}: no data", r.stderr[-800:])
            continue
        m = {row["Metric Name"]: row["Metric Value"].replace(",", "")
             for row in csv.DictReader(io.StringIO(text[text.index('"ID"'):]))}
        stalls = {k.split("stalled_")[1].split("_per")[0]: round(float(v), 2) for k, v in m.items() if "stalled" in k}
        print(f"ncu {cfg} {n}: {float(m['gpu__time_duration.sum']) / 1e6:.3f} ms, FMA pipe "
              f"{m['sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active']} %, issue active "
              f"{m['smsp__issue_active.avg.pct_of_peak_sustained_active']} %, warps active "
              f"{m['sm__warps_active.avg.pct_of_peak_sustained_active']} %, shared pipe "
              f"{m['l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed']} %")
        print("   stalls (warps per issue):", dict(sorted(stalls.items(), key=lambda x: -x[1])))


def main():
    if sys.argv[1:2] == ["sanitize"]:
        return sanitize()
    if sys.argv[1:2] == ["one"]:
        return one(sys.argv[2], int(sys.argv[3]))
    if sys.argv[1:2] == ["ncu"]:
        return ncu(int(sys.argv[2]), sys.argv[3:])
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("sass", "bench"))
    ap.add_argument("configs", nargs="*")
    ap.add_argument("--sizes", default="2048,4096,8192")
    ap.add_argument("--out")
    ap.add_argument("--no-rung10", action="store_true")
    args = ap.parse_intermixed_args()
    if args.mode == "sass":
        sass(args.configs)
    else:
        from tiledmm.kernels.simt import k11_async
        configs = args.configs or [c.name for c in k11_async.CANDIDATES["float32"]]
        bench([int(s) for s in args.sizes.split(",")], configs, args.out, not args.no_rung10)


if __name__ == "__main__":
    main()
