"""tf32 through the Gluon kernel with the operands as they are laid out (issue 24, item 3): check and time.

    PYTHONPATH=src python3 scripts/bench_gluon_tf32.py [--quick] [--no-check]

wgmma reads 32-bit shared-memory operands only K-major, but its first operand may sit in registers:
the kernel loads an M-major A into registers, and for a row-major (N-major) B computes the tile
transposed (C^T = B^T A^T, B^T in registers). No copy of B on any call.

Correctness (every tf32 config, the three layouts the kernel takes, and the refused fourth): ragged
sizes, alpha/beta, bias + gelu, split-K, three launches of the same inputs (a register race would
show as a difference between them); ||C - ref|| / ||ref|| against float64, output poisoned with NaN.
Timing (scripts/bench_gluon.py's method: CUDA graph of queued launches, inputs rotated over > 2x L2,
median of batches): torch.matmul (allow_tf32) with B row-major, tiledmm.matmul's default pick,
each tf32 config of the kernel with B row-major, and the heuristic's config with B column-major
(the kernel's K-major speed, for reference). GPU ms and x torch; the short table last.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gluon as BG  # noqa: E402

from tiledmm.kernels.block import gluon_gemm as G  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048), (256, 5120, 13824), (256, 13824, 5120),
          (512, 4096, 4096), (512, 14336, 4096), (64, 4096, 4096), (128, 8192, 8192), (4000, 300, 4000),
          (4097, 4093, 4095), (3000, 2000, 4000)]
QUICK = [(4096, 4096, 4096), (256, 5120, 13824), (512, 4096, 4096)]
EXTRA = [G._c(128, 128, 32, 8, 5)]


def repeat_check(M, N, K, cfg, a_t, b_t):
    """Three launches of one input set: equal to each other (bitwise) and to float64."""
    a, b = BG.operands(M, N, K, torch.float32, a_t, b_t, seed=7)
    outs = []
    for _ in range(3):
        c = torch.full((M, N), float("nan"), device="cuda")
        G.launch(a, b, c, precision="tf32", config=cfg)
        outs.append(c)
    torch.cuda.synchronize()
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    e = BG.rel_err(outs[0], a, b)
    return f"{'ok' if same and e < BG.TOL[torch.float32] else 'FAIL'} rel {e:.2e} repeats equal {same}"


def checks() -> int:
    fails = 0
    f32 = torch.float32

    def show(label, res):
        nonlocal fails
        fails += "FAIL" in res
        print(f"{label}: {res}", flush=True)

    for cfg in G.CONFIGS["tf32"] + EXTRA:
        for a_t, b_t in ((False, False), (True, True), (False, True)):
            tag = f"{BG.config_name(cfg)} a_t={a_t:d} b_t={b_t:d}"
            m = 784 if a_t else 777          # a column-major A needs a 16-byte row stride
            show(f"{tag} {m}x1000x1000", BG.check(m, 1000, 1000, f32, cfg, a_t, b_t))
            show(f"{tag} 304x520x264", BG.check(304, 520, 264, f32, cfg, a_t, b_t))
            show(f"{tag} 3x launches 1000x776x1032", repeat_check(1000, 776, 1032, cfg, a_t, b_t))
        show(f"{BG.config_name(cfg)} alpha=-1 beta=1 200x512x4096", BG.check(200, 512, 4096, f32, cfg, alpha=-1.0, beta=1.0))
    show("heuristic, offset sub-matrix 129x136x72", BG.check(129, 136, 72, f32, offset=True))
    show("a_t=1 b_t=0 (refused)", BG.check(64, 64, 64, f32, None, True, False))
    # bias + gelu in the epilogue with the transposed tile
    a, b = BG.operands(300, 520, 264, f32, seed=3)
    bias = torch.randn(520, device="cuda")
    c = torch.full((300, 520), float("nan"), device="cuda")
    G.launch(a, b, c, precision="tf32", bias=bias, bias_mode=1, act="gelu")
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
    e = ((c.double() - ref).norm() / ref.norm()).item()
    show("bias per column + gelu 300x520x264 b row-major", f"{'ok' if e < 2e-3 else 'FAIL'} rel {e:.2e}")
    rbias = torch.randn(300, device="cuda")
    G.launch(a, b, c, precision="tf32", bias=rbias, bias_mode=2, act="relu")
    ref = torch.relu(a.double() @ b.double() + rbias.double()[:, None])
    e = ((c.double() - ref).norm() / ref.norm()).item()
    show("bias per row + relu 300x520x264 b row-major", f"{'ok' if e < 2e-3 else 'FAIL'} rel {e:.2e}")
    return fails


def bench(M, N, K, configs):
    import tiledmm
    flops = 2.0 * M * N * K
    sets = BG.input_sets(M, N, K, torch.float32, b_t=False)
    torch.backends.cuda.matmul.allow_tf32 = True
    t_torch, _ = BG.time_fn(lambda a, b, c: (lambda: torch.matmul(a, b, out=c)), sets)
    row = {"torch": t_torch}
    t, _ = BG.time_fn(lambda a, b, c: (lambda: tiledmm.matmul(a, b, out=c, precision="tf32")), sets)
    row["tiledmm default"] = t
    pick = G.heuristic(M, N, K, "tf32", torch.cuda.get_device_properties(0).multi_processor_count, 4, reg=True)
    for cfg in configs:
        label = BG.config_name(cfg) + (" (pick)" if cfg == pick else "")
        try:
            row[label] = BG.time_fn(lambda a, b, c, cfg=cfg: (lambda: G.launch(a, b, c, precision="tf32", config=cfg)),
                                    sets)[0]
        except Exception as e:  # noqa: BLE001  (one config's failure is data)
            row[label] = f"{type(e).__name__}: {str(e)[:120]}"
    del sets
    sets = BG.input_sets(M, N, K, torch.float32, b_t=True)
    if G.why_not(*sets[0], "tf32") is None:
        row["K-major B, pick"] = BG.time_fn(lambda a, b, c: (lambda: G.launch(a, b, c, precision="tf32")), sets)[0]
    else:
        row["K-major B, pick"] = f"not applicable: {G.why_not(*sets[0], 'tf32')}"
    del sets
    torch.cuda.empty_cache()
    print(f"{M}x{N}x{K}: " + "; ".join(f"{k} {v:.3f} ms ({t_torch / v:.2f}x, {flops / v / 1e9:.0f} TF)"
                                       if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs a Hopper GPU (sm_90)", file=sys.stderr)
        return 2
    fails = 0 if args.no_check else checks()
    rows = {}
    for shape in (QUICK if args.quick else SHAPES):
        rows[shape] = bench(*shape, G.CONFIGS["tf32"] + EXTRA)
    print(f"\n== tf32, B row-major, GPU time x torch.matmul (check failures: {fails}) ==")
    for (M, N, K), row in rows.items():
        best = min((v, k) for k, v in row.items() if isinstance(v, float) and k not in ("torch", "K-major B, pick"))
        pick = next((v for k, v in row.items() if k.endswith("(pick)")), float("nan"))
        print(f"{M:>5}x{N:>5}x{K:>5}  torch {row['torch']:.3f} ms | default {row['torch'] / row['tiledmm default']:.2f}x"
              f" | gluon pick {row['torch'] / pick:.2f}x | best {row['torch'] / best[0]:.2f}x ({best[1]})"
              + (f" | K-major B {row['torch'] / row['K-major B, pick']:.2f}x" if isinstance(row['K-major B, pick'], float)
                 else ""))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
