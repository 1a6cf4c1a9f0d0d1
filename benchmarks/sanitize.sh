#!/usr/bin/env bash
# compute-sanitizer memcheck / racecheck / synccheck.
#
#   benchmarks/sanitize.sh [simt|block|tests|all]      (default: all)
#
# simt:  every SIMT kernel, at each of its tiles among 16, 32, 64, 128 (rung 10: every candidate
#        shape), on a rectangular non-multiple size (131x77x203).
# block: every Triton variant forced through tiledmm.matmul(..., kernel="triton", variant=V)
#        (benchmarks/sanitize_block.py): float32 ieee/tf32, bfloat16, float16 on masked, aligned
#        (TMA), transposed, split-K, batched and alpha/beta cases, each checked against float64;
#        memcheck on the full set (plus each variant's largest-tile config on the masked shapes),
#        racecheck and synccheck on the smallest shapes. Variants that cannot run a call are
#        skipped and said so. PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor its own cudaMalloc,
#        so an access past a tensor's end is outside any allocation and memcheck sees it.
#
# tests: memcheck and racecheck over the GPU tests of the kernels whose checks live in their tests
#        (the persistent TMA kernel's and the Gluon kernel's fused bias/activation epilogues, their
#        bound launches, batched-small): each test compares with float64; the pytest line counts.
#
# One process per tool and family runs every case; the tool's ERROR SUMMARY covers them all
# (an error report names the kernel). Host API return codes (numba and torch probe optional
# driver entry points, which fail harmlessly) are not reported: --report-api-errors no.
# Logs: $SANITIZE_OUT (default /tmp/tiledmm-sanitize/); a summary table ends the run; exit status 1
# if any tool reported an error (or no summary) or any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}
if ls .whl/*.whl >/dev/null 2>&1; then   # the device image's numpy 2.5 breaks numba-cuda: carry numpy 2.4 (as gpu.sh)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
LOG=${SANITIZE_OUT:-/tmp/tiledmm-sanitize}
mkdir -p "$LOG"
export TILEDMM_QUIET=1 TILEDMM_TUNE=off

run_simt() {
  local tool=$1
  echo "== simt $tool"
  compute-sanitizer --tool $tool --report-api-errors no --print-limit 10 python3 -c "
import tiledmm
from tiledmm.harness import check_and_time
for s in tiledmm.registry.all_specs():
    if s.family != 'simt':
        continue
    runs = [(t, 'float32', {}) for t in s.tiles if t in (16, 32, 64, 128)]
    if s.name == 'autotuned':   # every candidate shape of rung 10, forced
        from tiledmm.kernels.simt.k10_autotune import CANDIDATES
        runs = [(None, d, {'config': c.name}) for d, cs in CANDIDATES.items() for c in cs]
    for t, d, opts in runs:
        r = check_and_time(s.name, (131, 77, 203), d, tile=t, options=opts, time_it=False)
        print('checked', s.name, t or '', d, opts.get('config', ''), 'ok' if r.ok else 'FAIL', '%.1e' % r.rel_err, flush=True)
" 2>&1 | tee "$LOG/simt-$tool.log" | grep -E "ERROR SUMMARY|checked .* FAIL|rror"
}

run_block() {
  local tool=$1; shift
  echo "== block $tool $*"
  local t0=$SECONDS
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool $tool --report-api-errors no --print-limit 10 \
    python3 benchmarks/sanitize_block.py "$@" 2>&1 | tee "$LOG/block-$tool.log" \
    | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^checked .* FAIL|rror|ABORT|block total|^variant|^(blocked|tma|splitk|simt|batched|gluon)"
  echo "seconds $((SECONDS - t0))" >> "$LOG/block-$tool.log"
}

TEST_FILES="tests/test_tma_kernel.py tests/test_gluon.py tests/test_gluon_launch.py tests/test_batched_small.py"
run_tests() {
  local tool=$1
  echo "== tests $tool"
  local t0=$SECONDS
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool $tool --report-api-errors no --print-limit 10 \
    python3 -m pytest -q -p no:cacheprovider -m gpu $TEST_FILES 2>&1 | tee "$LOG/tests-$tool.log" \
    | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|rror"
  echo "seconds $((SECONDS - t0))" >> "$LOG/tests-$tool.log"
}

summary() {
  echo
  echo "== summary"
  printf "%-7s %-10s %10s %8s %6s %8s %8s\n" family tool san.errors ok FAIL skipped seconds   # racecheck: hazards
  for f in "$LOG"/simt-*.log "$LOG"/block-*.log "$LOG"/tests-*.log; do
    [ -e "$f" ] || continue
    local base fam tool errs ok fail skip secs
    base=$(basename "$f" .log); fam=${base%%-*}; tool=${base#*-}
    errs=$(grep -E "ERROR SUMMARY" "$f" | tail -1 | sed -E 's/.*ERROR SUMMARY: ([0-9]+).*/\1/')
    [ -z "$errs" ] && errs=$(grep -E "RACECHECK SUMMARY" "$f" | tail -1 | sed -E 's/.*SUMMARY: ([0-9]+) hazards.*/\1/')
    ok=$(grep -cE "^checked .* ok( |$)" "$f")
    fail=$(grep -cE "^checked .* FAIL( |$)" "$f")
    skip=$(grep -c "^skipped" "$f")
    secs=$(grep -E "^seconds" "$f" | awk '{print $2}')
    grep -q ABORT "$f" && fail="$fail+ABORT"
    if [ "$fam" = tests ]; then     # pytest's closing line: N passed, M failed
      ok=$(grep -oE "[0-9]+ passed" "$f" | tail -1 | cut -d' ' -f1); ok=${ok:-0}
      fail=$(grep -oE "[0-9]+ (failed|error)" "$f" | tail -1 | cut -d' ' -f1); fail=${fail:-0}
      skip=$(grep -oE "[0-9]+ skipped" "$f" | tail -1 | cut -d' ' -f1); skip=${skip:-0}
      [ "$ok" = 0 ] && fail="$fail+none-passed"
    fi
    printf "%-7s %-10s %10s %8s %6s %8s %8s\n" "$fam" "$tool" "${errs:-none}" "$ok" "$fail" "$skip" "${secs:--}"
    if [ "${errs:-1}" != 0 ] || [ "$fail" != 0 ]; then STATUS=1; fi
  done
  echo "(san.errors: the tool's ERROR SUMMARY count, racecheck's hazards; 'none': no summary line, look at the log)"
}

STATUS=0
rm -f "$LOG"/simt-*.log "$LOG"/block-*.log "$LOG"/tests-*.log
if [ "$MODE" = simt ] || [ "$MODE" = all ]; then
  for tool in memcheck racecheck synccheck; do run_simt $tool; done
fi
if [ "$MODE" = block ] || [ "$MODE" = all ]; then
  run_block memcheck
  run_block racecheck --small
  run_block synccheck --small
fi
if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  run_tests memcheck
  run_tests racecheck
fi
summary
exit $STATUS
