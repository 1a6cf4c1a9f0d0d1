"""The one timing method's batch size (``timing._batch_size``), with the GPU's batches stood in for."""
from __future__ import annotations

import pytest

from tiledmm import timing


@pytest.mark.parametrize("call_ms, want", [(35.0, 1), (10.0, 1), (5.0, 3), (1.0, 10), (0.001, 1000)])
def test_a_batch_holds_about_batch_ms_of_calls_and_one_call_where_one_lasts_that_long(monkeypatch, call_ms, want):
    seen = []
    monkeypatch.setattr(timing, "_batch", lambda calls, n, offset: seen.append(n) or n * call_ms)
    n, ms = timing._batch_size([lambda: None], 10.0, 1000)
    assert n == want and ms == pytest.approx(call_ms)
    assert seen[0] == 1 and (len(seen) == 1) == (call_ms >= 10.0)    # a slow call is sized from itself alone


@pytest.mark.parametrize("call_ms, batches, want", [(35.0, 10, 3), (20.0, 10, 5), (10.0, 20, 10), (10.0, 4, 4),
                                                     (200.0, 5, 3), (1.0, 10, 10)])
def test_a_call_that_outlasts_a_batch_gets_the_batches_that_fit_in_slow_ms(monkeypatch, call_ms, batches, want):
    """A batch of one (a call of batch_ms or more): at most SLOW_MS of batches, and three at least; a faster
    call keeps every batch asked for."""
    seen = []
    monkeypatch.setattr(timing._backend, "emulating", lambda: False)
    monkeypatch.setattr(timing, "_warm", lambda calls, warmup: None)
    monkeypatch.setattr(timing, "_batch", lambda calls, n, offset: seen.append(n) or n * call_ms)
    assert timing.time_calls(lambda: None, batches=batches) == pytest.approx(call_ms)
    probe = 1 if call_ms >= 10.0 else 2          # the batch-size probe: one call, then three
    assert len(seen) - probe == want
