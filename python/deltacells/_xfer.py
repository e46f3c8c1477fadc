"""Batches from DataLoader workers to the main process: no copy where the OS allows it.

torch sends a worker's tensors by moving each into a fresh shared-memory segment
(share_memory_()) that the main process then maps: per 5,000-cell batch of the
reference data about 80 MB of fresh shared pages faulted in twice (by the worker that
writes them, by the main process that maps them).  On the development VM a fresh shmem
page costs about 30 us to write and an existing one about 15 us to map, against about
2 us for a private page and nothing for a reused one (measured: 40 MB written into a new
memfd 297 ms, into a reused buffer 7 ms; process_vm_readv of 40 MB into a reused buffer
7-12 ms).  That, not decoding, made 2 workers 5x slower than none.

Two ways here, both writing each batch into reused slots, never into fresh memory:

* **Lanes (mapped, no copy).**  A dataset made in the main process makes (once per
  process, shared by its datasets) an arena: one sparse memfd, mapped MAP_SHARED before
  DataLoader forks its workers, cut into lanes of LANE_SLOTS slots.  A worker claims a free
  lane (a POSIX record lock on the lane's byte of the memfd: released by the kernel when
  the worker exits) and keeps it until it exits.  It places batches straight into the
  lane's slots (pages populated once per process with MADV_POPULATE_WRITE: mapping pages
  that exist costs a tenth of faulting them in one by one); an array in a slot is pickled
  as (arena, lane, slot, state, offset, length), and the main process returns a tensor
  that views the same pages in its own mapping of the arena.  The pages stay warm across
  epochs and worker generations, since the arena outlives the workers.
  Each slot's state word (serial << 2 | phase: taken, sent, held; 0 free) lives in the
  lane's header and changes only by compare-and-swap (deltacells_slot_cas, in the
  extension): the worker takes and sends, the main process marks a slot held when it
  arrives and frees it when the user drops the last tensor viewing it; a worker that
  claims a lane frees what its dead predecessor took or sent and nobody received (a batch
  left in the queue of an iterator stopped early).  A batch that arrives after its slot
  was taken back is an error, never another batch's data.
* **Copied once (process_vm_readv)**: a worker's slots are private buffers; an array in one
  travels as (worker pid, address, length, slot, state), and the main process copies it with
  process_vm_readv into buffers of its own pool (reused once the user drops the batch's
  tensors) and frees the slot by writing 0 over its state in the worker's memory
  (process_vm_writev).  The pool's buffers are private memory (huge pages where the machine
  gives them), kept out of copy-on-write at every fork (_recv_before_fork): an idle buffer is
  wiped for the child (MADV_WIPEONFORK), and one the user still views, which the child
  inherits, is not written again until a later fork finds it idle.  Plainly private buffers
  became copy-on-write at each fork of the next epoch's workers, and receiving into them took
  a fault per page while the workers lived (81,000 per epoch of the reference data: 2.2 s
  epochs against 0.75 s).  Shared anonymous memory avoided that, but gets no huge pages on
  many machines (shmem_enabled=never), and faulting in its 4 KiB pages made the first epoch
  1.4-1.5x as long as with private ones (2 workers new every epoch, 100,000 cells of the
  reference data, the main process reading each batch: 2.18-2.52 s against 1.51-1.73 s;
  later epochs the same; 2026-12-03).

Which way (handoff()): lanes save a copy, but only once a process has mapped a slot's pages;
mapping them costs every new process again, per 4 KiB page (shared memory gets huge pages only
where the machine allows them, see python/README.md).  A worker that lives one epoch
(persistent_workers=False, DataLoader's default) pays that for every slot it fills, every
epoch; private buffers get huge pages (_private_alloc), and the main process's copy into its warm
pool costs less (2 workers, 100,000 cells of the reference data, the main process reading
each batch: 1.27-1.58 s steady epochs through lanes, 0.73-1.13 s copied; 2026-12-03).  A
persistent worker's lane stays mapped, and from its second epoch on it hands batches over
without a copy (0.28-0.44 s epochs against 0.46-0.56 s copied, more variable through lanes).
So a persistent worker uses its lane and any other one copies; the worker learns which it
is from torch's worker loop (its persistent_workers argument), and where it cannot see it,
copies in its first reader and uses its lane from the second on (only a persistent worker
has a second).  Spawned workers, machines without memfd and older extensions have no arena
and always copy.
DELTACELLS_WORKER_HANDOFF=lanes|copy forces one way (tests, measurements).

A slot whose array was never sent is freed when the worker drops it.  A worker whose lane
slots are all busy (small batches: a window of more batches than a lane has slots; or the user
keeps many batches) copies the rest from private slots; when those are busy too, it uses plain
buffers, which torch sends its usual way.  Where process_vm_readv is not allowed (a seccomp
profile without it, e.g. some containers), available() is False and torch's way is used.
DELTACELLS_WORKER_COPY=0 turns both off.  Nothing crosses a fork in use: a lane belongs to
the process that claimed it, the arena's mapping is only ever read and written through slot
states.
"""
import ctypes
import itertools
import os
import sys
import weakref

