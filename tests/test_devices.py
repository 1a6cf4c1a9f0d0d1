"""Device properties per device index (analysis/device.properties) and the fake-device hook the
CPU tests use to see choices made for GPUs that are not here."""
import pytest

from tiledmm.analysis import device

from .conftest import GPU


def test_properties_are_read_once_per_index(monkeypatch):
    monkeypatch.setattr(device, "_known", {})
    reads = []
    monkeypatch.setattr(device, "_read", lambda i: reads.append(i) or device.emulated(i))
    assert device.properties(0) is device.properties(0)
    assert device.properties(1).index == 1 and reads == [0, 1]


@pytest.mark.skipif(GPU, reason="emulation only")
def test_emulation_describes_the_interpreters_small_gpu():
    p = device.properties(0)
    assert p.emulated and p.num_sms == 4 and p.capability == (0, 0)


def test_two_fake_devices_side_by_side():
    small = device.DeviceProperties(1, "small GPU", (8, 0), 20, 101376)
    real0 = device.properties(0)
    with device.fake(0, device.PROFILES["h100"]), device.fake(1, small):
        h100 = device.properties(0)
        assert (h100.num_sms, h100.capability, h100.smem_per_block_optin) == (132, (9, 0), 227 * 1024)
        assert device.properties(1) is small
        with device.fake(0, small):
            assert device.properties(0) is small
        assert device.properties(0) is h100
    assert device.properties(0) == real0


def test_properties_are_frozen():
    p = device.properties(0)
    with pytest.raises(AttributeError):
        p.num_sms = 1


@pytest.mark.skipif(GPU, reason="CPU tensors stand in for the fake devices' (the CPU image's test)")
def test_the_dispatchers_pick_follows_the_device(monkeypatch):
    """Two fake descriptions, two choices: the block family's no-timing pick (its candidates for the
    call and the model's pick on ``matmul.device``, both read from the device's properties) on a
    132-SM Hopper and on a 20-SM Ampere with less shared memory differs for the same call. The
    variants' real configs are used (not the interpreter's small ones), so this runs on the CPU."""
    import torch

    from tiledmm.kernels.block import heuristics as H
    from tiledmm.kernels.block import dispatch as bm
    monkeypatch.setattr(bm, "emulating", lambda: False)
    small = device.DeviceProperties(0, "small GPU", (8, 0), 20, 101376)
    for M, K, N in ((4096, 4096, 4096), (64, 4096, 4096)):
        a, b, c = torch.empty(M, K), torch.empty(K, N), torch.empty(M, N)
        picks = []
        for profile in (device.PROFILES["h100"], small):
            with device.fake(0, profile):
                cands = bm.candidates(a, b, c, "tf32", 1.0, 0.0)
                picks.append(H.pick(cands, bm._problem(a, b, c, "tf32"), bm.device(None)).name)
        assert picks[0] != picks[1], (M, K, N, picks)
