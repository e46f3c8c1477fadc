"""DataLoader workers hand batches over through reused slots (python/deltacells/_xfer.py):
slots of a lane of the arena that the main process mapped before the fork (the main process
returns tensors that view them, and frees a slot when they go), or private slots the main
process copies each array from once (process_vm_readv).  Persistent workers use their lane,
workers that live one epoch copy (_xfer.handoff); the tests of the lanes' mechanics force
lanes (LANES_ENV).  Every scenario runs in a subprocess with a timeout (workers are forked
there), so a hang fails instead of blocking the suite."""
import os
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT, gen  # noqa: E402
from _subproc import run_python  # noqa: E402

TIMEOUT = 120
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
ENV.pop("DELTACELLS_WORKER_HANDOFF", None)
LANES_ENV = dict(ENV, DELTACELLS_WORKER_HANDOFF="lanes")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    # 1,500 cells in 6 tiles, 300 genes
    return str(gen(tmp_path_factory.mktemp("py_workers"), 1500, 300, 7, 250)[1])


def run(code, db, env=None, timeout=TIMEOUT):
    rc, out = run_python([PY, "-c", textwrap.dedent(code), db], env or ENV, timeout)
    assert rc == 0, out[-3000:]
    return out


SAME = """
    import sys, numpy as np, torch
    from torch.utils.data import DataLoader
    import deltacells
    from deltacells import _xfer
    db = sys.argv[1]
    NO_ARENA
    def batches(workers, **kw):
        ds = deltacells.CellDataset(db, batch_size=BATCH, seed=3, obs=["cell_type"], shuffle_window=2, **kw)
        out = []
        for b in DataLoader(ds, batch_size=None, num_workers=workers,
                            multiprocessing_context="fork" if workers else None):
            out.append(b)                     # every batch kept: slots must not be reused under it
        return out
    def dense(X):
        if isinstance(X, deltacells.CSRBatch):
            X = X.to_sparse_csr()
        return X.to_dense()
    for kw in ({}, {"output": "csr_parts"}, {"dtype": torch.int16}, {"dtype": torch.int32}):
        ref = batches(0, **kw)
        got = batches(2, **kw)
        key = lambda b: int(b["cell_id"][0])
        ref.sort(key=key); got.sort(key=key)
        assert len(ref) == len(got) and len(ref) >= 10, (len(ref), len(got))
        assert len(ref) == -(-1500 // BATCH)
        for r, g in zip(ref, got):
            assert torch.equal(r["cell_id"], g["cell_id"])
            assert torch.equal(r["cell_type"], g["cell_type"])
            assert dense(g["X"]).dtype == dense(r["X"]).dtype
            assert torch.equal(dense(r["X"]), dense(g["X"])), kw
    print("copied", COPIED_CHECK)
    print("ok")
"""


def _same(mode, check, batch=100):
    return (SAME.replace("COPIED_CHECK", check).replace("BATCH", str(batch))
            .replace("NO_ARENA", "_xfer.arena = lambda: None" if mode == "copied" else "pass"))


def _lanes_here(db):
    code = "import deltacells._xfer as x; print(x.arena() is not None, x.available())"
    return run(code, db).strip().splitlines()[-1].split()


