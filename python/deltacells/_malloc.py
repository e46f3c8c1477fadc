"""Opt-in: keep large buffers in the heap instead of fresh mmaps (glibc only).

Importing deltacells changes nothing process-wide.  The loader reuses its own buffers
(dataset.py, _core.BufferPool: the extension's result is copied once, into buffers
that are recycled once the user drops a batch), so it does not need this.  What
follows is for programs whose own large per-batch allocations fault pages in again.

Every batch allocates blobs of tens of MB (the extension's output, the bytes Python's
sqlite3 copies them into, the converted values).  glibc serves such sizes with a fresh
mmap and unmaps them on free, so every batch page-faults all of its memory again; on
virtual machines that costs more than decoding (measured here: a cached 5,000-cell
gather of the reference data took 1.05 s with the defaults and 0.05 s with the heap
reused).  deltacells therefore raises glibc's mmap and trim thresholds when it is
imported (mallopt; the memory of freed batches is then reused by the next batch rather
than returned to the system; peak memory is unchanged) and keeps threads on the main
arena, whose heap can hold blocks of any size.

That was the old default.  Now it happens only when asked: call
deltacells.tune_malloc(), or set DELTACELLS_MALLOC_TUNE=1 before importing deltacells.
"""
import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
applied = False


def tune():
    """Raise glibc's mmap/trim thresholds and use one arena, for the whole process.
    Returns True when applied (False where malloc is not glibc's)."""
    global applied
    if applied:
        return applied
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version      # glibc only
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1
    ok &= mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1) == 1
    ok &= mallopt(M_ARENA_MAX, 1) == 1
    applied = bool(ok)
    return applied
