"""The PyTorch operator: tiledmm inside a model, against torch eager (a GPU; benchmarks, not tests).

  linear   tiledmm.nn.functional.linear(x, W, b, "gelu") vs torch eager F.gelu(F.linear(x, W, b)),
           x M x IN, W OUT x IN, bf16: forward (target >= 1.15x) and forward + backward (>= 1.05x)
  gpt2     GPT-2 small (transformers' GPT2LMHeadModel, random weights, bf16): logits under
           tiledmm.enable() vs torch's (bf16 tolerance), training-step time (forward + backward +
           AdamW) under tiledmm.enable() vs torch eager (target >= 1.00x), and --steps training
           steps on fixed synthetic data from one initialisation: final losses within 1 %
  compile  an MLP of tiledmm.nn.Linear(gelu) layers under torch.compile(fullgraph=True) (a graph
           break raises) vs the same of torch.nn.Linear + F.gelu compiled: step time, same results

Every time is tiledmm.timing.time_calls (CUDA events around queued calls, median of batches; through
benchmarks/_common.py). Results are checked before they are timed. A short table is printed last; --out DIR
writes torch_op.json.

  PYTHONPATH=src python3 benchmarks/torch_op.py --quick                 # small sizes first
  PYTHONPATH=src python3 benchmarks/torch_op.py --out $OUT              # the targets' sizes
  PYTHONPATH=src python3 benchmarks/torch_op.py --only linear --m 8192 --in-features 4096 --out-features 16384
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys

from _common import environment, header, log, table, time_calls, write_json


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=("all", "linear", "gpt2", "compile"), default="all")
    p.add_argument("--quick", action="store_true", help="small sizes everywhere (a first check)")
    p.add_argument("--m", type=int, default=8192, help="linear: rows of x")
    p.add_argument("--in-features", type=int, default=4096)
    p.add_argument("--out-features", type=int, default=16384)
    p.add_argument("--layers", type=int, default=12, help="gpt2: decoder layers")
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=200, help="gpt2: training steps for the loss comparison")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--weights", choices=("bf16", "fp32-autocast"), default="bf16",
                   help="gpt2: bf16 weights (the target's setting), or float32 master weights under "
                        "torch.autocast(bfloat16) (mixed precision: the GEMMs still run in bf16)")
    p.add_argument("--mlp-layers", type=int, default=4, help="compile: tiledmm.nn.Linear layers")
    p.add_argument("--out", default=None, help="folder for torch_op.json")
    a = p.parse_args(argv)
    if a.quick:
        a.m, a.in_features, a.out_features = 1024, 512, 2048
        a.layers, a.d_model, a.heads, a.seq, a.batch, a.vocab, a.steps = 2, 256, 4, 128, 4, 1000, 20
    return a


def bench_linear(a, torch, tiledmm, time_calls) -> dict:
    import torch.nn.functional as F
    from tiledmm.nn.functional import linear
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    xs = [torch.randn(a.m, a.in_features, device=dev, dtype=dt, generator=g) for _ in range(3)]
    W = (torch.randn(a.out_features, a.in_features, device=dev, dtype=dt, generator=g) / a.in_features ** 0.5)
    b = torch.randn(a.out_features, device=dev, dtype=dt, generator=g)
    with torch.no_grad():
        ours, ref = linear(xs[0], W, b, "gelu"), F.gelu(F.linear(xs[0], W, b))
        exact = F.gelu(F.linear(xs[0].double(), W.double(), b.double()))
    err = ((ours.double() - exact).abs().max() / exact.abs().max()).item()
    err_t = ((ref.double() - exact).abs().max() / exact.abs().max()).item()
    log(f"linear: max error / max |y| vs float64: tiledmm {err:.2e}, torch {err_t:.2e}")
    if err > 4 * max(err_t, 2 ** -8):
        raise SystemExit(f"linear: tiledmm's result is off ({err:.2e} vs torch's {err_t:.2e}); not timed")
    with torch.no_grad():
        t_fwd = time_calls([lambda x=x: F.gelu(F.linear(x, W, b)) for x in xs])
        o_fwd = time_calls([lambda x=x: linear(x, W, b, "gelu") for x in xs])
    Wg, bg = W.clone().requires_grad_(), b.clone().requires_grad_()
    xg = [x.clone().requires_grad_() for x in xs]
    gy = torch.randn(a.m, a.out_features, device=dev, dtype=dt, generator=g)
    t_fb = time_calls([lambda x=x: F.gelu(F.linear(x, Wg, bg)).backward(gy) for x in xg])
    o_fb = time_calls([lambda x=x: linear(x, Wg, bg, "gelu").backward(gy) for x in xg])
    flops = 2 * a.m * a.in_features * a.out_features
    return {"shape": [a.m, a.in_features, a.out_features], "error": err, "torch_error": err_t,
            "fwd_ms": {"torch": t_fwd, "tiledmm": o_fwd}, "fwd_bwd_ms": {"torch": t_fb, "tiledmm": o_fb},
            "fwd_speedup": t_fwd / o_fwd, "fwd_bwd_speedup": t_fb / o_fb,
            "fwd_tflops": {"torch": flops / t_fwd / 1e9, "tiledmm": flops / o_fwd / 1e9}}


def bench_gpt2(a, torch, tiledmm, time_calls) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel
    dev = "cuda"
    mixed = a.weights == "fp32-autocast"
    dt = torch.float32 if mixed else torch.bfloat16
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=a.layers, n_embd=a.d_model, n_head=a.heads, n_positions=a.seq, vocab_size=a.vocab,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    base = GPT2LMHeadModel(cfg).to(dev, dt)
    g = torch.Generator(device=dev).manual_seed(1)
    ids = [torch.randint(0, a.vocab, (a.batch, a.seq), device=dev, generator=g) for _ in range(3)]

    def precision():
        return torch.autocast("cuda", dtype=torch.bfloat16) if mixed else contextlib.nullcontext()

    with torch.no_grad(), precision():
        ref = base(ids[0]).logits
        with tiledmm.ops.enable() as mode:
            got = base(ids[0]).logits
    diff = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    log(f"gpt2 ({a.weights}): logits max |tiledmm - torch| / max |torch| = {diff:.2e}; calls {mode.summary()}")

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
    t_step = time_calls([lambda x=x: s_t(x) for x in ids], batches=3, per_batch=3, warmup=2)
    o_step = time_calls([lambda x=x: s_o(x) for x in ids], batches=3, per_batch=3, warmup=2)

    data = ids[0]
    losses = {}
    for name, on, perturb in (("torch", False, False), ("tiledmm", True, False), ("torch-perturbed", False, True)):
        step = trainer(copy.deepcopy(base), on, perturb)         # the loss runs: same init, same data
        losses[name] = [step(data).item() for _ in range(a.steps)]
    k = min(10, a.steps)
    final = {n: sum(v[-k:]) / k for n, v in losses.items()}
    ft, fo, fc = final["torch"], final["tiledmm"], final["torch-perturbed"]
    log(f"gpt2: loss after {a.steps} steps (mean of last {k}): torch {ft:.4f}, tiledmm {fo:.4f}, "
        f"torch from weights perturbed by one bf16 ulp in 1/1000 of them {fc:.4f}")
    return {"config": [a.layers, a.d_model, a.heads, a.seq, a.batch], "weights": a.weights, "logits_rel_diff": diff,
            "step_ms": {"torch": t_step, "tiledmm": o_step}, "step_speedup": t_step / o_step,
            "loss": {"torch": ft, "tiledmm": fo, "rel_diff": abs(fo - ft) / abs(ft), "torch_perturbed": fc,
                     "control_rel_diff": abs(fc - ft) / abs(ft)},
            "loss_curves": {n: v[::10] for n, v in losses.items()}, "routing": mode.summary()}


def bench_compile(a, torch, tiledmm, time_calls) -> dict:
    import torch.nn.functional as F
    import tiledmm.nn as tnn
    dev, dt = "cuda", torch.bfloat16
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
    for name, fn in (("linear", bench_linear), ("gpt2", bench_gpt2), ("compile", bench_compile)):
        if a.only in ("all", name):
            results[name] = fn(a, torch, tiledmm, time_calls)
    if a.out:
        log(f"wrote {write_json(os.path.join(a.out, 'torch_op.json'), dict(results, environment=env))}")
    rows = []
    if "linear" in results:
        r = results["linear"]
        rows.append(("linear gelu fwd", r["fwd_ms"]["torch"], r["fwd_ms"]["tiledmm"], r["fwd_speedup"], ">= 1.15x"))
        rows.append(("linear gelu fwd+bwd", r["fwd_bwd_ms"]["torch"], r["fwd_bwd_ms"]["tiledmm"], r["fwd_bwd_speedup"],
                     ">= 1.05x"))
    if "gpt2" in results:
        r = results["gpt2"]
        rows.append((f"gpt2 ({r['weights']}) train step", r["step_ms"]["torch"], r["step_ms"]["tiledmm"],
                     r["step_speedup"], ">= 1.00x"))
    if "compile" in results:
        r = results["compile"]
        rows.append(("compiled MLP step", r["step_ms"]["torch.compile"], r["step_ms"]["tiledmm+compile"], r["speedup"],
                     "(recorded)"))
    print(table("\n" + header(env) + "\nms per call (step); speed-up = torch / tiledmm",
                [("what", ""), ("torch ms", ".3f"), ("tiledmm ms", ".3f"), ("speed-up", ".2f"), ("target", "")], rows))
    if "gpt2" in results:
        r = results["gpt2"]
        print(f"gpt2 loss after {a.steps} steps: torch {r['loss']['torch']:.4f}, tiledmm {r['loss']['tiledmm']:.4f} "
              f"({100 * r['loss']['rel_diff']:.2f} %, target <= 1 %; control, torch perturbed: "
              f"{100 * r['loss']['control_rel_diff']:.2f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
