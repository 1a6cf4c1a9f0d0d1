"""Scratch (session 19): the 192-wide three-accumulator tiles (PARTS=3) against the configs the model picks, bf16,
GPU time (timing.time_calls, 3 input sets rotated, out= kept), twice each. Shapes M x K x N. '!' = wrong result.
    python3 session19_sweep.py            the 128x192 tile (session19_sweep_bf16_h100.txt)
    python3 session19_sweep.py 64x192     the 64x192 tile (session19_sweep_64x192_bf16_h100.txt)"""
import json, os, sys
import torch, tiledmm
from tiledmm import timing
from tiledmm.kernels.block import gluon_gemm as G
c_ = G._c
if "64x192" not in sys.argv:
    CFGS = {"pick": None, "192s5": c_(128, 192, 64, 8, 5, parts=3), "192s4": c_(128, 192, 64, 8, 4, parts=3),
            "192s5g16": c_(128, 192, 64, 8, 5, group=16, parts=3), "256t": c_(128, 256, 64, 8, 4, group=16, epi=2, tail=1),
            "128s5t": c_(128, 128, 64, 8, 5, tail=1)}
    SHAPES = [(256, 4096, 11008), (768, 4096, 4096), (640, 4096, 4096), (576, 4096, 4096), (704, 4096, 4096),
              (512, 4096, 4096), (384, 4096, 4096), (256, 4096, 4096), (896, 4096, 4096), (1024, 4096, 4096),
              (1100, 4096, 4096), (1280, 4096, 4096), (512, 4096, 11008), (256, 5120, 13824), (256, 13824, 5120),
              (128, 4096, 11008), (2048, 4096, 11008), (4096, 4096, 4096), (8192, 8192, 8192), (5000, 5000, 5000),
              (1024, 8192, 28672), (256, 8192, 28672)]
else:
    CFGS = {"pick": None, "64x192": c_(64, 192, 64, 4, 6, parts=3), "64x128": c_(64, 128, 64, 4, 6),
            "64x256": c_(64, 256, 64, 4, 4), "128s5t": c_(128, 128, 64, 8, 5, tail=1), "192s5": c_(128, 192, 64, 8, 5, parts=3)}
    SHAPES = [(m, 4096, 4096) for m in (96, 128, 160, 192, 257, 300, 320, 384, 448, 1100, 1920)] + [
        (256, 4096, 11008), (128, 4096, 11008), (256, 5120, 5120), (256, 13824, 5120), (64, 4096, 4096), (64, 4096, 11008),
        (512, 4096, 4096)]

dt = torch.bfloat16 if "fp16" not in sys.argv else torch.float16
rows = []
for (M, K, N) in SHAPES:
    sets = [(torch.randn(M, K, device="cuda").to(dt), torch.randn(K, N, device="cuda").to(dt)) for _ in range(3)]
    a, b = sets[0]; ref = a.double() @ b.double()
    tq = timing.time_calls([lambda a=a, b=b: torch.matmul(a, b) for a, b in sets])
    td = timing.time_calls([lambda a=a, b=b: tiledmm.matmul(a, b) for a, b in sets])
    pick = G.heuristic(M, N, K, "16bit")
    row = {"shape": [M, K, N], "torch_us": tq * 1e3, "default_us": td * 1e3, "pick": pick}
    line = f"{M}x{K}x{N} torch {tq*1e3:.1f} default {td*1e3:.1f} ({tq/td:.2f}) pick {pick['BLOCK_M']}x{pick['BLOCK_N']} |"
    for name, cfg in CFGS.items():
        outs = [torch.full((M, N), float("nan"), device="cuda", dtype=dt) for _ in sets]
        try:
            G.launch(a, b, outs[0], precision="none", config=cfg); torch.cuda.synchronize()
        except Exception as e:
            line += f" {name} {repr(e)[:80]}"; continue
        err = ((outs[0].double() - ref).norm() / ref.norm()).item()
        ts = [timing.time_calls([lambda a=a, b=b, o=o: G.launch(a, b, o, precision="none", config=cfg)
                                 for (a, b), o in zip(sets, outs)]) * 1e3 for _ in range(2)]
        row[name] = (ts, err)
        line += f" {name} {min(ts):.1f}/{max(ts):.1f}{'!' if err > 1e-2 or err != err else ''}"
    rows.append(row)
    print(line, flush=True)
    json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), f"sweep19{'b' if '64x192' in sys.argv else ''}_{str(dt)[6:]}.json"), "w"))
