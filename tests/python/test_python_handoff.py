"""The loader's hand-off (issue 10): results copied once into reused buffers through a
dc_batch ticket, narrow dtypes, per-stage timings, no process-wide side effects on import,
deterministic closing."""
import ctypes
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT, gen, read_h5ad, reindexed_X, stored_gene_names  # noqa: E402

import deltacells  # noqa: E402
from deltacells import _core  # noqa: E402

N_CELLS, N_GENES, TILE = 2000, 200, 300


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("py_handoff"), N_CELLS, N_GENES, 7, TILE)


@pytest.fixture(scope="module")
def ref(small):
    return reindexed_X(read_h5ad(small[0]), stored_gene_names(small[1]))


def _run(code, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("DELTACELLS_MALLOC_TUNE", None)
    p = subprocess.run([PY, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


# --- buffers ---------------------------------------------------------------------------
def test_kept_batches_are_not_overwritten(small, ref):
    """Buffers are reused only once a batch is dropped: batches kept alive stay intact."""
    for prefetch in (0, 2):
        ds = deltacells.CellDataset(small[1], batch_size=300, seed=1, prefetch_tiles=prefetch,
                                    output="csr_parts")
        kept = list(ds)
        seen = 0
        for b in kept:
            ids = b["cell_id"].numpy()
            assert np.array_equal(b["X"].to_dense().numpy(), ref[ids].toarray())
            seen += len(ids)
        assert seen == N_CELLS


def test_carried_parts_of_batches_reuse_buffers(small, ref, monkeypatch):
    """Batches larger than a shuffle window (1,000 cells; windows of two 300-cell tiles) are
    each made from parts of two or three windows; a part waits for the next window in buffers
    of the pool's side pool, which goes from epoch to epoch with the pool, so a later epoch
    allocates nothing (fresh arrays for every part had faulted in 2,000-5,000 pages an epoch
    of a where= selection), and every batch is right."""
    sizes = []
    real = _core._alloc
    monkeypatch.setattr(_core, "_alloc", lambda n: sizes.append(n) or real(n))
    monkeypatch.setattr(_core, "_spare", {"pid": None, "pools": []})
    ds = deltacells.CellDataset(small[1], batch_size=1000, seed=2, prefetch_tiles=0, output="csr_parts",
                                shuffle_window=2)
    assert ds.shuffle_window * TILE < 1000
    for epoch in range(3):
        ds.set_epoch(epoch)
        n_before, n = len(sizes), 0
        with iter(ds) as it:
            for b in it:
                ids = b["cell_id"].numpy()
                n += len(ids)
                assert np.array_equal(b["X"].to_dense().numpy(), ref[ids].toarray())
                del b
        assert n == N_CELLS
        side = _core._spare["pools"][0].side()
        if epoch == 0:
            assert len(side._bufs) >= 2          # the parts came from it
        else:
            assert len(sizes) == n_before, f"epoch {epoch} allocated {len(sizes) - n_before} buffers"


def test_dropped_batches_reuse_buffers(small, ref):
    """A loop that keeps no batch touches the same few buffers (a window's: two 300-cell tiles
    here), and every batch is right."""
    ds = deltacells.CellDataset(small[1], batch_size=250, seed=2, prefetch_tiles=0,
                                output="csr_parts", shuffle_window=2)
    ptrs = set()
    with iter(ds) as it:
        for b in it:
            X = b["X"]
            ptrs.add(X.values.data_ptr())
            ids = b["cell_id"].numpy()
            assert np.array_equal(X.to_dense().numpy(), ref[ids].toarray())
            del X, b
    assert len(ptrs) <= 3, f"{len(ptrs)} distinct value buffers for {len(ds)} batches"


@pytest.mark.parametrize("prefetch", [0, 2])
def test_later_epochs_reuse_the_buffers_of_earlier_ones(small, ref, prefetch, monkeypatch):
    """An epoch's iterator hands its pool on to the next one: epoch 1 allocates no buffer
    (fresh pages cost more than decoding on some machines), and a batch the user kept from
    epoch 2 stays intact while the rest of it runs (its buffers are not reused under it)."""
    sizes = []
    real = _core._alloc
    monkeypatch.setattr(_core, "_alloc", lambda n: sizes.append(n) or real(n))
    monkeypatch.setattr(_core, "_spare", {"pid": None, "pools": []})
    ds = deltacells.CellDataset(small[1], batch_size=250, seed=2, prefetch_tiles=prefetch,
                                output="csr_parts")
    kept = None
    for epoch in range(3):
        ds.set_epoch(epoch)
        n_before = len(sizes)
        with iter(ds) as it:
            for i, b in enumerate(it):
                ids = b["cell_id"].numpy()
                assert np.array_equal(b["X"].to_dense().numpy(), ref[ids].toarray())
                if epoch == 2 and i == 3:
                    kept = (ids.copy(), b["X"])
                del b
        assert len(_core._spare["pools"]) == 1
        if epoch == 0:
            assert len(sizes) > n_before
            pool = _core._spare["pools"][0]
        else:
            assert _core._spare["pools"][0] is pool       # the same pool went round
        if epoch == 1 and prefetch == 0:
            # (with a prefetch thread, how far it runs ahead varies, and so may the number of
            # buffers in use at once)
            assert len(sizes) == n_before, f"epoch 1 allocated {len(sizes) - n_before} buffers"
    ids, X = kept
    assert np.array_equal(X.to_dense().numpy(), ref[ids].toarray())


def test_a_forked_child_does_not_take_its_parents_spare_pool(small):
    out = _run(f"""
        import os, sys, deltacells
        from deltacells import _core
        ds = deltacells.CellDataset({str(small[1])!r}, batch_size=250, prefetch_tiles=0)
        for b in ds:
            pass
        assert len(_core._spare["pools"]) == 1
        parent = _core._spare["pools"][0]
        pid = os.fork()
        if pid == 0:
            got = _core.new_pool()
            os._exit(0 if got is not parent and not got._bufs else 3)
        _, st = os.waitpid(pid, 0)
        assert st == 0, st
        assert _core.new_pool() is parent
        print("ok")
    """)
    assert out.strip().endswith("ok"), out


def test_pool_keeps_live_views():
    pool = _core.BufferPool(keep=2)
    a = pool.take(1000, np.float32)
    a[:] = 1
    b = pool.take(1000, np.float32)
    assert a.ctypes.data != b.ctypes.data
    b[:] = 2
    assert (a == 1).all()
    addr = a.ctypes.data
    del a
    c = pool.take(900, np.int32)          # reuses the dropped buffer
    assert c.ctypes.data == addr and c.dtype == np.int32 and len(c) == 900


@pytest.mark.parametrize("nbytes", [5000, (1 << 20) + 7, (5 << 20) - 3])
def test_private_buffers_come_in_whole_aligned_huge_pages_and_stay_busy_while_viewed(nbytes):
    """_xfer's private buffers (the main process's receive pool, a worker's slots): from
    HUGE_MIN up whole 2 MiB pages starting on a 2 MiB boundary, advised for huge pages, so that
    the kernel can put huge pages everywhere in them; a pool over them reuses one only once no
    view of it is left (numpy hands a view of a view the first one's base: an aligned slice of a
    larger array would have looked idle while viewed)."""
    from deltacells import _xfer
    huge = _xfer.HUGE
    b = _xfer._private_alloc(nbytes)
    if nbytes >= _xfer.HUGE_MIN:
        assert b.nbytes % huge == 0 and nbytes <= b.nbytes < nbytes + huge
        assert b.ctypes.data % huge == 0
    else:
        assert b.nbytes == nbytes
    b[:] = 9                                # all of it is writable
    if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"):     # a kernel with THP
        flags = None
        for ln in open("/proc/self/smaps"):
            f = ln.split()
            if "-" in f[0] and len(f) >= 5:
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                inside = lo <= b.ctypes.data < hi
            elif inside and f[0] == "VmFlags:":
                flags = f[1:]
        assert flags is not None and "hg" in flags, flags
    pool = _core.BufferPool(keep=4, alloc=_xfer._private_alloc)
    n = nbytes // 4
    x = pool.take(n, np.int32)
    x[:] = 1
    y = pool.take(n, np.int32)              # x is viewed: another buffer
    assert x.ctypes.data != y.ctypes.data
    y[:] = 2
    assert (x == 1).all()
    addr = x.ctypes.data
    del x
    z = pool.take(n, np.int32)              # x's buffer is idle again
    assert z.ctypes.data == addr


def test_a_workers_large_private_slots_are_huge_page_aligned():
    from deltacells import _xfer
    slots = _xfer.WorkerSlots(_core.BufferPool(), max_slots=6, lane=False)
    ip, ix, dv = slots.take_batch(128, 300_000, np.float32)
    assert ix.ctypes.data % _xfer.HUGE == 0 and dv.ctypes.data % _xfer.HUGE == 0
    assert len(ix) == len(dv) == 300_000 and len(ip) == 129


def test_a_worker_makes_its_first_batch_alone_only_while_its_lane_was_never_filled():
    """_place.first_alone: a worker whose lane no worker ever filled (a persistent worker's
    first epoch) makes its first batch alone, so that it does not wait for a whole window of
    fresh shared pages; once the lane was filled (its next epochs, a later worker on the same
    lane) windows are whole; a worker that copies (private slots) never makes it alone."""
    from deltacells import _place, _xfer
    ar = _xfer.Arena(2)
    slots = _xfer.WorkerSlots(_core.BufferPool(), max_slots=6, lane=False)
    assert not _place.first_alone(slots)
    slots.lane = _xfer._Lane(ar, 1)
    assert _place.first_alone(slots)
    got = slots.lane.take_batch(10, 1000, np.float32)
    assert all(a is not None for a in got)
    del got                                  # never sent: free again, the pages stay
    assert not _place.first_alone(slots)
    later = _xfer.WorkerSlots(_core.BufferPool(), max_slots=6, lane=False)
    later.lane = _xfer._Lane(ar, 1)
    assert not _place.first_alone(later)
    later.lane = _xfer._Lane(ar, 0)
    assert _place.first_alone(later)


# --- the ticket ------------------------------------------------------------------------
def test_ticket_once_and_unknown(small):
    fn = _core._ticket_take_fn()
    assert fn is not None, "the extension's deltacells_ticket_take is not reachable"
    con = deltacells.connect(small[1])
    ids = np.array([5, 3, 1999], dtype=np.int64)
    n, g, nnz, t = con.execute("SELECT n_cells, n_genes, length(data)/4, ticket FROM dc_batch(?)",
                               (ids.tobytes(),)).fetchone()
    blobs = con.execute("SELECT indptr, indices, data FROM dc_batch(?)", (ids.tobytes(),)).fetchone()
    ip = np.zeros(n + 1, np.int32)
    ix = np.zeros(nnz, np.int32)
    dv = np.zeros(nnz, np.float32)
    bad = ctypes.c_int64()
    assert fn(t, n, nnz, ip.ctypes.data, ix.ctypes.data, dv.ctypes.data, 1, ctypes.byref(bad),
              ctypes.byref(bad)) == 0
    assert np.array_equal(ip, np.frombuffer(blobs[0], np.int64))
    assert np.array_equal(ix, np.frombuffer(blobs[1], np.int32))
    assert np.array_equal(dv, np.frombuffer(blobs[2], np.int32).astype(np.float32))
    # taken once: a second take, a made-up ticket, wrong sizes are refused (no memory access)
    assert fn(t, n, nnz, ip.ctypes.data, ix.ctypes.data, dv.ctypes.data, 1, None, None) == -1
    assert fn(123456789, n, nnz, ip.ctypes.data, ix.ctypes.data, dv.ctypes.data, 1, None, None) == -1
    t2 = con.execute("SELECT ticket FROM dc_batch(?)", (ids.tobytes(),)).fetchone()[0]
    assert fn(t2, n + 1, nnz, ip.ctypes.data, ix.ctypes.data, dv.ctypes.data, 1, None, None) == -1
    # many tickets never taken: the old ones are released, the newest still works
    ts = [con.execute("SELECT ticket FROM dc_batch(?)", (ids.tobytes(),)).fetchone()[0]
          for _ in range(10)]
    assert fn(ts[0], n, nnz, ip.ctypes.data, ix.ctypes.data, dv.ctypes.data, 1, None, None) == -1
    assert fn(ts[-1], n, nnz, ip.ctypes.data, ix.ctypes.data, dv.ctypes.data, 0, None, None) == 0
    con.close()


def _take(fn, t, n, nnz, kind, dt):
    ip = np.full(n + 1, -7, np.int32)
    ix = np.full(nnz, -7, np.int32)
    dv = np.zeros(nnz, dt)
    bad, at = ctypes.c_int64(), ctypes.c_int64()
    rc = fn(t, n, nnz, ip.ctypes.data, ix.ctypes.data, dv.ctypes.data, kind, ctypes.byref(bad),
            ctypes.byref(at))
    return rc, ip, ix, dv, bad.value, at.value


@pytest.mark.parametrize("shape", ["shuffled", "in_order", "panel"])
def test_ticket_every_kind_equals_the_blobs(small, shape):
    """Shuffled cells with repeats leave their rows to the ticket (copied from the decoded
    chunks at the take); whole chunks in order and gene panels are gathered in xFilter.
    Every value kind of every shape equals the SQL blobs, and nnz = length(data) / 4."""
    fn = _core._ticket_take_fn()
    con = deltacells.connect(small[1])
    rng = np.random.default_rng(5)
    if shape == "in_order":
        ids, arg = np.arange(0, 900, dtype=np.int64), ()
    else:
        ids = rng.integers(0, N_CELLS, 700).astype(np.int64)
        ids[:3] = ids[3]                                   # repeats
        arg = ()
    sql = "FROM dc_batch(?)"
    if shape == "panel":
        names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")][::3]
        arg = (json.dumps(names[::-1]),)
        sql = "FROM dc_batch(?, ?)"
    for kind, dt in enumerate([np.int32, np.float32, np.int16, np.int8, np.uint8, np.float64,
                               np.int64]):
        n, nnz, t = con.execute(f"SELECT n_cells, nnz, ticket {sql}", (ids.tobytes(),) + arg).fetchone()
        ip, ix, dv = con.execute(f"SELECT indptr, indices, data {sql}", (ids.tobytes(),) + arg).fetchone()
        ip, ix, dv = (np.frombuffer(ip, np.int64), np.frombuffer(ix, np.int32),
                      np.frombuffer(dv, np.int32))
        assert nnz == len(dv) and n == len(ids)
        rc, gip, gix, gdv, bad, at = _take(fn, t, n, nnz, kind, dt)
        info = np.iinfo(dt) if np.issubdtype(dt, np.integer) else None
        if info is not None and (dv.min() < info.min or dv.max() > info.max):
            first = int(np.flatnonzero((dv < info.min) | (dv > info.max))[0])
            assert (rc, at, bad) == (-2, first, int(dv[first])), (kind, rc, at, bad, first)
            continue
        assert rc == 0, (kind, rc)
        assert np.array_equal(gip, ip) and np.array_equal(gix, ix)
        assert np.array_equal(gdv, dv.astype(dt)), kind
    con.close()


def test_ticket_of_a_closed_connection_is_unknown(small):
    """A ticket whose rows wait in its connection's decoded chunks dies with the connection:
    taking it then is refused (-1), never a read of freed memory."""
    fn = _core._ticket_take_fn()
    con = deltacells.connect(small[1])
    ids = np.array([9, 1500, 3, 9], dtype=np.int64)
    n, nnz, t = con.execute("SELECT n_cells, nnz, ticket FROM dc_batch(?)", (ids.tobytes(),)).fetchone()
    con.close()
    assert _take(fn, t, n, nnz, 1, np.float32)[0] == -1


def test_ticket_survives_a_thread_count_change(small):
    """dc_config('threads') replaces the pool between dc_batch and the take: the take uses
    the new pool (or none) and gives the same rows."""
    fn = _core._ticket_take_fn()
    con = deltacells.connect(small[1])
    ids = np.random.default_rng(2).integers(0, N_CELLS, 1200).astype(np.int64)
    want = con.execute("SELECT indices, data FROM dc_batch(?)", (ids.tobytes(),)).fetchone()
    con.execute("SELECT dc_config('threads', 2)").fetchone()
    n, nnz, t = con.execute("SELECT n_cells, nnz, ticket FROM dc_batch(?)", (ids.tobytes(),)).fetchone()
    con.execute("SELECT dc_config('threads', 1)").fetchone()
    rc, ip, ix, dv, _, _ = _take(fn, t, n, nnz, 0, np.int32)
    assert rc == 0
    assert np.array_equal(ix, np.frombuffer(want[0], np.int32))
    assert np.array_equal(dv, np.frombuffer(want[1], np.int32))
    con.close()


def test_read_batch_does_not_echo_ids(small):
    con = deltacells.connect(small[1])
    ids = np.array([7, 2, 7], dtype=np.int64)
    out = _core.read_batch(con, ids)
    assert out[0] is ids or np.shares_memory(out[0], ids)
    con.close()


# --- dtypes ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64, torch.float64,
                                   torch.float16, torch.float32])
def test_dtypes_equal_counts(small, ref, dtype):
    ds = deltacells.CellDataset(small[1], batch_size=700, seed=3, dtype=dtype, output="csr_parts")
    n = 0
    for b in ds:
        assert b["X"].values.dtype == dtype
        ids = b["cell_id"].numpy()
        got = b["X"].to_dense().to(torch.float64).numpy()
        want = torch.from_numpy(ref[ids].toarray()).to(dtype).to(torch.float64).numpy()
        assert np.array_equal(got, want)     # float16 rounds counts above 2048, as torch does
        n += len(ids)
    assert n == N_CELLS


def test_narrow_dtype_overflow_names_the_cell(small, ref):
    big = int(ref.data.max())
    assert big > 127, "the fixture needs a count above 127"
    for row in range(ref.shape[0]):
        if ref[row].toarray().max() > 127:
            break
    ds = deltacells.CellDataset(small[1], batch_size=N_CELLS, shuffle=False, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"cell \d+ has a count of \d+, which does not fit int8"):
        next(iter(ds))
    ds = deltacells.CellDataset(small[1], cells=[row], dtype=torch.uint8, prefetch_tiles=0)
    with pytest.raises(ValueError, match=rf"cell {row} has a count of"):
        next(iter(ds))


# --- timings ---------------------------------------------------------------------------
@pytest.mark.parametrize("place", ["1", "0"])
def test_timings_name_every_stage(small, monkeypatch, place):
    """Placing (a window's batches decoded straight into their buffers) and reading batch by
    batch (DELTACELLS_PLACE=0) each name their stages."""
    monkeypatch.setenv("DELTACELLS_PLACE", place)
    ds = deltacells.CellDataset(small[1], batch_size=500, prefetch_tiles=0, timings=True,
                                obs=["cell_type"])
    with iter(ds) as it:
        n = sum(1 for _ in it)
        tm = it.timings
    assert tm["batches"] == n == len(ds)
    stages = ("sql_call", "ext_plan", "ext_fetch", "place", "tensor", "obs") if place == "1" else \
        ("sql_call", "ext_plan", "ext_fetch", "ext_direct", "ext_copy", "copy_out", "tensor", "obs")
    for k in stages:
        assert k in tm and tm[k] >= 0, k
    assert ("copy_out" in tm) == (place == "0") and ("place" in tm) == (place == "1")
    assert tm["ext_plan"] + tm["ext_fetch"] + tm.get("ext_direct", 0) + tm.get("ext_copy", 0) <= tm["sql_call"]
    assert ds.last_timings is tm
    assert deltacells.CellDataset(small[1]).last_timings is None


# --- side effects, hygiene -------------------------------------------------------------
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="under ASan, its allocator replaces glibc's malloc (no mallopt to apply)")
def test_import_changes_no_malloc_setting():
    out = _run("""
        import ctypes
        before = ctypes.CDLL(None).mallopt   # glibc's mallopt exists; nothing to compare
        import deltacells, deltacells._malloc as m
        print(m.applied)
    """)
    assert out.split() == ["False"]
    out = _run("""
        import os
        os.environ["DELTACELLS_MALLOC_TUNE"] = "1"
        import deltacells, deltacells._malloc as m
        print(m.applied)
    """)
    assert out.split() == ["True"]


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "deltacells-prefetch"]


