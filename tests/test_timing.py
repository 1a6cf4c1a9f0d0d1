"""The one timing method's batch size (``timing._batch_size``), with the GPU's batches stood in for."""
from __future__ import annotations

import pytest

from tiledmm import timing


@pytest.mark.parametrize("call_ms, want", [(35.0, 1), (10.0, 1), (5.0, 3), (1.0, 10), (0.001, 1000)])
def test_a_batch_holds_about_batch_ms_of_calls_and_one_call_where_one_lasts_that_long(monkeypatch, call_ms, want):
    seen = []
    monkeypatch.setattr(timing, "_batch", lambda calls, n, offset: seen.append(n) or n * call_ms)
    assert timing._batch_size([lambda: None], 10.0, 1000) == want
    assert seen[0] == 1 and (len(seen) == 1) == (call_ms >= 10.0)    # a slow call is sized from itself alone
