"""Scratch (session 19): 64 x 512^3 batched 16-bit (the bench's irregular row at 0.85): torch, tiledmm default (its
choice), and the Gluon kernel's configs on the whole batch in one launch (GPU time, 3 input sets rotated)."""
import torch, tiledmm
from tiledmm import timing
from tiledmm.kernels.block import gluon_gemm as G, matmul as D
c_ = G._c
CFGS = {"pick": None, "256e2": c_(128, 256, 64, 8, 4, group=16, epi=2), "256s3": c_(128, 256, 64, 8, 3),
        "128s5": c_(128, 128, 64, 8, 5), "128s4": c_(128, 128, 64, 8, 4), "192s5": c_(128, 192, 64, 8, 5, parts=3),
        "64x256": c_(64, 256, 64, 4, 4), "64x128": c_(64, 128, 64, 4, 6), "128s5g1": c_(128, 128, 64, 8, 5, group=1)}
for dt in (torch.bfloat16, torch.float16):
    for (B, M, K, N) in ((64, 512, 512, 512), (32, 512, 512, 512), (128, 256, 256, 256)):
        sets = [(torch.randn(B, M, K, device="cuda").to(dt), torch.randn(B, K, N, device="cuda").to(dt)) for _ in range(3)]
        a, b = sets[0]; ref = a.double() @ b.double()
        tq = timing.time_calls([lambda a=a, b=b: torch.matmul(a, b) for a, b in sets])
        D.forget_choices()
        td = timing.time_calls([lambda a=a, b=b: tiledmm.matmul(a, b) for a, b in sets])
        ch = [f"{v.get('variant')}:{v.get('config')}:{v.get('source')}" for v in D.choices().values()]
        line = f"{str(dt)[6:]} {B}x{M}x{K}x{N} torch {tq*1e3:.1f} default {td*1e3:.1f} ({tq/td:.2f}) |"
        for name, cfg in CFGS.items():
            outs = [torch.full((B, M, N), float("nan"), device="cuda", dtype=dt) for _ in sets]
            try:
                G.launch(a, b, outs[0], precision="none", config=cfg); torch.cuda.synchronize()
            except Exception as e:
                line += f" {name} {repr(e)[:50]}"; continue
            err = ((outs[0].double() - ref).norm() / ref.norm()).item()
            t = min(timing.time_calls([lambda a=a, b=b, o=o: G.launch(a, b, o, precision="none", config=cfg)
                                       for (a, b), o in zip(sets, outs)]) * 1e3 for _ in range(2))
            line += f" {name} {t:.1f}{'!' if err > 1e-2 or err != err else ''}"
        print(line, flush=True)
        print("   choice:", ch[-1:] if ch else None, flush=True)
