"""The ``tiledmm`` command line: the app, the error wrapper every command goes through, and the
helpers the command modules share (tables, shapes, byte counts, the environment record).

Every command checks its inputs before it does any work and reports a bad input as one
line (``error: ...``) on stderr with exit code 2; nothing a user types ends in a traceback
(``TILEDMM_DEBUG=1`` shows one for an unexpected failure). Tables go through ``table``.
"""
from __future__ import annotations

import datetime
import functools
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import __version__
from .._arrays import TiledmmError

# what `tiledmm --help` says of each command, in the order it lists them: the main job first, then as a
# course meets them (one line at 80 columns: click would cut a docstring's first sentence mid-way)
SUMMARY = {
    "run": "Multiply random matrices with the kernels; check and time them.",
    "bench": "Sweep kernels, shapes and precisions against cuBLAS; CSV, plots.",
    "kernels": "List the registered kernels.",
    "device": "The GPU's properties the lectures query, with derived peaks.",
    "occupancy": "Blocks per SM and what limits them, by the CUDA rules.",
    "model": "Traffic model: bytes per FLOP and which bound binds.",
    "burst": "The useful fraction of each DRAM burst for an access pattern.",
    "trace": "Record a SIMT kernel's memory accesses: reuse, coalescing, banks.",
    "explain": "Draw the slides' tiled example, block by block, phase by phase.",
    "roofline": "Roofline chart of the SIMT kernels (--bench: measured rates).",
    "claims": "Every number in the lectures, recomputed.",
    "tune": "Tune shape classes ahead of time; --show / --forget the store.",
    "outofcore": "Multiply host matrices bigger than the GPU, streamed in blocks.",
    "dist": "Distributed GEMM on N local ranks, checked and timed.",
}
_ORDER = tuple(SUMMARY)

# -- usage errors ------------------------------------------------------------------------------------
# what one command calls an option another names differently (run's --dtype is bench's --precision)
_SAME_JOB = {"--precision": ("--dtype",), "--dtype": ("--precision",), "--kernel": ("--gemm",), "--gemm": ("--kernel",)}


def _click_base(name: str) -> type:
    """A class of the click that typer runs on (its own copy or click itself), found through typer's public
    ``BadParameter``: ``ClickException`` (every usage error) or ``UsageError``."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


def _option_names(command) -> dict:
    """{every spelling: (the long spelling, metavar)} of a click command's options."""
    names = {}
    for p in getattr(command, "params", ()):
        spellings = [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]
        long = next((o for o in spellings if o.startswith("--")), spellings[0] if spellings else None)
        for o in spellings:
            names[o] = (long, getattr(p, "metavar", None))
    return names


def _suggest_option(group, command, typed: str) -> str:
    """' (did you mean --dtype float32|float64?)' for an option ``command`` does not have, or ''."""
    import difflib
    mine = _option_names(command)
    longs = {long for long, _ in mine.values() if long}
    wanted = []
    # the same spelling in another command, or an option of the same job under another name
    for other in getattr(group, "commands", {}).values():
        long = _option_names(other).get(typed, (None,))[0]
        if long:
            wanted += [long, *_SAME_JOB.get(long, ())]
    wanted += list(_SAME_JOB.get(typed, ()))
    wanted += difflib.get_close_matches(typed, sorted(longs), n=1, cutoff=0.6)
    hit = next((w for w in wanted if w in longs), None)
    if hit is None:
        return ""
    metavar = mine[hit][1]
    return f" (did you mean {hit}{f' {metavar}' if metavar else ''}?)"


