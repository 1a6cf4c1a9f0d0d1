"""The bench suites (tiledmm.bench.SUITES) the benchmarks and `tiledmm bench` run: the llm suite is the grid
of LLM projection products the dispatch targets were set on."""
import pytest

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


def test_the_check_compares_where_the_result_is_and_agrees_with_the_host():
    """A result is compared with the float64 reference on its own device when the reference is there
    (``on_device``): the same number as the host's comparison, NaN for a poisoned element, a shape error
    named; a reference on another device than the result is compared on the host."""
    import numpy as np
    import torch
    from tiledmm import harness
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(37, 19, generator=g), torch.randn(19, 23, generator=g)
    ref = harness.reference(a, b)
    c = (a @ b) * (1 + 1e-6 * torch.randn(37, 23, generator=g))
    host = harness.rel_error(c, ref)
    there = harness.rel_error(c, torch.from_numpy(ref))
    assert 0 < host < 1e-5 and abs(there - host) <= 1e-12 * host
    assert harness.on_device(ref, c) is ref                    # a CPU result: the host reference itself
    c[3, 4] = float("nan")
    assert np.isnan(harness.rel_error(c, torch.from_numpy(ref))) and np.isnan(harness.rel_error(c, ref))
    with pytest.raises(ValueError, match=r"\(37, 22\) != reference shape \(37, 23\)"):
        harness.rel_error(c[:, :22], torch.from_numpy(ref))
    assert np.isnan(harness.rel_error(c.numpy(), torch.from_numpy(ref)))      # a numpy result: the host's way


@pytest.mark.gpu
def test_gpu_the_check_on_the_gpu_agrees_with_the_host():
    import torch
    from tiledmm import harness
    a, b = (torch.randn(s, device="cuda") for s in ((300, 200), (200, 400)))
    ref = harness.reference(a, b)
    c = a @ b
    dev = harness.on_device(ref, c)
    assert dev.device == c.device and dev.dtype == torch.float64
    assert abs(harness.rel_error(c, dev) - harness.rel_error(c, ref)) <= 1e-9 * harness.rel_error(c, ref)
    c[0, 0] = float("nan")
    assert harness.rel_error(c, dev) != harness.rel_error(c, dev)


def test_the_kept_inputs_count_their_references(monkeypatch):
    """The memo of inputs shared by a product's kernels is bounded with its float64 references counted (kept on
    the GPU beside the inputs there): past ``KEEP_BYTES`` it starts again."""
    from tiledmm import harness
    monkeypatch.setattr(harness, "_kept", {})
    harness.check_and_time("naive", (9, 7, 5), seed=3, repeats=1, warmup=0, time_it=False)
    (a, b, ref), = harness._kept.values()
    inputs = a.numel() * a.element_size() + b.numel() * b.element_size()
    monkeypatch.setattr(harness, "KEEP_BYTES", 2 * inputs + ref.nbytes - 1)      # room for two inputs, not the ref
    harness.check_and_time("naive", (9, 7, 5), seed=4, repeats=1, warmup=0, time_it=False)
    assert len(harness._kept) == 1              # the first product's inputs and reference were let go
