"""Scratch (sessions 19-20): a PARTS=3 Gluon tile (argv: 0 128x192, the default; 1 64x192) under compute-sanitizer: ragged N in each slice,
transposed operands, beta and a bias; each checked against float64."""
import torch
from tiledmm.kernels.block import gluon_gemm as G
import sys; cfg = [c for c in G.CONFIGS["16bit"] if c.get("PARTS", 1) == 3][int(sys.argv[1]) if len(sys.argv) > 1 else 0]; print(cfg)
bad = 0
for (M, N, K, a_t, b_t, beta, bias_mode) in ((136, 1000, 136, False, False, 0.0, 0), (128, 1080, 64, True, True, 2.0, 1),
                                              (256, 1144, 128, False, True, 0.0, 2), (264, 200, 72, True, False, 1.0, 0)):
    a = torch.randn((K, M) if a_t else (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randn((N, K) if b_t else (K, N), device="cuda").to(torch.bfloat16)
    a, b = (a.t() if a_t else a), (b.t() if b_t else b)
    c = torch.randn(M, N, device="cuda").to(torch.bfloat16) if beta else torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    c0 = c.clone()
    bias = torch.randn(N if bias_mode == 1 else M, device="cuda") if bias_mode else None
    G.launch(a, b, c, precision="none", beta=beta, config=cfg, bias=bias, bias_mode=bias_mode)
    torch.cuda.synchronize()
    ref = a.double() @ b.double() + (beta * c0.double() if beta else 0)
    if bias_mode == 1:
        ref += bias.double()[None, :]
    elif bias_mode == 2:
        ref += bias.double()[:, None]
    err = ((c.double() - ref).norm() / ref.norm()).item()
    bad += not err < 1e-2
    print(M, N, K, a_t, b_t, beta, bias_mode, f"{err:.1e}")
print("checks failed:", bad)
