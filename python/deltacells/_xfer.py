"""Batches from DataLoader workers to the main process: one copy, into reused buffers.

torch sends a worker's tensors by moving each into a fresh shared-memory segment
(share_memory_()) that the main process then maps: per 5,000-cell batch of the
reference data about 80 MB of fresh shared pages faulted in twice (by the worker that
writes them, by the main process that maps them).  On the development VM a fresh shmem
page costs about 30 us to write and an existing one about 15 us to map, against about
2 us for a private page and nothing for a reused one (measured: 40 MB written into a new
memfd 297 ms, into a reused buffer 7 ms; process_vm_readv of 40 MB into a reused buffer
7-12 ms).  That, not decoding, made 2 workers 5x slower than none.

So here: a worker writes each batch (dc_batch's result copied once, through the
ticket) into its own reused private buffers, one slot per array.  When such an array is
pickled to the main process it travels as (worker pid, address, length, slot, serial);
the main process copies it with process_vm_readv straight into buffers of its own pool
(reused once the user drops the batch's tensors) and tells the worker the slot is free
by writing 0 over the slot's serial in the worker's memory (process_vm_writev).  A slot
whose array was never sent is freed when the worker drops it.  When every slot is busy
the worker uses plain buffers, which torch sends its usual way.

Where process_vm_readv is not allowed (a seccomp profile without it, e.g. some
containers), available() is False and torch's way is used.  DELTACELLS_WORKER_COPY=0
turns this off.  Nothing crosses a fork: slots belong to the process that made them.
"""
import ctypes
import os
import sys
import threading
import weakref

import numpy as np

MAX_SLOTS = 24          # 3 arrays per batch: 8 batches in flight per worker
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


def available():
    """process_vm_readv works here (checked once per process, on itself)."""
    pid = os.getpid()
    if pid not in _avail:
        ok = False
        if os.environ.get("DELTACELLS_WORKER_COPY", "1") != "0" and sys.platform.startswith("linux"):
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


class _Lease:
    """Base object of one slot array in the worker: frees the slot when the array goes,
    unless it was sent (then the main process frees it once it has copied it)."""
    __slots__ = ("ctrl", "slot", "serial", "sent", "__array_interface__", "buf", "__weakref__")

    def __init__(self, ctrl, slot, serial, buf, nbytes):
        self.ctrl, self.slot, self.serial, self.buf = ctrl, slot, serial, buf
        self.sent = False
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (buf.ctypes.data, False)}

    def __del__(self):
        if not self.sent and self.ctrl[self.slot] == self.serial:
            self.ctrl[self.slot] = 0


_mine = {"pid": None, "slots": None}


class WorkerSlots:
    """The worker side: BufferPool's take_batch on reused slots (see the module doc)."""

    def __init__(self, private, max_slots=MAX_SLOTS):
        self.private = private             # a BufferPool, when every slot is busy
        self.pid = os.getpid()
        self.max_slots = max_slots
        self.ctrl = np.zeros(max_slots, dtype=np.int64)   # serial of the array in it, 0: free
        self.bufs = [None] * max_slots
        self.leases = [None] * max_slots
        self._serial = 0
        self.fallbacks = 0
        self.lock = threading.Lock()
        _mine["pid"], _mine["slots"] = self.pid, self

    def _take(self, n, dtype):
        dtype = np.dtype(dtype)
        need = max(64, int(n) * dtype.itemsize)
        free = [i for i in range(self.max_slots) if self.ctrl[i] == 0]
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
            self.bufs[i] = np.empty(cap, dtype=np.uint8)
        self._serial += 1
        self.ctrl[i] = self._serial
        lease = _Lease(self.ctrl, i, self._serial, self.bufs[i], need)
        self.leases[i] = weakref.ref(lease)
        return np.asarray(lease)[:int(n) * dtype.itemsize].view(dtype)

    def take_batch(self, n, nnz, dtype):
        with self.lock:
            free = int((self.ctrl[:] == 0).sum())
            if free < 3:
                self.fallbacks += 1
                return self.private.take_batch(n, nnz, dtype)
            return self._take(n + 1, np.int32), self._take(nnz, np.int32), self._take(nnz, dtype)

    def take(self, n, dtype):              # BufferPool's interface
        return self.private.take(n, dtype)

    def find(self, ptr, nbytes):
        for i, b in enumerate(self.bufs):
            if b is not None:
                base = b.ctypes.data
                if base <= ptr and ptr + nbytes <= base + b.nbytes:
                    ref = self.leases[i]
                    lease = ref() if ref is not None else None
                    if lease is not None and self.ctrl[i] == lease.serial:
                        return i, lease
        return None


_NUMPY = None


def reduce_worker_tensor(t):
    """For the tensor reducer: a contiguous CPU tensor in a slot of this worker ->
    (rebuild, args) that copy it into the receiving process; else None."""
    global _NUMPY
    reg = _mine["slots"]
    if reg is None or _mine["pid"] != os.getpid():
        return None
    import torch
    if _NUMPY is None:
        _NUMPY = {torch.int32, torch.float32, torch.int16, torch.int8, torch.uint8,
                  torch.float64, torch.int64}
    if (t.layout != torch.strided or t.dtype not in _NUMPY or t.device.type != "cpu"
            or not t.is_contiguous() or t.numel() == 0):
        return None
    ptr, nbytes = t.data_ptr(), t.numel() * t.element_size()
    hit = reg.find(ptr, nbytes)
    if hit is None:
        return None
    slot, lease = hit
    lease.sent = True
    return _rebuild_copied, (reg.pid, reg.ctrl.ctypes.data, slot, lease.serial, ptr, nbytes,
                             tuple(t.shape), str(t.dtype).replace("torch.", ""))


# --- the receiving process -------------------------------------------------------------
_pool = {"pid": None, "pool": None}
stats = {"arrays": 0, "bytes": 0, "seconds": 0.0}     # what this process received (benchmarks)
_pool_lock = threading.Lock()


def _recv_pool():
    if _pool["pid"] != os.getpid():
        from ._core import BufferPool
        _pool["pid"], _pool["pool"] = os.getpid(), BufferPool(keep=24)
    return _pool["pool"]


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
