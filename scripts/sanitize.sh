#!/usr/bin/env bash
# compute-sanitizer memcheck / racecheck / synccheck over every SIMT kernel on a
# rectangular, non-multiple size. Prints one ERROR SUMMARY line per tool and kernel.
set -uo pipefail
cd "$(dirname "$0")/.."
KERNELS=${KERNELS:-$(python3 -c "import tiledmm; print(' '.join(s.name for s in tiledmm.registry.all_specs() if s.family == 'simt'))" 2>/dev/null)}
for tool in memcheck racecheck synccheck; do
  for k in $KERNELS; do
    for t in 16 32; do
      line=$(compute-sanitizer --tool $tool --print-limit 5 python3 -c "
import torch, tiledmm
from tiledmm.harness import check_and_time
r = check_and_time('$k', (131, 77, 203), 'float32', tile=$t, time_it=False)
print('check', 'ok' if r.ok else 'FAIL', r.rel_err)
" 2>&1 | grep -E "ERROR SUMMARY|check|Error" | tr '\n' ' ')
      echo "$tool $k tile=$t: $line"
    done
  done
done
