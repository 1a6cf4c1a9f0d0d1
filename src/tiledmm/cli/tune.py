"""``tiledmm tune``: tune shape classes ahead of time; ``--show`` / ``--forget`` the tuning store."""
from __future__ import annotations

import contextlib
import os
import time
from typing import List, Optional

import typer
from rich.markup import escape

from .._arrays import TiledmmError
from ._app import command, console, environment, human_bytes, parse_shape, positive, progress_bar, table

# -- tuning --------------------------------------------------------------------------------------
TUNE_DTYPES = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("nn", "nt", "tn", "tt")


@contextlib.contextmanager
def recording_choices(record: list):
    """While inside, note every ``tuning.choose`` call: its key, the choice, what was stored before,
    the seconds it took (the timing of candidates, when it tuned)."""
    from .. import tuning
    real = tuning.choose

    def choose(key, candidates, model_pick, **kw):
        before = tuning.lookup(key)
        t0 = time.perf_counter()
        name = real(key, candidates, model_pick, **kw)
        record.append({"key": key, "choice": name, "before": before, "stored": tuning.lookup(key),
                       "candidates": len(candidates), "s": time.perf_counter() - t0})
        return name
    tuning.choose = choose
    try:
        yield record
    finally:
        tuning.choose = real


def _how(rec: dict) -> str:
    if rec["stored"] is None:
        return "model's pick (one candidate: nothing to time)" if rec["candidates"] == 1 else \
            "model's pick (no candidate ran)"
    if rec["before"] == rec["choice"]:
        return "remembered"
    return f"tuned now ({rec['candidates']} candidates timed)"


def _tune_operand(batch: int, rows: int, cols: int, transposed: bool, dtype):
    """A random rows x cols CUDA operand (batched when batch > 1); 't': the transpose of a row-major array."""
    import torch
    shape = ((batch,) if batch > 1 else ()) + ((cols, rows) if transposed else (rows, cols))
    t = torch.randn(shape, device="cuda", dtype=dtype)
    return t.transpose(-1, -2) if transposed else t


def _read_store(strict: bool = True):
    """(path, {key: choice} or None when there is no store file) for this GPU and library versions."""
    from .. import tuning
    from .._cachefile import load_json
    path = tuning.store_path()
    doc, why = load_json(path, tuning.parse_store)
    if why:
        if strict:
            raise TiledmmError(f"{path}: not a tuning store ({why}); `tiledmm tune --forget` removes it")
        doc = {}
    return path, doc


def _bucket(e: int) -> str:
    """A log2 bucket of the shape class as the range of sizes it holds."""
    return "1" if e == 0 else f"{2 ** e}–{2 ** (e + 1) - 1}"


def _dtype(text: str) -> str:
    return text.removeprefix("torch.")


def describe_key(key: str) -> dict | None:
    """A tuning store key in words: kernel, dtype, precision, layout, M/N/K ranges, form; None when the
    key is of no format known here. Two formats: ``simt-KERNEL|dtype|(m, n, k)`` (kernels/simt/_launch.py)
    and ``triton|`` + plan_key's fields but the device (kernels/block/dispatch.py: a and c dtype, precision,
    a.dim, b.dim, a row-major, b row-major, b column-major, c row-major, aligned, (m, n, k), alpha == 1,
    beta == 0, rows of 128-byte multiples; keys stored before that last field have 13)."""
    import re
    parts = key.split("|")
    cls = next((i for i, p in enumerate(parts) if re.fullmatch(r"\(\d+, \d+, \d+\)", p)), None)
    if cls is None:
        return None
    m, n, k = (int(x) for x in re.findall(r"\d+", parts[cls]))
    out = {"kernel": None, "dtype": None, "precision": "–", "layout": "–", "M": _bucket(m), "N": _bucket(n),
           "K": _bucket(k), "form": "–"}
    if parts[0].startswith("simt-") and len(parts) == 3 and cls == 2:
        out.update(kernel=parts[0][5:], dtype=_dtype(parts[1]), form="C = A@B (2-D)")
        return out
    if parts[0] == "triton" and len(parts) in (14, 15) and cls == 11:
        adt, cdt, prec, adim, bdim, arow, brow, bcol, crow, aligned, _, alpha1, beta0 = parts[1:14]
        a = "n" if arow == "True" else "t"
        b = "n" if brow == "True" else ("t" if bcol == "True" else "s")
        batched = adim == "3" or bdim == "3"
        form = ("C = A@B" if alpha1 == "True" and beta0 == "True" else
                "C = αA@B" if beta0 == "True" else "C = αA@B + βC")
        out.update(kernel="triton", dtype=_dtype(adt) + ("" if cdt == adt else f" → {_dtype(cdt)}"), precision=prec,
                   layout=a + b + ("" if crow == "True" else ", C strided"),
                   form=form + (", batched" if batched else "") + ("" if aligned == "True" else ", unaligned"))
        return out
    return None


