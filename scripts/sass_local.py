"""What the compiler makes of a SIMT kernel, without a GPU: numba -> PTX (libnvvm), ptxas
-> cubin for sm_90, cuobjdump -> SASS; prints registers/spills and the instruction mix of
the whole kernel and of its inner loop (the code between the two barriers of a phase).

Needs a CUDA toolkit's libnvvm and ptxas (CUDA_HOME), libnvrtc and cuobjdump (the PyPI
wheels nvidia-cuda-nvrtc and nvidia-cuda-cuobjdump provide them), no driver or GPU.

    python3 scripts/sass_local.py unsigned 128
    python3 scripts/sass_local.py autotuned 128x128x16-w32x64-t8x8
    python3 scripts/sass_local.py warp-tile 128 --dtype float64 --keep /tmp/sass
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
import tiledmm._backend as backend  # noqa: E402

backend._mode = "gpu"          # real numba-cuda compiler; nothing is launched
import numba.cuda.dispatcher as dispatcher  # noqa: E402
from numba import from_dtype  # noqa: E402
from numba.cuda import compile_ptx  # noqa: E402

# device functions ask the current device for its compute capability; there is none
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))

OP = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", re.M)


def mix(sass: str) -> collections.Counter:
    return collections.Counter(OP.findall(sass))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel")
    ap.add_argument("tile", help="tile width, or a block/warp/lane shape like 128x128x8-w32x64-t8x8")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--keep", help="folder to keep the .ptx, .cubin and .sass in")
    args = ap.parse_args()
    import numpy as np

    import tiledmm  # noqa: F401
    from tiledmm import registry
    from tiledmm.kernels.simt.k09_unsigned import Shape, make_shape
    from tiledmm.kernels.simt.k10_autotune import make_tuned
    if "x" not in args.tile:
        k = registry.get(args.kernel).make(int(args.tile), args.dtype)
    elif args.kernel == "autotuned":
        k = make_tuned(Shape.parse(args.tile), args.dtype)
    else:
        k = make_shape(Shape.parse(args.tile), args.dtype)
    arr = from_dtype(np.dtype(args.dtype))[:, ::1]
    ptx, _ = compile_ptx(k.py_func, (arr, arr, arr), cc=(9, 0), launch_bounds=k.targetoptions.get("launch_bounds"))
    out = args.keep or tempfile.mkdtemp()
    os.makedirs(out, exist_ok=True)
    base = os.path.join(out, "kernel")
    open(base + ".ptx", "w").write(ptx)
    r = subprocess.run(["ptxas", "-arch=sm_90", "-v", base + ".ptx", "-o", base + ".cubin"],
                       capture_output=True, text=True, check=True)
    for line in r.stderr.splitlines():
        if "registers" in line or "spill" in line:
            print(line.strip())
    sass = subprocess.run(["cuobjdump", "-sass", base + ".cubin"], capture_output=True, text=True, check=True).stdout
    open(base + ".sass", "w").write(sass)
    print("whole kernel:", dict(mix(sass).most_common(16)))
    parts = sass.split("BAR.SYNC")
    if len(parts) >= 3:
        inner = mix(parts[1])
        total = sum(inner.values())
        print(f"inner loop ({total} instructions, FFMA/DFMA share "
              f"{(inner['FFMA'] + inner['DFMA']) / total:.0%}):", dict(inner.most_common(10)))


if __name__ == "__main__":
    main()
