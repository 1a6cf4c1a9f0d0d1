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
