#!/usr/bin/env bash
# Nsight Compute on the lectures' kernels at 2048^3, compared with tiledmm's model and trace.
#   scripts/ncu_check.sh [n] ; writes $OUT/ncu.csv and prints the comparison
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
n=${1:-2048}
M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum
M=$M,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
M=$M,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum
M=$M,gpu__time_duration.sum
ncu --clock-control none --csv --metrics "$M" --kernel-name-base function --kernel-name "regex:naive|tiled" \
    python3 scripts/ncu_target.py "$n" > "$OUT/ncu.csv" 2> "$OUT/ncu.err" || { tail -20 "$OUT/ncu.err"; }
python3 -m tiledmm.analysis.ncu "$OUT/ncu.csv" "$n"