def _usage_line(group, e, argv: list) -> str:
    """A click usage error as one line: what was wrong, the option or command meant, where help is."""
    import difflib
    ctx = getattr(e, "ctx", None)
    command = getattr(ctx, "command", None)
    path = getattr(ctx, "command_path", None) or "tiledmm"
    typed = getattr(e, "option_name", None)
    if typed and type(e).__name__ == "NoSuchOption":
        return f"{path} has no option {typed}{_suggest_option(group, command, typed)}; `{path} -h` lists its options"
    names = list(getattr(group, "commands", {}))
    typed = next((a for a in argv if not a.startswith("-")), None)       # the group's options take no values
    if command is group and typed is not None and typed not in names:   # no such command
        near = difflib.get_close_matches(typed, names, n=1, cutoff=0.5)
        return (f"no command {typed!r}" + (f"; did you mean {near[0]!r}?" if near else
                                             f"; the commands are {', '.join(_ORDER)}")
                + f" (`{path} -h` says what each does)")
    message = e.format_message().rstrip(".")
    return f"{path}: {message[:1].lower()}{message[1:]}; `{path} -h` lists its options"


def _run_group(group, args, prog_name, complete_var, extra) -> int:
    """Run the command line; the exit status. A usage error (an unknown option or command, a missing or
    malformed value) is one ``error: ...`` line and status 2, as every other bad input is."""
    try:
        rv = TyperGroup.main(group, args, "tiledmm", complete_var, False, **extra)   # (python -m tiledmm too)
    except typer.Abort:
        err_console.print(Text("error: ", style="red") + Text("aborted"))
        return 1
    except _click_base("ClickException") as e:
        if type(e).__name__ == "NoArgsIsHelpError":     # `tiledmm` alone: the help, as --help prints it
            print(e.format_message())
            return 0
        argv = sys.argv[1:] if args is None else list(args)
        line = _usage_line(group, e, argv) if isinstance(e, _click_base("UsageError")) else e.format_message()
        err_console.print(Text("error: ", style="red") + Text(line), soft_wrap=True)
        return e.exit_code
    return rv if isinstance(rv, int) else 0


class _Group(TyperGroup):
    """The ``tiledmm`` group: commands listed in teaching order, usage errors in one line."""

    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        sys.exit(_run_group(self, args, prog_name, complete_var, extra))


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Tiled matrix multiplication on NVIDIA GPUs: run, check, time and explain the kernels.")


def _width(stream) -> int | None:
    """The terminal's width (rich reads it, and COLUMNS when set); 132 for a pipe or file without COLUMNS."""
    return None if stream.isatty() or os.environ.get("COLUMNS", "").isdigit() else 132


console = Console(width=_width(sys.stdout))
err_console = Console(stderr=True, width=_width(sys.stderr))

# commands that never run a kernel: no emulation banner for them
NO_KERNEL = {"kernels", "device", "occupancy", "model", "burst", "roofline", "tune"}
PROFILE_HELP = "a built-in profile (g80, lecture1536, example150, ampere, h100); default: the GPU in use"


def fail(message: str, code: int = 2):
    """One line on stderr and a non-zero exit."""
    err_console.print(Text("error: ", style="red") + Text(message), soft_wrap=True)
    raise typer.Exit(code)


