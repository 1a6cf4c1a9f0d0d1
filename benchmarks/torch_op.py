"""The PyTorch operator: tiledmm inside a model, against torch eager (a GPU; benchmarks, not tests).

  linear   tiledmm.nn.functional.linear(x, W, b, act) vs torch eager act(F.linear(x, W, b)) for each of
           --activations (default none,gelu,silu; none: tiledmm's linear(x, W, b) with no activation),
           x M x IN, W OUT x IN, bf16: forward (target >= 1.15x) and forward + backward (>= 1.05x), each
           checked against float64 before it is timed
  gpt2     GPT-2 small (transformers' GPT2LMHeadModel, random weights): logits under tiledmm.enable() vs
           torch's (bf16 tolerance), training-step time (forward + backward + AdamW) under tiledmm.enable()
           vs torch eager (target >= 1.05x), and --steps training steps on fixed synthetic data from one
           initialisation: final losses within 1 % (--steps 0 skips this). --weights bf16, fp32-autocast
           or both (one after the other, each its own rows)
  compile  an MLP of tiledmm.nn.Linear(gelu) layers under torch.compile(fullgraph=True) (a graph
           break raises) vs the same of torch.nn.Linear + F.gelu compiled: step time, same results

Every time is tiledmm.timing.time_calls (CUDA events around queued calls, median of batches; through
benchmarks/_common.py). The linear and gpt2 comparisons run in --rounds alternating rounds (torch, tiledmm,
then tiledmm, torch, ...): a training step's time drifts with the host (clocks, other load), so one measurement
of each side, taken minutes apart, can differ by more than the speed-up sought; each side's number is the
median over rounds, the speed-up the ratio of those medians (the per-round ratios are in the JSON).
Results are checked before they are timed. A short table, one row per (part, activation or weights setting),
is printed last; --out DIR writes torch_op.json.

  PYTHONPATH=src python3 benchmarks/torch_op.py --quick                 # small sizes first
  PYTHONPATH=src python3 benchmarks/torch_op.py --out $OUT              # the targets' sizes
  PYTHONPATH=src python3 benchmarks/torch_op.py --only linear --m 8192 --in-features 4096 --out-features 16384
  PYTHONPATH=src python3 benchmarks/torch_op.py --only gpt2 --weights both --rounds 4 --steps 0
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys

from _common import environment, header, log, table, time_calls, write_json

DEVICE = "cuda"
WEIGHTS = ("bf16", "fp32-autocast")
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")      # tiledmm's names


def _torch_activation(name: str):
    """torch eager's activation of that name (tiledmm's names), applied after F.linear."""
    import torch.nn.functional as F
    return {"none": lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
            "gelu_tanh": lambda y: F.gelu(y, approximate="tanh")}[name]


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=("all", "linear", "gpt2", "compile"), default="all")
    p.add_argument("--quick", action="store_true", help="small sizes everywhere (a first check)")
    p.add_argument("--rounds", type=int, default=4,
                   help="linear and gpt2: alternating rounds (torch then tiledmm, then tiledmm then torch, ...); "
                        "each side's time is the median over rounds")
    p.add_argument("--m", type=int, default=8192, help="linear: rows of x")
    p.add_argument("--in-features", type=int, default=4096)
    p.add_argument("--out-features", type=int, default=16384)
    p.add_argument("--activations", default="none,gelu,silu",
                   help=f"linear: comma-separated, of {','.join(ACTIVATIONS)} (none: no activation)")
    p.add_argument("--layers", type=int, default=12, help="gpt2: decoder layers")
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=200,
                   help="gpt2: training steps for the loss comparison (0: no loss comparison)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--weights", choices=(*WEIGHTS, "both"), default="bf16",
                   help="gpt2: bf16 weights (the target's setting), or float32 master weights under "
                        "torch.autocast(bfloat16) (mixed precision: the GEMMs still run in bf16), or both, "
                        "one after the other")
    p.add_argument("--mlp-layers", type=int, default=4, help="compile: tiledmm.nn.Linear layers")
    p.add_argument("--out", default=None, help="folder for torch_op.json")
    a = p.parse_args(argv)
    a.activations = [x.strip() for x in a.activations.split(",") if x.strip()]
    bad = [x for x in a.activations if x not in ACTIVATIONS]
    if bad or not a.activations:
        p.error(f"--activations: {bad or 'none given'}; choose from {','.join(ACTIVATIONS)}")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    if a.steps < 0:
        p.error("--steps must be 0 or more")
    if a.quick:
        a.m, a.in_features, a.out_features = 1024, 512, 2048
        a.layers, a.d_model, a.heads, a.seq, a.batch, a.vocab = 2, 256, 4, 128, 4, 1000
        a.steps = min(a.steps, 20)
    return a


def alternate(rounds: int, torch_side, tiledmm_side) -> dict:
    """Each side's ms per call, torch first in even rounds and tiledmm first in odd ones (A B, B A, ...: neither
    side always follows the other's heat and allocations): the medians, their ratio (torch / tiledmm) and what
    each round gave."""
    t, o = [], []
    for r in range(rounds):
        if r % 2:
            o.append(tiledmm_side())
            t.append(torch_side())
        else:
            t.append(torch_side())
            o.append(tiledmm_side())
    mt, mo = statistics.median(t), statistics.median(o)
    return {"torch": mt, "tiledmm": mo, "speedup": mt / mo,
            "rounds": {"torch": t, "tiledmm": o, "speedup": [x / y for x, y in zip(t, o)]}}


def bench_linear(a, torch, tiledmm, time_calls) -> dict:
    import torch.nn.functional as F
    from tiledmm.nn.functional import linear
    dev, dt = DEVICE, torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    xs = [torch.randn(a.m, a.in_features, device=dev, dtype=dt, generator=g) for _ in range(3)]
    W = (torch.randn(a.out_features, a.in_features, device=dev, dtype=dt, generator=g) / a.in_features ** 0.5)
    b = torch.randn(a.out_features, device=dev, dtype=dt, generator=g)
    Wg, bg = W.clone().requires_grad_(), b.clone().requires_grad_()
    xg = [x.clone().requires_grad_() for x in xs]
    gy = torch.randn(a.m, a.out_features, device=dev, dtype=dt, generator=g)
    flops = 2 * a.m * a.in_features * a.out_features
    out = {"shape": [a.m, a.in_features, a.out_features], "rounds": a.rounds, "activations": {}}
    for name in a.activations:
        act = _torch_activation(name)
        ours_act = None if name == "none" else name          # tiledmm spells "no activation" None
        with torch.no_grad():
            ours, ref = linear(xs[0], W, b, ours_act), act(F.linear(xs[0], W, b))
            exact = act(F.linear(xs[0].double(), W.double(), b.double()))
        err = ((ours.double() - exact).abs().max() / exact.abs().max()).item()
        err_t = ((ref.double() - exact).abs().max() / exact.abs().max()).item()
        del ours, ref, exact
        log(f"linear {name}: max error / max |y| vs float64: tiledmm {err:.2e}, torch {err_t:.2e}")
        r = out["activations"][name] = {"error": err, "torch_error": err_t}
        if not err <= 4 * max(err_t, 2 ** -8):           # NaN fails too
            r["off"] = f"tiledmm's result is off ({err:.2e} vs torch's {err_t:.2e}); not timed"
            log(f"linear {name}: {r['off']}")
            continue

        def fwd(fn):
            def run():
                with torch.no_grad():
                    return time_calls([lambda x=x: fn(x, W, b) for x in xs])
            return run

        def fwd_bwd(fn):
            return lambda: time_calls([lambda x=x: fn(x, Wg, bg).backward(gy) for x in xg])

        def eager(x, w, bias):
            return act(F.linear(x, w, bias))

        def ours_fn(x, w, bias):
            return linear(x, w, bias, ours_act)

        f = alternate(a.rounds, fwd(eager), fwd(ours_fn))
        fb = alternate(a.rounds, fwd_bwd(eager), fwd_bwd(ours_fn))
        for what, m in (("fwd", f), ("fwd+bwd", fb)):
            log(f"linear {name} {what}: torch {m['torch']:.3f} ms, tiledmm {m['tiledmm']:.3f} ms, "
                f"{m['speedup']:.3f}x (rounds: " + ", ".join(f"{x:.3f}" for x in m["rounds"]["speedup"]) + ")")
        r.update({"fwd_ms": {"torch": f["torch"], "tiledmm": f["tiledmm"]},
                  "fwd_bwd_ms": {"torch": fb["torch"], "tiledmm": fb["tiledmm"]},
                  "fwd_speedup": f["speedup"], "fwd_bwd_speedup": fb["speedup"],
                  "fwd_rounds": f["rounds"], "fwd_bwd_rounds": fb["rounds"],
                  "fwd_tflops": {"torch": flops / f["torch"] / 1e9, "tiledmm": flops / f["tiledmm"] / 1e9}})
    # the top-level keys are gelu's, the one activation older torch_op.json files hold: they compare
    gelu = out["activations"].get("gelu", {})
    out.update({k: gelu[k] for k in ("error", "torch_error", "fwd_ms", "fwd_bwd_ms", "fwd_speedup",
                                     "fwd_bwd_speedup", "fwd_tflops") if k in gelu})
    return out


def bench_gpt2(a, torch, tiledmm, time_calls, weights: str) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel
    dev = DEVICE
    mixed = weights == "fp32-autocast"
    dt = torch.float32 if mixed else torch.bfloat16
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=a.layers, n_embd=a.d_model, n_head=a.heads, n_positions=a.seq, vocab_size=a.vocab,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    base = GPT2LMHeadModel(cfg).to(dev, dt)
    g = torch.Generator(device=dev).manual_seed(1)
    ids = [torch.randint(0, a.vocab, (a.batch, a.seq), device=dev, generator=g) for _ in range(3)]

    def precision():
        return torch.autocast(dev, dtype=torch.bfloat16) if mixed else contextlib.nullcontext()

    with torch.no_grad(), precision():
        ref = base(ids[0]).logits
        with tiledmm.ops.enable() as mode:
            got = base(ids[0]).logits
    diff = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    del ref, got
    log(f"gpt2 ({weights}): logits max |tiledmm - torch| / max |torch| = {diff:.2e}; calls {mode.summary()}")

    def trainer(model, on: bool, perturb: bool = False):
        if perturb:        # the control: the same model with one bf16 ulp added to 1 in 1000 weights
            with torch.no_grad():
                for p in model.parameters():
                    mask = torch.rand(p.shape, device=dev, generator=torch.Generator(device=dev).manual_seed(7)) < 1e-3
                    p.copy_(torch.where(mask, p.to(torch.bfloat16).float().mul(1 + 2 ** -7).to(p.dtype), p))
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr)

        def step(x):
            with tiledmm.ops.enable() if on else contextlib.nullcontext():
                with precision():
                    loss = model(x, labels=x).loss
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        return step

    m_t, m_o = copy.deepcopy(base), copy.deepcopy(base)
    s_t, s_o = trainer(m_t, False), trainer(m_o, True)

    def timed(step):
        return lambda: time_calls([lambda x=x: step(x) for x in ids], batches=3, per_batch=3, warmup=2)
    st = alternate(a.rounds, timed(s_t), timed(s_o))
    log(f"gpt2 ({weights}) step: torch {st['torch']:.2f} ms, tiledmm {st['tiledmm']:.2f} ms, {st['speedup']:.3f}x "
        "(rounds: " + ", ".join(f"{x:.3f}" for x in st["rounds"]["speedup"]) + ")")
    del m_t, m_o, s_t, s_o

    rec = {"config": [a.layers, a.d_model, a.heads, a.seq, a.batch], "weights": weights, "logits_rel_diff": diff,
           "step_ms": {"torch": st["torch"], "tiledmm": st["tiledmm"]}, "step_speedup": st["speedup"],
           "rounds": a.rounds, "step_rounds": st["rounds"], "routing": mode.summary(), "loss": None}
    if a.steps:
        data = ids[0]
        losses = {}
        for name, on, perturb in (("torch", False, False), ("tiledmm", True, False), ("torch-perturbed", False, True)):
            step = trainer(copy.deepcopy(base), on, perturb)         # the loss runs: same init, same data
            losses[name] = [step(data).item() for _ in range(a.steps)]
            del step
        k = min(10, a.steps)
        final = {n: sum(v[-k:]) / k for n, v in losses.items()}
        ft, fo, fc = final["torch"], final["tiledmm"], final["torch-perturbed"]
        log(f"gpt2 ({weights}): loss after {a.steps} steps (mean of last {k}): torch {ft:.4f}, tiledmm {fo:.4f}, "
            f"torch from weights perturbed by one bf16 ulp in 1/1000 of them {fc:.4f}")
        rec["loss"] = {"steps": a.steps, "torch": ft, "tiledmm": fo, "rel_diff": abs(fo - ft) / abs(ft),
                       "torch_perturbed": fc, "control_rel_diff": abs(fc - ft) / abs(ft)}
        rec["loss_curves"] = {n: v[::10] for n, v in losses.items()}
    del base
    torch.cuda.empty_cache()            # the next setting starts from an empty pool
    return rec


def bench_compile(a, torch, tiledmm, time_calls) -> dict:
    import torch.nn.functional as F
    import tiledmm.nn as tnn
    dev, dt = DEVICE, torch.bfloat16
    d = a.in_features

    class TorchMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(a.mlp_layers))

        def forward(self, x):
            for lay in self.layers:
                x = F.gelu(lay(x))
            return x

    class OurMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(tnn.Linear(d, d, activation="gelu") for _ in range(a.mlp_layers))

        def forward(self, x):
            for lay in self.layers:
                x = lay(x)
            return x

    torch.manual_seed(0)
    theirs = TorchMLP().to(dev, dt)
    ours = OurMLP().to(dev, dt)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(a.m, d, device=dev, dtype=dt)
    ct = torch.compile(theirs, fullgraph=True)
    co = torch.compile(ours, fullgraph=True)           # a graph break raises here
    with torch.no_grad():
        yt, yo = ct(x), co(x)
    diff = ((yo.float() - yt.float()).abs().max() / yt.float().abs().max()).item()
    log(f"compile: max |tiledmm - torch| / max |torch| = {diff:.2e}")

    def step(model):
        def run():
            model(x).float().square().mean().backward()
        return run
    t = time_calls(step(ct), batches=3, warmup=3)
    o = time_calls(step(co), batches=3, warmup=3)
    return {"mlp": [a.mlp_layers, a.m, d], "rel_diff": diff, "step_ms": {"torch.compile": t, "tiledmm+compile": o},
            "speedup": t / o}


def final_rows(results: dict) -> tuple[list[tuple], bool]:
    """The last table's rows, one per (part, activation or weights setting); whether a result was off."""
    rows, off = [], False
    for name, r in results.get("linear", {}).get("activations", {}).items():
        if "off" in r:
            off = True
            rows.append((f"linear {name}", None, None, None, "OFF vs float64: not timed"))
            continue
        rows.append((f"linear {name} fwd", r["fwd_ms"]["torch"], r["fwd_ms"]["tiledmm"], r["fwd_speedup"],
                     ">= 1.15x"))
        rows.append((f"linear {name} fwd+bwd", r["fwd_bwd_ms"]["torch"], r["fwd_bwd_ms"]["tiledmm"],
                     r["fwd_bwd_speedup"], ">= 1.05x"))
    for w, r in results.get("gpt2_by_weights", {}).items():
        rows.append((f"gpt2 ({w}) train step", r["step_ms"]["torch"], r["step_ms"]["tiledmm"], r["step_speedup"],
                     ">= 1.05x"))
    if "compile" in results:
        r = results["compile"]
        rows.append(("compiled MLP step", r["step_ms"]["torch.compile"], r["step_ms"]["tiledmm+compile"], r["speedup"],
                     "(recorded)"))
    return rows, off