def _store_rows(doc: dict) -> list[tuple]:
    rows = []
    for key, choice in sorted(doc.items()):
        d = describe_key(key)
        if d is None:      # a format this CLI does not know: shown as stored
            rows.append((key, "–", "–", "–", "–", "–", "–", "–", str(choice)))
            continue
        variant, _, cfg = str(choice).partition(":")
        words = f"{variant} ({cfg.replace('-', ', ')})" if cfg else variant
        rows.append((d["kernel"], d["dtype"], d["precision"], d["layout"], d["M"], d["N"], d["K"], d["form"], words))
    return rows


STORE_COLUMNS = ("kernel", "dtype", "precision", "layout", "M", "N", "K", "form", "chosen")
# M, N and K ranges whole, stacked one under another (then dtype and precision) where the terminal is narrow
STORE_LAYOUT = dict(fold=("kernel", "chosen"), whole=("M", "N", "K", "dtype", "precision", "layout"),
                    stack=((None, ("M", "N", "K")), (None, ("dtype", "precision", "layout"))))


def _show_store() -> None:
    path, doc = _read_store()
    if not doc:
        console.print(escape(f"no tuned choices stored for this GPU and these library versions "
                             f"({path} {'is empty' if doc == {} else 'does not exist'})"))
        return
    table(f"tuning store: {len(doc)} choice{'s' * (len(doc) != 1)}", STORE_COLUMNS, _store_rows(doc),
          **STORE_LAYOUT)
    console.print("layout: A's then B's storage (n row-major, t transposed, s other strides); M, N, K: the "
                  "class's range of sizes (C is MxN, K the inner dimension)")
    console.print(escape(f"store: {path}"), soft_wrap=True)


def _forget_store() -> None:
    from .. import tuning
    path, doc = _read_store(strict=False)
    if doc is None:
        console.print(escape(f"nothing to forget: {path} does not exist"), soft_wrap=True)
        return
    if doc:
        table(f"forgetting {len(doc)} tuned choice{'s' * (len(doc) != 1)}", STORE_COLUMNS, _store_rows(doc),
              **STORE_LAYOUT)
    if path.is_dir():
        path.rmdir()            # an empty folder in the store's place (a damaged store): removed too
    else:
        path.unlink()
    tuning.forget()
    console.print(escape(f"removed {path}"), soft_wrap=True)