def _need(db, arena=False, copy=False):
    """Skips the test where it cannot run: off Linux, and where it needs them, without an arena
    (memfd) or without process_vm_readv; else (lanes, avail) as _lanes_here gives them."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    lanes, avail = _lanes_here(db)
    if arena and lanes != "True":
        pytest.skip("no arena here (memfd)")
    if copy and avail != "True":
        pytest.skip("process_vm_readv is not allowed here")
    return lanes, avail


@pytest.mark.parametrize("mode", ["mapped", "copied"])
def test_two_workers_deliver_the_same_batches_through_slots(db, mode):
    if not sys.platform.startswith("linux"):
        pytest.skip("the slot hand-off is Linux only (memfd, process_vm_readv)")
    lanes, avail = _lanes_here(db)
    if mode == "mapped":
        # every array came mapped from a lane (none copied, none through torch's shared memory)
        out = run(_same(mode, "_xfer.stats['mapped'] > 0 and _xfer.stats['mapped'] == "
                              "_xfer.stats['arrays'] and _xfer._pool['pool'] is None"), db,
                  env=LANES_ENV)
        assert out.strip().endswith("ok"), out
        assert ("copied True" in out) == (lanes == "True"), out
    else:
        out = run(_same(mode, "_xfer._pool['pool'] is not None and "
                              "len(_xfer._pool['pool']._bufs) > 0 and _xfer.stats['mapped'] == 0"), db)
        assert out.strip().endswith("ok"), out
        # the batches really came through the receiving pool (not torch's shared memory)
        assert ("copied True" in out) == (avail == "True"), out


def test_kept_batches_beyond_the_lane_are_copied_and_stay_intact(db):
    # batches of 7: 215 batches, 645 arrays, all kept by the user: more than a lane's slots, so
    # once its slots are held the worker copies (private slots); nothing is overwritten, and every
    # X array arrives mapped or copied, none torch's way (4 loaders of 215 batches, 5 tensors
    # each: X's 3, cell ids, cell types; the small ones may travel torch's way, uncounted)
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    lanes, avail = _lanes_here(db)
    out = run(_same("mapped", "_xfer.stats['mapped'] > 0 and _xfer.stats['arrays'] > "
                              "_xfer.stats['mapped'] and _xfer.stats['arrays'] >= 4 * 3 * 215",
                    batch=7), db, env=LANES_ENV)
    assert out.strip().endswith("ok"), out
    assert ("copied True" in out) == (lanes == "True" and avail == "True"), out


def test_lane_slots_ask_for_huge_pages_and_the_header_does_not(db):
    # placing writes cells to random places in a window's batches: the slots carry
    # MADV_HUGEPAGE (smaps VmFlags 'hg', whatever shmem_enabled says), at 2 MiB aligned file
    # offsets after a 2 MiB header that does not (its one used page must not take a huge page);
    # the mapping's address is the kernel's to align where shared huge pages are possible
    _need(db, arena=True)
    code = """
        import sys, torch
        from torch.utils.data import DataLoader
        import deltacells
        from deltacells import _xfer
        ds = deltacells.CellDataset(sys.argv[1], batch_size=100, seed=1, shuffle_window=2)
        n = sum(b["X"].shape[0] for b in DataLoader(ds, batch_size=None, num_workers=1,
                                                   multiprocessing_context="fork"))
        assert n == ds.n_cells and _xfer.stats["mapped"] > 0, (n, _xfer.stats)
        assert _xfer.HEADER % (2 << 20) == 0 and all(o % (2 << 20) == 0 for o in _xfer.OFFS)
        vmas, cur = [], None
        for line in open("/proc/self/smaps"):
            f = line.split()
            if "-" in f[0] and not f[0].endswith(":"):
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                cur = [lo, hi, "deltacells-batches" in line, None]
                vmas.append(cur)
            elif f[0] == "VmFlags:":
                cur[3] = f[1:]
        mine = [v for v in vmas if v[2]]
        heads = [v for v in mine if v[1] - v[0] == _xfer.HEADER]
        slots = [v for v in mine if v[1] - v[0] == int(_xfer.OFFS[-1])]
        assert heads and slots and len(heads) == len(slots), [(v[1] - v[0], v[3]) for v in mine]
        assert all("hg" in v[3] for v in slots) and not any("hg" in v[3] for v in heads)
        print("ok")
    """
    out = run(code, db, env=LANES_ENV)
    assert out.strip().endswith("ok"), out


def test_torch_path_when_turned_off(db):
    env = dict(ENV, DELTACELLS_WORKER_COPY="0")
    code = _same("mapped", "_xfer._pool['pool'] is not None or _xfer.stats['arrays'] > 0")
    out = run(code, db, env=env)
    assert "copied False" in out and out.strip().endswith("ok"), out


def test_slots_are_freed_by_the_receiver_or_when_unsent(db):
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    code = """
        import os, pickle, sys, numpy as np, torch
        import deltacells
        from deltacells import _xfer, _core
        from deltacells._convert import install_csr_reduction
        from multiprocessing.reduction import ForkingPickler
        assert _xfer.available()
        install_csr_reduction()
        r, w = os.pipe()
        back_r, back_w = os.pipe()   # the worker's checks are done: the receiver may copy (and free)
        pid = os.fork()
        if pid == 0:                                   # the "worker"
            slots = _xfer.WorkerSlots(_core.BufferPool(), max_slots=6)
            a, b, c = slots.take_batch(3, 5, np.float32)
            a[:] = [0, 2, 4, 5]; b[:] = [1, 2, 3, 4, 0]; c[:] = [1.5, 2, 3, 4, 5]
            busy = int((slots.ctrl != 0).sum())
            t = [torch.from_numpy(x) for x in (a, b, c)]
            data = bytes(ForkingPickler.dumps(t))
            del a, b, c, t
            os.write(w, len(data).to_bytes(8, "little") + data)
            # unsent arrays free their slots when dropped
            d = slots.take_batch(1, 1, np.int32)
            assert int((slots.ctrl != 0).sum()) == 6, slots.ctrl
            del d
            assert int((slots.ctrl != 0).sum()) == 3, slots.ctrl
            # every slot busy: plain buffers (torch's way), not a failure
            e = slots.take_batch(1, 1, np.int32)
            f = slots.take_batch(1, 1, np.int32)
            assert slots.fallbacks == 1 and slots.find(f[0].ctypes.data, 4) is None
            os.write(back_w, b"x")
            import time
            for _ in range(500):                       # the receiver frees the sent ones
                if int((slots.ctrl != 0).sum()) == 3:
                    break
                time.sleep(0.01)
            print("worker", busy, int((slots.ctrl != 0).sum()), flush=True)
            os._exit(0)
        n = int.from_bytes(os.read(r, 8), "little")
        data = b""
        while len(data) < n:
            data += os.read(r, n - len(data))
        os.read(back_r, 1)      # (receiving frees the sent slots: the worker counts them busy first)
        t = pickle.loads(data)
        assert t[0].tolist() == [0, 2, 4, 5] and t[1].tolist() == [1, 2, 3, 4, 0]
        assert t[2].tolist() == [1.5, 2, 3, 4, 5] and t[2].dtype == torch.float32
        _, st = os.waitpid(pid, 0)
        assert st == 0, st
        print("ok")
    """
    out = run(code, db)
    assert "worker 3 3" in out and out.strip().endswith("ok"), out


def test_worker_threads_share_the_cores(monkeypatch):
    sys.path.insert(0, str(ROOT / "python"))
    from deltacells.dataset import worker_threads
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    assert [worker_threads(n) for n in (1, 2, 3, 4, 6, 12)] == [6, 3, 2, 1, 1, 1]


def test_a_worker_reads_with_its_share_of_threads_and_no_prefetch_thread(db):
    code = """
        import sys, os, torch
        from torch.utils.data import DataLoader, IterableDataset
        import deltacells
        from deltacells.dataset import worker_threads
        class Probe(IterableDataset):
            def __init__(self, ds): self.ds = ds
            def __iter__(self):
                with iter(self.ds) as it:
                    b = next(it)
                    th = it._con.execute("SELECT dc_config('threads')").fetchone()[0]
                    yield {"threads": th, "prefetch_thread": it._prod is not None,
                           "expect": worker_threads(2), "n": len(b["cell_id"])}
        ds = deltacells.CellDataset(sys.argv[1], batch_size=100, prefetch_tiles=2, shuffle_window=2)
        got = list(DataLoader(Probe(ds), batch_size=None, num_workers=2,
                              multiprocessing_context="fork"))
        assert len(got) == 2, got
        for g in got:
            assert g["threads"] == g["expect"] and not g["prefetch_thread"] and g["n"] == 100, g
        # in the main process the same dataset reads ahead in a thread
        with iter(ds) as it:
            next(it)
            assert it._prod is not None
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok"), out


