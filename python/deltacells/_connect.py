"""Opening a deltacells dataset: a sqlite3 connection with the extension loaded.

The extension (``deltacells.so``) is looked for, in order:

1. the environment variable ``DELTACELLS_EXTENSION`` (a path to the library);
2. a copy installed inside this package (``deltacells/_lib/deltacells.so``,
   placed there by ``pip install ./python`` when the library was built first);
3. ``build/deltacells.so`` of the source tree this package lives in
   (``PYTHONPATH=python`` after ``make``).

It is loaded with ``SELECT load_extension(path, 'sqlite3_deltacells_init')``, so
the library's file name does not matter.  Extension loading is switched off
again right after, so SQL run on the connection cannot load other libraries.
"""
import os
import sqlite3
from pathlib import Path

ENTRY_POINT = "sqlite3_deltacells_init"
# dataset format versions this package reads (ext/dc_format.h keeps the same numbers)
FORMAT_MIN, FORMAT_VERSION = 1, 3
_PKG_DIR = Path(__file__).resolve().parent

NO_LOADING_MESSAGE = (
    "this Python's sqlite3 module cannot load SQLite extensions "
    "(sqlite3.Connection.enable_load_extension is missing: the interpreter was built "
    "without --enable-loadable-sqlite-extensions). deltacells needs it. Use the system "
    "Python (/usr/bin/python3 on Debian/Ubuntu), or rebuild your Python with "
    "PYTHON_CONFIGURE_OPTS=--enable-loadable-sqlite-extensions (pyenv) / "
    "./configure --enable-loadable-sqlite-extensions."
)


class ExtensionNotFoundError(FileNotFoundError):
    """The deltacells SQLite extension library was not found."""


def _candidates():
    env = os.environ.get("DELTACELLS_EXTENSION")
    if env:
        return [Path(env)], True
    return [_PKG_DIR / "_lib" / "deltacells.so",
            _PKG_DIR.parent.parent / "build" / "deltacells.so"], False


def find_extension():
    """Return the path of the deltacells extension library, or raise ExtensionNotFoundError."""
    cands, from_env = _candidates()
    for c in cands:
        if c.is_file():
            return str(c)
    if from_env:
        raise ExtensionNotFoundError(
            f"DELTACELLS_EXTENSION={cands[0]} does not name a file")
    raise ExtensionNotFoundError(
        "the deltacells SQLite extension was not found; looked at "
        + ", ".join(str(c) for c in cands)
        + ". Run `make` in the deltacells source tree (it builds build/deltacells.so), "
        "or set DELTACELLS_EXTENSION to the library's path.")


def load_extension(con, path=None):
    """Load the deltacells extension into an open sqlite3 connection."""
    if not hasattr(con, "enable_load_extension"):
        raise RuntimeError(NO_LOADING_MESSAGE)
    path = path or find_extension()
    con.enable_load_extension(True)
    try:
        con.execute("SELECT load_extension(?, ?)", (path, ENTRY_POINT)).fetchall()
    except sqlite3.Error as e:
        raise RuntimeError(f"could not load the deltacells extension {path}: {e}") from None
    finally:
        con.enable_load_extension(False)
    return con


def _roll_back_journal(p, timeout):
    """A `deltacells append` killed mid-transaction leaves a hot journal, which only a read-write
    open rolls back (a read-only one fails with 'attempt to write a readonly database'): open it
    read-write once, read the schema (SQLite restores the old dataset), close."""
    uri = "file:" + _uri_quote(str(p.resolve())) + "?mode=rw"
    try:
        c = sqlite3.connect(uri, uri=True, timeout=timeout)
        try:
            c.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            c.close()
    except sqlite3.Error:
        pass   # the read-only open below reports what is wrong


def connect(path, *, readonly=True, check_same_thread=True, extension=None, timeout=30.0):
    """Open a deltacells dataset (a ``.dcdb`` file) and return a ``sqlite3.Connection``
    with the extension loaded, so ``cells``, ``genes``, ``tiles`` and ``dc_batch`` work.

    readonly: open with ``mode=ro`` (default); the dataset file must exist.
    extension: the library's path (default: see the module docstring).
    """
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        raise RuntimeError(NO_LOADING_MESSAGE)
    ext = extension or find_extension()
    p = Path(os.fspath(path))
    if readonly or not p.exists():
        if not p.is_file():
            raise FileNotFoundError(f"deltacells dataset {str(p)!r} does not exist")
    mode = "ro" if readonly else "rw"
    if readonly and os.path.exists(str(p) + "-journal") and os.access(str(p), os.W_OK):
        _roll_back_journal(p, timeout)
    uri = "file:" + _uri_quote(str(p.resolve())) + f"?mode={mode}"
    con = sqlite3.connect(uri, uri=True, check_same_thread=check_same_thread, timeout=timeout)
    try:
        load_extension(con, ext)
        _check_dataset(con, p)
    except BaseException:
        con.close()
        raise
    return con


def _uri_quote(s):
    from urllib.parse import quote
    return quote(s, safe="/")


def _check_dataset(con, p):
    try:
        rows = dict(con.execute("SELECT key, value FROM dc_meta").fetchall())
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{str(p)!r} is not a deltacells dataset ({e})") from None
    v = rows.get("format_version")
    if v is None:
        raise ValueError(f"{str(p)!r} is not a deltacells dataset (dc_meta has no format_version)")
    try:
        v = int(v)
    except (TypeError, ValueError):
        raise ValueError(f"{str(p)!r} is not a deltacells dataset (format_version {v!r})") from None
    if not FORMAT_MIN <= v <= FORMAT_VERSION:
        newer = " (a newer deltacells wrote it: upgrade deltacells)" if v > FORMAT_VERSION else ""
        raise ValueError(f"{str(p)!r} has format_version {v}; this deltacells reads versions "
                         f"{FORMAT_MIN}..{FORMAT_VERSION}{newer}")
