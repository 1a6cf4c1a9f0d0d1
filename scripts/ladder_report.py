"""Registers, shared and local memory of every SIMT rung, read from its compiled code,
with the occupancy they allow on this GPU. Run on the device: PYTHONPATH=src python3 scripts/ladder_report.py"""
import tiledmm  # noqa: F401
from tiledmm import registry
from tiledmm.analysis.device import query
from tiledmm.analysis.occupancy import numba_resources, occupancy

dev = query()
print(f"{'kernel':18s} {'tile':>4s} {'thr':>5s} {'regs':>5s} {'smem B':>7s} {'local B':>7s} {'blk/SM':>6s} "
      f"{'occ':>5s} limited by")
for s in registry.all_specs():
    if s.family != "simt":
        continue
    for t in [t for t in s.tiles if t in (16, 32, 64, 128)] or [None]:   # rung 10: the shape it analyses
        r = numba_resources(s.name, t)
        o = occupancy(dev, r["threads_per_block"], shared_per_block=r["shared_per_block"],
                      regs_per_thread=r["regs_per_thread"])
        print(f"{s.name:18s} {t or 0:4d} {r['threads_per_block']:5d} {r['regs_per_thread']:5d} {r['shared_per_block']:7d} "
              f"{r['local_per_thread']:7d} {o.blocks_per_sm:6d} {o.occupancy:5.2f} {','.join(o.limited_by)}")
        print(f"{'':18s} SASS (static counts): {r['sass']}")
