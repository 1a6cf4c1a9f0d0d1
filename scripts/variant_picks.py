#!/usr/bin/env python3
"""Which variants earn their place: per variant, the shipped H100 table's entries and the no-timing
default's picks over tiledmm.bench.SUITES, on any machine (a CPU one too).

    PYTHONPATH=src python3 scripts/variant_picks.py [--suites square,irregular,transformer,llm] [--ampere] [--each FILE]
    PYTHONPATH=src python3 scripts/variant_picks.py --against-table "NVIDIA H200"   (the model alone vs a table)

The picks are the dispatcher's own (``dispatch.candidates`` and ``dispatch._untimed``: the rules, the
shipped table, the model) for the bench's operands (row-major, "nn") of every suite shape, in bf16,
fp16, tf32 and fp32, as an H100 would make them: a stand-in device (``heuristics.H100``, the H100's
name for the table) and torch CPU tensors that call themselves CUDA tensors. Three counts per
variant: the table's entries (every layout the table holds), the entries where it was timed fastest
but the entry holds another (it compiles anew in every process: rung 11), the default's picks (rules >
table > model) and the model's (rules > model: ``TILEDMM_TABLE=off``). Nothing is launched or timed.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import types

import torch

DTYPES = {"bf16": (torch.bfloat16, "none"), "fp16": (torch.float16, "none"), "tf32": (torch.float32, "tf32"),
          "fp32": (torch.float32, "ieee")}
H100_NAME = "NVIDIA H100 80GB HBM3"


class _Cuda(torch.Tensor):
    """A CPU tensor that the variants' applicability tests take for one on CUDA device 0."""
    is_cuda = property(lambda self: True)

    def get_device(self) -> int:
        return 0


AMPERE = None    # set by --ampere: heuristics.Device of an A100 (capability 8.0: no TMA, no wgmma; no table)


def _stand_in_h100(name: str = H100_NAME):
    """Patch the dispatcher's view of the machine into an H100's (named ``name``: another Hopper's table is
    read by its name), or with --ampere an A100's (this process only)."""
    import tiledmm._device as device_facts
    import tiledmm.analysis.device as analysis_device
    from tiledmm.kernels.block import dispatch, heuristics as H, kmajor_cache, tma_copy, tma_persistent, variants
    dev = AMPERE or H.H100
    for mod in (variants, tma_copy, tma_persistent):
        mod.hopper = lambda *t: AMPERE is None
    kmajor_cache.V.hopper = lambda *t: AMPERE is None
    for mod in (dispatch, variants):
        mod.emulating = lambda: False
    dispatch.device = lambda index=None: dev
    device_facts.is_hopper = lambda index=None: AMPERE is None
    analysis_device.properties = lambda index=0: types.SimpleNamespace(
        name="NVIDIA A100-SXM4-80GB" if AMPERE else name, num_sms=dev.sms, l2_bytes=50 * 2 ** 20,
        capability=dev.capability)   # (rung 11: not on disk)
    torch.cuda.is_current_stream_capturing = lambda: False
    os.environ.pop("TRITON_INTERPRET", None)      # (read by the Gluon kernel's applicability test)


def _operands(shape, dtype):
    *batch, m, k, n = shape
    return tuple(torch.empty(*batch, r, c, dtype=dtype).as_subclass(_Cuda) for r, c in ((m, k), (k, n), (m, n)))


def picks(suites: list[str], each: dict | None = None) -> dict:
    """{"default": Counter, "model": Counter} of the variants picked over ``suites``' shapes and DTYPES;
    ``each``, if given, gets every default choice (variant and config) by "dtype shape"."""
    from tiledmm.bench import SUITES
    from tiledmm.kernels.block import dispatch
    out = {"default": collections.Counter(), "model": collections.Counter()}
    shapes = list(dict.fromkeys(s for suite in suites for s in SUITES[suite]))
    for label, (dtype, precision) in DTYPES.items():
        for shape in shapes:
            a, b, c = _operands(shape, dtype)
            key = dispatch.plan_key(a, b, c, precision, 1.0, 0.0)
            options = {cd.name: cd for cd in dispatch.candidates(a, b, c, precision, 1.0, 0.0, key)}
            p = dispatch._problem(a, b, c, precision)
            for which, table in (("default", "on"), ("model", "off")):
                os.environ["TILEDMM_TABLE"] = table
                owned, from_table, model = dispatch._untimed(key, a, b, c, precision, 1.0, 0.0, p, dict(options))
                name = owned or from_table or model
                out[which][name.partition(":")[0]] += 1
                if each is not None and which == "default":
                    each[f"{label} {shape}"] = name
    os.environ.pop("TILEDMM_TABLE", None)
    return out