import numpy as np

from . import _forksafe

# A lane's slots: many of 64 MiB (small batches: placing fills a whole shuffle window's batches
# at once, 39 batches of 512 cells for a 20,000-cell window), some of 1 GiB.  Address space
# only: a slot's pages are allocated as far as it was ever filled.
SPANS = [64 << 20] * 192 + [1 << 30] * 16
LANE_SLOTS = len(SPANS)
# Private slots (copied once).  Placing fills a whole window's batches at once, 3 arrays each; a
# slot costs 8 bytes of state until it is first used, and its buffer is reused, so the slots in use
# hold about one window whatever their number.  With 24 (8 batches), a window of 39 batches of 512
# cells sent 31 of them torch's way (a fresh shared-memory segment per tensor): 0.06x the cells/s
# of 0 workers.  1024 slots hold a window of 341 batches (a 2-tile window of 10,000-cell tiles
# at batch 59).
MAX_SLOTS = 1024
_SPANS = np.array(SPANS, dtype=np.int64)
OFFS = np.concatenate([[0], np.cumsum(SPANS, dtype=np.int64)])
HEADER = 1 << 21        # a lane's header: [0] its serial counter, [1 + s] slot s's state, [1 + LANE_SLOTS + s]
                        # the bytes of slot s ever populated (by any process)
assert 8 * (1 + 2 * LANE_SLOTS) <= 4096      # the header's words: its first page (the rest of its
                        # 2 MiB is never touched; it keeps the slots 2 MiB aligned, for huge pages)
FIRST_WORD = 511        # lane 0's last header word of that page: the DataLoader worker generation
                        # whose worker 0 has made its first batch (first_batch_mark/_wait)
assert 1 + 2 * LANE_SLOTS < FIRST_WORD < 4096 // 8
_TAKEN, _SENT, _HELD = 1, 2, 3
HUGE = 2 << 20          # a transparent huge page (x86-64, and ARM64 with 4 KiB pages)
HUGE_MIN = 1 << 20      # private buffers from this size up are whole, aligned huge pages (_private_alloc)
SMALL_COPY = 1 << 20    # a worker's tensors up to this size that are not in a slot are copied into one
_MADV_POPULATE_WRITE = 23
_avail = {}


class _iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_fns = {}


def _vm(name):
    fn = _fns.get(name)
    if fn is None:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, name)
        fn.restype = ctypes.c_ssize_t
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(_iovec), ctypes.c_ulong,
                       ctypes.POINTER(_iovec), ctypes.c_ulong, ctypes.c_ulong]
        _fns[name] = fn
    return fn


def _move(name, pid, local, remote, nbytes):
    """process_vm_readv/writev of nbytes, all of them; -> errno or 0."""
    done = 0
    fn = _vm(name)
    while done < nbytes:
        lv = _iovec(local + done, nbytes - done)
        rv = _iovec(remote + done, nbytes - done)
        n = fn(pid, ctypes.byref(lv), 1, ctypes.byref(rv), 1, 0)
        if n <= 0:
            return ctypes.get_errno() or -1
        done += n
    return 0


def _wanted():
    return os.environ.get("DELTACELLS_WORKER_COPY", "1") != "0" and sys.platform.startswith("linux")


def available():
    """process_vm_readv works here (checked once per process, on itself)."""
    pid = os.getpid()
    if pid not in _avail:
        ok = False
        if _wanted():
            try:
                a = np.arange(4, dtype=np.int64)
                b = np.zeros(4, dtype=np.int64)
                ok = _move("process_vm_readv", pid, b.ctypes.data, a.ctypes.data, 32) == 0 \
                    and bool((a == b).all())
            except (OSError, AttributeError):
                ok = False
        _avail.clear()
        _avail[pid] = ok
    return _avail[pid]


# --- the arena and its lanes --------------------------------------------------------------
def _cas_fn():
    from ._core import _ext_function
    return _ext_function("deltacells_slot_cas",
                         lambda: [ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64])


