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

Remote datasets: ``connect("https://host/atlas.dcdb")`` (also ``http://`` and
``s3://bucket/key``) opens the file through the extension's read-only ``dchttp``
VFS (HTTP range reads, see docs/guide.md "Remote datasets");
``remote={"cache_dir": ..., "latency_ms": 50, "mbps": 150, ...}`` passes its URI
parameters, and with a local path it opens the file through the same VFS (a
throttled local file, to emulate an object store).
"""
import os
import sqlite3
from pathlib import Path

ENTRY_POINT = "sqlite3_deltacells_init"
# dataset format versions this package reads (ext/dc_format.h keeps the same numbers)
FORMAT_MIN, FORMAT_VERSION = 1, 3
# PRAGMA mmap_size of a connection opened with mmap=True: the whole file.  SQLite caps it at its
# build's SQLITE_MAX_MMAP_SIZE (2 GiB in Debian's and python.org's builds); past that, pages are
# read as without it.
MMAP_BYTES = 1 << 40
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


REMOTE_SCHEMES = ("http://", "https://", "s3://")
VFS_PARAMS = ("block_kb", "readahead_kb", "mem_blocks", "shared", "cache_dir", "cache_mb", "retries", "timeout_ms",
              "latency_ms", "mbps", "max_inflight", "revalidate_s")


def is_remote(path):
    """True for an http://, https:// or s3:// name."""
    return isinstance(path, str) and path[:8].lower().startswith(REMOTE_SCHEMES)


def _ensure_vfs(ext):
    """Register the dchttp VFS (once per process: it stays registered, and the library
    stays loaded, after this connection closes)."""
    if "dchttp" in _registered:
        return
    con = sqlite3.connect(":memory:")
    try:
        load_extension(con, ext)
    finally:
        con.close()
    _registered.add("dchttp")


_registered = set()


def vfs_error(ext=None):
    """The dchttp VFS's last reason for a failed remote open or read on this thread ("" if none)."""
    con = sqlite3.connect(":memory:")
    try:
        load_extension(con, ext)
        return con.execute("SELECT dc_vfs_error()").fetchone()[0] or ""
    finally:
        con.close()


def vfs_stats(con):
    """The dchttp VFS's process-wide counters (requests, bytes, cache hits, ...) as a dict."""
    import json
    return json.loads(con.execute("SELECT dc_vfs_stats()").fetchone()[0])


def _with_vfs_detail(e, ext):
    msg = str(e)
    if "disk I/O error" in msg or "unable to open" in msg:
        d = vfs_error(ext)
        if d and d not in msg:
            return type(e)(f"{msg}: {d}")
    return None


class _RemoteCursor(sqlite3.Cursor):
    """A cursor that adds the dchttp VFS's reason (URL, HTTP status, ...) to I/O errors."""

    def _wrap(self, fn, *a):
        try:
            return fn(*a)
        except sqlite3.DatabaseError as e:
            better = _with_vfs_detail(e, getattr(self.connection, "_dc_ext", None))
            if better is None:
                raise
            raise better from None

    def execute(self, *a):
        return self._wrap(super().execute, *a)

    def executemany(self, *a):
        return self._wrap(super().executemany, *a)

    def fetchone(self):
        return self._wrap(super().fetchone)

    def fetchmany(self, *a):
        return self._wrap(super().fetchmany, *a)

    def fetchall(self):
        return self._wrap(super().fetchall)

    def __next__(self):
        return self._wrap(super().__next__)


class RemoteConnection(sqlite3.Connection):
    """The connection connect() returns for a dataset opened through dchttp: I/O errors
    name the URL and the reason."""

    def cursor(self, factory=_RemoteCursor):
        return super().cursor(factory)

    def execute(self, *a):
        return self.cursor().execute(*a)

    def executemany(self, *a):
        return self.cursor().executemany(*a)


def remote_uri(path, remote=None):
    """The SQLite URI that opens path (a URL, or a local file with remote= params) through dchttp."""
    from urllib.parse import quote, urlencode
    params = dict(remote or {})
    bad = sorted(set(params) - set(VFS_PARAMS))
    if bad:
        raise ValueError(f"unknown remote parameter(s) {bad}; known: {list(VFS_PARAMS)}")
    name = path if is_remote(path) else str(Path(os.fspath(path)).resolve())
    q = {"vfs": "dchttp", "mode": "ro", "immutable": "1"}
    q.update({k: str(v) for k, v in params.items()})
    return "file:" + quote(name, safe="/:") + "?" + urlencode(q)


def _connect_vfs(path, remote, check_same_thread, ext, timeout):
    _ensure_vfs(ext)
    if not is_remote(path) and not Path(os.fspath(path)).is_file():
        raise FileNotFoundError(f"deltacells dataset {str(path)!r} does not exist")
    try:
        con = sqlite3.connect(remote_uri(path, remote), uri=True, check_same_thread=check_same_thread,
                              timeout=timeout, factory=RemoteConnection)
    except sqlite3.Error as e:
        d = vfs_error(ext)
        raise type(e)(d if d and str(path) in d else f"cannot open {path}: {d or e}") from None
    con._dc_ext = ext
    try:
        load_extension(con, ext)
        _fetch_catalogue(con, _check_dataset(con, path))
    except BaseException:
        con.close()
        raise
    return con


CATALOGUE_MAX_BYTES = 64 << 20
CATALOGUE_MAX_RUNS = 32     # what the writers write at most (converter/pagemap.c DC_CATALOGUE_RUNS)


def _fetch_catalogue(con, meta):
    """A remote dataset's catalogue (the pages a reader reads when it opens the dataset: the
    genes, the obs columns' b-trees, the tile index and page map; dc_meta catalogue_pages, written
    by convert, append, merge and annotate) requested at once: one round trip where reading them
    as SQLite meets them took one per b-tree level (2 of the 3 of an open at 50 ms per request).
    A hint: skipped where absent, where the schema changed since it was written (a VACUUM), or over
    CATALOGUE_MAX_BYTES; a store that fails reports it here as any read would."""
    import json
    try:
        hint = json.loads(meta.get("catalogue_pages") or "null")
        runs = hint["runs"] if isinstance(hint, dict) else None
        version = hint.get("schema_version") if isinstance(hint, dict) else None
    except (ValueError, TypeError, KeyError):
        return
    if not runs or not isinstance(version, int):
        return
    if con.execute("PRAGMA schema_version").fetchone()[0] != version:
        return
    ps = con.execute("PRAGMA page_size").fetchone()[0]
    spans = []
    for r in runs[:CATALOGUE_MAX_RUNS]:
        if not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r) and 1 <= r[0] <= r[1]):
            return
        # (the VFS asks for runs less than one of its blocks apart as one request)
        spans.append([(r[0] - 1) * ps, r[1] * ps])
    if sum(hi - lo for lo, hi in spans) > CATALOGUE_MAX_BYTES:
        return
    args = [x for lo, hi in spans for x in (lo, hi - lo)]
    con.execute("SELECT dc_vfs_fetch('main'" + ", ?" * len(args) + ")", args).fetchone()


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


