"""``tiledmm outofcore``: random host operands through the device in blocks, checked and timed."""
from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from .._arrays import TiledmmError
from ._app import command, console, environment, human_bytes, kv, mem_available, num, ok_cell, parse_bytes, \
    parse_shape, positive, progress_bar
from .tune import recording_choices

# -- out of core ---------------------------------------------------------------------------------
OOC_DTYPES = ("float32", "float16", "bfloat16")
OOC_TOL = {"float32": 1e-4, "float16": 3e-3, "bfloat16": 1.5e-2}


def _host_matrix(rows: int, cols: int, dtype: str, pinned: bool, registered: list):
    """An uninitialised host operand: page-locked torch (registered with CUDA, no power-of-two rounding of
    torch's pinned allocator), else numpy for float32/float16 and a pageable torch tensor for bfloat16."""
    import numpy as np
    import torch
    if pinned:
        t = torch.empty((rows, cols), dtype=getattr(torch, dtype))
        err = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
        if int(err) != 0:
            raise TiledmmError(f"--pinned: page-locking {human_bytes(t.numel() * t.element_size())} failed "
                               f"(cudaHostRegister: {err}); run without --pinned")
        registered.append(t)
        return t
    if dtype == "bfloat16":
        return torch.empty((rows, cols), dtype=torch.bfloat16)
    return torch.from_numpy(np.empty((rows, cols), dtype=dtype))