_cas_cached = {}


def _cas(addr, expect, want):
    fn = _cas_cached.get("fn")
    if fn is None:            # resolved once, before any slot exists (arena()), never at exit
        fn = _cas_cached["fn"] = _cas_fn()
    return fn(addr, expect, want) == 1


def _madvise(addr, nbytes, advice):
    """madvise(2) on any address range (Python's mmap.madvise takes only its own map's);
    True when the kernel took the advice."""
    fn = _fns.get("madvise")
    if fn is None:
        fn = ctypes.CDLL(None, use_errno=True).madvise
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _fns["madvise"] = fn
    return fn(addr, nbytes, advice) == 0


def _populate(addr, nbytes):
    """Map (and, the first time ever, allocate) these pages (of the arena, or private ones) in
    this process in one call; where the kernel cannot (before Linux 5.14), they fault in when
    written.  True when the kernel did it."""
    return nbytes > 0 and _madvise(addr, nbytes, _MADV_POPULATE_WRITE)


_tokens = itertools.count(1)
# the arena this process maps (its own, or inherited from the parent it was forked from), by
# token; at most one is alive: arena() makes one only when none is
_by_token = weakref.WeakValueDictionary()


def _live_arena():
    return next(iter(list(_by_token.values())), None)


class Arena:
    """Lanes of batch slots in one sparse memfd, shared (see the module doc).  A process maps
    a lane when it first uses it: a process whose datasets never meet a worker maps nothing.
    Only the pages of slots that were filled are ever allocated; they are freed with the
    arena, when no dataset and no received tensor of this process refers to it any more."""

    def __init__(self, lanes):
        import fcntl
        import mmap
        self._fcntl, self._mmap = fcntl, mmap
        self.lanes = int(lanes)
        self.lane_bytes = HEADER + int(OFFS[-1])
        self.fd = os.memfd_create("deltacells-batches", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.lanes * self.lane_bytes)
        except Exception:
            os.close(self.fd)
            raise
        self._maps = {}           # lane -> (mmap, its address); a forked child inherits them
        self._maps_lock = _forksafe.Lock()
        self.pid = os.getpid()
        self.token = f"{self.pid}-{next(_tokens)}"
        _by_token[self.token] = self

    def _lane(self, k):
        got = self._maps.get(k)
        if got is None:
            with self._maps_lock:
                got = self._maps.get(k)
                if got is None:
                    m = self._mmap.mmap(self.fd, self.lane_bytes, self._mmap.MAP_SHARED,
                                        self._mmap.PROT_READ | self._mmap.PROT_WRITE,
                                        offset=k * self.lane_bytes)
                    view = np.frombuffer(m, dtype=np.uint8, count=HEADER)
                    # the slots in huge pages where the system allows them for shared memory
                    # (shmem_enabled 'advise' or 'within_size'; with 'never', the default of
                    # many distributions, this changes nothing): placing writes each cell to
                    # a random place in a window's batches, and with 4 KiB pages the TLB
                    # misses cost workers ~1.2x the placing time of the main process, whose
                    # numpy buffers get huge pages (python/README.md, "Workers")
                    if hasattr(self._mmap, "MADV_HUGEPAGE"):
                        try:
                            m.madvise(self._mmap.MADV_HUGEPAGE, HEADER, self.lane_bytes - HEADER)
                        except OSError:       # a kernel without transparent huge pages
                            pass
                    got = self._maps[k] = (m, view, view.ctypes.data)
        return got

    def header(self, lane):
        return self._lane(lane)[1].view(np.int64)

    def slot_addr(self, lane, slot):
        return self._lane(lane)[2] + HEADER + int(OFFS[slot])

    def state_addr(self, lane, slot):
        return self._lane(lane)[2] + 8 * (1 + slot)

    def claim(self, taken):
        """A lane no other process holds (locked until this process exits), its slots that
        a dead holder took or sent and nobody received freed; None when all are held."""
        for k in range(self.lanes):
            if k in taken:
                continue
            try:
                self._fcntl.lockf(self.fd, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB, 1, k)
            except OSError:
                continue
            hd = self.header(k)
            for s in range(LANE_SLOTS):
                st = int(hd[1 + s])
                if st & 3 in (_TAKEN, _SENT):
                    _cas(self.state_addr(k, s), st, 0)
            return k
        return None

    def __del__(self):
        try:
            os.close(self.fd)
        except OSError:
            pass


