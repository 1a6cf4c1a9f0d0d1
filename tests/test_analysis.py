"""The analysis layer on CPU: occupancy rules, traffic model, burst model, traces, pictures, CLI."""
import json
import xml.etree.ElementTree as ET

import pytest

from tiledmm.analysis.burst import burst_efficiency, parse_index, pattern
from tiledmm.analysis.device import PROFILES, profile
from tiledmm.analysis.model import bytes_per_flop, dram_bytes, roofline
from tiledmm.analysis.occupancy import occupancy, tiled_shared_bytes
from tiledmm import TiledmmError

from .conftest import GPU
from .test_cli import cli


def test_occupancy_rules_h100():
    h = profile("h100")
    o = occupancy(h, 256, shared_per_block=tiled_shared_bytes(16), regs_per_thread=24)
    assert (o.blocks_per_sm, o.limited_by) == (8, ["threads"])
    # registers: 160 per thread -> 160*32 = 5120 per warp -> 12 warps per SM -> one 8-warp block
    o = occupancy(h, 256, shared_per_block=8320, regs_per_thread=160)
    assert (o.blocks_by_regs, o.blocks_per_sm, o.limited_by) == (1, 1, ["registers"])
    # shared memory binds with large tiles: 100 KB + 1 KB reserved -> 2 per 228 KB SM
    o = occupancy(h, 128, shared_per_block=100 * 1024)
    assert (o.blocks_by_shared, o.limited_by) == (2, ["shared memory"])


def test_occupancy_refuses_what_cannot_launch():
    o = occupancy(profile("g80"), 1024, shared_per_block=8192)
    assert not o.launchable and "512" in o.why_not and o.blocks_per_sm == 0
    o = occupancy(profile("h100"), 256, shared_per_block=300 * 1024)
    assert not o.launchable and "shared memory" in o.why_not


def test_traffic_model():
    assert bytes_per_flop("naive") == 4.0
    assert bytes_per_flop("tiled", 16) == 0.25
    assert bytes_per_flop("regtile2d", 128) == pytest.approx(4 * 256 / (2 * 128 * 128))
    r = roofline("tiled", profile("h100"), 32)
    assert r.memory_bound_gflops == pytest.approx(3350 / 0.125) and r.binds == "memory bandwidth"  # 26.8 < 66.9
    d = dram_bytes("tiled", 2048, 2048, 2048, 16)
    assert d["requested_read"] == 2 * 2048 * 2048 * 128 * 4
    assert d["compulsory_read"] == 2 * 2048 * 2048 * 4
    assert dram_bytes("naive", 30, 20, 10)["requested_read"] == 2 * 30 * 20 * 10 * 4   # 2 operands per mul-add
    with pytest.raises(TiledmmError, match="supports tile"):
        bytes_per_flop("tiled", 3)


def test_burst_model_contiguous_and_strided():
    full = burst_efficiency(pattern([parse_index("i")], 256), 128, 100.0)
    assert full.useful_fraction == 1.0 and full.effective_gbs == 100.0
    quarter = burst_efficiency(pattern([parse_index("4*i")], 256), 128, 100.0)
    assert quarter.useful_fraction == 0.25
    with pytest.raises(TiledmmError, match="index expression"):
        parse_index("__import__('os')")


def test_profiles_cover_the_lectures():
    assert {"g80", "lecture1536", "ampere", "h100", "example150"} <= set(PROFILES)
    with pytest.raises(TiledmmError, match="unknown device profile 'x'"):
        profile("x")


@pytest.mark.skipif(GPU, reason="traces run in emulation")
def test_trace_tiled_toy_case():
    from tiledmm.analysis.trace import trace
    t = trace("tiled", (3, 3, 3), 2)
    assert t.result_ok
    assert t.stores_by_block()[(1, 1, 0)] == [(2, 2)]
    ph = {(p["block"][:2], p["phase"]): p for p in t.phases()}
    # Block(0,0) phase 1: M[0..1, 2] and N[2, 0..1] loaded; the rest of both tiles zero-filled
    p = ph[((0, 0), 1)]
    assert p["M"] == [(0, 2), (1, 2)] and p["N"] == [(2, 0), (2, 1)]
    assert p["zero_filled"] == {"subTileM": [(0, 1), (1, 1)], "subTileN": [(1, 0), (1, 1)]}
    assert t.bank_conflicts()["ld subTileN"]["extra_wavefronts"] == 0