def test_workers_own_whole_windows_and_the_last_one_takes_every_core(db):
    # 6 tiles of 250 cells, window 2, batches of 100: windows start at batches 0, 5, 10 of
    # 15; 2 workers get batches [0, 5) and [5, 15) (whole windows, no tile read by both),
    # and the second, alone for its last 5 batches, decodes them with both cores
    code = """
        import sys, torch
        from torch.utils.data import DataLoader, IterableDataset, get_worker_info
        import deltacells, deltacells.dataset as D
        D._cores = lambda: 2
        class Probe(IterableDataset):
            def __init__(self, ds): self.ds = ds
            def __iter__(self):
                w = get_worker_info().id
                with iter(self.ds) as it:
                    for b in it:
                        th = it._con.execute("SELECT dc_config('threads')").fetchone()[0]
                        tiles = sorted(set((b["cell_id"] // 250).tolist()))
                        yield {"w": w, "threads": th, "tiles": tiles, "ids": b["cell_id"]}
        ds = deltacells.CellDataset(sys.argv[1], batch_size=100, shuffle_window=2, seed=5)
        got = list(DataLoader(Probe(ds), batch_size=None, num_workers=2,
                              multiprocessing_context="fork", timeout=60))
        ids = torch.cat([g["ids"] for g in got])
        assert len(got) == 15 and len(ids) == 1500 and len(set(ids.tolist())) == 1500
        per = {w: [g for g in got if g["w"] == w] for w in (0, 1)}
        assert [len(per[0]), len(per[1])] == [5, 10], [len(per[0]), len(per[1])]
        t0 = {t for g in per[0] for t in g["tiles"]}
        t1 = {t for g in per[1] for t in g["tiles"]}
        assert not t0 & t1, (t0, t1)
        assert [g["threads"] for g in per[0]] == [1] * 5, per[0]
        assert [g["threads"] for g in per[1]] == [1] * 5 + [2] * 5, [g["threads"] for g in per[1]]
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok"), out


# the lane scripts' start: a dataset (which makes the arena), or "ok" where there is none
LANES = """
        import gc, os, pickle, sys, numpy as np, torch
        import deltacells
        from deltacells import _xfer
        ds = deltacells.CellDataset(sys.argv[1], batch_size=50, seed=1, shuffle_window=2)
        ar = ds._arena
        if ar is None:
            print("no arena here"); print("ok"); sys.exit(0)

        def in_child(fn):
            # fn(slots, lane) in a forked child (a worker with its lane of the arena); "ok-child"
            # or its traceback
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                msg = "ok-child"
                try:
                    from deltacells import _core
                    slots = _xfer.worker_slots(_core.BufferPool())
                    assert slots.lane is not None
                    fn(slots, slots.lane)
                except BaseException:
                    import traceback
                    msg = "FAIL " + traceback.format_exc()
                os.write(w, msg.encode())
                os._exit(0)
            os.close(w)
            out = b""
            while True:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                out += chunk
            os.waitpid(pid, 0)
            return out.decode()
"""


def run_in_child(code, db):
    """LANES, then code, which defines body(slots, lane): body runs in a forked child of the
    process that made the arena (a worker, with its lane), and a failure there fails the test."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    code = LANES + code + """
        msg = in_child(body)
        assert msg == "ok-child", msg
        print("ok")
