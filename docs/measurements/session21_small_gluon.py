"""Session 21 scratch: 16-bit products with M >= 64 and 2^30 <= MACs < 2^32 (the shipped table's today) -- the
default against the Gluon kernel owning them (GLUON_OWNS_FROM_MACS lowered), through tiledmm.matmul, in this
process: argv[1] = 'default' | 'gluon'. Per shape: queued us (time_calls, 3 rotated sets, out= kept), GPU and
host us (device_and_host), torch the same way, median of 3 rounds; each output checked against float64 first."""
import sys, json, torch, tiledmm
from tiledmm import timing
from tiledmm.kernels.block import matmul as D
mode = sys.argv[1]
if mode == "gluon":
    D.GLUON_OWNS_FROM_MACS = 2 ** 30
SHAPES = [(1024, 1024, 1024), (64, 4096, 4096), (128, 4096, 4096), (64, 4096, 11008), (64, 11008, 4096),
          (128, 2048, 4096), (512, 1024, 2048), (256, 2048, 2048), (1024, 2048, 1024)]   # (M, K, N)
for dt in (torch.bfloat16, torch.float16):
    for (M, K, N) in SHAPES:
        sets = [(torch.randn(M, K, device="cuda").to(dt), torch.randn(K, N, device="cuda").to(dt),
                 torch.full((M, N), float("nan"), device="cuda", dtype=dt)) for _ in range(3)]
        a, b, o = sets[0]
        tiledmm.matmul(a, b, out=o); torch.cuda.synchronize()
        ref = a.double() @ b.double()
        err = ((o.double() - ref).norm() / ref.norm()).item()
        ch = [f"{v.get('variant')}:{v.get('config')}" for v in D.choices().values()][-1]
        calls = {"torch": [lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in sets],
                 "tiledmm": [lambda a=a, b=b, o=o: tiledmm.matmul(a, b, out=o) for a, b, o in sets]}
        res = {k: [] for k in calls}
        for rnd in range(3):
            for k, c in calls.items():
                q = timing.time_calls(c, batches=5) * 1e3
                g, h = timing.device_and_host(c, batches=3, batch_ms=10.0)
                res[k].append((q, g * 1e3, h * 1e3))
        med = {k: [sorted(x[i] for x in v)[1] for i in range(3)] for k, v in res.items()}
        print(json.dumps({"mode": mode, "dtype": str(dt)[6:], "shape": f"{M}x{K}x{N}", "err": err, "choice": ch,
                          "torch": med["torch"], "tiledmm": med["tiledmm"]}), flush=True)