def command(name: str | None = None):
    """``app.command`` that turns every error into a one-line message and a non-zero exit."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (typer.Exit, typer.Abort, typer.BadParameter):
                raise
            except KeyboardInterrupt:
                fail("interrupted", 130)
            except (TiledmmError, ValueError, OSError) as e:
                fail(str(e) or type(e).__name__)
            except Exception as e:  # noqa: BLE001 -- a bug in tiledmm: still a message, not a traceback
                if os.environ.get("TILEDMM_DEBUG"):
                    raise
                fail(f"unexpected {type(e).__name__}: {e} (TILEDMM_DEBUG=1 shows the traceback)", 1)
        return app.command(name, short_help=SUMMARY.get(name or fn.__name__))(wrapper)
    return deco


def _version(value: bool):
    if value:
        print(f"tiledmm {__version__}")
        raise typer.Exit()


@app.callback()
def _main(ctx: typer.Context,
          emulate: bool = typer.Option(False, "--emulate", metavar="",
                                       help="Run kernels in emulation even on a GPU machine."),
          version: bool = typer.Option(False, "--version", metavar="", callback=_version, is_eager=True,
                                       help="Print tiledmm's version and exit.")):
    if ctx.invoked_subcommand in NO_KERNEL:
        os.environ["TILEDMM_QUIET"] = "1"
    if emulate:
        os.environ["TILEDMM_EMULATE"] = "1"
        rerun_in_emulation()


def rerun_in_emulation(quiet: bool = False) -> None:
    """``import tiledmm`` fixed GPU or emulation for this process: on a GPU, run this command again in
    a fresh process in emulation and exit with its status (in emulation already: return)."""
    from .. import _backend
    if _backend.decide() == "emulation":
        return
    import subprocess
    env = dict(os.environ, TILEDMM_EMULATE="1", **({"TILEDMM_QUIET": "1"} if quiet else {}))
    args = [a for a in sys.argv[1:] if a != "--emulate"]
    raise typer.Exit(subprocess.call([sys.executable, "-m", "tiledmm", *args], env=env))


# -- output --------------------------------------------------------------------------------------
def cell(v) -> Text:
    """A table cell: None -> '–', numbers with separators, lists joined; text is never read as markup."""
    if isinstance(v, Text):
        return v
    if v is None:
        return Text("–")
    if isinstance(v, bool):
        return Text("yes" if v else "no")
    if isinstance(v, float):
        return Text(f"{v:,.4g}")
    if isinstance(v, int):
        return Text(f"{v:,}")
    if isinstance(v, (list, tuple)):
        return Text(", ".join(map(str, v)) or "–")
    return Text(str(v))


def num(x, digits: int = 3) -> str | None:
    """``x`` to ``digits`` significant digits (3.69, 303, 1,212, 0.0123, 5.90e-08; more where a whole
    number has more); None stays None (a '–' cell)."""
    if x is None:
        return None
    if x == 0:
        return "0"
    if not 1e-4 <= abs(x) < 1e7:
        return f"{x:.{digits - 1}e}"
    import math
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


_FOLD_MIN = 12       # a 'fold' column (long keys without spaces) may break its words down to this width
_CHEAP = 12          # a column this many cells short of its whole width is given them before the rest
_COMFORT = 16        # a text column gets at least this many cells (or its whole width, if less)


def _lines(t: Text) -> list[str]:
    return t.plain.split("\n")


def _min_width(t: Text, whole: bool, fold: bool) -> int:
    """The narrowest a cell can be without cutting a number or a word."""
    from rich.cells import cell_len
    if whole:
        return max(map(cell_len, _lines(t)))
    longest = max((cell_len(w) for w in t.plain.split()), default=1)
    return min(longest, _FOLD_MIN) if fold else longest


def _widths(columns, cells, header: bool, right, fold, width: int) -> list[int] | None:
    """Each column's content width for a boxed table ``width`` cells wide: every number and word whole
    (``right`` columns never wrap), the room left given to the columns that want it most; None when
    even the narrowest layout does not fit."""
    from rich.cells import cell_len
    n = len(columns)
    lo, hi = [], []
    for i, c in enumerate(columns):
        col = [r[i] for r in cells] + ([Text(c)] if header else [])
        head = _min_width(Text(c), False, False) if header else 1
        lo.append(max([head] + [_min_width(t, c in right, c in fold) for t in col[:len(cells)]]))
        hi.append(max(lo[-1], max(cell_len(line) for t in col for line in _lines(t))))
        if c not in right:      # text: a column narrower than this wraps a cell over many lines (stack instead)
            lo[-1] = max(lo[-1], min(hi[-1], _COMFORT))
    room = width - (3 * n + 1)          # a border and a space each side of every column
    if sum(lo) > room:
        return None
    w = lo[:]
    spare = room - sum(w)
    # columns a few cells short of their whole width get it first (no '2, 4,' over four lines), the
    # smallest need first; the rest goes a cell at a time to the column that wants the most
    for i in sorted(range(n), key=lambda j: hi[j] - lo[j]):
        if 0 < hi[i] - w[i] <= min(spare, _CHEAP):
            spare -= hi[i] - w[i]
            w[i] = hi[i]
    while spare > 0:
        wants = [i for i in range(n) if w[i] < hi[i]]
        if not wants:
            break
        i = max(wants, key=lambda j: hi[j] - w[j])
        w[i] += 1
        spare -= 1
    return w


def _boxed(title: str, columns, cells, widths, *, header: bool, right) -> Table:
    from rich.cells import cell_len
    # (no narrower than its title, up to the terminal's width: the title then stays on one line)
    t = Table(title=Text(title) if title else None, show_header=header,
              min_width=min(cell_len(title) + 4, console.width) if title else None)
    for c, w in zip(columns, widths):
        # (a number's column is as wide as its widest number: it never wraps; its name may)
        t.add_column(Text(c), justify="right" if c in right else "left", width=w, overflow="fold")
    for r in cells:
        t.add_row(*r)
    return t


def _stacked(columns, cells, stack, right, whole):
    """Columns merged into one, a row's cells stacked: cells that never wrap (``right`` and ``whole``
    columns) one under another under their names stacked the same way; text as 'name: value' lines (a
    '–' left out)."""
    merged = {c: g for g in stack for c in g[1]}
    out_cols, out_rows, out_right, out_whole = [], [[] for _ in cells], set(), set()
    for i, c in enumerate(columns):
        group = merged.get(c)
        if group is None:
            out_cols.append(c)
            if c in right:
                out_right.add(c)
            if c in whole:
                out_whole.add(c)
            for row, r in zip(out_rows, cells):
                row.append(r[i])
            continue
        name, members = group
        if c != members[0]:
            continue
        idx = [columns.index(m) for m in members if m in columns]
        numeric = all(columns[j] in right or columns[j] in whole for j in idx)
        label = name or ("\n".join(columns[j] for j in idx) if numeric else " · ".join(columns[j] for j in idx))
        out_cols.append(label)
        if all(columns[j] in right for j in idx):
            out_right.add(label)
        elif numeric:
            out_whole.add(label)
        for row, r in zip(out_rows, cells):
            if numeric:
                row.append(Text("\n").join(r[j] for j in idx))
            else:
                parts = [Text(f"{columns[j]}: ") + r[j] for j in idx if r[j].plain != "–"]
                row.append(Text("\n").join(parts) if parts else Text("–"))
    return out_cols, out_rows, out_right, out_whole


def _transposed(title: str, columns, cells, width: int) -> None:
    """The last resort for a table too wide even stacked: turned, the column names down the left and
    one column a row, as many rows side by side as fit (tables one under another)."""
    def turned(rows):
        return [[Text(c)] + [r[i] for r in rows] for i, c in enumerate(columns)]

    def names(rows):
        return [""] + [f"#{k}" for k in range(len(rows))]
    groups: list = []
    for r in cells:
        if groups and _widths(names(groups[-1] + [r]), turned(groups[-1] + [r]), False, (), (), width):
            groups[-1].append(r)
        else:
            groups.append([r])
    for k, rows in enumerate(groups):
        cols = names(rows)
        w = _widths(cols, turned(rows), False, (), cols, width) or \
            [max(1, (width - 3 * len(cols) - 1) // len(cols))] * len(cols)    # (a row wider than the screen)
        console.print(_boxed(title if k == 0 else "", cols, turned(rows), w, header=False, right=()))


def table(title: str, columns, rows, *, header: bool = True, right=(), fold=(), stack=(), whole=()) -> None:
    """The one table helper: columns named, rows of cells (see ``cell``), fitted to the terminal's width
    with every number and word whole: ``right`` columns (numbers, right-aligned) and ``whole`` ones never
    wrap, text wraps between words, ``fold`` columns (long keys without spaces) may break anywhere. Where
    that does not fit, the ``stack`` groups ((name or None, (column, ...)), ...), in order, as few as fit,
    are merged into one column each, their values one under another; where that does not fit either, the
    table is printed turned, a column per row."""
    columns = list(columns)
    cells = [[cell(v) for v in r] for r in rows]
    width = console.width
    w = _widths(columns, cells, header, {*right, *whole}, fold, width)
    for k in range(1, len(stack) + 1):      # the stack groups in order, as few as make it fit
        if w is not None:
            break
        scols, scells, sright, swhole = _stacked(columns, cells, stack[:k], set(right), set(whole))
        w = _widths(scols, scells, header, sright | swhole, fold, width)
        if w is not None:
            columns, cells, right = scols, scells, sright
    if w is None:
        _transposed(title, columns, cells, width)
        return
    console.print(_boxed(title, columns, cells, w, header=header, right=right))


def kv(title: str, d: dict) -> None:
    table(title, ("what", "value"), d.items(), header=False)


def fmt(x, spec: str):
    return None if x is None else format(x, spec)


def ok_cell(ok: bool) -> Text:
    return Text("ok") if ok else Text("FAIL", style="bold red")


class _NoProgress:
    """``progress_bar``'s stand-in where stderr is not a terminal: the same calls, nothing printed (a
    transient bar leaves a blank line in a file or pipe for each time it stops)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *a, **k) -> int:
        return 0

    def update(self, *a, **k) -> None:
        pass

    advance = remove_task = update