"""
    out = run(code, db, env=LANES_ENV)
    assert out.strip().endswith("ok"), out


def test_lane_slots_are_freed_when_dropped_and_taken_back_after_an_early_stop(db):
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    code = LANES + """
        from torch.utils.data import DataLoader
        def states():
            return np.concatenate([ar.header(k)[1:1 + _xfer.LANE_SLOTS] for k in range(ar.lanes)]) & 3
        left = 0
        for i in range(12):      # stopped early: batches left in the queue, workers shut down
            it = iter(DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork"))
            b = next(it)
            b = next(it)
            assert (states() == 3).sum() >= 3, states()     # the batch the user holds (and any
                                                            # the iterator keeps, out of order)
            del it, b
            gc.collect()
            assert (states() == 3).sum() == 0, states()     # nothing held once it is dropped
            left = max(left, int((states() != 0).sum()))
        n0, m0 = _xfer.stats["arrays"], _xfer.stats["mapped"]
        ids = []
        for b in DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork"):
            ids.append(b["cell_id"])
        # no slot leaked by the early stops: every array of the epoch came mapped (X's three,
        # and the cell ids, copied into a slot by the worker)
        assert _xfer.stats["arrays"] - n0 == _xfer.stats["mapped"] - m0 == 4 * 30, \
            (_xfer.stats, n0, m0)
        assert sorted(torch.cat(ids).tolist()) == list(range(1500))
        del b, ids
        gc.collect()
        assert int((states() != 0).sum()) == 0, states()
        print("left", left)
        print("ok")
    """
    out = run(code, db, env=LANES_ENV)
    assert out.strip().endswith("ok"), out


def test_a_batch_whose_slot_was_taken_back_is_an_error_and_lanes_are_exclusive(db):
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    code = LANES + """
        from deltacells import _core
        from deltacells._convert import install_csr_reduction
        from multiprocessing.reduction import ForkingPickler
        install_csr_reduction()
        assert _xfer._my_lane() is None          # the arena's own process holds no lane
        def child(fn, hold=None):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    data = b"D" + fn()
                except BaseException as e:
                    data = b"E" + repr(e).encode()
                os.write(w, len(data).to_bytes(8, "little") + data)
                if hold is not None:
                    os.read(hold, 1)
                os._exit(0)
            os.close(w)
            n = int.from_bytes(os.read(r, 8), "little")
            data = b""
            while len(data) < n:
                data += os.read(r, n - len(data))
            assert data[:1] == b"D", data
            return pid, data[1:]
        def send():
            slots = _xfer.worker_slots(_core.BufferPool())
            assert slots.lane is not None and slots.lane.k == 0, slots.lane
            a, b, c = slots.take_batch(3, 5, np.float32)
            a[:] = [0, 2, 4, 5]; b[:] = [1, 2, 3, 4, 0]; c[:] = [1.5, 2, 3, 4, 5]
            return bytes(ForkingPickler.dumps([torch.from_numpy(x) for x in (a, b, c)]))
        pid, first = child(send)     # sent by a worker that then exited, not received yet
        os.waitpid(pid, 0)
        pid, second = child(send)    # the next worker on lane 0 takes the unreceived slots back
        os.waitpid(pid, 0)
        try:
            pickle.loads(first)
            raise SystemExit("a batch whose slot was taken back was received")
        except RuntimeError as e:
            assert "taken back" in str(e), e
        t = pickle.loads(second)
        assert t[0].tolist() == [0, 2, 4, 5] and t[1].tolist() == [1, 2, 3, 4, 0]
        assert t[2].tolist() == [1.5, 2, 3, 4, 5] and t[2].dtype == torch.float32
        st = ar.header(0)[1:1 + _xfer.LANE_SLOTS] & 3
        assert (st == 3).sum() == 3 and (st != 0).sum() == 3, st    # held while the tensors live
        pid = os.fork()
        if pid == 0:                 # a child dropping its inherited copy frees nothing
            del t
            gc.collect()
            os._exit(0)
        os.waitpid(pid, 0)
        assert ((ar.header(0)[1:1 + _xfer.LANE_SLOTS] & 3) == 3).sum() == 3
        del t
        gc.collect()
        assert (ar.header(0)[1:1 + _xfer.LANE_SLOTS] != 0).sum() == 0
        # a small tensor made elsewhere is copied into a slot; a large one goes torch's way
        def others():
            assert _xfer.worker_slots(_core.BufferPool()).lane.k == 0
            small = torch.arange(1000, dtype=torch.int64)
            large = torch.full((2 ** 19,), 3.0)       # 2 MiB, above SMALL_COPY
            return bytes(ForkingPickler.dumps([small, large]))
        m0 = _xfer.stats["mapped"]
        hr, hw = os.pipe()
        pid, data = child(others, hold=hr)       # alive while torch's way fetches its descriptor
        small, large = pickle.loads(data)
        os.write(hw, b"x")
        os.waitpid(pid, 0)
        assert _xfer.stats["mapped"] == m0 + 1
        assert small.tolist() == list(range(1000)) and bool((large == 3).all()) and len(large) == 2 ** 19
        assert ((ar.header(0)[1:1 + _xfer.LANE_SLOTS] & 3) == 3).sum() == 1
        del small
        gc.collect()
        assert (ar.header(0)[1:1 + _xfer.LANE_SLOTS] != 0).sum() == 0
        # lanes are exclusive: a second live worker gets the next lane
        lane = lambda: str(_xfer._my_lane().k).encode()
        hr, hw = os.pipe()
        pa, ka = child(lane, hold=hr)
        pb, kb = child(lane)
        os.waitpid(pb, 0)
        os.write(hw, b"x")
        os.waitpid(pa, 0)
        assert (ka, kb) == (b"0", b"1"), (ka, kb)
        pc, kc = child(lane)         # both gone: lane 0 again
        os.waitpid(pc, 0)
        assert kc == b"0", kc
        print("ok")
    """
    out = run(code, db, env=LANES_ENV)
    assert out.strip().endswith("ok"), out


def test_warm_gives_pages_to_the_slots_the_next_batches_take(db):
    """While a worker waits for a remote dataset's first tiles it warms the lane slots of its
    first window's batches (Placer.warm -> WorkerSlots.warm): they are left free, with their
    pages, and the batches then take those slots without populating more; the estimate of
    each batch's nonzeros (the tiles' mean per cell) is close to what the batch holds."""
    code = """
        from deltacells import _core, _place
        from deltacells.dataset import _placer
        def body(slots, lane):
            shapes = [(300, 50000, "float32"), (300, 40000, "float32")]
            slots.warm(shapes)
            assert lane.n_free() == _xfer.LANE_SLOTS          # every slot free again
            warmed = [i for i in range(_xfer.LANE_SLOTS) if lane.mapped[i]]
            assert len(warmed) == 6, warmed
            before = list(lane.mapped)
            got = [slots.take_batch(n, nnz, dt) for n, nnz, dt in shapes]
            assert list(lane.mapped) == before                # nothing more populated
            used = sorted(int(np.searchsorted(_xfer.OFFS, a.ctypes.data - lane.first, side="right")) - 1
                          for g in got for a in g)
            assert used == warmed, (used, warmed)
            del got
            # the placer's estimate for its first window, against what placing it takes
            class Rec:
                def __init__(self, pool):
                    self.pool, self.shapes, self.taken = pool, None, []
                def warm(self, shapes):
                    self.shapes = shapes
                def take_batch(self, n, nnz, dtype):
                    self.taken.append((n, nnz, np.dtype(dtype).name))
                    return self.pool.take_batch(n, nnz, dtype)
                def take(self, n, dtype):
                    return self.pool.take(n, dtype)
            it = iter(ds)
            rec = Rec(_core.BufferPool())
            placer = _placer(ds, it.batches, it.cuts, 0, rec)
            assert placer is not None
            placer.warm(rec)
            con = ds._open()
            placer.get(con, ds._obs_reader(), 0, rec, None)
            con.close()
            assert rec.shapes and len(rec.shapes) == len(rec.taken), (rec.shapes, rec.taken)
            for (n, est, dt), (n2, nnz, dt2) in zip(rec.shapes, rec.taken):
                assert n == n2 and dt == dt2 and abs(est - nnz) <= 0.25 * nnz + 50, (est, nnz)
    """
    run_in_child(code, db)


def test_a_lane_slot_that_grows_populates_only_its_new_pages(db):
    """A batch larger than any slot this worker filled grows the fullest free slot in place:
    only the pages past what the slot held before are populated (MADV_POPULATE_WRITE), not the
    whole slot again (a 5,000-cell batch of the reference data grew slots a few times per
    epoch, each time populating its whole 40-50 MB again)."""
    code = """
        def body(slots, lane):
            calls = []
            real = _xfer._populate
            def spy(addr, n):
                calls.append((addr - lane.first, n))
                return real(addr, n)
            _xfer._populate = spy
            a = lane.take(300_000, np.int32)            # 1.2 MB: 19 steps of 64 KiB
            i = int(np.searchsorted(_xfer.OFFS, a.ctypes.data - lane.first, side="right")) - 1
            first = lane.mapped[i]
            assert calls == [(int(_xfer.OFFS[i]), first)], calls
            a[:] = 7
            del a
            gc.collect()
            calls.clear()
            b = lane.take(1_000_000, np.int32)           # 4 MB: the same slot, grown
            j = int(np.searchsorted(_xfer.OFFS, b.ctypes.data - lane.first, side="right")) - 1
            assert j == i, (i, j)
            assert calls == [(int(_xfer.OFFS[i]) + first, lane.mapped[i] - first)], calls
            assert (b[:300_000] == 7).all()             # the same pages, kept
            b[:] = 1
            assert lane.mapped[i] == 4_000_000 + (-4_000_000 % 65536), lane.mapped[i]
            calls.clear()
            del b
            gc.collect()
            c = lane.take(900_000, np.int32)             # fits what the slot holds: nothing
            assert calls == [], calls
            del c
    """
    run_in_child(code, db)


def test_warm_gives_private_slots_their_buffers_and_pages_first(db):
    """A worker that copies (private slots: a worker new every epoch) warms too: warm() makes
    the slots' buffers and gives them their pages, leaves every slot free, and the batches
    then take those very buffers (nothing new made)."""
    code = """
        import sys, numpy as np
        from deltacells import _core, _xfer
        if not _xfer.available():
            print("ok (no process_vm_readv here)")
            raise SystemExit
        def resident(a):
            lo = a.ctypes.data & ~4095
            n = (a.ctypes.data + a.nbytes - lo + 4095) // 4096
            import ctypes, mmap
            vec = (ctypes.c_ubyte * n)()
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            assert libc.mincore(lo, n * 4096, vec) == 0, ctypes.get_errno()
            return sum(v & 1 for v in vec) / n
        slots = _xfer.WorkerSlots(_core.BufferPool(), max_slots=12, lane=False)
        shapes = [(300, 400_000, "float32"), (300, 350_000, "float32")]
        slots.warm(shapes)
        assert (slots.ctrl == 0).all()                      # every slot free again
        made = [i for i, b in enumerate(slots.bufs) if b is not None]
        assert len(made) == 6, made
        bufs = {i: slots.bufs[i] for i in made}
        got = [slots.take_batch(n, nnz, dt) for n, nnz, dt in shapes]
        assert all(resident(a) == 1.0 for g in got for a in g)   # their pages came with warm()
        assert [b is not None for b in slots.bufs].count(True) == 6   # nothing new made
        for i in made:
            assert slots.bufs[i] is bufs[i]
        used = sorted(i for g in got for a in g for i in made
                      if bufs[i].ctypes.data <= a.ctypes.data < bufs[i].ctypes.data + bufs[i].nbytes)
        assert used == made, (used, made)
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok") or "no process_vm_readv" in out, out


