#!/usr/bin/env python3
"""Dispatch and first call: what choosing and binding a kernel costs a user, through ``tiledmm.matmul`` as a
user calls it, against ``torch.matmul`` in the same process (benchmarks/_common.py: checked against float64,
then timed with ``tiledmm.timing``):

    PYTHONPATH=src python3 benchmarks/dispatch.py --out dispatch.json
        [--parts first,loop,picks] [--suites square,irregular,transformer,llm]
        [--dtypes bf16,fp32] [--quick] [--emulate] [--bytecode] [--budget-s S]

Every measurement runs in a fresh child process (this script, ``--child PART``) with default
settings (TILEDMM_TUNE unset) and an empty tiledmm cache (TILEDMM_CACHE_DIR, a new temporary
folder per process); every product is checked against float64 (relative Frobenius error under
the harness's bound) before or after it is timed. The steady state's cost per call is
benchmarks/call_cost.py's.

* first:   the first call of a never-seen shape class (1536^3) in a fresh process, twice per
           dtype with the same TRITON_CACHE_DIR (empty before the first): "triton-cold" then
           "triton-warm"; also the second call, a call with another M (1536 - 17) and torch's
           first and second calls of the same product.
* loop:    600 calls ``x @ W`` (W 4096 x 4096, M drawn from 1..2048 with --seed), a first and a
           second pass, wall time with torch.cuda.synchronize at the end, tiledmm and torch.matmul;
           twice per dtype like "first" (Triton's cache cold, then warm).
* picks:   every shape of --suites (bench.SUITES) in one child with default settings and one with
           TILEDMM_TUNE=on (every choice timed): timing.time_calls of the default pick and of the
           timed pick (inputs rotated, harness.rotation_for); ratio = timed ms / default ms (1.0:
           the default is as fast; below 0.90: flagged), torch.matmul's time alongside; then a
           "replay" child binds both recorded choices as the dispatcher does and times them in
           turn in one process (the two children's GPU states differ by a few per cent).

float32 is precision "ieee" (TF32 off for torch too). --quick: every other shape of each suite
and 3 timed batches instead of 5 (to fit one part into a 10-minute device call: run --parts and
--suites in pieces). --emulate: toy sizes in emulation (no GPU; numbers say nothing about speed),
a smoke run on any machine. --budget-s: the whole run's time; a child gets what is left and later ones are
skipped. A short table is printed last; JSON (environment, rows, summary) goes to --out, rewritten
after each child process so a run cut short keeps what finished.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import Budget, check, child, compile_bytecode, emit, environment, geomean, header, table, write_json

PARTS = ("first", "loop", "picks")
DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
PICK_SUITES = ("square", "irregular", "transformer", "llm")
GPU_SIZES = dict(first=1536, other_m=1536 - 17, new_class=(775, 3077, 1536), loop_k=4096, loop_max_m=2048, loop_calls=600)
EMU_SIZES = dict(first=24, other_m=24 - 5, new_class=(9, 40, 24), loop_k=32, loop_max_m=16, loop_calls=12)


# ---------------------------------------------------------------- child side (a fresh process)

def _setup(dtype: str):
    """Import torch and tiledmm; return (torch, tiledmm, torch dtype, device, sizes)."""
    import torch
    import tiledmm
    torch.backends.cuda.matmul.allow_tf32 = False        # fp32 is "ieee" on both sides
    emu = tiledmm.emulating()
    return torch, tiledmm, getattr(torch, dtype), ("cpu" if emu else "cuda"), (EMU_SIZES if emu else GPU_SIZES)


def _sync(torch, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def child_first(dtype: str, label: str) -> None:
    t0 = time.perf_counter()
    torch, tiledmm, dt, dev, S = _setup(dtype)
    t_import = time.perf_counter() - t0
    emit("ENV", environment())
    n = S["first"]
    a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
    _sync(torch, dev)

    def timed(f, x, y):
        _sync(torch, dev)
        t = time.perf_counter()
        r = f(x, y)
        _sync(torch, dev)
        return time.perf_counter() - t, r

    first, c = timed(tiledmm.matmul, a, b)
    err = check(c, a, b, dtype)
    second, _ = timed(tiledmm.matmul, a, b)
    other, c2 = timed(tiledmm.matmul, a[:S["other_m"]], b)
    check(c2, a[:S["other_m"]], b, dtype)
    torch_first, _ = timed(torch.matmul, a, b)
    torch_second, _ = timed(torch.matmul, a, b)
    m, k, n2 = S["new_class"]          # a class never seen, in this running process (its kernel in Triton's cache
    x, y = torch.randn(m, k, device=dev, dtype=dt), torch.randn(k, n2, device=dev, dtype=dt)   # on the warm pass)
    new_class, c3 = timed(tiledmm.matmul, x, y)
    check(c3, x, y, dtype)
    emit("ROW", dict(dtype=dtype, shape=[n, n, n], triton_cache=label, import_s=t_import, first_s=first,
                      second_s=second, other_m=S["other_m"], other_m_s=other, torch_first_s=torch_first,
                      torch_second_s=torch_second, rel_err=err, new_class=[m, k, n2], new_class_s=new_class))


def child_loop(dtype: str, label: str, seed: int) -> None:
    import numpy as np
    torch, tiledmm, dt, dev, S = _setup(dtype)
    emit("ENV", environment())
    k, top, calls = S["loop_k"], S["loop_max_m"], S["loop_calls"]
    ms = [int(m) for m in np.random.default_rng(seed).integers(1, top + 1, calls)]
    x, w = torch.randn(top, k, device=dev, dtype=dt), torch.randn(k, k, device=dev, dtype=dt)

    def one_pass(f) -> float:
        _sync(torch, dev)
        t = time.perf_counter()
        for m in ms:
            f(x[:m], w)
        _sync(torch, dev)
        return time.perf_counter() - t

    t1, t2 = one_pass(torch.matmul), one_pass(torch.matmul)
    m1, m2 = one_pass(tiledmm.matmul), one_pass(tiledmm.matmul)
    errs = [check(tiledmm.matmul(x[:m], w), x[:m], w, dtype) for m in sorted(set(ms))[::max(1, calls // 8)]]
    emit("ROW", dict(dtype=dtype, triton_cache=label, calls=calls, distinct_m=len(set(ms)), n=k, k=k, seed=seed,
                      torch_pass1_s=t1, torch_pass2_s=t2, tiledmm_pass1_s=m1, tiledmm_pass2_s=m2,
                      ratio_pass1=m1 / t1, ratio_pass2=m2 / t2, max_rel_err=max(errs)))


def pick_shapes(suites: list[str], quick: bool, emulate: bool) -> list[tuple[str, tuple]]:
    """(suite, shape) to compare picks on; in emulation the toy 'emulation' suite stands in."""
    from tiledmm.bench import SUITES
    out = []
    for s in (["emulation"] if emulate else suites):
        shapes = SUITES[s]
        out += [(s, tuple(x)) for x in (shapes[::2] if quick else shapes)]
    return out


def child_picks(mode: str, dtypes: list[str], suites: list[str], quick: bool) -> None:
    from tiledmm.harness import rotation_for
    from tiledmm.timing import time_calls
    batches = 3 if quick else 5
    for dtype in dtypes:
        torch, tiledmm, dt, dev, S = _setup(dtype)
        emit("ENV", environment())
        for suite, shape in pick_shapes(suites, quick, tiledmm.emulating()):
            *batch, m, k, n = shape
            rot = 1 if tiledmm.emulating() else rotation_for(shape, dtype)
            sets = [(torch.randn(*batch, m, k, device=dev, dtype=dt), torch.randn(*batch, k, n, device=dev, dtype=dt))
                    for _ in range(rot)]
            a, b = sets[0]
            t = time.perf_counter()
            c = tiledmm.matmul(a, b)          # the pick: by the model (default) or timed (TILEDMM_TUNE=on)
            _sync(torch, dev)
            pick_s = time.perf_counter() - t
            row = dict(mode=mode, suite=suite, shape=list(shape), dtype=dtype, pick_s=pick_s,
                       rel_err=check(c, a, b, dtype))
            del c
            row["ms"] = time_calls([lambda x=x, y=y: tiledmm.matmul(x, y) for x, y in sets], batches=batches)
            if mode == "default":
                row["torch_ms"] = time_calls([lambda x=x, y=y: torch.matmul(x, y) for x, y in sets], batches=batches)
            emit("ROW", row)
            del sets, a, b
    from tiledmm import tuning
    emit("CHOICES", {mode: {str(k): str(v) for k, v in tuning.remembered().items()}})


def parse_choice(name: str):
    """A dispatcher choice's name, "variant:KEY=value-KEY=value" (matmul.candidate_name), as (Variant,
    config); None for an unknown variant or a value that is not an integer or a boolean."""
    from tiledmm.kernels.block import variants as V
    vname, _, rest = name.partition(":")
    variant = V.BY_NAME.get(vname)
    cfg = {}
    for item in filter(None, rest.split("-")):
        k, _, v = item.partition("=")
        if v in ("True", "False"):
            cfg[k] = v == "True"
        elif v.lstrip("-").isdigit():
            cfg[k] = int(v)
        else:
            return None
    return (variant, cfg) if variant is not None else None


def child_replay(dtypes: list[str], suites: list[str], quick: bool, choices_path: str) -> None:
    """The default's and the timing's choices (recorded by the 'default' and 'timed' children), each
    bound as the dispatcher binds it and timed in turn in this one process (three rounds each, medians):
    the two children ran on the GPU at different times and clocks, which moves their ratio by a few
    per cent even where both chose the same kernel (session 10). Same choice: ratio 1 (one kernel)."""
    import statistics

    from tiledmm import tuning
    from tiledmm.harness import rotation_for
    from tiledmm.kernels.block import heuristics as H
    from tiledmm.kernels.block import dispatch as bm
    from tiledmm.timing import time_calls
    choices = json.loads(Path(choices_path).read_text())
    default, timed = choices.get("default", {}), choices.get("timed", {})
    batches = 3 if quick else 5
    for dtype in dtypes:
        torch, tiledmm, dt, dev, S = _setup(dtype)
        emit("ENV", environment())
        precision = bm.check_precision(dtype, None)
        for suite, shape in pick_shapes(suites, quick, tiledmm.emulating()):
            *batch, m, k, n = shape
            rot = 1 if tiledmm.emulating() else rotation_for(shape, dtype)
            sets = [(torch.randn(*batch, m, k, device=dev, dtype=dt), torch.randn(*batch, k, n, device=dev, dtype=dt))
                    for _ in range(rot)]
            a, b = sets[0]
            c = torch.empty(*batch, m, n, device=dev, dtype=dt)
            key = bm.plan_key(a, b, c, precision, 1.0, 0.0)
            tkey = tuning.key_of("triton", *(str(x) for x in key[:-1]))
            # the default's choice as _resolve makes it with an empty store: the table's, else the model's
            # (the default child times nothing, so it records no choice unless a store gave one)
            options = {cd.name: cd for cd in bm.candidates(a, b, c, precision, 1.0, 0.0, key)}
            model_pick, table_pick = bm.untimed_choices(key, a, b, c, precision, 1.0, 0.0,
                                                        bm._problem(a, b, c, precision), options)
            names = {"default": default.get(tkey) or table_pick or model_pick, "timed": timed.get(tkey)}
            row = dict(mode="replay", suite=suite, shape=list(shape), dtype=dtype, **{f"{w}_choice": v
                                                                                      for w, v in names.items()})
            if None in names.values():
                emit("ROW", dict(row, missing=[w for w, v in names.items() if v is None]))
                continue
            for v in names.values():
                # a choice made for the class by another of its shapes (a class spans 2x in each of M, N, K)
                # need not be among this shape's candidates: bind it from its name
                parsed = parse_choice(v) if v not in options else None
                if parsed is not None:
                    options[v] = H.Candidate(v, parsed[1], parsed[0].traits, 0, parsed[0])
            if any(v not in options for v in names.values()):
                emit("ROW", dict(row, missing=[w for w, v in names.items() if v not in options]))
                continue
            fns = {w: bm._bind(options[v].variant, precision, options[v].config) for w, v in names.items()}
            outs = [torch.empty_like(c) for _ in sets]
            for w, f in fns.items():
                f(a, b, outs[0], alpha=1.0, beta=0.0)
                row[f"rel_err_{w}"] = check(outs[0], a, b, dtype)
            times = {w: [] for w in fns}
            for _ in range(1 if names["default"] == names["timed"] else 3):
                for w, f in fns.items():
                    times[w].append(time_calls([lambda x=x, y=y, o=o, f=f: f(x, y, o, alpha=1.0, beta=0.0)
                                                for (x, y), o in zip(sets, outs)], batches=batches))
            row.update({f"{w}_ms": statistics.median(v) for w, v in times.items()})
            row["ratio"] = 1.0 if names["default"] == names["timed"] else row["timed_ms"] / row["default_ms"]
            emit("ROW", row)
            del sets, a, b, c, outs


def child_main(argv: list[str]) -> None:
    part, rest = argv[0], argv[1:]
    if part == "first":
        child_first(rest[0], rest[1])
    elif part == "loop":
        child_loop(rest[0], rest[1], int(rest[2]))
    elif part == "picks" and rest[0] == "replay":
        child_replay(rest[1].split(","), rest[2].split(","), rest[3] == "quick", rest[4])
    elif part == "picks":
        child_picks(rest[0], rest[1].split(","), rest[2].split(","), rest[3] == "quick")
    else:
        raise SystemExit(f"unknown child part {part!r}")


# ---------------------------------------------------------------- parent side

def run_child(args, part_args: list[str], *, triton_cache: str | None = None, tune: bool = False,
              table: bool = True) -> dict:
    """One fresh process with default settings and an empty tiledmm cache (_common.child); its ROW, ENV and
    CHOICES lines. ``table`` False: the shipped table off (TILEDMM_TABLE=off: the model alone)."""
    got = child(str(Path(__file__).resolve()), part_args, timeout=args.budget.left(), tune=tune, table_on=table,
                emulate=args.emulate, triton_cache=triton_cache)
    choices = {}
    for c in got.get("CHOICES", []):
        choices.update(c)
    return {"rows": got.get("ROW", []), "env": (got.get("ENV") or [None])[0], "choices": choices,
            "error": got["error"]}


def summarize_picks(rows: list[dict]) -> dict:
    """Per dtype (and suite): geomean of timed ms / default ms (the default: the shipped table, else
    the model), the same for the model alone (the table off), the shapes below 0.90, default vs torch."""
    key = lambda r: (r["suite"], tuple(r["shape"]), r["dtype"])     # noqa: E731
    timed = {key(r): r for r in rows if r["mode"] == "timed"}
    model = {key(r): r for r in rows if r["mode"] == "model"}
    pairs = [(d, timed[key(d)]) for d in rows if d["mode"] == "default" and key(d) in timed]
    replay = [r for r in rows if r["mode"] == "replay" and r.get("ratio")]
    out = {}
    for dtype in dict.fromkeys(d["dtype"] for d, _ in pairs):
        sub = [(d, t) for d, t in pairs if d["dtype"] == dtype]
        ratio = {key(d): t["ms"] / d["ms"] for d, t in sub if d["ms"] and t["ms"]}
        alone = {key(d): t["ms"] / model[key(d)]["ms"] for d, t in sub if key(d) in model and t["ms"]
                 and model[key(d)]["ms"]}
        out[dtype] = {
            "n": len(ratio), "geomean_timed_over_default": geomean(list(ratio.values())),
            "geomean_timed_over_model": geomean(list(alone.values())),
            "per_suite": {s: geomean([v for k, v in ratio.items() if k[0] == s])
                          for s in dict.fromkeys(k[0] for k in ratio)},
            "below_0.90": [{"suite": k[0], "shape": list(k[1]), "ratio": v} for k, v in ratio.items() if v < 0.90],
            "geomean_torch_over_default": geomean([d["torch_ms"] / d["ms"] for d, _ in sub
                                                   if d.get("torch_ms") and d["ms"]]),
            # the same two choices timed in turn in one process (child_replay)
            "replay": {"n": len([r for r in replay if r["dtype"] == dtype]),
                       "same_choice": len([r for r in replay if r["dtype"] == dtype
                                           and r["default_choice"] == r["timed_choice"]]),
                       "geomean_timed_over_default": geomean([r["ratio"] for r in replay if r["dtype"] == dtype]),
                       "below_0.90": [{"suite": r["suite"], "shape": r["shape"], "ratio": r["ratio"]}
                                      for r in replay if r["dtype"] == dtype and r["ratio"] < 0.90]},
        }
    return out


def report(doc: dict) -> str:
    """The tables printed last."""
    out = [header(doc["environment"])] if doc.get("environment") else []
    if doc.get("first"):
        out.append(table("first call, fresh process, empty tiledmm cache (s)",
                         [("dtype", ""), ("Triton cache", ""), ("first", ".3f"), ("second", ".4f"), ("another M", ".4f"),
                          ("torch first", ".3f"), ("new class", ".4f"), ("import", ".2f")],
                         [(r["dtype"], r["triton_cache"], r["first_s"], r["second_s"], r["other_m_s"], r["torch_first_s"],
                           r.get("new_class_s"), r["import_s"]) for r in doc["first"]]))
    if doc.get("loop"):
        out.append(table("random-M loop x @ W (s): pass 1 and pass 2, tiledmm and torch; x torch",
                         [("dtype", ""), ("Triton cache", ""), ("tiledmm 1", ".3f"), ("tiledmm 2", ".4f"),
                          ("torch 1", ".3f"), ("torch 2", ".4f"), ("x torch 1", ".2f"), ("x torch 2", ".2f")],
                         [(r["dtype"], r["triton_cache"], r["tiledmm_pass1_s"], r["tiledmm_pass2_s"], r["torch_pass1_s"],
                           r["torch_pass2_s"], r["ratio_pass1"], r["ratio_pass2"]) for r in doc["loop"]]))
    for dtype, s in (doc.get("summary", {}).get("picks") or {}).items():
        rp = s.get("replay") or {}
        below = ", ".join(f"{b['suite']} {'x'.join(map(str, b['shape']))} {b['ratio']:.2f}"
                          for b in rp.get("below_0.90") or s["below_0.90"]) or "none"
        out.append(table(f"picks {dtype}: timed ms / default ms, geomean (1.0: the default as fast as timing)",
                         [("measured", ""), ("shapes", "d"), ("timed/default", ".3f"), ("timed/model", ".3f"),
                          ("torch/default", ".3f")],
                         [("separate children", s["n"], s["geomean_timed_over_default"],
                           s.get("geomean_timed_over_model"), s["geomean_torch_over_default"]),
                          (f"one process ({rp.get('same_choice')} same)", rp.get("n"),
                           rp.get("geomean_timed_over_default"), None, None)]))
        out.append("  per suite: " + ", ".join(f"{k} {v:.3f}" for k, v in s["per_suite"].items() if v))
        out.append(f"  below 0.90: {below}")
    return "\n\n".join(out)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {PARTS}")
    ap.add_argument("--suites", default=",".join(PICK_SUITES), help="bench suites for 'picks'")
    ap.add_argument("--dtypes", default="bf16,fp32", help=f"comma-separated, of {tuple(DTYPES)}")
    ap.add_argument("--quick", action="store_true", help="'picks' on every other shape, 3 timed batches")
    ap.add_argument("--emulate", action="store_true", help="toy sizes in emulation (no GPU; not speed)")
    ap.add_argument("--seed", type=int, default=0, help="the loop's M sequence")
    ap.add_argument("--child-timeout", type=float, default=560.0, help="seconds per child process")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for the whole run: a child gets at most "
                    "what is left (what it printed is kept), later ones are skipped (for 10-minute device calls)")
    ap.add_argument("--bytecode", action="store_true", help="compile tiledmm's and Triton's modules to bytecode "
                    "first (what pip does at install; a checkout or PYTHONDONTWRITEBYTECODE may leave it undone)")
    ap.add_argument("--out", type=Path, default=Path("dispatch.json"))
    args = ap.parse_args(argv)
    from tiledmm.bench import SUITES
    for name, have, allowed in (("part", args.parts, PARTS), ("suite", args.suites, SUITES),
                                ("dtype", args.dtypes, DTYPES)):
        bad = [x for x in have.split(",") if x not in allowed]
        if bad:
            ap.error(f"unknown {name} {bad[0]!r}; choose from {list(allowed)}")
    return args


def _self_check() -> None:
    """parse_choice reads back what the dispatcher writes (the replay binds recorded choices by name)."""
    from tiledmm.kernels.block import dispatch as bm
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "EPI_SPLIT": 2, "WS": False, "num_stages": 3}
    variant, got = parse_choice(bm.candidate_name("gluon-ws", cfg))
    assert variant.name == "gluon-ws" and got == cfg and type(got["WS"]) is bool, (variant, got)
    assert parse_choice("no-such-variant:BLOCK_M=64") is None and parse_choice("blocked:BLOCK_M=x") is None


def main(argv=None) -> int:
    args = parse_args(argv)
    args.budget = Budget(args.budget_s, args.child_timeout)
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    doc = {"environment": {}, "args": {k: str(v) for k, v in vars(args).items() if k != "budget"}}
    failed = False
    if "picks" in args.parts.split(","):
        _self_check()

    def keep(part: str, got: dict) -> None:
        nonlocal failed
        doc.setdefault(part, []).extend(got["rows"])
        if not doc["environment"] and got["env"]:
            doc["environment"] = got["env"]
        doc.setdefault("choices", {}).update(got["choices"])
        if got["error"]:
            failed = True
            doc.setdefault("errors", []).append({"part": part, "error": got["error"]})
        write_json(args.out, doc)       # after every child: a cut run keeps the rest

    if args.bytecode:
        compile_bytecode()
    passes = ("emulated",) if args.emulate else ("triton-cold", "triton-warm")
    for part in args.parts.split(","):
        if part in ("first", "loop"):
            for dtype in dtypes:
                triton_cache = tempfile.mkdtemp(prefix="tiledmm-bench-triton-")   # empty, then warm
                for label in passes:
                    extra = [str(args.seed)] if part == "loop" else []
                    keep(part, run_child(args, [part, dtype, label, *extra], triton_cache=triton_cache))
        elif part == "picks":
            size = "quick" if args.quick else "full"
            for mode in ("default", "timed"):
                keep(part, run_child(args, ["picks", mode, ",".join(dtypes), args.suites, size], tune=mode == "timed"))
            # both choices again, timed in turn in one process (the children's GPU states differ)
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(doc.get("choices", {}), f)
            keep(part, run_child(args, ["picks", "replay", ",".join(dtypes), args.suites, size, f.name]))
            os.unlink(f.name)
            keep(part, run_child(args, ["picks", "model", ",".join(dtypes), args.suites, size], table=False))
            doc.setdefault("summary", {})["picks"] = summarize_picks(doc.get("picks", []))
            write_json(args.out, doc)
    print(report(doc))
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
    else:
        sys.exit(main())