def test_iterator_context_closes_thread_and_connection(small):
    ds = deltacells.CellDataset(small[1], batch_size=100, prefetch_tiles=4)
    with iter(ds) as it:
        next(it)
        assert len(_prefetch_threads()) == 1
    assert it._prod is None and it._con is None
    assert not _prefetch_threads()
    with pytest.raises(StopIteration):
        next(it)


def test_dropping_an_iterator_does_not_block(small):
    """Dropping an iterator tells its prefetch thread to stop and never joins it (a join in
    __del__ can deadlock).  Checked by recording joins, not by timing (which fails under load);
    the 30 s bound only catches a hang."""
    ds = deltacells.CellDataset(small[1], batch_size=100, prefetch_tiles=4)
    it = iter(ds)
    next(it)
    thread = it._prod.thread
    joins = []
    real_join = thread.join
    thread.join = lambda *a, **k: (joins.append(a), real_join(*a, **k))[1]
    t = time.perf_counter()
    del it
    gc.collect()
    assert joins == [], "dropping the iterator joined its prefetch thread"
    assert time.perf_counter() - t < 30
    deadline = time.time() + 10
    while _prefetch_threads() and time.time() < deadline:
        time.sleep(0.02)
    assert not _prefetch_threads(), "the prefetch thread of a dropped iterator did not end"