def connect(path, *, readonly=True, check_same_thread=True, extension=None, timeout=30.0, remote=None,
            mmap=False):
    """Open a deltacells dataset (a ``.dcdb`` file) and return a ``sqlite3.Connection``
    with the extension loaded, so ``cells``, ``genes``, ``tiles`` and ``dc_batch`` work.

    path: a file, or a URL (``https://``, ``http://``, ``s3://bucket/key``) read with
    HTTP range requests through the extension's read-only ``dchttp`` VFS.
    readonly: open with ``mode=ro`` (default); the dataset file must exist.
    extension: the library's path (default: see the module docstring).
    remote: URI parameters of the dchttp VFS (block_kb, readahead_kb, mem_blocks, cache_dir, cache_mb,
    retries, timeout_ms, latency_ms, mbps, max_inflight, revalidate_s); with a local path, opens it through dchttp
    (read-only; latency_ms and mbps throttle it like an object store).
    mmap: read a local file through a memory map (``PRAGMA mmap_size``, up to SQLite's cap:
    2 GiB in most builds): a tile blob is then one copy out of the OS page cache instead of
    one read call per page, about 8x faster (python/README.md, "Reading through a memory
    map").  A file cut short by another program in the middle of a statement then ends the
    process with SIGBUS instead of an error (between statements SQLite notices the new size).
    Ignored for URLs and ``remote=``.
    """
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        raise RuntimeError(NO_LOADING_MESSAGE)
    ext = extension or find_extension()
    if is_remote(path) or remote is not None:
        if not readonly:
            raise ValueError(f"{path}: a dataset read through dchttp is read-only (readonly=False given)")
        return _connect_vfs(path, remote, check_same_thread, ext, timeout)
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
        if mmap:
            con.execute(f"PRAGMA mmap_size = {MMAP_BYTES}").fetchall()
    except BaseException:
        con.close()
        raise
    return con


def _uri_quote(s):
    from urllib.parse import quote
    return quote(s, safe="/")


def _convert_hint(p):
    """For an input the converter reads (h5ad, 10x h5, loom: HDF5) given where a dataset belongs."""
    try:
        with open(p, "rb") as f:
            hdf5 = f.read(8) == b"\x89HDF\r\n\x1a\n"
    except (OSError, TypeError, ValueError):
        return ""
    return (f"; it is an HDF5 file (h5ad, 10x h5 or loom): convert it first, "
            f"`deltacells convert {p} -o DATASET.dcdb`") if hdf5 else ""


def _damaged(p, e):
    """The message for a SQLite file that SQLite finds malformed (SQLITE_CORRUPT, or
    SQLITE_NOTADB with SQLite's header): damaged or cut short, not some other kind of file;
    None otherwise (a remote dataset, an empty file, another file)."""
    code = getattr(e, "sqlite_errorcode", 0) & 0xff
    if code not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or not os.path.isfile(p):
        return None
    size = os.path.getsize(p)
    if code == sqlite3.SQLITE_NOTADB:
        with open(p, "rb") as f:
            if f.read(16) != b"SQLite format 3\0":
                return None
    return (f"{str(p)!r} is damaged or truncated: a SQLite file of {size} bytes that SQLite "
            f"reports malformed ({e}); copy or convert it again")


def _check_dataset(con, p):
    try:
        rows = dict(con.execute("SELECT key, value FROM dc_meta").fetchall())
    except sqlite3.DatabaseError as e:
        damaged = _damaged(p, e)
        if damaged:
            raise ValueError(damaged) from None
        raise ValueError(f"{str(p)!r} is not a deltacells dataset ({e}){_convert_hint(p)}") from None
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
    return rows
