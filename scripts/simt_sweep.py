"""The SIMT rungs 8-10 and every rung-10 candidate shape against cuBLAS SGEMM (TF32 off),
checked against float64 and timed by the shared harness; registers read from the
compiled kernels. Run on the device:
    PYTHONPATH=src python3 scripts/simt_sweep.py [JxKxL ...]      (default 4096^3)
Prints one table per problem, ending with the tuned choice of rung 10."""
import sys

import tiledmm  # noqa: F401
from tiledmm.harness import check_and_time, rotation_for
from tiledmm.kernels.simt import k10_autotune
from tiledmm.kernels.simt.k09_unsigned import PRESETS, make_shape

shapes = [tuple(int(x) for x in a.split("x")) for a in sys.argv[1:]] or [(4096, 4096, 4096)]
for shape in shapes:
    rot = rotation_for(shape, "float32")
    base = check_and_time("cublas", shape, "float32", precision="ieee", rotate=rot, repeats=20)
    runs = [("cublas", None, {}, base)]
    for kernel, tile in (("warp-tile", 128), ("unsigned", 64), ("unsigned", 128)):
        runs.append((kernel, tile, {}, check_and_time(kernel, shape, "float32", tile=tile, rotate=rot)))
    for cfg in k10_autotune.CANDIDATES["float32"]:
        opts = {"config": cfg.name}
        runs.append(("autotuned", cfg.name, opts, check_and_time("autotuned", shape, "float32", options=opts,
                                                                 rotate=rot)))
    runs.append(("autotuned", "(tuned)", {}, check_and_time("autotuned", shape, "float32", rotate=rot)))
    print(f"\n{'x'.join(map(str, shape))} float32, cuBLAS {base.tflops:.1f} TFLOP/s")
    print(f"{'kernel':10s} {'tile / shape':24s} {'ms':>8s} {'TFLOP/s':>8s} {'x cuBLAS':>8s} {'regs':>7s} {'rel err':>8s}")
    for kernel, tile, opts, r in runs:
        regs = ""
        if kernel == "unsigned":
            k = make_shape(PRESETS[tile], "float32")
        elif kernel == "autotuned" and tile != "(tuned)":
            k = k10_autotune.make_tuned(k10_autotune.parse(tile), "float32")
        else:
            k = None
        if k is not None and k.overloads:
            c = next(iter(k.overloads.values()))
            regs = f"{c.regs_per_thread}" + (f"+{c.local_mem_per_thread}L" if c.local_mem_per_thread else "")
        ratio = base.ms / r.ms if r.ms else float("nan")
        print(f"{kernel:10s} {str(tile or '-'):24s} {r.ms or float('nan'):8.3f} {r.tflops or float('nan'):8.2f} "
              f"{ratio:8.3f} {regs:>7s} {r.rel_err:8.1e}{'' if r.ok else '  FAILED'}")
    from tiledmm import tuning
    for key, choice in tuning.remembered().items():
        print("tuned", key, "->", choice)