@command()
def tune(shapes: Optional[List[str]] = typer.Argument(None, metavar="JxKxL", hidden=True,   # (told above)
                                                       help="shapes P (JxK @ KxL) to tune; a leading 4th number "
                                                            "is a batch."),
         dtype: Optional[List[str]] = typer.Option(None, "--dtype", metavar="|".join(TUNE_DTYPES),
                                                   help="repeatable; default float32."),
         precision: Optional[str] = typer.Option(None, metavar="ieee|tf32",
                                                 help="float32 only: ieee (default) or tf32 (tensor cores)."),
         kernel: Optional[str] = typer.Option(None, "--kernel", "-k", metavar="NAME",
                                              help="default: tiledmm.matmul's for the dtype (triton; autotuned "
                                                   "for float64)."),
         batch: int = typer.Option(1, metavar="B", help="batch size of every shape."),
         layout: str = typer.Option("nn", metavar="nn|nt|tn|tt",
                                    help="storage of a and b: n row-major, t the transpose of a row-major array."),
         show: bool = typer.Option(False, "--show", metavar="",
                                   help="List the tuned choices stored for this GPU and library versions."),
         forget: bool = typer.Option(False, "--forget", metavar="", help="Empty that store (listing what goes)."),
         table_path: Optional[str] = typer.Option(None, "--table", metavar="PATH",
                                                  help="Also write the choices timed now into a shipped-table file "
                                                       "(merged into PATH; kernels/block/tables/ holds the shipped ones).")):
    """Tune ahead of time: for each shape JxKxL given (P = M (JxK) @ N (KxL), e.g. 4096x4096x4096
    128x4096x11008; a leading 4th number is a batch), time the candidate kernels and configs of its
    class on this GPU once (what tiledmm.matmul's first call does) and remember the fastest on disk."""
    from .. import _backend, registry, tuning
    from ..api import default_kernel, matmul
    if show and forget:
        raise TiledmmError("give --show or --forget, not both")
    if table_path is not None and (show or forget):
        raise TiledmmError("--table writes what this run times: it takes shapes, not --show or --forget")
    if (show or forget) and shapes:
        raise TiledmmError(f"{'--show' if show else '--forget'} takes no shapes")
    if show:
        return _show_store()
    if forget:
        return _forget_store()
    if not shapes:
        raise TiledmmError("give the shapes to tune (e.g. tiledmm tune 1024x1024x1024 4096x4096x4096), "
                           "or --show / --forget")
    dtypes = list(dict.fromkeys(dtype or ["float32"]))
    for d in dtypes:
        if d not in TUNE_DTYPES:
            raise TiledmmError(f"--dtype {d!r}: choose from {', '.join(TUNE_DTYPES)}")
    if layout not in LAYOUTS:
        raise TiledmmError(f"--layout {layout!r}: choose nn, nt, tn or tt (a's then b's storage: "
                           "n row-major, t transposed)")
    positive("--batch", batch)
    problems = []
    for s in shapes:
        dims = parse_shape(s)
        if len(dims) == 4:
            if batch not in (1, dims[0]):
                raise TiledmmError(f"shape {s!r} has batch {dims[0]} and --batch is {batch}: give one of them")
            problems.append(dims)
        else:
            problems.append((batch, *dims))
    problems = list(dict.fromkeys(problems))
    if precision is not None:
        if precision not in ("ieee", "tf32"):
            raise TiledmmError(f"--precision {precision!r}: choose ieee or tf32")
        other = [d for d in dtypes if d != "float32"]
        if other:
            raise TiledmmError(f"--precision {precision}: float32 only; {other[0]} takes none "
                               "(drop --precision, or tune that dtype separately)")
    specs = {}
    for d in dtypes:
        spec = registry.get(kernel or default_kernel(d))
        if d not in spec.dtypes:
            raise TiledmmError(f"kernel {spec.name!r} supports dtypes {list(spec.dtypes)}, not {d}")
        if precision is not None and "precision" not in spec.options:
            raise TiledmmError(f"--precision: kernel {spec.name!r} has no precision option")
        specs[d] = spec
    if _backend.emulating():
        raise TiledmmError("nothing to tune without a GPU: in emulation each kernel runs one fixed configuration "
                           "(tiledmm tune --show and --forget still work)")
    import torch
    free = torch.cuda.mem_get_info()[0]
    for b, m, k, n in problems:
        for d in dtypes:
            need = b * (m * k + k * n + 2 * m * n) * getattr(torch, d).itemsize
            if need > 0.9 * free:
                raise TiledmmError(f"shape {'x'.join(map(str, (b, m, k, n) if b > 1 else (m, k, n)))} {d}: operands, "
                                   f"result and a tuning scratch need {human_bytes(need)} of GPU memory, "
                                   f"{human_bytes(free)} is free; a smaller shape of the same class tunes the same key")
    if os.environ.get("TILEDMM_TUNE", "").lower() in ("0", "off", "false", "no"):
        console.print("TILEDMM_TUNE=off does not apply here: tune times the candidates")
    rows, seen = [], []
    prev_mode = tuning.mode()
    tuning.set_mode("on")
    try:
        with progress_bar() as progress:
            task = progress.add_task("tuning", total=len(problems) * len(dtypes))
            for b, m, k, n in problems:
                label = "x".join(map(str, (b, m, k, n) if b > 1 else (m, k, n)))
                for d in dtypes:
                    progress.update(task, description=f"tuning {label} {d}")
                    dt = getattr(torch, d)
                    a = _tune_operand(b, m, k, layout[0] == "t", dt)
                    bb = _tune_operand(b, k, n, layout[1] == "t", dt)
                    torch.cuda.synchronize()
                    with recording_choices([]) as record:
                        t0 = time.perf_counter()
                        matmul(a, bb, kernel=kernel, precision=precision)
                        torch.cuda.synchronize()
                        secs = time.perf_counter() - t0
                    del a, bb
                    spec = specs[d]
                    cls = (spec.name, d, precision, layout, b > 1, registry.shape_class(m, n, k))
                    if record:
                        key = "\n".join(r["key"] for r in record)
                        choice = "\n".join(r["choice"] for r in record)
                        how = "; ".join(dict.fromkeys(_how(r) for r in record))
                        seen.append((cls, key, choice, label))
                    else:
                        earlier = [s for s in seen if s[0] == cls]
                        if earlier:
                            _, key, choice, first = earlier[-1]
                            how = f"remembered (same class as {first})"
                        else:
                            key = choice = None
                            how = "chosen earlier in this process" if "config" in spec.options else \
                                f"no tuner: {spec.name} has one configuration"
                    dlabel = d + (f"/{precision}" if precision else "")
                    rows.append((label, dlabel, spec.name, key, choice, how, f"{secs:.3g}"))
                    progress.advance(task)
    finally:
        tuning.set_mode(prev_mode)
    table(f"tiledmm tune — {environment()['device']}, layout {layout}",
          ("shape", "dtype", "kernel", "tuning key", "choice", "how", "first call s"), rows,
          right=("first call s",), fold=("tuning key", "choice"), whole=("shape", "dtype", "kernel"),
          stack=((None, ("shape", "dtype", "kernel")),))
    console.print(escape(f"store: {tuning.store_path()}"), soft_wrap=True)
    if table_path is not None:
        _write_table(table_path)


def _write_table(path: str) -> None:
    """``--table``: the Triton choices timed in this run, merged into a shipped-table file."""
    from pathlib import Path
    import torch
    from .. import tuning
    from ..kernels.block import dispatch as BM, shipped
    entries = BM.table_entries()
    stored = sum(1 for ch in BM.choices().values() if ch["source"] in ("store", "timed") and not BM.timed_here(ch))
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    import triton
    about = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
             "store": str(tuning.store_path()), "target": shipped.target((p.major, p.minor))}
    n = shipped.write(Path(path), p.name, p.multi_processor_count, entries, about)
    console.print(escape(f"table {path}: {len(entries)} timed choice{'s' * (len(entries) != 1)} written "
                         f"({n} entries in all)"))
    if stored:
        console.print(escape(f"{stored} class{'es' * (stored != 1)} came from the tuning store, not timed now, "
                             "and are not written (tune with an empty TILEDMM_CACHE_DIR to time them)"))


