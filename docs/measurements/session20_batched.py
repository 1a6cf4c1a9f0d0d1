"""Scratch (session 20): 64 x 512^3 batched 16-bit, the default (the table's pick) against the Gluon kernel's own
batch pick, in alternating rounds on one machine (GPU time, 3 input sets rotated; each output checked first)."""
import torch, tiledmm
from tiledmm import timing
from tiledmm.kernels.block import gluon_gemm as G, matmul as D
for dt in (torch.bfloat16, torch.float16):
    for (B, M, K, N) in ((64, 512, 512, 512), (32, 512, 512, 512)):
        sets = [(torch.randn(B, M, K, device="cuda").to(dt), torch.randn(B, K, N, device="cuda").to(dt),
                 torch.full((B, M, N), float("nan"), device="cuda", dtype=dt)) for _ in range(3)]
        a, b, o = sets[0]; ref = a.double() @ b.double()
        D.forget_choices()
        tiledmm.matmul(a, b, out=o); torch.cuda.synchronize()
        e1 = ((o.double() - ref).norm() / ref.norm()).item(); o.fill_(float("nan"))
        G.launch(a, b, o, precision="none"); torch.cuda.synchronize()
        e2 = ((o.double() - ref).norm() / ref.norm()).item()
        ch = [f"{v.get('variant')}:{v.get('config')}" for v in D.choices().values()][-1:]
        pick = G._pick(M, N, K, "16bit", G._num_sms(), 2, False, B)
        rows = {"torch": [], "default": [], "gluon": []}
        for rnd in range(5):
            rows["torch"].append(timing.time_calls([lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in sets]))
            rows["default"].append(timing.time_calls([lambda a=a, b=b, o=o: tiledmm.matmul(a, b, out=o) for a, b, o in sets]))
            rows["gluon"].append(timing.time_calls([lambda a=a, b=b, o=o: G.launch(a, b, o, precision="none") for a, b, o in sets]))
        med = {k: sorted(v)[2] * 1e3 for k, v in rows.items()}
        print(f"{str(dt)[6:]:8} {B}x{M}x{K}x{N}  torch {med['torch']:.1f}  default {med['default']:.1f} "
              f"(x{med['torch']/med['default']:.3f})  gluon {med['gluon']:.1f} (x{med['torch']/med['gluon']:.3f})  "
              f"err {e1:.1e}/{e2:.1e}  default={ch}  gluon={pick['BLOCK_M']}x{pick['BLOCK_N']}s{pick['num_stages']}", flush=True)
        print("   rounds:", {k: [round(x * 1e3, 1) for x in v] for k, v in rows.items()}, flush=True)