def arena():
    """The arena of this process's datasets (made by the first; a forked child keeps its
    parent's), or None where lanes cannot be had.  Datasets hold it: it lives as long as
    one of them, or a tensor viewing it, does."""
    a = _live_arena()
    if a is not None or not _wanted() or not hasattr(os, "memfd_create"):
        return a
    try:
        _cas_cached["fn"] = _cas_fn()
        if _cas_cached["fn"] is None:
            return None
        a = Arena(min(64, max(4, os.cpu_count() or 1)))
    except (OSError, ValueError, OverflowError, ImportError):
        return None
    return a


def _first_header():
    """Lane 0's header words in the arena this process's parent made before forking it, or None
    (no arena, or the arena is this process's own: no sibling shares it)."""
    ar = _live_arena()
    if ar is None or ar.pid == os.getpid():
        return None
    try:
        return ar.header(0)
    except (OSError, ValueError, OverflowError):
        return None


def first_batch_mark(key):
    """This process (a generation's worker 0) has made its first batch: its siblings waiting in
    first_batch_wait(key) may start.  key: the generation's, non-zero (an aligned 8-byte store
    into the arena that the generation's parent made before forking it).  False without an arena."""
    hd = _first_header()
    if hd is None:
        return False
    hd[FIRST_WORD] = key
    return True


def first_batch_wait(key, timeout):
    """Wait until the generation's worker 0 has made its first batch (first_batch_mark(key)), at
    most timeout seconds (worker 0 failed, or is slow: this worker then goes on).  The seconds
    waited, or None without an arena (nothing to wait on)."""
    import time
    hd = _first_header()
    if hd is None:
        return None
    t0 = time.monotonic()
    pause = 0.001
    while int(hd[FIRST_WORD]) != key:
        waited = time.monotonic() - t0
        if waited >= timeout:
            break
        time.sleep(min(pause, timeout - waited))
        pause = min(2 * pause, 0.01)
    return time.monotonic() - t0


class _Lane:
    """This process's lane (claimed on first use, kept until the process exits)."""

    def __init__(self, ar, k):
        self.arena, self.k = ar, k
        self.hd = ar.header(k)
        self.state = self.hd[1:1 + LANE_SLOTS]
        self.ever = self.hd[1 + LANE_SLOTS:1 + 2 * LANE_SLOTS]
        self.mapped = [0] * LANE_SLOTS         # bytes of each slot populated in this process
        self.leases = [None] * LANE_SLOTS
        self.first = ar.slot_addr(k, 0)
        self.lock = _forksafe.Lock()

    def n_free(self):
        return int((self.state == 0).sum())

    def take(self, n, dtype):
        """An array of n dtype in a free slot (caller holds self.lock), or None."""
        dtype = np.dtype(dtype)
        need = max(64, int(n) * dtype.itemsize)
        ok = (self.state == 0) & (_SPANS >= need)
        if not ok.any():
            return None
        fit = ok & (self.ever >= need)
        if fit.any():         # the smallest slot that was ever filled this far
            i = int(np.flatnonzero(fit)[np.argmin(self.ever[fit])])
        else:                 # else the fullest that can hold it
            i = int(np.flatnonzero(ok)[np.argmax(self.ever[ok])])
        addr = self.first + int(OFFS[i])
        if self.mapped[i] < need:
            # exactly what is needed (64 KiB steps): a slot that must hold more later grows
            # in place, so a margin would only be more fresh pages in the first epoch
            cap = min(SPANS[i], (need + (1 << 16) - 1) & ~((1 << 16) - 1))
            _populate(addr + self.mapped[i], cap - self.mapped[i])
            self.mapped[i] = cap
            if self.ever[i] < cap:
                self.ever[i] = cap
        serial = int(self.hd[0]) + 1
        self.hd[0] = serial
        st = (serial << 2) | _TAKEN
        self.state[i] = st          # a free slot: only this lane's holder takes it
        lease = _Lease(self.arena.state_addr(self.k, i), i, st, addr, need, True)
        self.leases[i] = weakref.ref(lease)
        return np.asarray(lease)[:int(n) * dtype.itemsize].view(dtype)

    def take_batch(self, n, nnz, dtype):
        """A batch's indptr, indices and data in three free slots (caller holds self.lock);
        an array that fits no free slot is None."""
        return self.take(n + 1, np.int32), self.take(nnz, np.int32), self.take(nnz, dtype)

    def find(self, ptr, nbytes):
        if ptr < self.first:
            return None
        i = int(np.searchsorted(OFFS, ptr - self.first, side="right")) - 1
        if i >= LANE_SLOTS or ptr + nbytes > self.first + int(OFFS[i + 1]):
            return None
        ref = self.leases[i]
        lease = ref() if ref is not None else None
        if lease is None or int(self.state[i]) != lease.serial:
            return None
        return i, lease


