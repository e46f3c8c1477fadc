"""Fork safety: no connection, decoder pool or prefetch thread crosses a fork in use.

PyTorch starts DataLoader workers with fork() on Linux.  A forked child has only the
thread that forked; everything else it inherits is a copy of memory:

- a sqlite3 connection of the parent (and the extension's decoder pool behind it) must
  not be used, nor even closed, in the child (SQLite's rule; closing may need a mutex
  that a thread of the parent held at the moment of the fork).  `ConnSlot` keeps one
  connection per process and thread: in a child it opens a new one and keeps the
  inherited object alive, unused, in `_inherited` so that it is never closed there.
- a thread of the parent inside SQLite at the fork leaves SQLite's global mutexes
  (memory, PRNG, VFS) locked in the child forever.  The extension's fork handler
  (ext/sqlite_fork.c) takes them around every fork, for any thread, the user's too.
  On top of it, so that no statement of the package is mid-way at a fork, its only
  background threads, the prefetch threads of CellDataset iterators, do all their
  SQLite work holding a `Gate`; os.register_at_fork's `before` hook takes every live
  gate (waiting for a batch in progress to finish), so at the fork every prefetch thread
  is parked outside SQLite.  The gates are released after the fork in the parent; in the child
  they and their threads are forgotten (an inherited iterator restarts its prefetch).
- a lock a thread of the parent held at the fork stays locked in the child forever: the
  package's own locks (pools, registries) are `Lock`s, which the child gets unlocked.
"""
import os
import threading
import warnings
import weakref

_inherited = []                      # parent connections: kept alive, never used or closed
_gates = weakref.WeakSet()
_gates_lock = threading.Lock()
_held = []
FORK_WAIT_S = 60.0                   # longest the before-fork hook waits for one batch


def pid():
    return os.getpid()


def abandon(obj):
    """Keep an object made by another process (a connection) alive and untouched."""
    if obj is not None:
        _inherited.append(obj)


class Gate:
    """Held by a prefetch thread while it is inside SQLite (and the extension)."""
    __slots__ = ("lock", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        with _gates_lock:
            _gates.add(self)

    def __enter__(self):
        self.lock.acquire()
        return self

    def __exit__(self, *exc):
        self.lock.release()
        return False


_locks = weakref.WeakSet()


class Lock:
    """A lock of the package's own state (a pool, a registry) that a forked child gets
    unlocked: the thread of the parent that held it at the fork does not exist there, and a
    copy of a held threading.Lock would stay locked in the child forever."""
    __slots__ = ("_lock", "__weakref__")

    def __init__(self):
        self._lock = threading.Lock()
        with _gates_lock:
            _locks.add(self)

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()
        return False

    def acquire(self, timeout=-1):
        return self._lock.acquire(timeout=timeout)

    def release(self):
        self._lock.release()


def _before_fork():
    _gates_lock.acquire()
    held = []
    for g in list(_gates):
        if g.lock.acquire(timeout=FORK_WAIT_S):
            held.append(g)
        else:
            warnings.warn("deltacells: a prefetch thread did not leave SQLite within "
                          f"{FORK_WAIT_S:.0f} s of a fork; the child may not be able to use SQLite",
                          RuntimeWarning)
    _held[:] = held


def _after_fork_parent():
    for g in _held:
        g.lock.release()
    _held.clear()
    if _gates_lock.locked():
        _gates_lock.release()


def _after_fork_child():
    global _gates
    _held.clear()
    _gates = weakref.WeakSet()        # the threads that held them do not exist here
    for lk in list(_locks):
        lk._lock = threading.Lock()
    if _gates_lock.locked():
        _gates_lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                        after_in_child=_after_fork_child)


class _Held:
    """A connection and what belongs to it, closed when dropped in the process that
    opened it, abandoned (never closed) when dropped in a forked child."""
    __slots__ = ("con", "extra", "pid")

    def __init__(self, con, extra):
        self.con, self.extra, self.pid = con, extra, os.getpid()

    def __del__(self):
        con, self.con = self.con, None
        if con is None:
            return
        if self.pid == os.getpid():
            try:
                con.close()
            except Exception:
                pass
        else:
            abandon(con)


class ConnSlot:
    """One connection per (process, thread), opened on first use by `opener()` -> (con, extra).
    A thread's connection closes when the thread ends or the slot is dropped."""

    def __init__(self, opener):
        self._opener = opener
        self._local = threading.local()

    def get(self):
        loc = self._local
        h = getattr(loc, "held", None)
        if h is not None and h.pid != os.getpid():
            abandon(h.con)            # inherited through fork: never used or closed here
            h.con = None
            h = None
        if h is None:
            con, extra = self._opener()
            h = loc.held = _Held(con, extra)
        return h.con, h.extra

    def close(self):
        """Close this thread's connection (in the process that opened it)."""
        h = getattr(self._local, "held", None)
        if h is not None:
            self._local.held = None
            h.__del__()
