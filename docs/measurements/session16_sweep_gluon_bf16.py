"""Scratch (session 16): Gluon configs on the bf16 shapes below 0.95x cuBLAS in session 14's bench (M x K x N).
Each: torch.matmul, tiledmm.matmul default, then G.launch with each config (out= kept, 3 input sets rotated,
timing.time_calls). Prints one line a shape; '!' marks a wrong result."""
import json, os, sys
import torch, tiledmm
from tiledmm import timing
from tiledmm.kernels.block import gluon_gemm as G
c_ = G._c
CFGS = {"256t": c_(128, 256, 64, 8, 4, group=16, epi=2, tail=1), "256e2": c_(128, 256, 64, 8, 4, group=16, epi=2),
        "256s3": c_(128, 256, 64, 8, 3), "256s3g16": c_(128, 256, 64, 8, 3, group=16),
        "128": c_(128, 128, 64, 8, 4), "128s5": c_(128, 128, 64, 8, 5), "128s6": c_(128, 128, 64, 8, 6),
        "128s5g16": c_(128, 128, 64, 8, 5, group=16), "128s5t": c_(128, 128, 64, 8, 5, tail=1),
        "64x256": c_(64, 256, 64, 4, 4)}
if len(sys.argv) > 1:
    CFGS = {k: v for k, v in CFGS.items() if k in sys.argv[1].split(",")}
SHAPES = [(256, 4096, 4096), (256, 4096, 11008), (256, 8192, 8192), (512, 4096, 4096), (512, 4096, 11008),
          (512, 11008, 4096), (256, 13824, 5120), (256, 5120, 5120), (1024, 8192, 8192), (2048, 8192, 8192),
          (128, 4096, 4096), (128, 4096, 11008), (1024, 28672, 8192), (16, 11008, 4096), (1024, 4096, 11008),
          (4096, 4096, 4096), (8192, 8192, 8192), (2048, 4096, 4096), (1536, 1536, 1536), (4096, 4096, 11008),
          (4096, 5120, 13824), (1000, 1000, 1000), (5000, 5000, 5000), (64, 4096, 4096), (4096, 8192, 28672)]
rows = []
dt = torch.bfloat16
for (M, K, N) in SHAPES:
    sets = [(torch.randn(M, K, device="cuda").to(dt), torch.randn(K, N, device="cuda").to(dt)) for _ in range(3)]
    a, b = sets[0]; ref = a.double() @ b.double()
    tq = timing.time_calls([lambda a=a, b=b: torch.matmul(a, b) for a, b in sets])
    td = timing.time_calls([lambda a=a, b=b: tiledmm.matmul(a, b) for a, b in sets])
    row = {"shape": [M, K, N], "torch_us": tq * 1e3, "default_us": td * 1e3, "pick": G.heuristic(M, N, K, "16bit")}
    line = f"{M}x{K}x{N} torch {tq*1e3:.1f} default {td*1e3:.1f} ({tq/td:.2f}) |"
    for name, cfg in CFGS.items():
        if cfg["SPLIT_K"] > 1 and (G.cdiv(K, 64) < 4 * cfg["SPLIT_K"]):
            continue
        outs = [torch.full((M, N), float("nan"), device="cuda", dtype=dt) for _ in sets]
        try:
            G.launch(a, b, outs[0], precision="none", config=cfg); torch.cuda.synchronize()
        except Exception as e:
            line += f" {name} {repr(e)[:60]}"; continue
        err = ((outs[0].double() - ref).norm() / ref.norm()).item()
        row[name] = (ts := [timing.time_calls([lambda a=a, b=b, o=o: G.launch(a, b, o, precision="none", config=cfg)
                                                for (a, b), o in zip(sets, outs)]) * 1e3 for _ in range(2)], err)
        line += f" {name} {min(ts):.1f}/{max(ts):.1f}{'!' if err > 1e-2 else ''}"
    rows.append(row)
    print(line, flush=True)
    json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "sweep16.json"), "w"))