@pytest.mark.skipif(GPU, reason="traces run in emulation")
def test_trace_sees_bank_conflicts_and_uncoalesced_access():
    from tiledmm.analysis.trace import trace
    bc = trace("regtile2d", (64, 16, 64), 64).bank_conflicts()
    # thread t reads Bs[k, 4t .. 4t+3]: threads t and t+8 share banks; As rows 32 words apart: 2-way
    assert bc["ld Bs"]["worst_ways"] == 2 and bc["ld As"]["worst_ways"] == 2
    assert bc["ld Bs"]["extra_wavefronts"] == bc["ld Bs"]["requests"]
    bc = trace("conflict-free", (64, 16, 64), 64).bank_conflicts()  # strided micro-tile, k-major padded As
    assert all(v["extra_wavefronts"] == 0 for v in bc.values())
    t = trace("naive-uncoalesced", (32, 8, 32), 16)
    assert t.coalescing()["ld M"]["sectors_per_request"] == 16


@pytest.mark.skipif(GPU, reason="traces run in emulation")
def test_trace_of_rungs_9_and_10():
    """Repeated, because the simulator runs a block's threads concurrently: the trace's own
    shared-array bookkeeping once raced there and gave some threads a private copy (wrong P
    in about one run of three). Rung 10 (128x128x32): operand reads conflict-free, but a warp
    loads one row's 32 k of M and stores them down a k-major column: 4-way conflicts on
    those stores. Loading 4 rows x 8 k instead removed them and was 8-11 % slower on the H100
    (4 cache lines per request instead of 1), so the kernel keeps them."""
    from tiledmm.analysis.trace import trace
    for _ in range(3):
        assert trace("unsigned", (20, 12, 24), 64).result_ok
    t = trace("autotuned", (64, 40, 64), None)
    assert t.result_ok
    bc = t.bank_conflicts()
    assert bc["ld As"]["extra_wavefronts"] == bc["ld Bs"]["extra_wavefronts"] == bc["st Bs"]["extra_wavefronts"] == 0
    assert bc["st As"]["worst_ways"] == 4
    assert t.coalescing()["ld N"]["lines_per_request"] == 1


@pytest.mark.skipif(GPU, reason="traces run in emulation")
@pytest.mark.parametrize("shape,tile", [((3, 3, 3), 2), ((5, 9, 4), 4), ((4, 8, 4), 2)])
def test_trace_names_phases_and_shared_contents_as_the_lectures(shape, tile):
    """Phase 0..n-1 then the store (tiled passes two barriers a phase); each shared cell holds
    M[by*T+ty, ph*T+tx] / N[ph*T+ty, bx*T+tx] or a zero-fill exactly where that element is missing;
    progress is reported once per block."""
    import math
    from tiledmm.analysis.trace import trace
    seen = []
    t = trace("tiled", shape, tile, progress=lambda done, total: seen.append((done, total)))
    J, K, L = shape
    n, blocks = math.ceil(K / tile), math.ceil(J / tile) * math.ceil(L / tile)
    assert seen[-1] == (blocks, blocks) and len(seen) == blocks + 1
    for b in {p["block"] for p in t.phases()}:
        steps = [p for p in t.phases() if p["block"] == b]
        assert [p["step"] for p in steps] == [f"Phase {i}" for i in range(n)] + ["the store"]
        bx, by = b[0], b[1]
        for p in steps[:-1]:
            ph = p["phase"]
            for (ty, tx), v in p["shared"]["subTileM"].items():
                r, c = by * tile + ty, ph * tile + tx
                assert v == (f"M{r},{c}" if r < J and c < K else "0")
            for (ty, tx), v in p["shared"]["subTileN"].items():
                r, c = ph * tile + ty, bx * tile + tx
                assert v == (f"N{r},{c}" if r < K and c < L else "0")


