#!/usr/bin/env bash
# The GPU tests and the benchmarks, in one call of a GPU machine, by name:
#
#   benchmarks/gpu.sh MODE [MODE ...]          (default: tests)
#
#   tests        every test on the GPU (pytest, 8 workers)
#   readme       tests/test_readme.py alone, one process (the README's commands, its # GPU ones included)
#   suites       tiledmm bench: the default against torch.matmul on the square, irregular, transformer and
#                llm suites, per precision (PRECISIONS, default "bf16 fp16 tf32"; fp32 is exact, slower)
#   ladder       the SIMT ladder: its GPU tests, then tiledmm bench --suite ladder (fp32, x cuBLAS SGEMM)
#   dispatch     benchmarks/dispatch.py: first call (Triton's cache cold, then warm) and the random-M loop,
#                modules compiled to bytecode as pip leaves them
#   picks        benchmarks/dispatch.py --parts picks: the default's picks against timed ones (PICKS_SUITES,
#                default "square,irregular,transformer"; llm takes longer)
#   call-cost    benchmarks/call_cost.py: per-call cost against torch.matmul, array kinds, graphs, the layers
#   torch-op     benchmarks/torch_op.py: Linear, a GPT-2 training step, torch.compile (TORCHOP_ONLY=linear|...)
#   outofcore    benchmarks/outofcore.py --quick, then --first-call
#   distributed  scripts/bench_distributed.py --quick on every GPU of the machine (torchrun)
#   sanitize     benchmarks/sanitize.sh all (compute-sanitizer over SIMT kernels, Triton variants, GPU tests)
#   ncu          scripts/ncu_check.sh: Nsight Compute against the traffic model (the lectures' kernels)
#   tables       scripts/build_tables.py: the shipped table of timed choices, built on this GPU
#
# Logs and result files go to $OUT (or ./out); each benchmark prints its table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
modes=" ${*:-tests} "
known=" tests readme suites ladder dispatch picks call-cost torch-op outofcore distributed sanitize ncu tables "
for m in $modes; do
  [[ $known == *" $m "* ]] || { echo "gpu.sh: unknown mode '$m'; modes:$known" >&2; exit 2; }
done
if ls .whl/*.whl >/dev/null 2>&1; then   # the device image's numpy 2.5 breaks numba-cuda: carry numpy 2.4
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160
T=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - T )) s] $*"; }
want() { [[ $modes == *" $1 "* ]]; }
timeout_opt() { python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout $1"; }   # where pytest-timeout is
stamp "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, numba, numpy; from importlib.metadata import version as v; print('torch', torch.__version__, 'triton', triton.__version__, 'numba', numba.__version__, 'numba-cuda', v('numba-cuda'), 'numpy', numpy.__version__)" | tee -a "$OUT/gpu.txt"

if want tests; then
  stamp "every test on the GPU, 8 workers"
  python3 -m pytest -q -p no:cacheprovider -n 8 $(timeout_opt 400) tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
if want readme; then
  stamp "the README's commands and snippets, one process"
  python3 -m pytest -q -p no:cacheprovider $(timeout_opt 900) tests/test_readme.py 2>&1 | tee "$OUT/readme.log" | tail -8
fi
if want suites; then
  for p in ${PRECISIONS:-bf16 fp16 tf32}; do
    stamp "bench $p: the default (shipped table, else the model) against torch.matmul"
    timeout "${BENCH_S:-220}" python3 -m tiledmm bench --suite square --suite irregular --suite transformer --suite llm \
      -k triton -p "$p" --repeats 3 --gpu-time --out "$OUT/bench_$p" > "$OUT/bench_$p.txt" 2>&1; tail -8 "$OUT/bench_$p.txt"
  done
fi
if want ladder; then
  stamp "the SIMT ladder: GPU tests, then the bench against cuBLAS SGEMM"
  python3 -m pytest -q -p no:cacheprovider tests/test_simt.py -k gpu 2>&1 | tee "$OUT/ladder_tests.log" | tail -4
  python3 -m tiledmm bench --suite ladder -p fp32 --repeats 10 --out "$OUT/ladder" 2>&1 | tee "$OUT/bench_ladder.txt" | tail -45
fi
if want dispatch; then
  stamp "first call and the random-M loop (benchmarks/dispatch.py)"
  python3 benchmarks/dispatch.py --parts first,loop --bytecode --budget-s "${DISPATCH_BUDGET:-540}" \
    --out "$OUT/dispatch.json" 2>&1 | tee "$OUT/dispatch.txt" | tail -16
fi
if want picks; then
  stamp "the default's picks against timed picks (benchmarks/dispatch.py --parts picks)"
  python3 benchmarks/dispatch.py --parts picks --suites "${PICKS_SUITES:-square,irregular,transformer}" \
    --budget-s "${PICKS_BUDGET:-540}" --out "$OUT/picks.json" 2>&1 | tee "$OUT/picks.txt" | tail -16
fi
if want call-cost; then
  stamp "per-call cost against torch.matmul (benchmarks/call_cost.py)"
  timeout "${CALLCOST_S:-300}" python3 benchmarks/call_cost.py --out "$OUT" 2>&1 | tee "$OUT/call_cost.txt" | tail -40
fi
if want torch-op; then
  stamp "the PyTorch operator (benchmarks/torch_op.py)"
  timeout "${TORCHOP_S:-400}" python3 benchmarks/torch_op.py --only "${TORCHOP_ONLY:-all}" --out "$OUT" 2>&1 \
    | tee "$OUT/torch_op.txt" | tail -16
fi
if want outofcore; then
  stamp "out of core: quick sizes, then the first call against a repeat (benchmarks/outofcore.py)"
  timeout 300 python3 benchmarks/outofcore.py --quick --out "$OUT" 2>&1 | tee "$OUT/outofcore.txt" | tail -8
  timeout 200 python3 benchmarks/outofcore.py --first-call --out "$OUT" 2>&1 | tee -a "$OUT/outofcore.txt" | tail -6
fi
if want distributed; then
  stamp "multi-GPU GEMM (scripts/bench_distributed.py, every GPU here)"
  torchrun --nproc_per_node "$(nvidia-smi -L | wc -l)" scripts/bench_distributed.py --quick --out "$OUT" 2>&1 \
    | tee "$OUT/distributed.txt" | tail -20
fi
if want sanitize; then
  stamp "compute-sanitizer (benchmarks/sanitize.sh)"
  SANITIZE_OUT="$OUT/sanitize" bash benchmarks/sanitize.sh all 2>&1 | tee "$OUT/sanitize.txt" | tail -20
fi
if want ncu; then
  stamp "Nsight Compute against the model (scripts/ncu_check.sh)"
  OUT=$OUT bash scripts/ncu_check.sh 2048 2>&1 | tee "$OUT/ncu.txt" | tail -8
fi
if want tables; then
  stamp "the shipped table: compile ahead, then tiledmm tune --table per dtype, layout and suite"
  python3 scripts/build_tables.py --out "$OUT/table.json" --dtypes "${TABLE_DTYPES:-bf16,tf32,fp32,fp16}" \
    --budget-s "${TABLE_BUDGET:-500}" 2>&1 | tee "$OUT/build_tables.txt" | tail -40
fi
stamp "done"