# This worker process's lane and its readers (handoff()); reset in a forked child.  Read and
# written holding _lane_lock.
_proc = {"pid": None}
_lane_lock = _forksafe.Lock()


def _this_process():
    if _proc["pid"] != os.getpid():
        _proc.clear()
        _proc.update(pid=os.getpid(), lane=None, taken=set(), tried=False, readers=0,
                     persistent=None)
    return _proc


def _my_lane():
    """This DataLoader worker's lane of an arena its parent made before forking it, or None
    (no arena, every lane held, or the arena is this process's own: nobody maps it)."""
    with _lane_lock:
        p = _this_process()
        if p["lane"] is None and not p["tried"]:
            p["tried"] = True
            ar = _live_arena()
            if ar is not None and ar.pid != p["pid"]:
                try:
                    k = ar.claim(p["taken"])
                except (OSError, ValueError, OverflowError):    # a lane cannot be mapped here
                    k = None
                if k is not None:
                    p["taken"].add(k)
                    p["lane"] = _Lane(ar, k)
        return p["lane"]


def _persistent_worker():
    """Whether the DataLoader worker running this thread outlives its epoch: the
    persistent_workers argument of torch's worker loop (torch.utils.data._utils.worker,
    since torch 1.7), found among the callers; None where it is not there (another thread,
    another loader)."""
    f = sys._getframe(1)
    for _ in range(100):
        if f is None:
            return None
        if f.f_code.co_name == "_worker_loop" and "persistent_workers" in f.f_code.co_varnames:
            v = f.f_locals.get("persistent_workers")
            return None if v is None else bool(v)
        f = f.f_back
    return None


def handoff():
    """'lanes' or 'copy': how the reader being made in this worker process hands its batches
    over (see the module doc); counts the readers of the process."""
    with _lane_lock:
        p = _this_process()
        p["readers"] += 1
        n = p["readers"]
    forced = os.environ.get("DELTACELLS_WORKER_HANDOFF", "auto")
    if forced in ("lanes", "copy"):
        return forced
    with _lane_lock:
        if p["persistent"] is None:
            p["persistent"] = _persistent_worker()
        persistent = p["persistent"]
    if persistent is None:
        persistent = n > 1
    return "lanes" if persistent else "copy"


def worker_slots(private):
    """A DataLoader worker's WorkerSlots (lane slots or private ones copied once, as
    handoff() says; the other where that one cannot be had here), or None where neither
    works."""
    if handoff() == "copy" and available():
        return WorkerSlots(private, lane=False)
    if _my_lane() is not None or available():
        return WorkerSlots(private)
    return None


class _Lease:
    """Base object of one slot array in the worker: frees the slot when the array goes,
    unless it was sent (then the main process frees it once it is done with it)."""
    __slots__ = ("ctrl", "slot", "serial", "sent", "shared", "pid", "__array_interface__", "buf",
                 "__weakref__")

    def __init__(self, ctrl, slot, serial, buf, nbytes, shared=False):
        # ctrl: the state array (private slots) or the state word's address (a lane's)
        self.ctrl, self.slot, self.serial, self.buf, self.shared = ctrl, slot, serial, buf, shared
        self.sent = False
        self.pid = os.getpid()
        addr = buf if shared else buf.ctypes.data
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (addr, False)}

    def __del__(self):
        if self.sent or self.pid != os.getpid():
            return
        if self.shared:
            _cas(self.ctrl, self.serial, 0)
        elif self.ctrl[self.slot] == self.serial:
            self.ctrl[self.slot] = 0


_mine = {"pid": None, "slots": None}


