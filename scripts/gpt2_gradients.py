#!/usr/bin/env python3
"""Every parameter gradient of one GPT-2 training step under ``tiledmm.enable()`` against torch eager,
both in bf16, each measured against a float32 reference of the same step (the same initial weights and
tokens): ‖g − g_fp32‖/‖g_fp32‖ per parameter for torch and for tiledmm. A tiledmm error far above
torch's on any parameter is a wrong gradient, not rounding. Also every GEMM shape the step runs, checked
alone through tiledmm.matmul with transposed operands (the backward's views) against float64.

    PYTHONPATH=src python3 scripts/gpt2_gradients.py [--layers 2] [--seq 1024] [--batch 8]
"""
from __future__ import annotations

import argparse
import contextlib
import copy

import torch

import tiledmm
import tiledmm.ops


def grads(model, ids, on: bool) -> dict:
    model.zero_grad(set_to_none=True)
    with tiledmm.ops.enable() if on else contextlib.nullcontext():
        model(ids, labels=ids).loss.backward()
    return {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}


def rel(x, ref) -> float:
    return ((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    dev = "cpu" if tiledmm.emulating() else "cuda"
    cfg = GPT2Config(n_layer=a.layers, n_embd=a.d_model, n_head=12, n_positions=a.seq, vocab_size=a.vocab,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    base = GPT2LMHeadModel(cfg).to(dev)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev, generator=torch.Generator(dev).manual_seed(1))
    ref = grads(copy.deepcopy(base), ids, False)                        # float32 reference
    bf = copy.deepcopy(base).to(torch.bfloat16)
    g_torch, g_ours = grads(copy.deepcopy(bf), ids, False), grads(copy.deepcopy(bf), ids, True)
    worst = []
    for n in ref:
        et, eo = rel(g_torch[n], ref[n]), rel(g_ours[n], ref[n])
        worst.append((eo / max(et, 1e-12), n, et, eo))
    worst.sort(reverse=True)
    print("parameter                                   torch err   tiledmm err   ratio")
    for r, n, et, eo in worst[:12]:
        print(f"{n:42s}  {et:9.2e}   {eo:11.2e}   {r:6.2f}")
    M, d = a.batch * a.seq, a.d_model
    print("\nGEMM shapes alone (bf16, through tiledmm.matmul vs float64): MxKxN, layout, rel err")
    for K, N in ((d, 3 * d), (d, d), (d, 4 * d), (4 * d, d), (d, a.vocab)):
        x, w = (torch.randn(M, K, device=dev, dtype=torch.bfloat16), torch.randn(K, N, device=dev, dtype=torch.bfloat16))
        dy = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
        for name, p, q in (("x@w", x, w), ("dy@w.T", dy, w.t()), ("x.T@dy", x.t(), dy)):
            got = tiledmm.matmul(p, q)
            print(f"  {p.shape[0]}x{p.shape[1]}x{q.shape[1]:<6} {name:7s} {rel(got, p.double() @ q.double()):.2e}")


if __name__ == "__main__":
    main()
