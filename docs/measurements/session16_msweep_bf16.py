"""Scratch: 128x256 (TAIL where it splits) against 128x128 s5 over M (bf16), N x K in a few LLM pairs; torch beside."""
import torch
from tiledmm import timing
from tiledmm.kernels.block import gluon_gemm as G
c_ = G._c
A = c_(128, 256, 64, 8, 4, group=16, epi=2, tail=1); B = c_(128, 128, 64, 8, 5)
dt = torch.bfloat16
for (N, K) in ((4096, 4096), (11008, 4096), (4096, 11008)):
    for M in (384, 512, 640, 768, 1100, 1280, 1536, 1800, 2048):
        sets = [(torch.randn(M, K, device="cuda").to(dt), torch.randn(K, N, device="cuda").to(dt)) for _ in range(3)]
        outs = [torch.empty(M, N, device="cuda", dtype=dt) for _ in sets]
        tq = timing.time_calls([lambda a=a, b=b: torch.matmul(a, b) for a, b in sets])
        ts = {}
        for nm, cfg in (("256", A), ("128s5", B)):
            ts[nm] = min(timing.time_calls([lambda a=a, b=b, o=o: G.launch(a, b, o, precision="none", config=cfg)
                                            for (a, b), o in zip(sets, outs)]) for _ in range(2)) * 1e3
        pick = G.heuristic(M, N, K, "16bit")
        print(f"M={M} N={N} K={K} torch {tq*1e3:.1f} | 256 {ts['256']:.1f} 128s5 {ts['128s5']:.1f} | pick {pick['BLOCK_M']}x{pick['BLOCK_N']}", flush=True)
