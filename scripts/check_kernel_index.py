#!/usr/bin/env python3
"""tiledmm's kernel index on a GPU: the first call of a process finds its compiled kernels without
Triton's JIT (and without ``triton_key``, ~0.45 s), where an earlier process compiled them.

    PYTHONPATH=src python3 scripts/check_kernel_index.py [--n 1536] [--dtypes bf16,fp32]

Per dtype, three fresh child processes call ``tiledmm.matmul(a, b)`` once on n x n x n, default
settings, the same TRITON_CACHE_DIR as the caller (Triton's own cache as it is):
  1. "record":   an empty tiledmm cache folder: Triton's JIT finds or compiles the kernels, the index
                 records them;
  2. "indexed":  a new, empty tiledmm cache folder (no tuned choices: a shape class tiledmm's
                 dispatcher has never seen); the index lives beside Triton's cache, so it is found;
  3. "index off": like 2 with TILEDMM_KERNEL_INDEX=off (Triton's JIT, its disk cache warm).
Each prints the first call's wall time (synchronised), how often Triton's ``JITFunction.run`` ran,
whether ``triton_key`` was computed, and the product's error against float64. Expected on a GPU with
Triton 3.6.0: "indexed" with 0 JIT runs and triton_key not computed, faster than "index off".
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
n, dtype = int(sys.argv[1]), sys.argv[2]
import torch, triton, tiledmm
from triton.runtime import jit
from triton.runtime.cache import triton_key
runs = [0]
real_run = jit.JITFunction.run
def counted(self, *args, **kwargs):
    runs[0] += 1
    return real_run(self, *args, **kwargs)
jit.JITFunction.run = counted
dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
torch.backends.cuda.matmul.allow_tf32 = False
a, b = torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)
torch.cuda.synchronize()
t = time.perf_counter()
c = tiledmm.matmul(a, b)
torch.cuda.synchronize()
first = time.perf_counter() - t
t = time.perf_counter()
tiledmm.matmul(a, b)
torch.cuda.synchronize()
second = time.perf_counter() - t
ref = a.double() @ b.double()
err = ((c.double() - ref).norm() / ref.norm()).item()
print(json.dumps(dict(first_s=round(first, 4), second_s=round(second, 5), jit_runs=runs[0],
                      triton_key_computed=triton_key.cache_info().currsize > 0, rel_err=err,
                      triton=triton.__version__)))
"""


def child(n: int, dtype: str, cache: str, index_off: bool = False) -> dict:
    env = dict(os.environ, TILEDMM_CACHE_DIR=cache, TILEDMM_QUIET="1")
    env.pop("TILEDMM_TUNE", None)
    env.pop("TILEDMM_KERNEL_INDEX", None)
    if index_off:
        env["TILEDMM_KERNEL_INDEX"] = "off"
    r = subprocess.run([sys.executable, "-c", CHILD, str(n), dtype], env=env, capture_output=True, text=True,
                       timeout=600)
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1536)
    ap.add_argument("--dtypes", default="bf16,fp32")
    opts = ap.parse_args()
    for dtype in opts.dtypes.split(","):
        first = tempfile.mkdtemp(prefix="tiledmm-kindex-")
        rows = {"record": child(opts.n, dtype, first)}
        from triton import knobs
        kernels = os.path.join(knobs.cache.dir, "tiledmm-index")
        entries = len(os.listdir(kernels)) if os.path.isdir(kernels) else 0
        for label, off in (("indexed", False), ("index off", True)):
            fresh = tempfile.mkdtemp(prefix="tiledmm-kindex-")
            rows[label] = child(opts.n, dtype, fresh, index_off=off)
            shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(first, ignore_errors=True)
        print(f"== {dtype} {opts.n}^3: {entries} index entries beside Triton's cache after the first process")
        for label, row in rows.items():
            print(f"  {label:10} first call {row['first_s']:7.3f} s  second {row['second_s']:.5f} s  "
                  f"JIT runs {row['jit_runs']}  triton_key computed {row['triton_key_computed']}  "
                  f"rel err {row['rel_err']:.1e}  (Triton {row['triton']})")


if __name__ == "__main__":
    main()