def main(argv=None) -> int:
    a = parse(argv)
    import torch
    import tiledmm
    if tiledmm.emulating() or not torch.cuda.is_available():
        log("torch_op: needs a CUDA GPU (arguments parsed: " + json.dumps(vars(a)) + ")")
        return 2
    env = environment()
    log(header(env))
    results = {}
    if a.only in ("all", "linear"):
        results["linear"] = bench_linear(a, torch, tiledmm, time_calls)
    if a.only in ("all", "gpt2"):
        settings = WEIGHTS if a.weights == "both" else (a.weights,)
        by = {w: bench_gpt2(a, torch, tiledmm, time_calls, w) for w in settings}
        results["gpt2"] = by[settings[0]]     # one record under "gpt2": older torch_op.json files compare
        results["gpt2_by_weights"] = by
    if a.only in ("all", "compile"):
        results["compile"] = bench_compile(a, torch, tiledmm, time_calls)
    if a.out:
        log(f"wrote {write_json(os.path.join(a.out, 'torch_op.json'), dict(results, environment=env))}")
    rows, off = final_rows(results)
    for w, r in results.get("gpt2_by_weights", {}).items():
        if r["loss"]:
            lo = r["loss"]
            print(f"gpt2 ({w}) loss after {lo['steps']} steps: torch {lo['torch']:.4f}, tiledmm {lo['tiledmm']:.4f} "
                  f"({100 * lo['rel_diff']:.2f} %, target <= 1 %; control, torch perturbed: "
                  f"{100 * lo['control_rel_diff']:.2f} %)")
    print(table("\n" + header(env) + f"\nms per call (step), median of {a.rounds} alternating rounds; "
                "speed-up = torch / tiledmm",
                [("what", ""), ("torch ms", ".3f"), ("tiledmm ms", ".3f"), ("speed-up", ".2f"), ("target", "")], rows))
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