def test_workers_of_one_epoch_copy_and_persistent_ones_use_their_lane(db):
    """The default way (_xfer.handoff): DataLoader's default workers, new processes every
    epoch, hand batches over copied (mapping a lane's pages would cost each new process
    again); persistent workers use their lane from the first epoch on.  Same cells either way."""
    lanes, avail = _need(db, copy=True)
    code = """
        import sys, torch
        from torch.utils.data import DataLoader
        import deltacells
        from deltacells import _xfer
        ds = deltacells.CellDataset(sys.argv[1], batch_size=100, seed=2, shuffle_window=2)
        def epochs(persistent):
            dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork",
                            persistent_workers=persistent, timeout=60)
            got = []
            for e in range(2):
                ds.set_epoch(e)
                n0, m0 = _xfer.stats["arrays"], _xfer.stats["mapped"]
                ids = []
                for b in dl:
                    ids.append(b["cell_id"])
                    x = b["X"]
                    assert x.shape[0] == len(b["cell_id"]) and x.values().numel() == x.col_indices().numel()
                assert sorted(torch.cat(ids).tolist()) == list(range(1500))
                got.append((_xfer.stats["arrays"] - n0, _xfer.stats["mapped"] - m0))
            return got
        print("fresh", epochs(False))
        print("persistent", epochs(True))
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok"), out
    got = {ln.split(" ", 1)[0]: eval(ln.split(" ", 1)[1]) for ln in out.splitlines()
           if ln.startswith(("fresh ", "persistent "))}
    # 15 batches an epoch, X's three arrays each at least
    assert all(n >= 45 and m == 0 for n, m in got["fresh"]), got
    if lanes == "True":
        assert all(n >= 45 and m == n for n, m in got["persistent"]), got
    else:
        assert all(n >= 45 and m == 0 for n, m in got["persistent"]), got


def test_workers_of_one_epoch_copy_every_batch_of_a_large_window(db):
    """Small batches: placing fills a whole window's batches at once (here the window is the
    whole dataset, 150 batches), and a worker that copies has a private slot for each of their
    arrays; none goes torch's way (a fresh shared-memory segment per tensor).  With 24 slots
    (8 batches) most of a window of 39 batches of 512 cells did: 0.06x the cells/s of 0 workers."""
    _need(db, copy=True)
    code = """
        import sys, torch
        from torch.utils.data import DataLoader
        import deltacells
        from deltacells import _xfer
        ds = deltacells.CellDataset(sys.argv[1], batch_size=10, seed=3, shuffle_window=100)
        dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork",
                        persistent_workers=False, timeout=60)
        ids, nb = [], 0
        for b in dl:
            ids.append(b["cell_id"])
            nb += 1
        assert sorted(torch.cat(ids).tolist()) == list(range(1500))
        print("got", (nb, _xfer.stats["arrays"], _xfer.stats["mapped"]))
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok"), out
    nb, n, m = eval(next(ln for ln in out.splitlines() if ln.startswith("got "))[4:])
    assert nb == 150 and n >= 3 * nb and m == 0, (nb, n, m)


