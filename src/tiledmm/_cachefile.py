"""Reading back the files tiledmm keeps, and writing them: a damaged file is a miss, never an error.

Every file tiledmm writes and reads back later -- the tuning store, the per-GPU tables, the kernel
index's entries and the kept self-test beside them -- is read through ``read_json`` or ``read_text``.
A cache is a convenience: whatever stops one file from being used (unreadable, not UTF-8 text, not
JSON, JSON of another shape or with values of other types, a format of another version, a folder
where the file should be, a file where its folder should be) makes the read a miss, as if the file
were not there, with one ``CacheWarning`` naming the file (at most one per file per process). The
caller's next write replaces the file (``write_atomic``: a temporary file renamed over it, so a
reader sees the old file or the new one, never half of one).

A caller says what its file must hold with a ``parse`` function: it gets the decoded JSON (or the
text) and returns the value to use, calling ``need`` (or raising ``Damaged``, ``TypeError``,
``KeyError``, ...) where the document is not of its form. Reads are meant to happen once per file and
process (callers keep what they read): nothing here is on the path of a steady-state call.

A folder that must be written for a call to work at all (Triton's cache: ``_adapter``) is looked at
once with ``usable_folder``: where it cannot be written, the process uses a private temporary folder
instead, with one warning naming the setting to change.
"""
from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any, Callable

__all__ = ["CacheWarning", "Damaged", "need", "load_json", "read_json", "read_text", "write_atomic",
           "warn_once", "warn_unwritable", "folder_fault", "usable_folder"]


class CacheWarning(RuntimeWarning):
    """A file tiledmm keeps could not be used (it is ignored) or written (its content stays in memory)."""


class Damaged(ValueError):
    """A document not of the form its reader expects (the message says how)."""


def need(condition: object, why: str) -> None:
    """Raise ``Damaged(why)`` unless ``condition`` holds (for ``parse`` functions)."""
    if not condition:
        raise Damaged(why)


_SHAPE_ERRORS = (Damaged, TypeError, KeyError, IndexError, AttributeError, ValueError)


def _blocker(path: Path) -> Path:
    """The file that stands where a folder above ``path`` should be (else ``path``)."""
    return next((p for p in path.parents if p.exists() and not p.is_dir()), path)


