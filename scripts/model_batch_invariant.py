#!/usr/bin/env python3
"""The batch-invariant mode's picks and the model's predicted cost over the bench shapes, on the CPU for a
stand-in GPU (no kernel runs, nothing is timed: scripts/bench_batch_invariant.py measures on the GPU).

    PYTHONPATH=src python3 scripts/model_batch_invariant.py [--dtypes bf16,tf32,fp32]
        [--suites square,irregular,transformer,llm] [--sms 132] [--no-split] [--out F.json]

Per shape (``tiledmm.bench.SUITES``) and dtype, on the operands bench_batch_invariant.py times (row-major,
contiguous A and B): the mode's pick (``kernels/block/invariant.py``, resolved as on an H100 -- its name,
capability 9.0, ``--sms`` SMs, its shared memory), the normal mode's untimed pick (the shipped table's or
the model's, ``matmul.untimed_choices``) and the model's best candidate of the normal mode at the shape,
each timed by the model as the mode judges it (``invariant.modelled_us``). Printed: per shape the picks
and the predicted cost (mode / normal pick, mode / normal model's best); last the geomeans per dtype.
``--no-split``: the mode without its split-K configs (what it offered before them).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

DTYPES = {"bf16": ("bfloat16", "none"), "fp16": ("float16", "none"), "tf32": ("float32", "tf32"),
          "fp32": ("float32", "ieee")}
SUITES = ("square", "irregular", "transformer", "llm")


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _fake_cuda(torch):
    class FakeCuda(torch.Tensor):
        """A meta tensor that says it lives on CUDA device 0 (what the dispatchers read: shapes, strides,
        dtype, a 16-byte aligned base, the device)."""
        @property
        def is_cuda(self):
            return True

        @property
        def device(self):
            return torch.device("cuda", 0)

        def get_device(self):
            return 0
    return FakeCuda


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", default="bf16,tf32,fp32")
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--no-split", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ.setdefault("TILEDMM_QUIET", "1")

    import torch

    import tiledmm  # noqa: F401  (decides emulation on this CPU machine; the dispatchers are then told GPU)
    from tiledmm import _backend
    from tiledmm.analysis import device as AD
    from tiledmm.bench import SUITES as SHAPES
    from tiledmm.kernels.block import heuristics as H
    from tiledmm.kernels.block import invariant as I
    from tiledmm.kernels.block import dispatch as D
    from tiledmm.kernels.block import variants as V
    from tiledmm.kernels.block._vcommon import device

    _backend._mode = "gpu"                    # the dispatchers' GPU paths; nothing is launched
    os.environ["TRITON_INTERPRET"] = "0"      # (read by the Gluon kernel's applicability)
    torch.cuda.is_current_stream_capturing = lambda: False      # (read by rung 11's; no CUDA here)
    if args.no_split:
        whole = I.split_of
        I.split_of = lambda v, cfg, N, K, dev: (lambda s: s if s == 1 else None)(whole(v, cfg, N, K, dev))
    fake = _fake_cuda(torch)
    props = AD.DeviceProperties(0, "NVIDIA H100 80GB HBM3", (9, 0), args.sms, 232448, 50 * 2 ** 20, 80 * 2 ** 30)
    rows = []
    with AD.fake(0, props):
        dev = device(0)
        for label in args.dtypes.split(","):
            dtype, precision = DTYPES[label]
            dt = getattr(torch, dtype)
            for suite in args.suites.split(","):
                for shape in SHAPES[suite]:
                    *batch, m, k, n = shape
                    a, b, c = (torch.empty(*batch, x, y, dtype=dt, device="meta").as_subclass(fake)
                               for x, y in ((m, k), (k, n), (m, n)))
                    p = D._problem(a, b, c, precision)
                    # the mode's pick, and its time at the shape
                    I.resolved(a, b, c, precision, 1.0, 0.0)
                    ch = I.choices()[I.key_of(a, b, c, precision, 1.0, 0.0)]
                    v = V.BY_NAME[ch["variant"]]
                    cd = H.Candidate(ch["variant"], ch["config"], v.traits, 0, v, D._repeats_bound(v, a, b, c))
                    copies = v.traits.copies(a, b, c, precision) if v.traits.copies else 0
                    t_mode = I.modelled_us(cd, p, dev, copies)
                    splits = I.split_of(v, ch["config"], n, k, dev)
                    # the normal mode's untimed pick (its own config for the shape where the variant says so)
                    key = D.plan_key(a, b, c, precision, 1.0, 0.0)
                    options = {o.name: o for o in D.candidates(a, b, c, precision, 1.0, 0.0, key)}
                    pick, table_pick = D.untimed_choices(key, a, b, c, precision, 1.0, 0.0, p, options)
                    normal = options[table_pick or pick]
                    if normal.variant.traits.own_config_by_shape:
                        normal = H.pick(D.model_candidates([normal.variant], p, dev,
                                                           {normal.variant.name: normal.copy_bytes}), p, dev)
                    t_normal = I.modelled_us(normal, p, dev, normal.copy_bytes)
                    # the normal mode's best candidate at the shape, by the same measure
                    vs = D._runnable(a, b, c, precision, 1.0, 0.0, p.batch)
                    cps = {x.name: x.traits.copies(a, b, c, precision) for x in vs if x.traits.copies}
                    best = min(I.modelled_us(o, p, dev, o.copy_bytes) for o in D.model_candidates(vs, p, dev, cps)
                               if o.traits.modelled)
                    r = {"dtype": label, "suite": suite, "shape": "x".join(map(str, shape)),
                         "mode": f"{ch['variant']}:" + "x".join(str(ch["config"][x]) for x in
                                                              ("BLOCK_M", "BLOCK_N", "BLOCK_K")),
                         "splits": splits, "normal": normal.name.split(":")[0] + ":" + "x".join(
                             str(normal.config.get(x)) for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K")),
                         "source": "table" if table_pick else "model", "mode_us": t_mode, "normal_us": t_normal,
                         "best_us": best, "cost": t_mode / t_normal, "cost_best": t_mode / best}
                    rows.append(r)
                    print(f"{label:5s} {suite:11s} {r['shape']:>18s}  mode {r['mode']:<26s} S={splits:<3d} "
                          f"normal ({r['source']}) {r['normal']:<26s} cost {r['cost']:6.2f}  vs best {r['cost_best']:6.2f}")
    print(f"\nmodel's predicted cost, mode / normal, geomean ({'without' if args.no_split else 'with'} the mode's "
          f"split-K; {args.sms} SMs)")
    for label in args.dtypes.split(","):
        rs = [r for r in rows if r["dtype"] == label]
        print(f"{label:5s} n={len(rs):3d}  vs normal pick {geomean(r['cost'] for r in rs):6.3f}  vs the model's best "
              f"{geomean(r['cost_best'] for r in rs):6.3f}  split-K picks {sum(r['splits'] > 1 for r in rs)}")
    print(f"all   n={len(rows):3d}  vs normal pick {geomean(r['cost'] for r in rows):6.3f}  vs the model's best "
          f"{geomean(r['cost_best'] for r in rows):6.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