def test_handoff_is_lanes_from_the_second_reader_where_persistence_is_unseen():
    code = """
        import os
        from deltacells import _xfer
        assert _xfer._persistent_worker() is None      # not in torch's worker loop
        os.environ.pop("DELTACELLS_WORKER_HANDOFF", None)
        ways = [_xfer.handoff() for _ in range(3)]
        assert ways == ["copy", "lanes", "lanes"], ways
        pid = os.fork()
        if pid == 0:                                  # a new process counts its own readers
            os._exit(0 if [_xfer.handoff(), _xfer.handoff()] == ["copy", "lanes"] else 1)
        assert os.waitpid(pid, 0)[1] == 0
        for forced in ("lanes", "copy"):
            os.environ["DELTACELLS_WORKER_HANDOFF"] = forced
            assert _xfer.handoff() == forced
        print("ok")
    """
    out = run(code, "-")
    assert out.strip().endswith("ok"), out


def test_receive_buffers_stay_private_across_a_fork(db):
    """The main process copies workers' arrays into private buffers of its own pool.  At a
    fork (the next epoch's workers) a buffer the user still views goes to the child with its
    data, and the pool does not write into it again until a later fork finds it idle; an idle
    buffer stays in the pool and the child finds zeros there, not the parent's pages (so the
    parent's next write into it takes no copy-on-write fault).  After the fork the idle buffer
    is no longer marked wipe-on-fork."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    code = """
        import os, numpy as np
        from deltacells import _xfer
        pool = _xfer._recv_pool()
        held = pool.take(1 << 20, np.int32)
        held[:] = 7
        idle = pool.take(1 << 20, np.int32)
        idle[:] = 5
        a_held, a_idle = held.ctypes.data, idle.ctypes.data
        del idle

        def vma(addr):
            out, cur = None, None
            for ln in open("/proc/self/smaps"):
                f = ln.split()
                if "-" in f[0] and len(f) >= 5:
                    lo, hi = (int(x, 16) for x in f[0].split("-"))
                    cur = {"perms": f[1]} if lo <= addr < hi else None
                    if cur is not None:
                        out = cur
                elif cur is not None and f[0] == "VmFlags:":
                    cur["flags"] = f[1:]
            return out

        assert vma(a_held)["perms"] == "rw-p" and vma(a_idle)["perms"] == "rw-p"
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            ok = int(held.sum()) == 7 * (1 << 20)
            mine = [b for b in pool._bufs if b.ctypes.data == a_idle]
            ok = ok and len(mine) == 1 and not mine[0].any()
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.close(w)
        assert os.read(r, 1) == b"1", "the child read the wrong data"
        assert os.waitpid(pid, 0)[1] == 0
        assert "wf" not in vma(a_idle)["flags"], vma(a_idle)
        assert int(held.sum()) == 7 * (1 << 20)
        del held                           # idle now, but its pages may still be the child's
        again = pool.take(1 << 20, np.int32)
        assert again.ctypes.data == a_idle and int(again.sum()) == 5 * (1 << 20)
        other = pool.take(1 << 20, np.int32)
        assert other.ctypes.data not in (a_idle, a_held), "wrote into a buffer a child shares"
        del again, other
        pid = os.fork()                    # finds it idle: wiped for this child, reused after
        if pid == 0:
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        taken = [pool.take(1 << 20, np.int32) for _ in range(3)]
        assert a_held in {t.ctypes.data for t in taken}, "a buffer idle at a fork is used again"
        print("ok")
    """
    out = run(code, db)
    assert out.strip().endswith("ok"), out


RESUME = """
    import sys
    from torch.utils.data import DataLoader
    import deltacells
    db, kw = sys.argv[1], KW

    def batches(loader):
        return [b["cell_id"].tolist() for b in loader]

    def ref(epoch, done=0):
        r = deltacells.CellDataset(db, batch_size=100, seed=5, shuffle_window=2)
        r.set_epoch(epoch)
        return batches(DataLoader(r, batch_size=None, **dict(kw, persistent_workers=False)))[done:]

    ds = deltacells.CellDataset(db, batch_size=100, seed=5, shuffle_window=2)
    state = ds.state_dict(batches_done=3)
    ds.load_state_dict(state)
    loader = DataLoader(ds, batch_size=None, **kw)
    # the resume applies to the next epoch only: the loader's later ones are whole
    got = [batches(loader) for _ in range(3)]
    assert got == [ref(0, 3), ref(0), ref(0)], [sum(map(len, g)) for g in got]
    assert sorted(sum(got[1], [])) == list(range(1500))
    # resumed between epochs (persistent workers already run): set_epoch of the same epoch
    # keeps it, the next epoch is whole
    ds.set_epoch(1)
    ds.load_state_dict(dict(state, epoch=1, batches_done=5))
    ds.set_epoch(1)
    assert batches(loader) == ref(1, 5)
    ds.set_epoch(2)
    assert batches(loader) == ref(2)
    # set_epoch of another epoch drops it
    ds.load_state_dict(dict(state, epoch=2, batches_done=1))
    ds.set_epoch(3)
    assert batches(loader) == ref(3)
    print("ok")