class WorkerSlots:
    """The worker side: BufferPool's take_batch on reused slots (see the module doc): the
    slots of this process's lane where it has one, else private ones."""

    def __init__(self, private, max_slots=MAX_SLOTS, lane=True):
        self.private = private             # a BufferPool, when every slot is busy
        self.pid = os.getpid()
        self.lane = _my_lane() if lane else None
        self.max_slots = max_slots
        self.ctrl = np.zeros(max_slots, dtype=np.int64)   # private slots: state, 0 free
        self.bufs = [None] * max_slots
        self.leases = [None] * max_slots
        self._serial = 0
        self.fallbacks = 0
        self.lock = self.lane.lock if self.lane is not None else _forksafe.Lock()
        # private slots: the way without a lane, and with one when all its slots are busy
        # (small batches: a window of more batches than a lane has slots)
        self.copies = self.lane is None or available()
        if self.copies:
            _mine["pid"], _mine["slots"] = self.pid, self

    def cold(self):
        """This worker's lane was never filled, by it or an earlier worker (_place.first_alone)."""
        return self.lane is not None and not self.lane.ever.any()

    def _take(self, n, dtype):
        dtype = np.dtype(dtype)
        need = max(64, int(n) * dtype.itemsize)
        free = np.flatnonzero(self.ctrl == 0).tolist()
        if not free:
            return None
        fit = [i for i in free if self.bufs[i] is not None and self.bufs[i].nbytes >= need]
        if fit:
            i = min(fit, key=lambda k: self.bufs[k].nbytes)
        else:
            i = next((k for k in free if self.bufs[k] is None), None)
            if i is None:
                i = max(free, key=lambda k: self.bufs[k].nbytes)
            cap = (need + need // 4 + (1 << 16) - 1) & ~((1 << 16) - 1)
            self.bufs[i] = _slot_alloc(cap)
        self._serial += 1
        st = (self._serial << 2) | _TAKEN
        self.ctrl[i] = st
        lease = _Lease(self.ctrl, i, st, self.bufs[i], need)
        self.leases[i] = weakref.ref(lease)
        return np.asarray(lease)[:int(n) * dtype.itemsize].view(dtype)

    def take_batch(self, n, nnz, dtype):
        with self.lock:
            if self.lane is not None:
                ln = self.lane
                if ln.n_free() >= 3:
                    got = ln.take_batch(n, nnz, dtype)
                    if all(a is not None for a in got):
                        return got
                if not self.copies:
                    self.fallbacks += 1
                    return self.private.take_batch(n, nnz, dtype)
            if self._n_free() < 3:
                self.fallbacks += 1
                return self.private.take_batch(n, nnz, dtype)
            return self._take_batch(n, nnz, dtype)

    def _n_free(self):
        return int((self.ctrl == 0).sum())

    def _take_batch(self, n, nnz, dtype):
        """A batch's indptr, indices and data in three free private slots (caller holds
        self.lock and has seen three free)."""
        return self._take(n + 1, np.int32), self._take(nnz, np.int32), self._take(nnz, dtype)

    def take(self, n, dtype):              # BufferPool's interface
        return self.private.take(n, dtype)

    def side(self):
        return self.private.side()

    def warm(self, shapes):
        """Gives their pages now to the slots that batches of these (cells, nonzeros, dtype)
        would take: each taken and freed again (later takes pick the same slots: the smallest
        that fits, else the fullest, grown in place; a private slot's buffer is made here).
        For a reader that would otherwise wait idle, e.g. for a remote dataset's first tiles:
        a worker new every epoch (private slots) spent that wait idle and then faulted its
        first window's buffers in, after the tiles had come."""
        held = []
        with self.lock:
            for n, nnz, dtype in shapes:
                if self.lane is not None:
                    if self.lane.n_free() < 3:
                        break
                    held += self.lane.take_batch(n, nnz, dtype)
                elif self.copies:
                    if self._n_free() < 3:
                        break
                    got = self._take_batch(n, nnz, dtype)
                    for a in got:
                        _fault_in(a)
                    held += got
        del held                            # never sent: the slots are free again

    def find(self, ptr, nbytes):
        for i in np.flatnonzero(self.ctrl != 0).tolist():     # the slots taken
            b = self.bufs[i]
            if b is not None:
                base = b.ctypes.data
                if base <= ptr and ptr + nbytes <= base + b.nbytes:
                    ref = self.leases[i]
                    lease = ref() if ref is not None else None
                    if lease is not None and self.ctrl[i] == lease.serial:
                        return i, lease
        return None


def _fault_in(a):
    """Gives the pages under array a their memory now (one call where the kernel can, Linux
    5.14+; else a write per page)."""
    if a.nbytes == 0:
        return
    lo = a.ctypes.data & ~4095
    if not _populate(lo, a.ctypes.data + a.nbytes - lo):
        a.view(np.uint8)[::4096] = 0


def _slot_alloc(nbytes):
    """A private slot's buffer.  Those of HUGE_MIN and up come in whole huge pages (numpy
    advises them only from 4 MiB, so the arrays of batches of a few hundred cells faulted in
    4 KiB pages: in a worker new every epoch, a fault per page of every slot).  2 workers new
    every epoch, the main process reading each batch, 100,000 cells of the reference data, two
    alternating pairs of 4 epochs (2026-12-03): batch 128 22.6-30.6k cells/s before, 31.8-62.0k
    after; batch 512 49.0-60.4k before, 51.3-83.7k after."""
    if nbytes < HUGE_MIN:
        return np.empty(nbytes, dtype=np.uint8)
    return _private_alloc(nbytes)


_NUMPY = None


def reduce_worker_tensor(t):
    """For the tensor reducer: a contiguous CPU tensor in a slot of this worker ->
    (rebuild, args) that give it to the receiving process (mapped or copied); else None."""
    global _NUMPY
    lane = _proc.get("lane") if _proc["pid"] == os.getpid() else None
    reg = _mine["slots"] if _mine["pid"] == os.getpid() else None
    if reg is None and lane is None:
        return None
    import torch
    if _NUMPY is None:
        _NUMPY = {torch.int32, torch.float32, torch.int16, torch.int8, torch.uint8,
                  torch.float64, torch.int64}
    if (t.layout != torch.strided or t.dtype not in _NUMPY or t.device.type != "cpu"
            or not t.is_contiguous() or t.numel() == 0):
        return None
    ptr, nbytes = t.data_ptr(), t.numel() * t.element_size()
    shape, dtype = tuple(t.shape), str(t.dtype).replace("torch.", "")
    if lane is not None:
        hit = lane.find(ptr, nbytes)
        copy = None
        if hit is None and nbytes <= SMALL_COPY and not t.requires_grad:
            # a small tensor made elsewhere (cell ids, obs codes): copied into a slot, which
            # costs less than torch's fresh shared-memory segment and descriptor per tensor
            with lane.lock:
                copy = lane.take(nbytes, np.uint8)
            if copy is not None:
                ctypes.memmove(copy.ctypes.data, ptr, nbytes)
                ptr = copy.ctypes.data
                hit = lane.find(ptr, nbytes)
        if hit is not None:
            slot, lease = hit
            sent = (lease.serial & ~3) | _SENT
            if _cas(lease.ctrl, lease.serial, sent):
                lease.sent = True
                return _rebuild_mapped, (lane.arena.token, lane.k, slot, sent,
                                         ptr - lane.first - int(OFFS[slot]), nbytes, shape, dtype)
    if reg is None:
        return None
    hit = reg.find(ptr, nbytes)
    if hit is None:
        return None
    slot, lease = hit
    lease.sent = True
    return _rebuild_copied, (reg.pid, reg.ctrl.ctypes.data, slot, lease.serial, ptr, nbytes,
                             shape, dtype)


# --- the receiving process -------------------------------------------------------------
_pool = {"pid": None, "pool": None}
stats = {"arrays": 0, "bytes": 0, "seconds": 0.0, "mapped": 0}   # what this process received
_pool_lock = _forksafe.Lock()


# madvise(2) advice (Linux 4.14+) that Python's mmap module does not name
_MADV_WIPEONFORK, _MADV_KEEPONFORK = 18, 19
_fork = {"wiped": [], "locked": False}     # the fork under way: buffers advised, _pool_lock held


def _private_alloc(nbytes):
    """Private anonymous memory, a mapping of its own (so that a fork can leave it out:
    _recv_before_fork), advised for transparent huge pages where the machine gives them to
    private memory.  From HUGE_MIN up its length is rounded up to whole 2 MiB pages and its
    start aligned to one: a mapping's start is only page-aligned, and the kernel puts a huge
    page only where an aligned 2 MiB lies wholly inside an advised mapping (an unaligned
    1.5 MB buffer faulted in 384 pages of 4 KiB)."""
    import mmap
    nbytes = max(1, int(nbytes))
    if not hasattr(mmap, "MAP_PRIVATE"):          # Windows
        return np.empty(nbytes, dtype=np.uint8)
    big = nbytes >= HUGE_MIN
    cap = (nbytes + HUGE - 1) & ~(HUGE - 1) if big else nbytes
    m = mmap.mmap(-1, cap + HUGE if big else cap, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    off = -np.frombuffer(m, dtype=np.uint8, count=1).ctypes.data % HUGE if big else 0
    # an array of its own over the aligned part (not a slice of one over the whole mapping:
    # numpy gives a view of a view the first one's base, and the pools tell a buffer in use
    # by the references its views hold to it)
    buf = np.frombuffer(memoryview(m)[off:off + cap], dtype=np.uint8)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        _madvise(buf.ctypes.data, cap, mmap.MADV_HUGEPAGE)
    return buf


def _recv_before_fork():
    """Before any fork: keep the receive pool's buffers out of copy-on-write (see the module
    doc).  A buffer the user still views goes to the child as any memory does, and the pool
    passes it over until a later fork finds it idle (BufferPool.at_fork).  An idle one is wiped
    for the child (MADV_WIPEONFORK: the child finds zero pages there, the parent's pages stay its
    own); where the kernel cannot do that, the pool drops it."""
    if _pool["pid"] != os.getpid() or _pool["pool"] is None:
        return
    if not _pool_lock.acquire(timeout=_forksafe.FORK_WAIT_S):
        return                # a receive that does not end: the child inherits all (copy-on-write)
    _fork["locked"] = True
    pool = _pool["pool"]
    for b in pool.at_fork():
        addr, n = b.ctypes.data, b.nbytes
        if _madvise(addr, n, _MADV_WIPEONFORK):
            _fork["wiped"].append((addr, n))
        else:
            pool.drop(b)


def _recv_after_fork_parent():
    """The buffers are inherited again by forks that run no hooks (a C library's fork)."""
    for addr, n in _fork["wiped"]:
        _madvise(addr, n, _MADV_KEEPONFORK)
    _fork["wiped"].clear()
    if _fork["locked"]:
        _fork["locked"] = False
        _pool_lock.release()


def _recv_after_fork_child():
    _fork["wiped"].clear()    # the child's _pool_lock is a new one (_forksafe.Lock)
    _fork["locked"] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_recv_before_fork, after_in_parent=_recv_after_fork_parent,
                        after_in_child=_recv_after_fork_child)


def _recv_pool():
    if _pool["pid"] != os.getpid():
        from ._core import BufferPool
        _pool["pid"], _pool["pool"] = os.getpid(), BufferPool(keep=24, alloc=_private_alloc)
    return _pool["pool"]


class _Held:
    """Base of a received array that views a lane slot: frees the slot when it goes (in the
    process that received it: a forked child that drops its inherited copy frees nothing)."""
    __slots__ = ("arena", "addr", "state", "pid", "__array_interface__")

    def __init__(self, ar, addr, state, data, nbytes):
        self.arena, self.addr, self.state, self.pid = ar, addr, state, os.getpid()
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (data, False)}

    def __del__(self):
        if self.pid == os.getpid():
            _cas(self.addr, self.state, 0)


