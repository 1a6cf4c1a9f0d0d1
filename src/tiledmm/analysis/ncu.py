"""Nsight Compute's counters against tiledmm's model and trace.

    python -m tiledmm.analysis.ncu ncu.csv 2048

Reads the CSV that scripts/ncu_check.sh writes (one launch each of naive, naive-uncoalesced,
tiled 16, tiled 32 at n^3, in that order) and prints, per kernel: DRAM bytes (ncu) against
the compulsory traffic (each input once, output once) and against what the loads request
(the model, no cache); L1 global load sectors against the model's requested bytes / 32;
sectors per load request against the simulator trace of a small problem with the same
launch shape; shared-memory bank conflicts against the trace.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import defaultdict

ORDER = [("naive", 16), ("naive-uncoalesced", 16), ("tiled", 16), ("tiled", 32)]


def read_ncu(path: str) -> list[dict]:
    rows = defaultdict(dict)
    names = {}
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for r in csv.DictReader(lines):
        rid = int(r["ID"])
        names[rid] = r["Kernel Name"]
        val = r["Metric Value"].replace(",", "")
        unit = r.get("Metric Unit", "")
        try:
            v = float(val)
        except ValueError:
            continue
        scale = {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "byte": 1, "KB": 1024, "MB": 2**20, "GB": 2**30,
                 "usecond": 1e-6, "msecond": 1e-3, "nsecond": 1e-9, "second": 1,
                 "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}.get(unit, 1)
        rows[rid][r["Metric Name"]] = v * scale
    return [dict(rows[i], kernel=names[i]) for i in sorted(rows)]


def trace_prediction(kernel: str, tile: int) -> dict:
    """Sectors per global load request and bank conflicts per shared request, from a
    simulator trace of 2*tile x tile x 2*tile (the same launch shape, 2 x 2 blocks)."""
    env = dict(os.environ, TILEDMM_EMULATE="1", TILEDMM_QUIET="1")
    out = subprocess.run([sys.executable, "-m", "tiledmm.cli", "trace", "-k", kernel, "-s",
                          f"{2 * tile}x{tile}x{2 * tile}", "-t", str(tile), "--json", "--no-phases"],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"trace of {kernel} T{tile} failed: {out.stdout[-500:]} {out.stderr[-1500:]}")
    s = json.loads(out.stdout)
    co = s["coalescing"]
    req = sum(v["requests"] for k, v in co.items() if k.startswith("ld"))
    sec = sum(v["requests"] * v["sectors_per_request"] for k, v in co.items() if k.startswith("ld"))
    bc = s["bank_conflicts"]
    return {"sectors_per_ld_request": sec / req if req else None,
            "shared_ld_requests": sum(v["requests"] for k, v in bc.items() if k.startswith("ld")),
            "shared_extra_wavefronts": sum(v["extra_wavefronts"] for v in bc.values())}


def compare(path: str, n: int) -> list[dict]:
    from .model import dram_bytes
    got = read_ncu(path)
    out = []
    for (kernel, tile), m in zip(ORDER, got):
        model = dram_bytes(kernel, n, n, n, tile)
        pred = trace_prediction(kernel, tile)
        ld_req = m.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 0)
        ld_sec = m.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", 0)
        dram = m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
        out.append({
            "kernel": f"{kernel} T{tile}", "ncu_name": m["kernel"][:40],
            "time_ms": m.get("gpu__time_duration.sum", 0) * 1e3,
            "dram_bytes_ncu": dram,
            "dram_compulsory_model": model["compulsory_read"] + model["compulsory_write"],
            "dram_requested_model": model["requested_read"] + model["requested_write"],
            "l1_ld_bytes_ncu": ld_sec * 32, "l1_ld_bytes_model": model["requested_read"],
            "l2_read_bytes_ncu": m.get("lts__t_sectors_srcunit_tex_op_read.sum", 0) * 32,
            "sectors_per_ld_request_ncu": ld_sec / ld_req if ld_req else None,
            "sectors_per_ld_request_trace": pred["sectors_per_ld_request"],
            # loads requested by threads / 32 = warp requests; x sectors per request (trace) x 32 B
            "l1_ld_bytes_trace_model": model["requested_read"] / 4 / 32 * (pred["sectors_per_ld_request"] or 0) * 32,
            "ld_requests_ncu": ld_req, "ld_requests_model": model["requested_read"] / 4 / 32,
            "bank_conflicts_ncu": m.get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 0)
            + m.get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 0),
            "shared_ld_wavefronts_ncu": m.get("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
            "shared_ld_instructions_ncu": m.get("smsp__inst_executed_op_shared_ld.sum"),
            "bank_extra_wavefronts_trace": pred["shared_extra_wavefronts"],
        })
    return out


def main(argv: list[str]) -> None:
    path, n = argv[0], int(argv[1]) if len(argv) > 1 else 2048
    rows = compare(path, n)
    print(json.dumps(rows, indent=1))
    hdr = ("kernel", "ms", "DRAM ncu", "DRAM compulsory", "L1 ld ncu", "L1 ld model(req x sect/req)", "ratio",
           "sect/req ncu", "sect/req trace", "bank confl ncu", "shared ld wavefronts / instr (ncu)")
    print(" | ".join(hdr))
    for r in rows:
        ratio = r["l1_ld_bytes_ncu"] / r["l1_ld_bytes_trace_model"] if r["l1_ld_bytes_trace_model"] else float("nan")
        wf = (f"{r['shared_ld_wavefronts_ncu']:.3g} / {r['shared_ld_instructions_ncu']:.3g}"
              if r.get("shared_ld_wavefronts_ncu") and r.get("shared_ld_instructions_ncu") else "-")
        print(" | ".join([r["kernel"], f"{r['time_ms']:.2f}", f"{r['dram_bytes_ncu'] / 1e6:.1f} MB",
                          f"{r['dram_compulsory_model'] / 1e6:.1f} MB", f"{r['l1_ld_bytes_ncu'] / 1e9:.2f} GB",
                          f"{r['l1_ld_bytes_trace_model'] / 1e9:.2f} GB", f"{ratio:.3f}",
                          f"{r['sectors_per_ld_request_ncu'] or 0:.2f}", f"{r['sectors_per_ld_request_trace'] or 0:.2f}",
                          f"{r['bank_conflicts_ncu']:.0f}", wf]))


if __name__ == "__main__":
    main(sys.argv[1:])
