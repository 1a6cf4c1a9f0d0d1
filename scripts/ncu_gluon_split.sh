#!/usr/bin/env bash
# Nsight Compute on the Gluon kernel unsplit and split-K (issue 24: where do split units lose their time?).
#   scripts/ncu_gluon_split.sh [MxNxK] ; writes $OUT/ncu_gluon_split.csv and prints the key rows per launch
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
shape=${1:-256x11008x4096}
cat > "$OUT/ncu_gluon_split_target.py" <<'PY'
import sys
import torch
from tiledmm.kernels.block import gluon_gemm as G
M, N, K = map(int, sys.argv[1].split("x"))
a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
for split in (1, 2, 4):
    cfg = dict(G.CONFIGS["16bit"][0], SPLIT_K=split)
    for _ in range(2):          # the first compiles; ncu keeps both, the second is the one to read
        G.launch(a, b, c, precision="none", config=cfg)
    torch.cuda.synchronize()
    print("launched split", split, flush=True)
PY
ncu --clock-control none --csv --page details --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section LaunchStats --kernel-name regex:gluon_ws \
    python3 "$OUT/ncu_gluon_split_target.py" "$shape" > "$OUT/ncu_gluon_split.csv" 2> "$OUT/ncu_gluon_split.err" \
    || tail -20 "$OUT/ncu_gluon_split.err"
python3 - "$OUT/ncu_gluon_split.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
ix = {k: i for i, k in enumerate(head)}
want = ("Duration", "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput", "L2 Hit Rate",
        "Warp Cycles Per Issued Instruction", "Avg. Active Threads Per Warp", "Grid Size", "Registers Per Thread",
        "Mem Busy", "Max Bandwidth", "L1/TEX Hit Rate")
by = collections.OrderedDict()
for r in body:
    by.setdefault(r[ix["ID"]], {})[r[ix["Metric Name"]]] = (r[ix["Metric Value"]], r[ix["Metric Unit"]])
for i, (kid, m) in enumerate(by.items()):
    print(f"launch {kid} (split {(1, 1, 2, 2, 4, 4)[i] if i < 6 else '?'}):",
          "; ".join(f"{k} {m[k][0]} {m[k][1]}" for k in want if k in m))
PY