@command()
def outofcore(shape: str = typer.Option(..., "--shape", "-s", metavar="JxKxL",
                                        help="P = M (JxK) @ N (KxL), random host operands; in emulation at most "
                                             "the kernel's emulation limit of multiply-adds."),
              dtype: str = typer.Option("float32", metavar="|".join(OOC_DTYPES),
                                        help="element type (float32, float16: numpy arrays; bfloat16: torch "
                                             "tensors); 16-bit products accumulate in float32 on the device."),
              max_device_bytes: Optional[str] = typer.Option(
                  None, "--max-device-bytes", metavar="BYTES",
                  help="device budget for tiles: 123, 512MiB, 16GiB (default: free GPU memory less a reserve; in "
                       "emulation a quarter of the operands, so that there are several blocks)."),
              pinned: bool = typer.Option(False, "--pinned", metavar="",
                                          help="Page-locked torch host operands (copies go straight to the GPU) "
                                               "instead of pageable ones. GPU only."),
              kernel: Optional[str] = typer.Option(None, "--kernel", "-k", metavar="NAME",
                                                   help="the device GEMM (default: tiledmm.matmul's for the dtype)."),
              check_rows: int = typer.Option(64, metavar="N", help="rows of the result checked against float64, "
                                             "block edges among them (0: no check)."),
              check_cols: int = typer.Option(2048, metavar="N", help="columns of those rows checked."),
              seed: int = typer.Option(0, metavar="N", help="seed of the random operands.")):
    """Out of core: multiply random host matrices larger than the GPU's memory, streamed through it in
    blocks (tiledmm.outofcore) under a progress bar; check sampled rows against float64; report the
    rate and how busy the copy-in, compute and copy-out streams were."""
    from .. import _backend, registry
    from ..api import default_kernel
    m, k, n = parse_shape(shape, batch=False)
    if dtype not in OOC_DTYPES:
        raise TiledmmError(f"--dtype {dtype!r}: choose float32, float16 or bfloat16")
    budget = None if max_device_bytes is None else parse_bytes("--max-device-bytes", max_device_bytes)
    positive("--check-rows", check_rows, allow_zero=True)
    positive("--check-cols", check_cols)
    spec = registry.get(kernel or default_kernel(dtype))
    if dtype not in spec.dtypes:
        raise TiledmmError(f"kernel {spec.name!r} supports dtypes {list(spec.dtypes)}, not {dtype}")
    gpu = not _backend.emulating()
    if pinned and not gpu:
        raise TiledmmError("--pinned: page-locked host memory needs a GPU; none is in use (emulation)")
    import torch
    from ..outofcore import check_sampled, fill_random, matmul_out_of_core, plan_out_of_core, row_chunks, tiledmm_gemm
    tdtype = getattr(torch, dtype)
    host = (m * k + k * n + m * n) * tdtype.itemsize
    avail = mem_available()
    if avail is not None and host > 0.9 * avail:
        raise TiledmmError(f"{shape} {dtype}: A, B and C take {human_bytes(host)} of host memory, "
                           f"{human_bytes(avail)} is available (MemAvailable in /proc/meminfo)")
    if not gpu:
        if spec.emulation_limit is None:
            raise TiledmmError(f"kernel {spec.name!r} needs a GPU; none is in use (emulation)")
        limit = _backend.emulation_limit(spec.emulation_limit)
        if m * k * n > limit:
            raise TiledmmError(f"{shape}: {m * k * n:,} multiply-adds, over the emulation limit of {limit:,} for "
                               f"kernel {spec.name!r} (no GPU: the CPU stands in for it); try 64x48x80")
        budget = budget or max(host // 4, 4096)
    acc = torch.float32 if dtype != "float32" else None
    plan = plan_out_of_core(m, n, k, tdtype, acc_dtype=acc, max_device_bytes=budget,
                            direct=(pinned, pinned, pinned and acc is None))
    console.print(escape(f"plan: {plan.describe()}"))
    registered: list = []
    done = [0, plan.steps]
    try:
        with progress_bar() as progress:
            a, b, c = (_host_matrix(r, q, dtype, pinned, registered) for r, q in ((m, k), (k, n), (m, n)))
            task = progress.add_task(f"random operands ({human_bytes(host)})",
                                     total=sum(len(row_chunks(t)) for t in (a, b, c)))
            for t, s, poison in ((a, 2 * seed + 1, False), (b, 2 * seed + 2, False), (c, 0, True)):
                fill_random(t, s, nan=poison, advance=lambda: progress.advance(task))   # C: NaN until written
            progress.remove_task(task)
            task = progress.add_task(f"out of core {shape} {dtype}", total=plan.steps)

            def on_progress(d, total):
                done[:] = [d, total]
                progress.update(task, completed=d, total=total)
            stats: dict = {}
            with recording_choices([]) as tuned:     # a block shape's first GEMM may tune its class
                matmul_out_of_core(a, b, c, max_device_bytes=budget, gemm=tiledmm_gemm(kernel),
                                   progress=on_progress, stats=stats, acc_dtype=acc, plan=plan)
            if check_rows:
                progress.update(task, description=f"checking {check_rows} rows against float64")
                rel, _, _ = check_sampled(a, b, c, plan, check_rows, check_cols, seed)
            else:
                rel = None
    finally:
        for t in registered:
            torch.cuda.cudart().cudaHostUnregister(t.data_ptr())
    secs = stats["wall_s"]
    ok = rel is None or rel <= OOC_TOL[dtype]
    kind = "pinned" if pinned else ("torch" if dtype == "bfloat16" else "numpy")
    tuning_s = sum(r["s"] for r in tuned if r["stored"] is not None and r["before"] != r["choice"])
    # one run: a list, a line a quantity (fits any terminal); in emulation no rate
    kv(f"tiledmm outofcore — {environment()['device']}", {
        "shape": f"{m}x{k}x{n}", "dtype": f"{dtype} {kind}", "budget": human_bytes(plan.budget),
        "GEMMs": f"{done[0]:,}/{done[1]:,}", ("s" if gpu else "sim s"): num(secs), "tuning s": num(tuning_s),
        **({"TFLOP/s": num(2.0 * m * n * k / secs / 1e12)} if gpu else {}),
        "rel err": num(rel), "check": ok_cell(ok) if rel is not None else "skipped",
        "busy s: in / GEMM / out": " / ".join(num(stats[f"{s}_ms"] / 1e3) for s in ("copy_in", "compute", "copy_out"))})
    console.print("busy: seconds the copy-in, GEMM and copy-out streams were working"
                  + (f"; s and GEMM busy include {tuning_s:.3g} s of first-call tuning of the block shapes' "
                     "classes, remembered now: a second run skips it" if tuning_s else ""))
    if not gpu:
        console.print("sim s: the CPU simulator's time, which says nothing about GPU speed")
    if not ok:
        raise typer.Exit(1)


