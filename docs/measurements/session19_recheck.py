"""Sessions 18-20 diagnostics (part s19: session 19's recheck; s20: the fp16 bench's low rows against bf16): (1) the low bench rows: pick, GPU and host time, tiledmm vs torch;
(2) 127x8191x127 split-K with/without the register prefetch, split counts and tiles."""
import sys, json, torch, tiledmm
from tiledmm import harness, timing
from tiledmm.kernels.block import matmul as bm

DT = {"bf16": (torch.bfloat16, None), "fp16": (torch.float16, None), "tf32": (torch.float32, "tf32")}

def sets_for(shape, dt):
    dtype, prec = DT[dt]
    *batch, M, K, N = shape
    n = harness.rotation_for(tuple(shape), str(dtype).replace("torch.", ""))
    S = [(torch.randn(*batch, M, K, device="cuda").to(dtype), torch.randn(*batch, K, N, device="cuda").to(dtype),
          torch.empty(*batch, M, N, device="cuda", dtype=dtype)) for _ in range(n)]
    return S

def check(a, b, out, dt):
    ref = a.double() @ b.double()
    return ((out.double() - ref).norm() / ref.norm()).item()

def row(shape, dt, **kw):
    dtype, prec = DT[dt]
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    S = sets_for(shape, dt)
    a, b, o = S[0]
    o.fill_(float("nan"))
    try:
        tiledmm.matmul(a, b, kernel="triton", precision=prec, out=o, **kw)
    except Exception as e:
        return {"shape": "x".join(map(str, shape)), "dt": dt, "kw": str(kw), "err": str(e)[:100]}
    err = check(a, b, o, dt)
    tcalls = [lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in S]
    mcalls = [lambda a=a, b=b, o=o: tiledmm.matmul(a, b, kernel="triton", precision=prec, out=o, **kw) for a, b, o in S]
    t_t = timing.time_calls(tcalls); t_m = timing.time_calls(mcalls)
    t_t2 = timing.time_calls(tcalls); t_m2 = timing.time_calls(mcalls)
    gt, ht = timing.device_and_host(tcalls); gm, hm = timing.device_and_host(mcalls)
    c = torch.empty(o.shape, device="cuda", dtype=dtype)
    ch = bm.choices().get(bm.plan_key(a, b, c, prec or "none", 1.0, 0.0), {}) if a.dim() == 2 else {}
    return {"shape": "x".join(map(str, shape)), "dt": dt, "kw": str(kw)[:60], "err": err,
            "torch_us": min(t_t, t_t2) * 1e3, "tdmm_us": min(t_m, t_m2) * 1e3,
            "x": min(t_t, t_t2) / min(t_m, t_m2), "gpu_t": gt * 1e3, "gpu_m": gm * 1e3, "host_t": ht * 1e3,
            "host_m": hm * 1e3, "pick": f"{ch.get('source')} {ch.get('variant')} {ch.get('config')}"[:150]}

out = []
part = sys.argv[1] if len(sys.argv) > 1 else "all"
if part in ("all", "low", "low2"):
    for shape, dt in ([((1, 5120, 5120), "bf16"), ((64, 512, 512, 512), "bf16"), ((1, 11008, 4096), "bf16")] if part == "low2" else [((1024, 1024, 1024), "fp16"), ((1024, 1024, 1024), "bf16"), ((64, 4096, 4096), "bf16"),
                      ((1, 5120, 5120), "bf16"), ((1, 5120, 5120), "fp16"), ((64, 512, 512, 512), "bf16"),
                      ((1, 11008, 4096), "bf16"), ((256, 4096, 11008), "bf16"), ((256, 13824, 5120), "bf16"),
                      ((640, 4096, 4096), "bf16"), ((4096, 4096, 4096), "bf16")]):
        r = row(shape, dt); out.append(r); print(json.dumps(r), flush=True)
