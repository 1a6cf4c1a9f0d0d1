"""Scratch (session 20): batched 16-bit products through tiledmm.matmul(out=) with matmul.GLUON_BATCH_FROM_K at
argv[1] (1024: as committed, the table's blocked kernel for 64x512^3; 512: the Gluon kernel's own pick), in a fresh
process each; output checked against float64 first; queued time and GPU / host time a call."""
import sys, torch, tiledmm
from tiledmm import timing
from tiledmm.kernels.block import matmul as D
D.GLUON_BATCH_FROM_K = int(sys.argv[1])
for dt in (torch.bfloat16, torch.float16):
    for (B, M, K, N) in ((64, 512, 512, 512), (32, 512, 512, 512), (16, 1024, 1024, 1024), (128, 512, 768, 512)):
        sets = [(torch.randn(B, M, K, device="cuda").to(dt), torch.randn(B, K, N, device="cuda").to(dt),
                 torch.full((B, M, N), float("nan"), device="cuda", dtype=dt)) for _ in range(3)]
        a, b, o = sets[0]
        tiledmm.matmul(a, b, out=o); torch.cuda.synchronize()
        ref = a.double() @ b.double(); err = ((o.double() - ref).norm() / ref.norm()).item()
        ch = [f"{v.get('variant')} {v.get('config', {}).get('BLOCK_M')}x{v.get('config', {}).get('BLOCK_N')}"
              for v in D.choices().values()][-1:]
        tc = [lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in sets]
        mc = [lambda a=a, b=b, o=o: tiledmm.matmul(a, b, out=o) for a, b, o in sets]
        r = []
        for _ in range(3):
            r.append((timing.time_calls(tc) * 1e3, timing.time_calls(mc) * 1e3,
                      *[x * 1e3 for x in timing.device_and_host(tc) + timing.device_and_host(mc)]))
        q_t, q_m, g_t, h_t, g_m, h_m = (sorted(x[i] for x in r)[1] for i in range(6))
        print(f"K>={sys.argv[1]:5} {str(dt)[6:]:8} {B}x{M}x{K}x{N:<5} torch {q_t:6.1f} tiledmm {q_m:6.1f} x{q_t/q_m:.3f} | "
              f"GPU {g_t:6.1f}/{g_m:6.1f} host {h_t:5.1f}/{h_m:5.1f}  err {err:.1e}  {ch}", flush=True)