def progress_bar():
    """A progress bar on stderr, gone when done; nothing where stderr is not a terminal."""
    if not err_console.is_terminal:
        return _NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=True)


# -- input ---------------------------------------------------------------------------------------
def parse_shape(text: str, *, batch: bool = True) -> tuple:
    """'3000x2000x4000' -> (3000, 2000, 4000): P (JxL) = M (JxK) @ N (KxL); a leading 4th number is a batch."""
    try:
        dims = tuple(int(x) for x in text.lower().replace("*", "x").split("x"))
    except ValueError:
        dims = ()
    if len(dims) not in ((3, 4) if batch else (3,)) or min(dims) < 1:
        if len(dims) == 4 and min(dims) >= 1:
            raise TiledmmError(f"shape {text!r}: this command takes one JxKxL product, not a batch; "
                               f"drop the leading batch size (e.g. {'x'.join(map(str, dims[1:]))})")
        raise TiledmmError(f"shape {text!r}: write JxKxL{' (or BxJxKxL)' if batch else ''} with positive "
                           "integers, e.g. 3000x2000x4000")
    return dims


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}


def parse_bytes(name: str, text: str) -> int:
    """'123', '512MiB', '16GiB', '1.5GB' -> bytes (binary KiB..TiB, decimal kB..TB); refused otherwise."""
    import re
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text or "")
    unit = m and m.group(2).lower()
    if not m or unit not in _UNITS:
        raise TiledmmError(f"{name} {text!r}: write a byte count as 123, 512MiB or 16GiB "
                           "(units B, KiB, MiB, GiB, TiB or kB, MB, GB, TB)")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n < 1:
        raise TiledmmError(f"{name} {text!r}: must be at least 1 byte")
    return n


def human_bytes(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def mem_available() -> Optional[int]:
    """Host memory available for new allocations (MemAvailable in /proc/meminfo), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def writable(path: str, suffixes=None) -> Path:
    """Check before any work that ``path`` can be written (and has a known suffix)."""
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise TiledmmError(f"{path}: the file name must end in {' or '.join(suffixes)}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise TiledmmError(f"{path}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise TiledmmError(f"{path}: not writable")
    return p


def positive(name: str, v, allow_zero: bool = False):
    if v is not None and (v < 0 or (v == 0 and not allow_zero)):
        raise TiledmmError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {v}")


def environment() -> dict:
    """Device and versions, for the record."""
    from importlib import metadata

    from .. import _backend
    env = {"date": datetime.date.today().isoformat(), "mode": _backend.mode()}
    for pkg in ("tiledmm", "torch", "triton", "numba", "numba-cuda", "numpy"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env[pkg] = None
    if not _backend.emulating():
        import torch
        p = torch.cuda.get_device_properties(0)
        env["device"] = f"{p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs)"
        env["cuda"] = torch.version.cuda
    else:
        env["device"] = "CPU emulation"
    return env



def main() -> None:
    """The console script's entry point (``tiledmm``, ``python -m tiledmm``)."""
    app()
