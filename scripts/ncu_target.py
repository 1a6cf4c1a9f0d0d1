"""The launches scripts/ncu_check.sh profiles: one launch each of the lectures' kernels at
2048^3 (float32), nothing else on the GPU that matches the kernel-name filter."""
import sys

import tiledmm  # noqa: F401
from tiledmm import registry
from tiledmm._arrays import Operand
from tiledmm.harness import poisoned_like, random_inputs, sync

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
a, b = random_inputs((n, n), (n, n), "float32", seed=0)
for kernel, tile in [("naive", 16), ("naive-uncoalesced", 16), ("tiled", 16), ("tiled", 32)]:
    out = poisoned_like(a, (n, n))
    launch = registry.get(kernel).prepare(Operand.of(a, "a"), Operand.of(b, "b"), Operand.of(out, "out"), tile, {})
    launch.run()
    sync()
    print("launched", kernel, tile, flush=True)
