#!/usr/bin/env bash
# Nsight Compute on register-tiled SIMT kernels: shared-memory wavefronts per instruction,
# FMA-pipe use and the stall reasons, one row per kernel.
#   scripts/ncu_simt.sh [n] [kernel:tile | autotuned@shape ...]   (default 2048, rungs 8-10)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
n=${1:-2048}; shift || true
specs=${*:-warp-tile:128 unsigned:128 autotuned@128x128x32-w32x64-t8x8}
S=smsp__average_warps_issue_stalled
M=l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
M=$M,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,${S}_mio_throttle_per_issue_active.ratio,${S}_short_scoreboard_per_issue_active.ratio
M=$M,${S}_barrier_per_issue_active.ratio,${S}_long_scoreboard_per_issue_active.ratio
M=$M,${S}_math_pipe_throttle_per_issue_active.ratio,${S}_not_selected_per_issue_active.ratio
M=$M,${S}_wait_per_issue_active.ratio,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
ncu --clock-control none --csv --metrics "$M" --kernel-name-base function --kernel-name "regex:warp_tile|unsigned" \
    python3 scripts/ncu_target.py "$n" $specs > "$OUT/ncu_simt.csv" 2> "$OUT/ncu_simt.err" || tail -20 "$OUT/ncu_simt.err"
python3 - "$OUT/ncu_simt.csv" <<'PY'
import csv, io, sys
text = open(sys.argv[1]).read()
rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"'):]))) if '"ID"' in text else []
table = {}
for r in rows:
    table.setdefault((r["ID"], r["Kernel Name"][:12]), {})[r["Metric Name"]] = r["Metric Value"].replace(",", "")
for (i, k), m in table.items():
    ld = float(m["smsp__inst_executed_op_shared_ld.sum"] or 0)
    wf = float(m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] or 0)
    print(f"launch {i} {k}: {float(m['gpu__time_duration.sum'])/1e6:.3f} ms, shared-load wavefronts/instruction "
          f"{wf / ld if ld else float('nan'):.2f}, shared pipe {m['l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed']} %, "
          f"FMA pipe {m['sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active']} %, issue {m['smsp__issue_active.avg.pct_of_peak_sustained_active']} %")
    stalls = {n.split("stalled_")[1].split("_per")[0]: float(v) for n, v in m.items() if "stalled" in n}
    print("   stalls (warps per issue):", {n: round(v, 2) for n, v in sorted(stalls.items(), key=lambda x: -x[1])})
PY