"""


@pytest.mark.parametrize("workers,persistent,start", [
    (0, False, None), (1, False, "fork"), (2, False, "fork"), (2, True, "fork"), (2, True, "spawn")])
def test_resume_applies_to_the_next_epoch_only(db, workers, persistent, start):
    kw = dict(num_workers=workers, persistent_workers=persistent, multiprocessing_context=start)
    out = run(RESUME.replace("KW", repr(kw)), db)
    assert "ok" in out.split(), out


FIRST_TURN = """
    import sys, time, numpy as np, torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info
    import deltacells
    from deltacells import dataset as dsm
    db = sys.argv[1]

    class Probe(IterableDataset):
        # each worker's first batch with: its id, when its turn came (worker 0: when it marked
        # its first batch made; the others: when their wait ended; CLOCK_MONOTONIC is the
        # system's, comparable across processes; -1: no turn), how long it waited for worker 0
        # (-1: it did not wait), and its decoder threads after that batch
        def __init__(self, ds):
            self.ds = ds
        def __iter__(self):
            it = iter(self.ds)
            first = True
            for b in it:
                if first:
                    first = False
                    t = it.first_turn_at if it.first_turn_at is not None else -1.0
                    th = int(it._con.execute("SELECT dc_config('threads')").fetchone()[0])
                    b["_probe"] = torch.tensor([get_worker_info().id, t,
                                                (it.timings or {}).get("first_wait", -1.0), th,
                                                dsm.worker_threads(2)], dtype=torch.float64)
                yield b

    dsm.FIRST_WAIT_S = 300.0      # worker 1 waits for worker 0 however slow the machine (sanitizers)
    ds = deltacells.CellDataset(db, batch_size=BATCH, seed=2, timings=True, shuffle_window=2)   # windows for both
    ref = sorted(int(c) for b in DataLoader(ds, batch_size=None) for c in b["cell_id"])
    loader = DataLoader(Probe(ds), batch_size=None, num_workers=2, persistent_workers=PERSISTENT,
                        multiprocessing_context="fork")
    for epoch in range(2):
        ds.set_epoch(epoch)
        probes, cells = {}, []
        for b in loader:
            cells += b["cell_id"].tolist()
            if "_probe" in b:
                w, t, wait, th, share = b["_probe"].tolist()
                probes[int(w)] = (t, wait, int(th), int(share))
        assert sorted(cells) == ref
        assert set(probes) == {0, 1}, probes
        (t0, wait0, th0, share), (t1, wait1, th1, _) = probes[0], probes[1]
        if epoch == 0 or not PERSISTENT:
            # a worker's first epoch (workers new every epoch: every epoch): worker 1 waited for
            # worker 0's first call; its wait ended after worker 0 had marked it done
            assert wait0 == -1.0 and wait1 >= 0.0, probes
            assert t0 > 0 and t1 >= t0, probes
        else:
            # a persistent worker's later epochs: no turns
            assert wait0 == wait1 == t0 == t1 == -1.0, probes
        # worker 0 is back on its share of the cores after its first batch
        assert th0 == th1 == share, probes
    print("ok")