def table_counts() -> dict:
    """{"table": the entries' variants, "fastest": the variants timed fastest where the entry holds another
    (compiled anew in every process: rung 11)}."""
    from tiledmm.kernels.block import shipped
    table = None if AMPERE else shipped.table_for(H100_NAME, 132)
    entries = [e for group in (table or {"index": {}})["index"].values() for e in group]
    return {"table": collections.Counter(e["variant"] for e in entries),
            "fastest": collections.Counter(e["fastest"].partition(":")[0] for e in entries if e.get("fastest"))}


def against_table(gpu: str, suites: list[str]) -> list[str]:
    """The model alone against ``gpu``'s shipped table, per dtype over the suites' shapes whose class the table
    timed: where the model's pick is the table's, ratio 1; where it is the pick the entry recorded as the model's,
    the entry's timed ms / model ms (one timing, on that GPU); else unknown (a change of the model moved it to a
    candidate the build did not time). The geomean is what the model alone would lose against the table (target:
    within 3 %). The model sees every Hopper as ``heuristics.H100`` (the same SMs and shared memory), under
    ``gpu``'s name (``_stand_in_h100``)."""
    import math
    from tiledmm.bench import SUITES
    from tiledmm.kernels.block import dispatch, shipped
    table = shipped.table_for(gpu, 132)
    if table is None:
        return [f"no shipped table for {gpu!r}"]
    shapes = list(dict.fromkeys(s for suite in suites for s in SUITES[suite]))
    lines = []
    for label, (dtype, precision) in DTYPES.items():
        ratios, unknown, same, low = [], 0, 0, []
        for shape in shapes:
            a, b, c = _operands(shape, dtype)
            key = dispatch.plan_key(a, b, c, precision, 1.0, 0.0)
            layout, cls = shipped.split_key(key)
            e = next((e for e in table["index"].get(layout, []) if tuple(e["class"]) == tuple(cls)), None)
            if e is None or not e["timed_ms"] or not e["model_ms"]:
                continue
            options = {cd.name: cd for cd in dispatch.candidates(a, b, c, precision, 1.0, 0.0, key)}
            p = dispatch._problem(a, b, c, precision)
            got = {}
            for table_on in ("off", "on"):
                os.environ["TILEDMM_TABLE"] = table_on
                owned, from_table, model = dispatch._untimed(key, a, b, c, precision, 1.0, 0.0, p, dict(options))
                got[table_on] = owned or from_table or model
            if got["off"] == got["on"]:
                ratios.append(1.0)
                same += 1
            elif got["off"] == e["model"]:
                ratios.append(e["timed_ms"] / e["model_ms"])
                if ratios[-1] < 0.90:
                    low.append(f"{'x'.join(map(str, shape))} {ratios[-1]:.2f} ({got['off'].partition(':')[0]} "
                               f"for {got['on'].partition(':')[0]})")
            else:
                unknown += 1
        os.environ.pop("TILEDMM_TABLE", None)
        if ratios:
            g = math.exp(sum(map(math.log, ratios)) / len(ratios))
            lines.append(f"{label}: {len(ratios)} shapes, the model's pick the table's on {same}, model / table "
                         f"geomean {g:.3f}; unknown {unknown}; below 0.90: {len(low)}" +
                         (f" ({'; '.join(low[:3])}{' ...' if len(low) > 3 else ''})" if low else ""))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suites", default="square,irregular,transformer,llm")
    ap.add_argument("--ampere", action="store_true", help="the picks on a stand-in A100 (capability 8.0)")
    ap.add_argument("--each", metavar="FILE", help="write every default choice (variant:config by dtype and shape) "
                    "as JSON: diff two commits' files to see whether a change moved any pick")
    ap.add_argument("--against-table", metavar="GPU", help="instead: the model alone against GPU's shipped table "
                    "(e.g. 'NVIDIA H200'), per dtype")
    args = ap.parse_args(argv)
    global AMPERE
    if args.against_table:
        _stand_in_h100(args.against_table)
        print("\n".join(against_table(args.against_table, args.suites.split(","))))
        return 0
    if args.ampere:
        from tiledmm.kernels.block import heuristics as H
        AMPERE = H.Device(108, (8, 0), 166912 - 1024, 2.0e6)
    _stand_in_h100()
    from tiledmm.kernels.block import variants
    each = {} if args.each else None
    counts = {**table_counts(), **picks(args.suites.split(","), each)}
    if args.each:
        with open(args.each, "w") as f:
            json.dump(each, f, indent=0, sort_keys=True)
    names = [v.name for v in variants.ALL + variants.OPT_IN]
    print(f"{'variant':16}" + "".join(f"{k:>9}" for k in counts))
    for n in names:
        print(f"{n:16}" + "".join(f"{c.get(n, 0):9d}" for c in counts.values()))
    print(f"{'(all)':16}" + "".join(f"{sum(c.values()):9d}" for c in counts.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
