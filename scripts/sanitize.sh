#!/usr/bin/env bash
# compute-sanitizer memcheck / racecheck / synccheck over every SIMT kernel, at each of
# its tiles among 16, 32, 64, 128 (rung 10: every candidate shape), on a rectangular non-multiple size (131x77x203).
# One process per tool runs every kernel; the tool's ERROR SUMMARY covers them all
# (an error report names the kernel). Host API return codes (numba and torch probe optional
# driver entry points, which fail harmlessly) are not reported: --report-api-errors no.
set -uo pipefail
cd "$(dirname "$0")/.."
for tool in memcheck racecheck synccheck; do
  echo "== $tool"
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
" 2>&1 | grep -E "ERROR SUMMARY|checked|rror" | head -60
done
