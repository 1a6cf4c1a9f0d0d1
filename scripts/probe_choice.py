"""What the default picks for one product and how its neighbours time, through ``tiledmm.matmul``:

    PYTHONPATH=src python3 scripts/probe_choice.py 256x5120x13824 --dtype tf32 [--variants tma-copy,tma-kmajor,blocked]

MxKxN, A and B row-major (the bench's layout). Prints the dispatcher's recorded choice (source,
variant, config), then ms (``timing.time_calls``: rotated inputs, median of batches) for the pick,
for each listed variant forced with its own config and with the pick's config where it fits, and
for torch.matmul; every result checked against float64 first. ``--kept-out``: each input set's calls
write a kept output passed as ``out=`` (the bench harness's way) instead of a new one.
"""
from __future__ import annotations

import argparse
import sys

import torch

import tiledmm
from tiledmm import harness, timing
from tiledmm.kernels.block import matmul as bm

DTYPES = {"bf16": (torch.bfloat16, None), "fp16": (torch.float16, None), "tf32": (torch.float32, "tf32"),
          "fp32": (torch.float32, "ieee")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape")
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    ap.add_argument("--variants", default="tma-copy,tma-kmajor,tma,blocked,splitk")
    ap.add_argument("--kept-out", action="store_true", help="each input set with its own kept output, passed as "
                    "out= (the bench harness's way)")
    args = ap.parse_args()
    M, K, N = map(int, args.shape.split("x"))
    dtype, prec = DTYPES[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    n = harness.rotation_for((M, K, N), str(dtype).replace("torch.", ""))
    sets = [(torch.randn(M, K, device="cuda").to(dtype), torch.randn(K, N, device="cuda").to(dtype)) for _ in range(n)]
    a0, b0 = sets[0]
    outs = [torch.empty(M, N, device="cuda", dtype=dtype) if args.kept_out else None for _ in sets]
    ref = a0.double() @ b0.double()
    tol = 2e-2 if dtype != torch.float32 else (5e-3 if prec == "tf32" else 1e-5)

    def timed(label, **kw):
        try:
            out = tiledmm.matmul(a0, b0, kernel="triton", precision=prec, **kw)
        except tiledmm.TiledmmError as e:
            print(f"{label:34} n/a: {str(e)[:90]}")
            return
        err = ((out.double() - ref).norm() / ref.norm()).item()
        ms = timing.time_calls([lambda a=a, b=b, o=o: tiledmm.matmul(a, b, kernel="triton", precision=prec,
                                                                     out=o, **kw)
                                for (a, b), o in zip(sets, outs)])
        wrong = "  WRONG" if err > tol else ""
        print(f"{label:34} {ms:8.4f} ms  x torch {t_torch / ms:5.2f}  rel err {err:.1e}{wrong}", flush=True)

    t_torch = timing.time_calls([lambda a=a, b=b: torch.matmul(a, b) for a, b in sets])
    timed("default pick")
    c = torch.empty(M, N, device="cuda", dtype=dtype)
    choice = bm.choices().get(bm.plan_key(a0, b0, c, prec or "none", 1.0, 0.0), {})
    print(f"choice: {choice.get('source')} {choice.get('variant')} {choice.get('config')}")
    for v in args.variants.split(","):
        timed(f"{v} (its own config)", variant=v)
        if choice.get("config") and v == choice.get("variant"):
            continue
        if choice.get("config") and "BLOCK_M" in choice["config"]:
            timed(f"{v} (the pick's config)", variant=v, config=dict(choice["config"]))
    print(f"{'torch.matmul':34} {t_torch:8.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
