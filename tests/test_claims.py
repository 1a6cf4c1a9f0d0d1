"""Every number in the lectures, recomputed from tiledmm's code (docs/claims.md)."""
import pytest

from tiledmm.analysis.claims import CLAIMS

from .conftest import GPU

# where tiledmm and a slide disagree, the value tiledmm computes (and the note says why)
DISAGREE = {"g80-347.6": 345.6, "g80-4096-pending": 1536, "g80-tile32": 0}


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim(claim):
    if claim.needs_emulation and GPU:
        pytest.skip("traces are recorded in emulation")
    v = claim.value()
    if claim.id in DISAGREE:
        assert not claim.agrees(v) and v == pytest.approx(DISAGREE[claim.id]) and claim.note
    else:
        assert claim.agrees(v), f"{claim.claim}: slide {claim.slide}, tiledmm {v}"


def test_claims_doc_is_current():
    from pathlib import Path

    from tiledmm import _backend
    from tiledmm.analysis.claims import markdown, table
    if not _backend.emulating():
        pytest.skip("the doc is generated in emulation")
    doc = Path(__file__).parent.parent / "docs" / "claims.md"
    assert doc.read_text() == markdown(table(True)), "regenerate: tiledmm --emulate claims --markdown docs/claims.md"


def test_claims_command_gives_the_reason_for_every_disagreement():
    from typer.testing import CliRunner

    from tiledmm import _backend
    from tiledmm.cli import app
    if not _backend.emulating():
        pytest.skip("traces are recorded in emulation")
    out = " ".join(CliRunner().invoke(app, ["claims"]).stdout.split())      # (notes wrap at the width)
    for c in CLAIMS:
        if c.id in DISAGREE:
            assert f"{c.id}: {c.note}" in out


def test_claims_are_computed_not_restated():
    """Each claim's value comes from tiledmm's code: break the code a claim reads and it changes."""
    from unittest import mock

    from tiledmm import registry
    by_id = {c.id: c for c in CLAIMS}
    spec = registry.get("tiled")
    with mock.patch.dict(registry._REGISTRY, {"tiled": __import__("dataclasses").replace(
            spec, launch_config=lambda tile, J, K, L: ((1, 1), (tile, tile)))}):
        assert by_id["g80-4096blk"].value() == 1
    with mock.patch("tiledmm.analysis.device.PROFILES", dict(__import__("tiledmm.analysis.device", fromlist=["x"])
                                                             .PROFILES)) as profs:
        from dataclasses import replace
        profs["ampere"] = replace(profs["ampere"], max_threads_per_sm=1024)
        assert by_id["64warps"].value() == 32
