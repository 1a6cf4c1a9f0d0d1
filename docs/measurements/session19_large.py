"""Scratch (session 19): large 16-bit products, 128x256 (the model's) against 128x192 (PARTS=3), rounds alternating,
GPU time (timing.time_calls, 3 input sets rotated). Shapes M x K x N."""
import statistics, sys
import torch
from tiledmm import timing
from tiledmm.kernels.block import gluon_gemm as G
c_ = G._c
CFGS = {"256t": c_(128, 256, 64, 8, 4, group=16, epi=2, tail=1), "192": c_(128, 192, 64, 8, 5, parts=3),
        "192g16": c_(128, 192, 64, 8, 5, group=16, parts=3), "192s4": c_(128, 192, 64, 8, 4, parts=3)}
SHAPES = [(8192, 8192, 8192), (4096, 8192, 8192), (8192, 4096, 4096), (4096, 5120, 13824), (2048, 8192, 28672),
          (4096, 4096, 4096), (3000, 2000, 4000)]
dt = torch.float16 if "fp16" in sys.argv else torch.bfloat16
for (M, K, N) in SHAPES:
    sets = [(torch.randn(M, K, device="cuda").to(dt), torch.randn(K, N, device="cuda").to(dt)) for _ in range(3)]
    outs = [torch.empty(M, N, device="cuda", dtype=dt) for _ in sets]
    a, b = sets[0]
    ref = (a.double() @ b.double()) if M * N * K <= 4096 ** 3 else None
    fns = {"torch": [lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for (a, b), o in zip(sets, outs)]}
    for name, cfg in CFGS.items():
        G.launch(a, b, outs[0], precision="none", config=cfg); torch.cuda.synchronize()
        if ref is not None:
            err = ((outs[0].double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (name, err)
        fns[name] = [lambda a=a, b=b, o=o, cfg=cfg: G.launch(a, b, o, precision="none", config=cfg)
                     for (a, b), o in zip(sets, outs)]
    ts = {k: [] for k in fns}
    for r in range(5):
        for k, f in fns.items():
            ts[k].append(timing.time_calls(f) * 1e3)
    tq = statistics.median(ts["torch"])
    print(f"{M}x{K}x{N} " + " ".join(f"{k} {statistics.median(v):.1f} ({tq / statistics.median(v):.3f}) [{min(v):.1f}-{max(v):.1f}]"
                                     for k, v in ts.items()), flush=True)
    del sets, outs, fns
