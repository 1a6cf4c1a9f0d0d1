"""The bench suites (tiledmm.bench.SUITES) the benchmarks and `tiledmm bench` run: the llm suite is the grid
of LLM projection products the dispatch targets were set on."""
from tiledmm import bench as B


def test_llm_suite_is_the_projection_grid():
    shapes = B.SUITES["llm"]
    assert len(shapes) == 60 == len(set(shapes))
    assert {m for m, _, _ in shapes} == {1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
    # (N, K) = (11008, 4096): B is K x N = 4096 x 11008, stored (m, k, n)
    assert {(n, k) for _, k, n in shapes} == {(4096, 4096), (11008, 4096), (4096, 11008), (8192, 8192),
                                              (28672, 8192), (8192, 28672)}
    assert (16, 4096, 11008) in shapes and (16, 11008, 4096) in shapes


def test_the_kernels_of_one_product_share_its_inputs_and_reference(monkeypatch):
    """The main job checks five kernels on one product: its inputs are drawn and its float64 reference computed
    once (each costs a visible part of ``tiledmm run``), and each kernel is still checked against it."""
    from tiledmm import harness
    calls = []
    real = harness.reference
    monkeypatch.setattr(harness, "reference", lambda a, b: calls.append(1) or real(a, b))
    monkeypatch.setattr(harness, "_kept", {})
    rows = [harness.check_and_time(k, (9, 7, 5), seed=3, repeats=1, warmup=0, time_it=False)
            for k in ("naive", "tiled", "naive")]
    assert len(calls) == 1 and all(r.ok for r in rows)
    harness.check_and_time("naive", (9, 7, 5), seed=4, repeats=1, warmup=0, time_it=False)
    assert len(calls) == 2                       # another seed: other inputs, another reference