def _rebuild_mapped(token, lane, slot, state, offset, nbytes, shape, dtype):
    import torch
    ar = _by_token.get(token)
    if ar is None:
        raise RuntimeError("deltacells: a DataLoader worker sent a batch in shared memory that this "
                           "process does not map (was the worker forked from another process?); set "
                           "DELTACELLS_WORKER_COPY=0 to send batches through torch's shared memory")
    held = (state & ~3) | _HELD
    addr = ar.state_addr(lane, slot)
    if not _cas(addr, state, held):
        raise RuntimeError(f"deltacells: a batch from a DataLoader worker arrived after its memory "
                           f"(lane {lane}, slot {slot}) was taken back; the worker that sent it has "
                           "exited")
    base = _Held(ar, addr, held, ar.slot_addr(lane, slot) + offset, nbytes)
    stats["arrays"] += 1
    stats["mapped"] += 1
    stats["bytes"] += nbytes
    return torch.from_numpy(np.asarray(base).view(np.dtype(dtype)).reshape(shape))


def _rebuild_copied(pid, ctrl_addr, slot, serial, addr, nbytes, shape, dtype):
    import time
    import torch
    t0 = time.perf_counter()
    dt = np.dtype(dtype)
    n = nbytes // dt.itemsize
    with _pool_lock:
        out = _recv_pool().take(n, dt)
    err = _move("process_vm_readv", pid, out.ctypes.data, addr, nbytes)
    if err:
        raise RuntimeError(f"deltacells: cannot copy a batch from DataLoader worker {pid} "
                           f"({os.strerror(err) if err > 0 else 'short read'}); set "
                           "DELTACELLS_WORKER_COPY=0 to send batches through torch's shared memory")
    zero = np.zeros(1, dtype=np.int64)
    cur = np.zeros(1, dtype=np.int64)
    # free the slot in the worker (only if it still holds this array)
    if _move("process_vm_readv", pid, cur.ctypes.data, ctrl_addr + 8 * slot, 8) == 0 \
            and int(cur[0]) == serial:
        _move("process_vm_writev", pid, zero.ctypes.data, ctrl_addr + 8 * slot, 8)
    stats["arrays"] += 1
    stats["bytes"] += nbytes
    stats["seconds"] += time.perf_counter() - t0
    return torch.from_numpy(out.reshape(shape))
