"""Scratch (session 20): host time a call of Gluon split launches (tail split: 1100-1280 x 4096^2 bf16) through
tiledmm.matmul(out=), this tree against the one before the kept workspace (run once per tree, alternating)."""
import sys, torch, tiledmm
from tiledmm import timing
tag = sys.argv[1]
for M in (1100, 1200, 600):
    N = K = 4096
    sets = [(torch.randn(M, K, device="cuda").to(torch.bfloat16), torch.randn(K, N, device="cuda").to(torch.bfloat16),
             torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    a, b, o = sets[0]
    tiledmm.matmul(a, b, out=o); torch.cuda.synchronize()
    ref = a.double() @ b.double(); err = ((o.double() - ref).norm() / ref.norm()).item()
    tc = [lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in sets]
    mc = [lambda a=a, b=b, o=o: tiledmm.matmul(a, b, out=o) for a, b, o in sets]
    r = []
    for _ in range(3):
        gt, ht = timing.device_and_host(tc); gm, hm = timing.device_and_host(mc)
        r.append((gt * 1e3, ht * 1e3, gm * 1e3, hm * 1e3))
    med = [sorted(x[i] for x in r)[1] for i in range(4)]
    print(f"{tag} {M}x{N}x{K} bf16  torch GPU {med[0]:.1f} host {med[1]:.1f} | tiledmm GPU {med[2]:.1f} host {med[3]:.1f} us"
          f"  err {err:.1e}", flush=True)
