"""A/B of two source trees (argv: tree dirs): tiledmm.matmul vs torch.matmul, bf16, kept out=, rotated inputs;
each tree in its own process, the trees alternated twice."""
import json, os, subprocess, sys
SHAPES = [(m, 4096, 4096) for m in (512, 544, 576, 608, 640, 672, 704, 768)]
CHILD = r'''
import json, sys, torch, tiledmm
from tiledmm import harness, timing
out = {}
for s in SHAPES:
    M, K, N = s[:3]; dt = torch.float16 if len(s) > 3 else torch.bfloat16
    n = harness.rotation_for((M, K, N), str(dt)[6:])
    S = [(torch.randn(M, K, device="cuda", dtype=dt), torch.randn(K, N, device="cuda", dtype=dt), torch.empty(M, N, device="cuda", dtype=dt)) for _ in range(n)]
    a, b, o = S[0]
    o.fill_(float("nan")); tiledmm.matmul(a, b, out=o)
    ref = a.double() @ b.double(); err = ((o.double() - ref).norm() / ref.norm()).item()
    tc = [lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in S]
    mc = [lambda a=a, b=b, o=o: tiledmm.matmul(a, b, out=o) for a, b, o in S]
    t = min(timing.time_calls(tc), timing.time_calls(tc)); m = min(timing.time_calls(mc), timing.time_calls(mc))
    gt = timing.device_and_host(tc)[0]; gm = timing.device_and_host(mc)[0]
    from tiledmm.kernels.block import gluon_gemm as G
    c = G._plain_unless_split(G._pick(M, N, K, "16bit", 132, 2, False, 1), M, N, K, 132)
    cfg = f"{c['BLOCK_M']}x{c['BLOCK_N']}s{c['num_stages']}T{c.get('TAIL')}"
    out["x".join(map(str, s))] = (t * 1e3, m * 1e3, err, gt * 1e3, gm * 1e3, cfg)
print("RESULT", json.dumps(out))
'''
res = {}
for rnd in range(3):
    for tree in sys.argv[1:]:
        env = dict(os.environ, PYTHONPATH=f"{tree}:" + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, "-c", f"SHAPES={SHAPES!r}\n" + CHILD], env=env, capture_output=True, text=True)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT")]
        if not line:
            print(tree, p.stderr[-2000:]); continue
        for k, v in json.loads(line[0][7:]).items():
            res.setdefault(k, {}).setdefault(tree, []).append(v)
print(json.dumps(res))
print(f"{'shape':22}" + "".join(f"{t[-14:]:>60}" for t in sys.argv[1:]))
for k, d in res.items():
    row = f"{k:22}"
    for t in sys.argv[1:]:
        v = d.get(t, [])
        if not v:
            row += f"{'-':>30}"; continue
        tm, mm, e = min(x[0] for x in v), min(x[1] for x in v), max(x[2] for x in v)
        gt, gm = min(x[3] for x in v), min(x[4] for x in v)
        row += f"   {mm:6.1f} us (torch {tm:5.1f}) x{tm/mm:4.2f} gpu {gm:5.1f}/{gt:5.1f} {v[0][5]}"
    print(row)