def _load(path, decode: Callable[[str], Any], parse: Callable[[Any], Any] | None) -> tuple[Any, str | None, bool, Path]:
    """(value, why not, whether the fault is the file's content -- which a write replaces -- and the file at
    fault: ``path``, or a file standing where a folder above it should be, warned about once for all the
    files below it)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, None, False, path
    except IsADirectoryError:
        return None, "a folder stands where the file should be", True, path
    except NotADirectoryError:
        blocker = _blocker(path)
        return None, f"a file stands where its folder {blocker} should be", False, blocker
    except OSError as e:
        return None, f"unreadable: {type(e).__name__}: {e.strerror or e}", False, path
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text (byte {e.start})", True, path
    if not text.strip():
        return None, "empty", True, path
    try:
        doc = decode(text)
    except (ValueError, RecursionError) as e:
        return None, f"not JSON ({str(e)[:80]})", True, path
    if parse is None:
        return doc, None, False, path
    try:
        return parse(doc), None, False, path
    except _SHAPE_ERRORS as e:
        detail = str(e) if isinstance(e, Damaged) else f"{type(e).__name__}: {str(e)[:80]}"
        return None, f"not of the expected form: {detail}", True, path


def load_json(path, parse: Callable[[Any], Any] | None = None) -> tuple[Any, str | None]:
    """(value, None) where ``path`` holds a usable document (``parse(doc)``, or the JSON itself);
    (None, None) where there is no file; (None, why) where there is one that cannot be used. Never raises
    (for readers that report the reason themselves: the CLI)."""
    return _load(path, json.loads, parse)[:2]


def _report(path, what: str, loaded: tuple, then: str, rewritten: bool) -> Any:
    value, why, content, at_fault = loaded
    if why:
        tail = "; the next write replaces it" if rewritten and content else ""
        warn_once(at_fault, f"tiledmm: {what} {path} cannot be used ({why}); {then}{tail}", stacklevel=4)
    return value


def read_json(path, what: str, parse: Callable[[Any], Any] | None = None, *, then: str = "ignored",
              rewritten: bool = True) -> Any:
    """The usable document at ``path`` (``parse(doc)`` where ``parse`` is given), else None: no file, or
    one that cannot be used, which is warned about once (``what`` names the kind of file, ``then`` what
    happens instead; ``rewritten``: the caller writes the file again, replacing damaged content).
    Never raises."""
    return _report(path, what, _load(path, json.loads, parse), then, rewritten)


def read_text(path, what: str, parse: Callable[[str], Any] | None = None, *, then: str = "ignored",
              rewritten: bool = True) -> Any:
    """``read_json`` for a plain text file: ``parse(text)`` (or the text), else None."""
    return _report(path, what, _load(path, lambda text: text, parse), then, rewritten)


_warned: set[str] = set()
_warn_lock = threading.Lock()


def warn_once(path, message: str, stacklevel: int = 3) -> bool:
    """Warn ``message`` (a ``CacheWarning``) unless this process has warned about ``path`` already;
    True where it warned. (``stacklevel`` 3: the line that called the caller.)"""
    key = os.path.abspath(str(path))
    with _warn_lock:
        if key in _warned:
            return False
        _warned.add(key)
    warnings.warn(message, CacheWarning, stacklevel=stacklevel)
    return True


def warn_unwritable(path, what: str, e: OSError, then: str) -> bool:
    """Warn once that ``what`` at ``path`` could not be written (``e``, from ``write_atomic``), and
    ``then`` what happens instead; a file standing where its folder should be is warned about once
    for every file below it, and only where reading them has not warned about it already."""
    path = Path(path)
    at_fault = _blocker(path) if isinstance(e, (NotADirectoryError, FileExistsError)) else path
    return warn_once(at_fault, f"tiledmm: {what} {path} cannot be written ({type(e).__name__}: {e.strerror or e}); "
                               f"{then}", stacklevel=4)


def write_atomic(path, text: str, *, own_folder: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary file of this process and thread in
    the same folder, renamed over ``path``. An empty folder standing at ``path`` is removed first (a
    damaged entry); with ``own_folder`` (the folder's name is tiledmm's: nothing else belongs there) so
    is a file standing where the folder should be. Raises OSError (a read-only or full disk)."""
    path = Path(path)
    folder = path.parent
    if own_folder and (folder.is_file() or folder.is_symlink() and not folder.exists()):
        folder.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        path.rmdir()                # only where empty; else OSError: the caller keeps its value in memory
    tmp = folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


PROBE_BYTES = 1 << 16       # what a writable cache folder must take: a full disk refuses it
MIN_FREE_BYTES = 1 << 20    # less free space than this (where the file system reports its size) is full


def folder_fault(folder) -> str | None:
    """Why files cannot be kept in ``folder`` (made where missing): a file stands in its way, it is
    read-only or full -- found by writing and removing a small file --, or None where it is usable."""
    import tempfile
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tiledmm-probe-", dir=folder)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
        finally:
            try:
                os.close(fd)        # (a network file system reports a full disk here)
            finally:
                os.unlink(probe)
        st = os.statvfs(folder)
        if st.f_blocks and st.f_bavail * st.f_frsize < MIN_FREE_BYTES:
            return f"its disk is full ({st.f_bavail * st.f_frsize} bytes free)"
    except FileExistsError:
        return "a file stands where the folder should be"
    except NotADirectoryError:
        return "a file stands where the folder or one above it should be"
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    return None


def usable_folder(folder, what: str, setting: str, cost: str) -> str:
    """``folder`` where files can be kept in it (``folder_fault``), else a private temporary folder for this
    process, removed at exit, with one warning naming ``setting`` (the variable that names ``what``) and
    ``cost`` (what the process loses). Raises TiledmmError where not even that can be written."""
    import atexit
    import shutil
    import tempfile
    why = folder_fault(folder) if folder else "no folder is set"
    if why is None:
        return str(folder)
    try:
        private = tempfile.mkdtemp(prefix="tiledmm-private-cache-")
        fault = folder_fault(private)
    except OSError as e:
        private, fault = None, f"{type(e).__name__}: {e.strerror or e}"
    if fault is not None:
        from ._errors import TiledmmError
        raise TiledmmError(f"{what} {folder} cannot be written ({why}) and neither can a temporary folder "
                           f"({fault}); set {setting} to a writable folder")
    atexit.register(shutil.rmtree, private, ignore_errors=True)
    warnings.warn(f"tiledmm: {what} {folder} cannot be written ({why}); this process uses a temporary folder "
                  f"instead ({private}, removed at exit), so {cost} until {setting} names a writable folder",
                  CacheWarning, stacklevel=4)
    return private
