#!/usr/bin/env python3
"""Does a GPT-2-small-sized model train as well with FP8 linears as in bf16? (the FP8 issue's
convergence target). Run on the GPU image (about 2-3 minutes on an H100):

    PYTHONPATH=src python3 scripts/fp8_convergence.py [--steps 300] [--recipe rowwise] [--json out.json]

Three runs of the same model and data for ``--steps`` steps: bf16 with seed 0, bf16 with seed 1 (the
run-to-run spread: they differ only in the seed, which draws the initial weights), and FP8 with
seed 0 -- every linear layer of the transformer blocks a ``tiledmm.nn.Linear(fp8=recipe)`` loaded
with the same initial weights (the tied embedding / output layer stays in bf16, as torchao's recipes
leave it). Target: the FP8 run's final loss within the bf16 runs' spread,
``|loss(fp8, seed 0) - loss(bf16, seed 0)| <= |loss(bf16, seed 1) - loss(bf16, seed 0)|``, each loss the
mean of the last 20 steps.

The model: GPT-2 small (12 layers, d 768, 12 heads, vocab 50257, pre-LN, GELU-tanh MLP, tied
embeddings), context 256, 16 sequences a step, AdamW (lr 6e-4, 30 warm-up steps, cosine decay),
fp32 weights under ``torch.autocast(bfloat16)``. Data (synthetic, the machine has no network):
sequences from a fixed random Markov chain over 4096 of the vocabulary's ids, four successors per
token with Dirichlet(1) probabilities -- the same sequences in every run, drawn from their own
generator -- so the loss falls from ln(50257) = 10.8 towards the chain's entropy rate (about 1 nat).
``--smoke``: a 2-layer toy on the CPU (emulation), the script's logic only.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

import tiledmm
import tiledmm.nn


class Block(torch.nn.Module):
    def __init__(self, d, heads, linear):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = linear(d, 3 * d), linear(d, d)
        self.fc, self.out = linear(d, 4 * d), linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, vocab, ctx, d, layers, heads, linear=torch.nn.Linear):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(ctx, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads, linear) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.apply(self._init)
        for name, p in self.named_parameters():          # GPT-2's scaled init of the residual projections
            if name.endswith(("proj.weight", "out.weight")):
                torch.nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, torch.nn.Linear) and m.bias is not None:
            torch.nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return F.linear(self.ln(x), self.wte.weight)          # tied output layer


def markov_data(steps, batch, ctx, device, states=4096, succ=4, seed=1234):
    """Every step's (inputs, targets), fixed by ``seed`` (the same in every run)."""
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, states, (states, succ), generator=g)
    probs = torch.distributions.Dirichlet(torch.ones(succ)).sample((states,))
    seqs = torch.empty(steps, batch, ctx + 1, dtype=torch.long)
    seqs[:, :, 0] = torch.randint(0, states, (steps, batch), generator=g)
    for t in range(ctx):
        cur = seqs[:, :, t]
        pick = torch.multinomial(probs[cur.reshape(-1)], 1, generator=g).view(steps, batch)
        seqs[:, :, t + 1] = nxt[cur, pick]
    seqs = seqs.to(device)
    return [(s[:, :-1], s[:, 1:]) for s in seqs]


def run(args, seed, recipe, data, device):
    cfg = dict(vocab=50257, ctx=args.ctx, d=args.d, layers=args.layers, heads=args.heads)
    torch.manual_seed(seed)
    model = GPT(**cfg).to(device)
    if recipe:                       # the same initial weights in FP8 linears
        fp8 = GPT(**cfg, linear=lambda i, o: tiledmm.nn.Linear(i, o, fp8=recipe)).to(device)
        fp8.load_state_dict(model.state_dict())
        model = fp8
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warm = max(1, args.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    losses = []
    t0 = time.time()
    for step, (x, y) in enumerate(data):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % max(1, args.steps // 10) == 0 or step == len(data) - 1:
            print(f"  {'fp8 ' + recipe if recipe else 'bf16'} seed {seed} step {step:4d} loss {losses[-1]:.4f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
    return losses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--recipe", default="rowwise", choices=["tensorwise", "rowwise", "blockwise"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="a 2-layer toy on the CPU (emulation): the logic only")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.batch, args.ctx, args.layers, args.d, args.heads = 6, 2, 16, 2, 128, 2
        device = torch.device("cpu")
    elif tiledmm.emulating() or not torch.cuda.is_available():
        print("fp8_convergence: needs a CUDA GPU; --smoke runs its logic on the CPU", file=sys.stderr)
        return 2
    else:
        device = torch.device("cuda")
    t0 = time.time()
    data = markov_data(args.steps, args.batch, args.ctx, device)
    print(f"fp8_convergence: {args.layers} layers, d {args.d}, ctx {args.ctx}, batch {args.batch}, "
          f"{args.steps} steps, fp8 recipe {args.recipe}")
    runs = {"bf16 seed 0": run(args, 0, None, data, device), "bf16 seed 1": run(args, 1, None, data, device),
            f"fp8 {args.recipe} seed 0": run(args, 0, args.recipe, data, device)}
    tail = min(20, args.steps)
    final = {k: sum(v[-tail:]) / tail for k, v in runs.items()}
    a, b, f = final["bf16 seed 0"], final["bf16 seed 1"], final[f"fp8 {args.recipe} seed 0"]
    spread, gap = abs(b - a), abs(f - a)
    print(f"\nfinal loss (mean of the last {tail} steps): bf16 seed 0 {a:.4f}, bf16 seed 1 {b:.4f}, "
          f"fp8 {args.recipe} seed 0 {f:.4f}")
    print(f"bf16 run-to-run spread {spread:.4f}; fp8 vs bf16 (same seed) {gap:.4f}: "
          f"{'within' if gap <= spread else 'OUTSIDE'} the spread   ({time.time() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "losses": runs, "final": final, "spread": spread, "gap": gap}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
