"""Stand-ins for Triton's compiled kernels in CPU tests of the direct launch path (fastlaunch,
_adapter): a launcher whose ``__call__`` has the body of Triton 3.6's CudaLauncher -- the one
tiledmm._adapter recognises and bypasses -- recording the C launch's arguments instead of launching."""


class Launcher:
    launch_cooperative_grid, launch_pdl = False, False
    num_ctas, global_scratch_align, global_scratch_size, profile_scratch_size = 1, 128, 0, 0

    def __init__(self, calls=None, scratch=0):
        self.calls, self.global_scratch_size = calls, scratch
        self.launch = (lambda *args: None) if calls is None else (lambda *args: calls.append(args))

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        global_scratch = None
        profile_scratch = None
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    global_scratch, profile_scratch, *args)


class Compiled:
    """A compiled kernel as the adapter reads it (``bind_compiled``, ``run_compiled``): ``function``,
    ``packed_metadata`` and ``run``."""

    def __init__(self, run, function="fn"):
        self.function, self.packed_metadata, self.run = function, "meta", run


def direct_launches(monkeypatch, slow) -> None:
    """fastlaunch as on a GPU with direct launches on, every compile answered by ``slow(self, grid,
    args)`` (a FastKernel method returning a Compiled), stream 9, scratch from host memory."""
    import torch
    from tiledmm import _adapter
    from tiledmm.kernels.block import fastlaunch
    monkeypatch.setattr(fastlaunch, "emulating", lambda: False)
    monkeypatch.setattr(fastlaunch.FastKernel, "_slow", slow)
    monkeypatch.setattr(fastlaunch, "current_stream", lambda: 9)
    monkeypatch.setattr(fastlaunch, "_scratch", lambda n: torch.empty(n, dtype=torch.int8))
    monkeypatch.setattr(_adapter, "_direct", True)