@pytest.mark.skipif(GPU, reason="traces run in emulation")
def test_trace_phases_of_a_one_barrier_kernel():
    """double-buffer passes one barrier a phase: its phases are numbered 0..n-1 without gaps."""
    from tiledmm import registry
    from tiledmm.analysis.trace import trace
    assert registry.get("double-buffer").barriers_per_phase == 1
    t = trace("double-buffer", (64, 24, 64), 64)
    assert t.result_ok
    nums = sorted({p["phase"] for p in t.phases() if p["step"] != "the store"})
    assert nums == list(range(len(nums))) and len(nums) >= 2


@pytest.mark.skipif(GPU, reason="runs in emulation")
def test_explain_detail_and_summary_views(tmp_path):
    from tiledmm.analysis.explain import check_explain
    assert check_explain((3, 3, 3), 2) == "detail" and check_explain((19, 7, 21), 4) == "summary"
    with pytest.raises(TiledmmError, match="at most 36 blocks"):
        check_explain((64, 64, 64), 8)
    code, out, err = cli("explain", "--shape", "10x5x7", "--tile", "4", "--out", str(tmp_path / "s.svg"))
    assert code == 0 and "summary view" in out, out + err
    text = (tmp_path / "s.svg").read_text()
    assert "Phase 1: M rows 0–3 × col 4 (4)" in text and "zero-filled: subTileM 12" in text


@pytest.mark.skipif(GPU, reason="runs in emulation")
def test_explain_draws_svg(tmp_path):
    code, out, err = cli("explain", "--out", str(tmp_path / "e.svg"))
    assert code == 0, out + err
    root = ET.parse(tmp_path / "e.svg").getroot()
    assert root.tag.endswith("svg")
    text = (tmp_path / "e.svg").read_text()
    assert "blockIdx.x=1, blockIdx.y=1 — Phase 1" in text and "blockIdx.x=1, blockIdx.y=1 — the store" in text
    assert "M2,2" in text and "N2,2" in text      # the shared tiles show what they received


def test_cli_analysis_commands(tmp_path):
    """In this process (the README's test runs each of these commands in a fresh one)."""
    code, out, _ = cli("occupancy", "--tile", "16", "--profile", "g80", "--json")
    assert code == 0 and json.loads(out)["blocks_per_sm"] == 3
    code, out, _ = cli("model", "--profile", "example150", "--json")
    rows = json.loads(out)
    assert [r["memory_bound_gflops"] for r in rows] == [37.5, 600.0, 1200.0]
    code, out, _ = cli("burst", "--json")
    assert json.loads(out)["effective_gbs"] == 120.0
    code, out, _ = cli("device", "--profile", "ampere", "--json")
    assert json.loads(out)["shared_per_sm"] == 164 * 1024
    code, out, _ = cli("roofline", "--profile", "h100", "--out", str(tmp_path / "r.png"))
    assert code == 0 and (tmp_path / "r.png").stat().st_size > 10000
    code, out, err = cli("occupancy", "--tile", "16", "--profile", "nope")
    assert code == 2 and "unknown device profile" in err


@pytest.mark.skipif(GPU, reason="runs in emulation")
def test_cli_trace_json():
    code, out, err = cli("trace", "--shape", "3x3x3", "--tile", "2", "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["stores_by_block"]["(1, 1, 0)"] == [[2, 2]] and s["correct"]


@pytest.mark.skipif(GPU, reason="traces run in emulation")
def test_the_simulators_block_runner_is_in_and_a_trace_first_in_a_process_still_sees_every_block():
    """tiledmm's simulator block runner (the adapter's numba_sim_block_runner) is installed before the trace's hooks
    wrap numba's block runner, so a trace that is a fresh process's first simulated launch still counts its
    blocks, and the runner stays installed after."""
    import subprocess
    import sys
    code = ("from tiledmm import _adapter\n"
            "from tiledmm.analysis import trace\n"
            "from numba.cuda.simulator import kernel as K\n"
            "seen = []\n"
            "t = trace.trace('tiled', (20, 8, 20), 8, progress=lambda done, total: seen.append((done, total)))\n"
            "assert t.result_ok and seen[-1] == (9, 9), seen\n"
            "assert _adapter.numba_sim._runner['installed']\n"
            "assert 'numba_sim_block_runner' in K.BlockManager.run.__qualname__, K.BlockManager.run\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
