"""What the Triton kernel compiles to, per precision: the tuned config, the MMA
instructions in PTX and SASS, and (tf32) row-major B against a K-major copy.
Run on the GPU: PYTHONPATH=src python3 scripts/triton_inspect.py [size]"""
import re
import sys

import torch

import tiledmm  # noqa: F401
from tiledmm._arrays import Operand
from tiledmm.harness import poisoned_like, random_inputs, time_ms
from tiledmm.kernels.block import matmul as m

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
PATTERNS = {"ptx": [r"wgmma\.mma_async[\w.]*", r"mma\.sync[\w.]*", r"fma\.rn\.f32", r"cp\.async\.cg|cp\.async\.ca",
                    r"cp\.async\.bulk\.tensor", r"ld\.global\.v4"],
            "sass": [r"HGMMA\S*", r"HMMA\S*", r"FFMA", r"LDGSTS\S*", r"LDS\S*", r"UTMALDG"]}


def mix(asm: dict, kind: str) -> dict:
    text = asm.get(kind) or ""
    out = {}
    for p in PATTERNS[kind]:
        found = re.findall(p, text)
        if found:
            top = max(set(found), key=found.count)
            out[top if len(set(found)) == 1 else p] = len(found)
    return out


for label, dtype, prec in [("fp32", "float32", "ieee"), ("tf32", "float32", "tf32"), ("bf16", "bfloat16", None)]:
    a, b = random_inputs((n, n), (n, n), dtype, seed=1)
    variants = {"as given (B row-major)": (a, b)}
    if prec == "tf32":
        variants["B K-major copy"] = (a, m._k_major(b, 1))
    for vname, (x, y) in variants.items():
        out = poisoned_like(x, (n, n))
        L = m.TritonLaunch(x, y, out, prec or "none", 1.0, 0.0)
        if vname.startswith("as given") and prec == "tf32":
            pass  # TritonLaunch itself does not copy: _prepare does; this measures the raw layout
        L.run()
        torch.cuda.synchronize()
        ms = time_ms([L], warmup=3, repeats=10)
        tf = 2 * n ** 3 / (ms * 1e-3) / 1e12
        kind = "16bit" if prec is None else prec
        best = m._tuners[kind].best_config if kind in m._tuners else None
        asm = getattr(L.compiled, "asm", {}) or {}
        if "sass" not in asm and "cubin" in asm:
            try:
                from triton.tools.disasm import get_sass
                asm = dict(asm, sass=get_sass(asm["cubin"]))
            except Exception as e:  # noqa: BLE001
                asm = dict(asm, sass="")
                print("  (no sass:", e, ")")
        print(f"{label:5s} {vname:24s} {ms:8.3f} ms {tf:7.1f} TFLOP/s  best={best}")
        print(f"      ptx:  {mix(asm, 'ptx')}")
        print(f"      sass: {mix(asm, 'sass')}")
        md = getattr(L.compiled, "metadata", None)
        if md is not None:
            print(f"      regs={getattr(L.compiled, 'n_regs', '?')} spills={getattr(L.compiled, 'n_spills', '?')} "
                  f"shared={getattr(md, 'shared', '?')} warps={getattr(md, 'num_warps', '?')}")
