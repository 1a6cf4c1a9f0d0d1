"""Session 17 scratch: where a stream-K tail's time goes. v0 as is; v1 the finisher adds no partials;
v2 the finisher does not wait; v3 the partials are not stored (masked off). Wrong results in v1-v3: timing only."""
import importlib.util, sys, os, torch
from tiledmm import timing, _adapter
from tiledmm.kernels.block import gluon_gemm as G
v = sys.argv[1]
spec = importlib.util.spec_from_file_location("gk_" + v, os.path.join(os.path.dirname(__file__), v + ".py"))
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
G._kernel_module = mod
_adapter.load_compiled = lambda *a, **k: None
_adapter.remember_compiled = lambda *a, **k: None
SK = G._c(128, 256, 64, 8, 4, group=16, epi=2, tail=1)
dt = torch.bfloat16
out = []
for M, N, K in ((640, 4096, 4096), (384, 4096, 4096), (256, 11008, 4096), (5000, 5000, 5000), (1100, 4096, 4096)):
    sets = [(torch.randn(M, K, device="cuda").to(dt), torch.randn(K, N, device="cuda").to(dt)) for _ in range(3)]
    outs = [torch.empty(M, N, device="cuda", dtype=dt) for _ in sets]
    t = min(timing.time_calls([lambda a=a, b=b, o=o: G.launch(a, b, o, precision="none", config=SK)
                               for (a, b), o in zip(sets, outs)]) for _ in range(2)) * 1e3
    out.append(f"{M}x{N}x{K} {t:.1f}")
if v in ("v0", "v5"):
    for cfg in (SK, dict(SK, TAIL=0)):
        a, b = sets[0]
        ck, _ = G._public(a, b, outs[0], M, N, K, cfg, 132, 0, outs[0], 0, 1.0, 0.0, 0, "none")
        ck._init_handles()
        out.append(f"TAIL={cfg['TAIL']} regs {ck.n_regs} spills {ck.n_spills}")
print(v, " | ".join(out), flush=True)
