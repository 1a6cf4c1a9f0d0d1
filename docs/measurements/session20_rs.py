"""Scratch (session 20): the PARTS=3 tiles with A from registers (RS) against A from shared memory (SS):
run once with PYTHONPATH=src (SS) and once with the patched copy (RS); GPU time of G.launch per config,
each checked against float64 with a NaN-poisoned output first."""
import sys, torch
from tiledmm import timing
from tiledmm.kernels.block import gluon_gemm as G
tag = sys.argv[1]
c_ = G._c
T192 = c_(128, 192, 64, 8, 5, parts=3); T64 = c_(64, 192, 64, 4, 6, parts=3)
CASES = [((768, 4096, 4096), T192), ((600, 4096, 4096), T192), ((1300, 4096, 4096), T192),
         ((256, 11008, 4096), T192), ((4096, 4096, 4096), T192), ((8192, 8192, 8192), T192),
         ((257, 4096, 4096), T64), ((384, 4096, 4096), T64), ((256, 5120, 5120), T64), ((256, 13824, 5120), T64),
         ((4096, 4096, 4096), c_(128, 256, 64, 8, 4, group=16, epi=2))]
for dt in (torch.bfloat16, torch.float16) if len(sys.argv) < 3 else (torch.bfloat16,):
    for (M, N, K), cfg in CASES:
        if dt == torch.float16 and M > 4096: continue
        n = 2 if M * N * K > 2 ** 34 else 3
        sets = [(torch.randn(M, K, device="cuda").to(dt), torch.randn(K, N, device="cuda").to(dt),
                 torch.full((M, N), float("nan"), device="cuda", dtype=dt)) for _ in range(n)]
        a, b, o = sets[0]
        G.launch(a, b, o, precision="none", config=cfg); torch.cuda.synchronize()
        ref = a.double() @ b.double()
        err = ((o.double() - ref).norm() / ref.norm()).item()
        tq = min(timing.time_calls([lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in sets]) for _ in range(2))
        tg = min(timing.time_calls([lambda a=a, b=b, o=o: G.launch(a, b, o, precision="none", config=cfg)
                                    for a, b, o in sets]) for _ in range(2))
        fl = 2 * M * N * K / tg / 1e9
        print(f"{tag} {str(dt)[6:]:8} {M}x{N}x{K} {cfg['BLOCK_M']}x{cfg['BLOCK_N']} torch {tq*1e3:8.1f} us  gluon {tg*1e3:8.1f} us "
              f"{fl:6.0f} TF/s  x{tq/tg:5.3f}  err {err:.1e}{' BAD' if not err < 1e-2 else ''}", flush=True)