def test_map_dataset_close(small, ref):
    m = deltacells.CellMapDataset(small[1])
    with m:
        x = m.batch([4, 9])["X"].to_dense().numpy()
        held = m._slot._local.held
        con = held.con
    assert m._slot._local.held is None
    with pytest.raises(Exception):
        con.execute("SELECT 1")
    assert np.array_equal(x, ref[[4, 9]].toarray())
    assert np.array_equal(m.batch([4, 9])["X"].to_dense().numpy(), x)   # reopens
    m.close()


def test_pool_empty_arrays():
    pool = _core.BufferPool()
    for dt in (np.int32, np.float64, np.int16):
        a = pool.take(0, dt)
        assert a.shape == (0,) and a.dtype == dt


def test_large_pool_buffers_are_writable_and_reused():
    pool = _core.BufferPool()
    a = pool.take(5 << 20, np.float32)
    assert a.flags.writeable and len(a) == 5 << 20
    a[:] = 3
    t = torch.from_numpy(a)
    assert float(t.sum()) == 3 * (5 << 20)
    addr = a.ctypes.data
    del a, t
    b = pool.take(4 << 20, np.int32)
    assert b.ctypes.data == addr


# --- read_csr: whole selections into one CSR (to_anndata, bench/compare_formats.py) ------
@pytest.mark.parametrize("chunk,hint", [(20000, 0), (300, 0), (333, 10), (256, None)])
def test_read_csr_matches_source(small, ref, chunk, hint):
    """Every cell (or an unordered subset) through read_csr equals the source matrix, whatever
    the chunking and whether the nnz hint is absent, too small or exact."""
    con = _core.with_connection(small[1])
    try:
        ids = np.arange(N_CELLS, dtype=np.int64)
        if hint is None:
            hint = int(con.execute("SELECT sum(nnz) FROM tiles").fetchone()[0])
        ip, ix, dt, g = _core.read_csr(con, ids, chunk_cells=chunk, nnz_hint=hint)
        assert g == N_GENES and ip.dtype == np.int64 and ix.dtype == np.int32
        import scipy.sparse as sp
        got = sp.csr_matrix((dt, ix, ip), shape=(N_CELLS, g))
        assert (got != ref).nnz == 0
        sub = np.array([1999, 5, 5, 700, 0], dtype=np.int64)
        ip, ix, dt, g = _core.read_csr(con, sub, chunk_cells=2)
        got = sp.csr_matrix((dt, ix, ip), shape=(len(sub), g))
        assert (got != ref[sub]).nnz == 0
    finally:
        con.close()


def test_read_csr_without_the_ticket_path(small, ref, monkeypatch):
    """When the extension's ticket entry point cannot be had, read_csr falls back to
    Python's sqlite3 blobs and gives the same matrix."""
    monkeypatch.setattr(_core, "_ticket_take_fn", lambda: None)
    con = _core.with_connection(small[1])
    try:
        ip, ix, dt, g = _core.read_csr(con, np.arange(N_CELLS, dtype=np.int64), chunk_cells=700)
        import scipy.sparse as sp
        assert (sp.csr_matrix((dt, ix, ip), shape=(N_CELLS, g)) != ref).nnz == 0
        ip, ix, dt, g = _core.read_csr(con, np.zeros(0, dtype=np.int64))
        assert len(ip) == 1 and len(ix) == 0 and g == N_GENES
    finally:
        con.close()
