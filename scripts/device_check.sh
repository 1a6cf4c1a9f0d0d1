#!/usr/bin/env bash
# Everything tiledmm checks and times on a GPU, in one call of the device tool.
#   scripts/device_check.sh [smoke|ladder|sweep|bench|profile|dispatch|all] [more modes...]
#   (more: gputests retest targets kernels tables ops workload final8 pending9; see each block below)
# (dispatch: issue 22's first call, random-M loop and per-call cost by scripts/bench_dispatch.py; its
#  default-vs-timed picks take longer: run `bench_dispatch.py --parts picks --suites S --budget-s 540` per suite)
# Logs and result files go to $OUT (or ./out); the short tables are printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
what=" ${*:-smoke} "
if ls .whl/*.whl >/dev/null 2>&1; then   # the device image's numpy 2.5 breaks numba-cuda: carry numpy 2.4
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160
T=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - T )) s] $*"; }
stamp "environment"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, numba, numpy; from importlib.metadata import version as v; print('torch', torch.__version__, 'triton', triton.__version__, 'numba', numba.__version__, 'numba-cuda', v('numba-cuda'), 'numpy', numpy.__version__)" | tee -a "$OUT/gpu.txt"

if [[ $what == *" smoke "* || $what == *" all "* ]]; then
  stamp "pytest (every test, on the GPU)"
  python3 -m pytest -q -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15
  stamp "tiledmm run (defaults)"
  python3 -m tiledmm.cli run --json > "$OUT/run_default.json"; python3 -m tiledmm.cli run 2>&1 | tee "$OUT/run_default.txt"
  stamp "tiledmm run 4096^3"
  python3 -m tiledmm.cli run --shape 4096x4096x4096 2>&1 | tee "$OUT/run_4096.txt"
  stamp "bench quick (4096^3, fp32/tf32/bf16)"
  python3 -m tiledmm.cli bench --suite quick --kernel triton --out "$OUT/quick" 2>&1 | tee "$OUT/bench_quick.txt" | tail -25
fi
if [[ $what == *" ladder "* || $what == *" all "* ]]; then
  stamp "pytest: the SIMT ladder on the GPU"
  python3 -m pytest -q -p no:cacheprovider tests/test_simt.py -k "gpu" 2>&1 | tee "$OUT/pytest_ladder.log" | tail -4
  stamp "ladder resources"
  python3 scripts/ladder_report.py 2>&1 | tee "$OUT/ladder_resources.txt"
  stamp "bench ladder (SIMT rungs vs cuBLAS, fp32)"
  python3 -m tiledmm.cli bench --suite ladder -p fp32 --repeats 10 --out "$OUT/ladder" 2>&1 | tee "$OUT/bench_ladder.txt" | tail -45
fi
if [[ $what == *" sweep "* || $what == *" all "* ]]; then
  stamp "SIMT rungs 8-10 and every rung-10 shape vs cuBLAS"
  python3 scripts/simt_sweep.py 4096x4096x4096 2048x2048x2048 1024x1024x1024 4097x4093x4095 2>&1 | tee "$OUT/simt_sweep.txt" | tail -60
  stamp "ncu: shared wavefronts, FMA pipe, stalls (rungs 8-10, 2048^3)"
  OUT=$OUT bash scripts/ncu_simt.sh 2048 2>&1 | tee "$OUT/ncu_simt.txt" | tail -8
fi
if [[ $what == *" bench "* || $what == *" all "* ]]; then
  stamp "bench square + irregular"
  python3 -m tiledmm.cli bench --suite square --suite irregular --out "$OUT/bench" 2>&1 | tee "$OUT/bench.txt" | tail -60
fi
if [[ $what == *" profile "* || $what == *" all "* ]]; then
  stamp "compute-sanitizer on the SIMT kernels"
  bash scripts/sanitize.sh 2>&1 | tee "$OUT/sanitizer.txt" | tail -20
  stamp "ncu vs model"
  OUT=$OUT bash scripts/ncu_check.sh 2048 2>&1 | tee "$OUT/ncu.txt" | tail -8
fi
if [[ $what == *" dispatch "* || $what == *" all "* ]]; then
  stamp "issue 22: first call (Triton cold/warm), random-M loop, per call vs torch.matmul"
  python3 scripts/bench_dispatch.py --parts first,loop,percall --budget-s 540 --out "$OUT/bench_dispatch.json" \
    2>&1 | tee "$OUT/bench_dispatch.txt" | tail -20
fi
if [[ $what == *" gputests "* ]]; then
  stamp "every test on the GPU, 8 workers (GPU-marked and the emulation-sized ones, now on the GPU)"
  python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 400 tests 2>&1 | tee "$OUT/gpu_pytest.log" | tail -40
fi
if [[ $what == *" retest "* ]]; then
  stamp "the test files that failed on the GPU in this session's first run"
  python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 300 tests/test_cli.py tests/test_contract.py tests/test_enable.py \
    tests/test_dispatch.py tests/test_gluon.py tests/test_heuristics.py tests/test_threads.py tests/test_torch_op.py \
    tests/test_bench_dispatch.py tests/test_shortpath.py tests/test_adapter.py 2>&1 | tee "$OUT/gpu_retest.log" | tail -25
  stamp "README tests, one process (bench writes the file roofline reads)"
  python3 -m pytest -q -p no:cacheprovider --timeout 300 tests/test_readme.py 2>&1 | tee -a "$OUT/gpu_retest.log" | tail -8
fi
if [[ $what == *" targets "* ]]; then
  stamp "issue 23: Linear(4096, 16384, gelu) forward and forward+backward vs torch eager"
  python3 scripts/bench_torch_op.py --only linear --out "$OUT" 2>&1 | tee "$OUT/targets.txt" | tail -15
  stamp "issue 24: the pick vs forced gluon-ws / tma-persistent vs torch through tiledmm.matmul"
  timeout 150 python3 scripts/bench_gluon_pick.py 2>&1 | tee -a "$OUT/targets.txt" | tail -25
  stamp "issue 22: first call (Triton cold/warm), random-M loop, per call vs torch.matmul"
  python3 scripts/bench_dispatch.py --parts first,loop,percall --budget-s 300 --out "$OUT/bench_dispatch.json" \
    2>&1 | tee -a "$OUT/targets.txt" | tail -30
fi
stamp "done"
if [[ $what == *" kernels "* ]]; then
  stamp "GPU tests of the Triton family, the short path, the operators (8 workers)"
  python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 400 -m gpu tests/test_tma_kernel.py tests/test_block_variants.py \
    tests/test_block.py tests/test_shortpath.py tests/test_dispatch.py tests/test_torch_op.py tests/test_nn.py \
    tests/test_heuristics.py tests/test_shipped_table.py ${KERNEL_TESTS:-} 2>&1 | tee "$OUT/gpu_kernels.log" | tail -25
  stamp "the persistent TMA kernel: forced, launch, graph, pick, fused Linear (bench_tma_kernel.py)"
  timeout 240 python3 scripts/bench_tma_kernel.py --variant tma ${TMA_SWEEP:-} 2>&1 | tee "$OUT/bench_tma_kernel.txt" | tail -12
fi
if [[ $what == *" tables "* ]]; then
  stamp "the shipped table: compile ahead, then tiledmm tune --table per dtype, layout and suite"
  python3 scripts/build_tables.py --out "$OUT/table.json" --dtypes "${TABLE_DTYPES:-bf16,tf32,fp32,fp16}" \
    --budget-s "${TABLE_BUDGET:-500}" 2>&1 | tee "$OUT/build_tables.txt" | tail -40
fi
if [[ $what == *" ops "* ]]; then
  stamp "GPU tests: the operators, enable(), nn, OpInfo, batched-small, the shipped table"
  python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 300 tests/test_torch_op.py tests/test_enable.py tests/test_nn.py \
    tests/test_opinfo.py tests/test_batched_small.py tests/test_shipped_table.py tests/test_gluon_launch.py 2>&1 \
    | tee "$OUT/gpu_ops.log" | tail -6
  stamp "batched small products vs torch"
  timeout 150 python3 scripts/bench_batched_small.py 2>&1 | tee "$OUT/bench_batched_small.txt" | tail -24
fi
if [[ $what == *" workload "* ]]; then
  stamp "issue 22: first call, random-M loop, per call (bytecode compiled as pip leaves it)"
  python3 scripts/bench_dispatch.py --parts first,loop,percall --bytecode --budget-s ${DISPATCH_BUDGET:-170} \
    --out "$OUT/bench_dispatch.json" 2>&1 | tee "$OUT/bench_dispatch.txt" | tail -16
  stamp "issue 23: Linear gelu and GPT-2 small"
  timeout ${TORCHOP_BUDGET:-200} python3 scripts/bench_torch_op.py --only ${TORCHOP_ONLY:-all} --out "$OUT" 2>&1 \
    | tee "$OUT/bench_torch_op.txt" | tail -12
fi
if [[ $what == *" pending9 "* ]]; then
  # what session 9 changed or found and could not measure (docs/performance.md, session 9)
  stamp "out of core: the first numpy 16384^3 fp32 call vs a repeat (twice: Triton's cache warm the 2nd time)"
  for i in 1 2; do timeout 120 python3 scripts/bench_outofcore.py --first-call --out "$OUT" 2>&1 | grep "first call\|phases"; done
  stamp "exact fp32 without rung 11 in the default: bench square + irregular vs torch"
  timeout 200 python3 -m tiledmm bench --suite square --suite irregular -k triton -p fp32 --repeats 3 \
    --out "$OUT/bench_fp32" > "$OUT/bench_fp32.txt" 2>&1; tail -4 "$OUT/bench_fp32.txt"
  stamp "the table's gluon-ws picks at small M: the pick, gluon-ws and tma forced, torch (tuner said 18 us at 128x4096^2)"
  timeout 150 python3 scripts/bench_gluon_pick.py --dtypes bf16 \
    --shapes 128x4096x4096,64x4096x4096,256x4096x11008,512x8192x28672,1024x1024x1024 2>&1 | tail -14
fi
if [[ $what == *" final8 "* ]]; then
  stamp "GPU tests: kernel index, gluon-ws, the shipped table, batched-small"
  python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 300 tests/test_kernel_index.py tests/test_gluon.py \
    tests/test_gluon_launch.py tests/test_shipped_table.py tests/test_batched_small.py 2>&1 | tee "$OUT/gpu_final.log" | tail -4
  stamp "the random-M loop, bf16"
  python3 scripts/bench_dispatch.py --parts loop --dtypes bf16 --bytecode --budget-s 90 --out "$OUT/loop_bf16.json" 2>&1 | tail -4
  for p in bf16 fp16 tf32; do
    suites="--suite square --suite irregular --suite transformer"; [[ $p == bf16 ]] && suites="$suites --suite llm"
    stamp "bench $p (the default: shipped table, else the model) vs torch"
    limit=${BENCH_S:-150}; [[ $p == bf16 ]] && limit=${BENCH_BF16_S:-220}
    timeout $limit python3 -m tiledmm bench $suites -k triton -p $p --repeats 3 --out "$OUT/bench_$p" \
      > "$OUT/bench_$p.txt" 2>&1; tail -3 "$OUT/bench_$p.txt"
  done
  if [[ -n ${PROFILE_GPT2:-} ]]; then
    stamp "GPT-2 step profile"
    timeout 60 python3 scripts/profile_workload.py --parts gpt2 --out "$OUT/prof" 2>&1 | tail -4
  fi
fi