"""


@pytest.mark.parametrize("batch,persistent", [(100, True), (400, True), (400, False)])
def test_worker_0_makes_the_first_batch_while_the_others_wait(db, batch, persistent):
    """_BatchIterator._first_turn: in a worker's first epoch (workers new every epoch: every
    epoch) worker 0 places first (its first batch alone where its lane is cold, else its first
    window), on every core, while worker 1 waits for it (the loader's first batch is worker
    0's); then each has its share of the cores again; a persistent worker's later epochs take
    no turns.  The batches are those of 0 workers."""
    code = FIRST_TURN.replace("BATCH", str(batch)).replace("PERSISTENT", str(persistent))
    out = run(code, db)
    assert "ok" in out.split(), out


TURN_WAIT = """
    import os, sys, time
    from deltacells import _xfer
    ar = _xfer.arena()
    assert _xfer.first_batch_wait(7, 5.0) is None       # the arena's own process: nothing to wait on
    assert not _xfer.first_batch_mark(7)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # worker 0: marks after 0.3 s
        time.sleep(0.3)
        _xfer.first_batch_mark(11)
        os._exit(0)
    pid2 = os.fork()
    if pid2 == 0:                                         # worker 1: waits for it
        t = time.monotonic()
        waited = _xfer.first_batch_wait(11, 10.0)
        ok = 0.2 < waited < 5.0 and time.monotonic() - t < 5.0
        # a generation whose worker 0 never marks: at most the timeout
        t = time.monotonic()
        waited2 = _xfer.first_batch_wait(12, 0.2)
        ok = ok and 0.2 <= waited2 < 2.0 and time.monotonic() - t < 2.0
        # a mark already there: no wait
        ok = ok and _xfer.first_batch_wait(11, 10.0) < 0.5
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0); os.waitpid(pid2, 0)
    assert os.read(r, 1) == b"1"
    print("ok")
"""


def test_first_batch_wait_returns_at_the_mark_or_the_timeout(db):
    out = run(TURN_WAIT, db)
    assert "ok" in out.split(), out