if part == "gemv":
    for shape in [(1, 11008, 4096), (1, 4096, 4096), (16, 11008, 4096), (1, 5120, 5120)]:
        r = row(shape, "bf16"); out.append(r); print(json.dumps(r), flush=True)
        for v, cfg in [("blocked", dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SWAP=1, num_warps=4, num_stages=4)),
                       ("blocked", dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, SWAP=1, num_warps=4, num_stages=4)),
                       ("blocked", dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=8, SWAP=1, num_warps=4, num_stages=3)),
                       ("blocked", dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, SWAP=1, num_warps=4, num_stages=6)),
                       ("splitk", dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, WAVES=2, num_warps=4, num_stages=4)),
                       ("splitk", dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, WAVES=2, SPLIT_K=4, num_warps=4, num_stages=4)),
                       ("splitk", dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=8, WAVES=4, num_warps=4, num_stages=3)),
                       ("splitk", dict(BLOCK_M=16, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, WAVES=2, num_warps=4, num_stages=4))]:
            r = row(shape, "bf16", variant=v, config=cfg); r["kw"] = v + " " + "x".join(str(cfg[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + f" s{cfg['num_stages']} S{cfg.get('SPLIT_K', '-')}"
            out.append(r); print(json.dumps(r), flush=True)
if part == "fp16chk":
    for rnd in range(2):
        for shape, dt in [((16, 11008, 4096), "fp16"), ((16, 11008, 4096), "bf16"), ((1024, 1024, 1024), "fp16"),
                          ((1024, 1024, 1024), "bf16"), ((128, 4096, 4096), "fp16"), ((256, 4096, 4096), "fp16"),
                          ((1, 4096, 4096), "bf16"), ((1, 5120, 5120), "fp16")]:
            r = row(shape, dt); out.append(r); print(json.dumps(r), flush=True)
if part == "s19":
    for rnd in range(2):
        for shape, dt in [((256, 4096, 4096), "fp16"), ((128, 4096, 4096), "fp16"), ((1, 8192, 28672), "fp16"),
                          ((127, 8191, 127), "fp16"), ((16, 4096, 4096), "bf16"), ((1, 5120, 5120), "bf16"),
                          ((256, 13824, 5120), "fp16"), ((256, 5120, 5120), "bf16")]:
            r = row(shape, dt); out.append(r); print(json.dumps(r), flush=True)
if part == "s20":
    for rnd in range(2):
        for shape in [(8192, 128, 8192), (1, 5120, 5120), (127, 8191, 127), (1, 4096, 4096), (2048, 2048, 2048),
                      (1024, 1024, 1024)]:
            for dt in ("fp16", "bf16"):
                r = row(shape, dt); out.append(r); print(json.dumps(r), flush=True)
if part == "odd1":
    for dt in ("bf16", "fp16", "tf32"):
        r = row((127, 8191, 127), dt); out.append(r); print(json.dumps(r), flush=True)
if part in ("all", "odd", "low2"):
    for dt in ("bf16", "fp16"):
        r = row((127, 8191, 127), dt); out.append(r); print(json.dumps(r), flush=True)
        base = {"bf16": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, WAVES=2, num_warps=8, num_stages=3),
                "fp16": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, WAVES=2, num_warps=8, num_stages=3),
                "tf32": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, WAVES=2, num_warps=8, num_stages=3)}[dt]
        bk = base["BLOCK_K"]
        for tile in [(128, 128, 8), (64, 128, 4), (64, 64, 4)]:
            for pre in (0, 1):
                for split in (None, 64, 128):
                    if dt == "tf32" and tile[0] == 128 and split == 128: continue
                    cfg = dict(base, BLOCK_M=tile[0], BLOCK_N=tile[1], num_warps=tile[2], PREFETCH=pre)
                    if split: cfg["SPLIT_K"] = split
                    r = row((127, 8191, 127), dt, variant="splitk", config=cfg); out.append(r)
                    print(json.dumps(r), flush=True)
print()
print(f"{'shape':18} {'dt':5} {'kw':44} {'x':>5} {'t_us':>7} {'m_us':>7} {'gpu t/m':>13} {'host t/m':>13} err")
for r in out:
    if "err" in r and isinstance(r["err"], str):
        print(f"{r['shape']:18} {r['dt']:5} {r['kw'][-44:]:44} ERR {r['err']}"); continue
    print(f"{r['shape']:18} {r['dt']:5} {r['kw'][-44:]:44} {r['x']:5.2f} {r['torch_us']:7.1f} {r['tdmm_us']:7.1f} "
          f"{r['gpu_t']:6.1f}/{r['gpu_m']:6.1f} {r['host_t']:6.1f}/{r['host_m']:6.1f} {r['err']:.1e}")
for r in out:
    if r.get("pick") and r["kw"] == "{}": print(r["shape"], r["dt"], r["pick"])
