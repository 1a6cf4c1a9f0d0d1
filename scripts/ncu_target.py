"""The launches scripts/ncu_check.sh profiles: one launch each of the lectures' kernels at
2048^3 (float32), nothing else on the GPU that matches the kernel-name filter.
    python3 scripts/ncu_target.py [n] [kernel:tile | autotuned@shape ...]"""
import sys

import tiledmm
from tiledmm.harness import poisoned_like, random_inputs, sync

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
runs = []
for arg in sys.argv[2:]:
    name, _, config = arg.partition("@")
    name, _, tile = name.partition(":")
    runs.append((name, int(tile) if tile else None, {"config": config} if config else {}))
runs = runs or [("naive", 16, {}), ("naive-uncoalesced", 16, {}), ("tiled", 16, {}), ("tiled", 32, {})]
a, b = random_inputs((n, n), (n, n), "float32", seed=0)
for kernel, tile, opts in runs:
    out = poisoned_like(a, (n, n))
    tiledmm.matmul(a, b, kernel=kernel, tile=tile, out=out, **opts)
    sync()
    print("launched", kernel, tile, opts, flush=True)
