"""Placing (issue 10): a window's batches decoded straight into their buffers (dc_batch's place
argument, deltacells_ticket_place, python/deltacells/_place.py) must give exactly the batches
of reading them one by one (DELTACELLS_PLACE=0): the same cells in the same order, the same X
(indices, values, dtype) and the same obs values and dtypes; whatever the batch size against
the windows (batches inside a window, spanning two, longer than a window), with where-filters,
obs columns with NULLs, prefetch on and off, in DataLoader workers, when resuming and with pad
batches, with gene panels too (each placed row filtered to the panel where it lies, then the
batch packed); and where it cannot place (a zstd tile, a narrow dtype) it reads the usual way.  The SQL side: cell_nnz, its refusals and the ticket's errors."""
import ctypes
import json
import os
import shutil
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import convert, gen, read_h5ad, reindexed_X, stored_gene_names  # noqa: E402

import deltacells  # noqa: E402
from deltacells import _core  # noqa: E402

N_CELLS, N_GENES, TILE = 2000, 300, 300     # 7 tiles: windows of 600 cells (shuffle_window 2)
OBS = ["cell_type", "batch", "age", "percent_mt", "is_doublet", "barcode", "score"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("place")
    h5, db = gen(d, N_CELLS, N_GENES, 5, TILE)
    # an int column with NULLs in some windows only, and one of ints beyond 2^53 with NULLs:
    # the extension sends such ints as float64 for a call that holds a NULL
    import pandas as pd
    names = [r[0] for r in deltacells.connect(db).execute("SELECT name FROM cells ORDER BY cell_id")]
    score = pd.array([None if i % 97 == 0 and i < 900 else i * 3 for i in range(N_CELLS)], dtype="Int64")
    big = pd.array([None if i % 50 == 0 else 2 ** 60 + i for i in range(N_CELLS)], dtype="Int64")
    deltacells.annotate(db, pd.DataFrame({"score": score, "big": big}, index=names))
    return h5, db


def batches(db, place, **kw):
    kw.setdefault("shuffle_window", 2)          # windows of 600 cells (the default: every tile)
    os.environ["DELTACELLS_PLACE"] = place
    try:
        ds = deltacells.CellDataset(db, **kw)
        with iter(ds) as it:
            out = [next(it)]
            placer, prod = it._placer, it._prod
            out += list(it)
        # whether the reader placed every window (None: the prefetch thread's placer, not seen)
        return out, (placer is not None and not placer.off) if prod is None else None
    finally:
        os.environ.pop("DELTACELLS_PLACE", None)


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        assert np.array_equal(np.asarray(x["cell_id"]), np.asarray(y["cell_id"]))
        X, Y = x["X"], y["X"]
        if isinstance(X, torch.Tensor) and X.layout == torch.sparse_csr:
            assert X.shape == Y.shape and X.values().dtype == Y.values().dtype
            assert torch.equal(X.crow_indices(), Y.crow_indices())
            assert torch.equal(X.col_indices(), Y.col_indices())
            assert torch.equal(X.values(), Y.values())
        elif isinstance(X, torch.Tensor):
            assert X.dtype == Y.dtype and torch.equal(X, Y)
        else:                                   # scipy
            assert X.dtype == Y.dtype and (X != Y).nnz == 0 and np.array_equal(X.indptr, Y.indptr)
        for k in x:
            if k in ("X", "cell_id"):
                continue
            p, q = np.asarray(x[k]), np.asarray(y[k])
            assert p.dtype == q.dtype, (k, p.dtype, q.dtype)
            assert np.array_equal(p, q, equal_nan=p.dtype.kind == "f"), k


@pytest.mark.parametrize("batch_size", [7, 250, 600, 1000, 2000])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_placed_equals_read_one_by_one(small, batch_size, prefetch):
    """Batches inside a window (600 = one window), spanning two (250), longer than a window
    (1000: a batch takes two whole windows' parts), one batch for all (2000), tiny ones (7)."""
    kw = dict(batch_size=batch_size, seed=4, prefetch_tiles=prefetch, obs=OBS + ["big"])
    new, placed = batches(small[1], "1", **kw)
    old, _ = batches(small[1], "0", **kw)
    same(new, old)
    assert placed in (True, None)               # None: the prefetch thread's placer, not visible
    ids = np.concatenate([b["cell_id"].numpy() for b in new])
    assert np.array_equal(np.sort(ids), np.arange(N_CELLS))


def groups(max_cells, sizes=(5, 5, 5, 5), cuts=(8, 16)):
    """The [g0, g1) of each call a Placer makes over batches of these sizes (windows starting at cuts)."""
    from deltacells import _place
    bs, o = [], 0
    for n in sizes:
        bs.append(np.arange(o, o + n))
        o += n
    pl = _place.Placer(None, bs, cuts=list(cuts), n_real=len(bs), first=0, max_cells=max_cells)
    out = []
    while pl.pos < pl.starts[-1]:
        g0, g1, _, _ = pl._group()
        assert g1 > g0
        out.append((g0, g1))
        pl.pos = g1
    return out


def test_a_group_is_cut_only_where_its_window_exceeds_the_memory_budget():
    """A call (group) places a window's cells; it is cut at a batch's end only where the window
    holds more cells than the budget (max_cells; at least the batch it starts in), whatever the
    number of batches the window touches.  Windows of 8 cells against batches of 5 (small tiles
    against large batches) under a budget of 8: one call per window, each chunk decoded once;
    cutting at every batch end, as a budget counted in batches did, decoded most chunks twice."""
    whole = [(0, 8), (8, 16), (16, 20)]
    assert groups(None) == whole
    assert groups(8) == whole and groups(100) == whole
    assert groups(6) == [(0, 5), (5, 8), (8, 10), (10, 16), (16, 20)]
    assert groups(2) == [(0, 5), (5, 8), (8, 10), (10, 15), (15, 16), (16, 20)]
    assert groups(0) == groups(2)
    # batches longer than a window: a window inside one batch is never cut
    assert groups(3, sizes=(20,)) == whole


def test_a_cold_pool_makes_its_first_batch_alone(small, monkeypatch):
    """A reader whose buffer pool has no buffers yet places its first batch alone (the rest of
    its window next, the window's chunks decoded again), so that it need not wait for the fresh
    pages of the whole window's batches; a reader with a warm pool places whole windows.  The
    batches are those read one by one either way."""
    from deltacells import _place
    made = []
    orig = _place.Placer._window

    def spy(self, *a):
        before = set(self.ready)
        ok = orig(self, *a)
        made.append(sorted(set(self.ready) - before))
        return ok
    monkeypatch.setattr(_place.Placer, "_window", spy)
    kw = dict(batch_size=100, seed=3, prefetch_tiles=0, obs=OBS)    # windows of 6 batches
    old, _ = batches(small[1], "0", **kw)
    with _core._spare_lock:
        _core._spare["pools"].clear()           # no pool left by an earlier reader: a cold one
    new, placed = batches(small[1], "1", **kw)
    assert placed
    same(new, old)
    cold = list(made)
    assert cold[0] == [0] and len(cold[1]) >= 3 and cold[1][0] == 1, cold[:3]
    made.clear()
    again, placed = batches(small[1], "1", **kw)   # the pool the last reader left: warm
    assert placed
    same(again, old)
    assert made[0] == [0] + cold[1] and made[1:] == cold[2:], (made[:3], cold[:3])


def test_placed_batches_equal_the_input(small):
    ref = reindexed_X(read_h5ad(small[0]), stored_gene_names(small[1]))
    new, placed = batches(small[1], "1", batch_size=333, seed=9, prefetch_tiles=0, output="scipy",
                          dtype=torch.int32)
    assert placed
    for b in new:
        assert (b["X"] != ref[b["cell_id"]].astype(np.int32)).nnz == 0


@pytest.mark.parametrize("output,dtype", [("csr", torch.float32), ("csr", torch.int32), ("dense", torch.float32),
                                          ("scipy", torch.int32), ("csr_parts", torch.float32)])
def test_outputs_and_dtypes(small, output, dtype):
    kw = dict(batch_size=450, seed=1, prefetch_tiles=0, output=output, dtype=dtype, obs=["cell_type"])
    new, placed = batches(small[1], "1", **kw)
    old, _ = batches(small[1], "0", **kw)
    assert placed
    if output == "csr_parts":
        for x, y in zip(new, old):
            for f in ("crow_indices", "col_indices", "values"):
                assert torch.equal(getattr(x["X"], f), getattr(y["X"], f))
    else:
        same(new, old)


@pytest.mark.parametrize("where", ["percent_mt < 4 OR batch IS NULL", "age > 40 AND NOT is_doublet",
                                   "cell_id % 3 = 1"])
def test_where_filters(small, where):
    """Selected cells are a subset of each chunk: the others are decoded into the sink."""
    kw = dict(batch_size=128, seed=2, prefetch_tiles=0, where=where, obs=["cell_type", "score"])
    new, placed = batches(small[1], "1", **kw)
    old, _ = batches(small[1], "0", **kw)
    assert placed and len(new) > 1
    same(new, old)


def test_unshuffled_and_other_windows(small):
    # cache_mb bounds a group's memory: windows cut into groups of whole batches (0: one batch)
    for kw in (dict(shuffle=False), dict(shuffle_window=1), dict(shuffle_window=5), dict(shuffle_window=100),
               dict(cache_mb=0), dict(cache_mb=1, shuffle_window=5)):
        kw.update(batch_size=400, seed=3, prefetch_tiles=0, obs=["score"])
        new, placed = batches(small[1], "1", **kw)
        old, _ = batches(small[1], "0", **kw)
        assert placed, kw
        same(new, old)


def test_resume_and_pad_batches(small):
    """Resuming skips batches (the windows shift); 'pad' batches repeat cells: read one by one."""
    for place in ("1", "0"):
        os.environ["DELTACELLS_PLACE"] = place
        try:
            ds = deltacells.CellDataset(small[1], batch_size=170, seed=6, prefetch_tiles=0, shuffle_window=2)
            it = iter(ds)
            head = [next(it) for _ in range(5)]
            state = ds.state_dict()
            it.close()
            ds2 = deltacells.CellDataset(small[1], batch_size=170, seed=6, prefetch_tiles=0, shuffle_window=2)
            ds2.load_state_dict(state)
            rest = list(ds2)
            if place == "1":
                new = head + rest
            else:
                old = head + rest
            pads = [list(deltacells.CellDataset(small[1], batch_size=170, seed=6, prefetch_tiles=0, shuffle_window=2, rank=r,
                                                world_size=3, equal_batches="pad")) for r in range(3)]
            if place == "1":
                new_pads = pads
            else:
                old_pads = pads
        finally:
            os.environ.pop("DELTACELLS_PLACE", None)
    same(new, old)
    for a, b in zip(new_pads, old_pads):
        same(a, b)


def test_dataloader_workers(small):
    """Forked DataLoader workers place their own windows (each opens its own connection)."""
    kw = dict(batch_size=260, seed=7, obs=["cell_type", "score"], shuffle_window=2)
    out = {}
    for place in ("1", "0"):
        os.environ["DELTACELLS_PLACE"] = place
        try:
            out[place] = list(DataLoader(deltacells.CellDataset(small[1], **kw), batch_size=None, num_workers=2,
                                         timeout=120))
        finally:
            os.environ.pop("DELTACELLS_PLACE", None)
    same(out["1"], out["0"])


def test_not_placed_where_it_cannot_be(small, tmp_path):
    """A narrow dtype is read one by one; a zstd tile cannot be placed, and the reader falls
    back for the rest of the epoch."""
    ds = deltacells.CellDataset(small[1], batch_size=300, prefetch_tiles=0, dtype=torch.int16)
    with iter(ds) as it:
        next(it)
        assert it._placer is None
    z = convert(small[0], tmp_path / "z.dcdb", TILE, ["--codec", "zstd"])
    kw = dict(batch_size=300, seed=5, prefetch_tiles=0, obs=["cell_type"])
    new, placed = batches(z, "1", **kw)
    old, _ = batches(z, "0", **kw)
    assert placed is False
    same(new, old)
    con = deltacells.connect(z)
    ids = np.arange(10, dtype="<i8").tobytes()
    assert con.execute("SELECT cell_nnz, ticket FROM dc_batch(?, ?, ?, 1)", (ids, None, None)).fetchone() == (None, None)


def test_merged_inputs_place(small, tmp_path):
    """Tiles of a dataset converted from inputs with different genes (tiles of one input, their
    genes renumbered: a gene map) place the dataset's gene ids."""
    h2, _ = gen(tmp_path, 700, 450, 11, 200)
    m = convert(small[0], tmp_path / "m.dcdb", TILE, [str(h2)])
    kw = dict(batch_size=310, seed=8, prefetch_tiles=0)
    new, placed = batches(m, "1", **kw)
    old, _ = batches(m, "0", **kw)
    assert placed
    same(new, old)


def _panels(db):
    names = stored_gene_names(db)
    rng = np.random.default_rng(12)
    return {"gene order": list(names[10:250:3]),                            # a sorted panel
            "shuffled": [str(g) for g in rng.permutation(names)[:120]],     # scatter-ordered rows
            "few": [str(g) for g in rng.permutation(names)[:5]],            # rows of <= 16: insertion sort
            "every gene, reversed": list(names[::-1])}


@pytest.mark.parametrize("panel", ["gene order", "shuffled", "few", "every gene, reversed"])
@pytest.mark.parametrize("batch_size,prefetch", [(7, 0), (250, 2), (1000, 0)])
def test_placed_with_a_gene_panel(small, panel, batch_size, prefetch):
    """A gene panel is placed: batches equal those read one by one, whatever the panel's order
    and size, batches inside, across and longer than a window; and they equal the input."""
    genes = _panels(small[1])[panel]
    kw = dict(batch_size=batch_size, seed=4, prefetch_tiles=prefetch, genes=genes, obs=["cell_type", "score"])
    new, placed = batches(small[1], "1", **kw)
    old, _ = batches(small[1], "0", **kw)
    assert placed in (True, None)
    same(new, old)
    ref = reindexed_X(read_h5ad(small[0]), genes)
    for b in new[:3]:
        assert np.array_equal(b["X"].to_dense().numpy(), ref[b["cell_id"].numpy()].toarray())


def test_placed_panel_with_missing_genes_and_workers(small, tmp_path):
    """Panel genes the dataset lacks (missing_genes='zeros') and a merged dataset's tiles (gene
    maps), placed in forked DataLoader workers."""
    h2, _ = gen(tmp_path, 700, 450, 11, 200)
    m = convert(small[0], tmp_path / "m.dcdb", TILE, [str(h2)])
    genes = ["NOT_A_GENE"] + list(stored_gene_names(m)[::7]) + ["ALSO_MISSING"]
    kw = dict(batch_size=260, seed=7, genes=genes, missing_genes="zeros", obs=["cell_type"], shuffle_window=2)
    out = {}
    for place in ("1", "0"):
        os.environ["DELTACELLS_PLACE"] = place
        try:
            out[place] = list(DataLoader(deltacells.CellDataset(m, **kw), batch_size=None, num_workers=2,
                                         timeout=120))
        finally:
            os.environ.pop("DELTACELLS_PLACE", None)
    same(out["1"], out["0"])
    assert out["1"][0]["X"].shape[1] == len(genes)
    one, placed = batches(m, "1", prefetch_tiles=0, **kw)
    assert placed
    same(one, batches(m, "0", prefetch_tiles=0, **kw)[0])


def test_sql_place_with_a_panel(small):
    """dc_batch(cells, genes, NULL, 1): cell_nnz are the sizes before the panel; the ticket needs
    row_nnz, fills each place with the panel's (position, value) and says how many; with seg it
    packs each run of rows (a batch's part) from the run's first address on, equal to
    dc_batch(cells, genes)'s rows; a run whose rows do not lie as seg says is refused."""
    con = deltacells.connect(small[1])
    ids = np.array([5, 1999, 0, 700, 701, 3], dtype="<i8")
    names = stored_gene_names(small[1])
    genes = json.dumps([str(g) for g in np.random.default_rng(3).permutation(names)[:60]])
    n, g, nnz, ticket, cnz = con.execute("SELECT n_cells, n_genes, nnz, ticket, cell_nnz FROM dc_batch(?, ?, ?, 1)",
                                         (ids.tobytes(), genes, None)).fetchone()
    full = np.frombuffer(con.execute("SELECT indptr FROM dc_batch(?)", (ids.tobytes(),)).fetchone()[0], "<i8")
    sizes = np.frombuffer(cnz, "<i4").astype(np.int64)
    assert g == 60 and np.array_equal(sizes, np.diff(full)) and nnz == sizes.sum()
    ip, ref_ix, ref_v = (np.frombuffer(b, t) for b, t in zip(
        con.execute("SELECT indptr, indices, data FROM dc_batch(?, ?)", (ids.tobytes(), genes)).fetchone(),
        ("<i8", "<i4", "<i4")))
    msg = ctypes.create_string_buffer(256)
    fn = _fn()

    def layout():
        # two runs (rows 0-2 and 3-5), laid out for the sizes before the panel, the second run
        # first in the arrays (so that one run over both is a row before its run's start)
        ix, val = np.full(int(nnz) + 1, -7, np.int32), np.full(int(nnz) + 1, -7, np.int32)
        ia, va = np.zeros(6, np.uint64), np.zeros(6, np.uint64)
        bufs = []
        base = 0
        for a, e in ((3, 6), (0, 3)):
            off = base + np.concatenate([[0], np.cumsum(sizes[a:e])[:-1]]).astype(np.uint64)
            ia[a:e] = ix.ctypes.data + 4 * off
            va[a:e] = val.ctypes.data + 4 * off
            bufs.append((ix[base:], val[base:]))
            base += int(sizes[a:e].sum())
        return bufs[::-1], ia, va, (ix, val)

    def fresh():
        return con.execute("SELECT ticket FROM dc_batch(?, ?, ?, 1)", (ids.tobytes(), genes, None)).fetchone()[0]

    bufs, ia, va, keep = layout()
    assert fn(ticket, 6, int(nnz), ia.ctypes.data, va.ctypes.data, 0, None, 0, None, msg, 256) == -3  # no row_nnz
    row_nnz = np.full(6, -1, np.int64)
    seg = np.array([0, 3, 6], np.int64)
    assert fn(fresh(), 6, int(nnz), ia.ctypes.data, va.ctypes.data, 0, row_nnz.ctypes.data, 2, seg.ctypes.data,
              msg, 256) == 0
    assert np.array_equal(row_nnz, np.diff(ip))
    for (ix, val), (a, e) in zip(bufs, ((0, 3), (3, 6))):
        m = int(row_nnz[a:e].sum())
        assert np.array_equal(ix[:m], ref_ix[ip[a]:ip[e]]) and np.array_equal(val[:m], ref_v[ip[a]:ip[e]])
    # without seg: each row's panel genes at the front of its own place
    bufs, ia, va, keep = layout()
    assert fn(fresh(), 6, int(nnz), ia.ctypes.data, va.ctypes.data, 0, row_nnz.ctypes.data, 0, None, msg, 256) == 0
    ix0 = np.frombuffer((ctypes.c_int32 * int(row_nnz[4])).from_address(int(ia[4])), np.int32)
    assert np.array_equal(ix0, ref_ix[ip[4]:ip[5]])
    # seg not as the rows lie (one run over two buffers; bounds that do not cover the cells): refused
    for bad in ([0, 6], [0, 4, 3, 6], [1, 6]):
        bufs, ia, va, keep = layout()
        sb = np.array(bad, np.int64)
        assert fn(fresh(), 6, int(nnz), ia.ctypes.data, va.ctypes.data, 0, row_nnz.ctypes.data, len(bad) - 1,
                  sb.ctypes.data, msg, 256) == -3, bad
    # without a panel, row_nnz (when given) holds the sizes
    t2 = con.execute("SELECT ticket FROM dc_batch(?, ?, ?, 1)", (ids.tobytes(), None, None)).fetchone()[0]
    bufs, ia, va, keep = layout()
    assert fn(t2, 6, int(nnz), ia.ctypes.data, va.ctypes.data, 0, row_nnz.ctypes.data, 0, None, msg, 256) == 0
    assert np.array_equal(row_nnz, sizes)


# --- SQL and the ticket ----------------------------------------------------------------------
def _fn():
    fn = _core._ticket_place_fn()
    assert fn is not None
    return fn


def test_sql_cell_nnz_and_refusals(small):
    con = deltacells.connect(small[1])
    ids = np.array([5, 1999, 0, 700, 701, 3], dtype="<i8")
    n, nnz, ticket, cnz = con.execute("SELECT n_cells, nnz, ticket, cell_nnz FROM dc_batch(?, ?, ?, 1)",
                                      (ids.tobytes(), None, None)).fetchone()
    ip = np.frombuffer(con.execute("SELECT indptr FROM dc_batch(?)", (ids.tobytes(),)).fetchone()[0], "<i8")
    sizes = np.frombuffer(cnz, "<i4")
    assert n == 6 and np.array_equal(sizes, np.diff(ip)) and nnz == sizes.sum()
    # placed through the ticket: each cell at its own address, equal to dc_batch's rows
    ix = [np.full(max(1, s), -7, np.int32) for s in sizes]
    val = [np.full(max(1, s), -7, np.float32) for s in sizes]
    msg = ctypes.create_string_buffer(256)
    fn = _fn()
    ia = np.array([a.ctypes.data for a in ix], np.uint64)
    va = np.array([a.ctypes.data for a in val], np.uint64)
    assert fn(ticket, 6, int(nnz), ia.ctypes.data, va.ctypes.data, 1, None, 0, None, msg, 256) == 0
    row = con.execute("SELECT indices, data FROM dc_batch(?)", (ids.tobytes(),)).fetchone()
    ref_ix, ref_v = np.frombuffer(row[0], "<i4"), np.frombuffer(row[1], "<i4")
    for i, s in enumerate(sizes):
        assert np.array_equal(ix[i][:s], ref_ix[ip[i]:ip[i + 1]])
        assert np.array_equal(val[i][:s], ref_v[ip[i]:ip[i + 1]].astype(np.float32))
    # used once; unknown; a place ticket is not a take ticket and back
    assert fn(ticket, 6, int(nnz), ia.ctypes.data, va.ctypes.data, 1, None, 0, None, msg, 256) == -1
    take = _core._ticket_take_fn()
    t2 = con.execute("SELECT ticket FROM dc_batch(?, ?, ?, 1)", (ids.tobytes(), None, None)).fetchone()[0]
    assert take(t2, 6, int(nnz), None, None, None, 0, None, None) == -1
    assert fn(t2, 5, int(nnz), ia.ctypes.data, va.ctypes.data, 1, None, 0, None, msg, 256) == -3      # wrong size: released
    t3 = con.execute("SELECT ticket FROM dc_batch(?, ?, ?, 1)", (ids.tobytes(), None, None)).fetchone()[0]
    assert fn(t3, 6, int(nnz), ia.ctypes.data, va.ctypes.data, 2, None, 0, None, msg, 256) == -4      # int16: not placed
    t4 = con.execute("SELECT ticket FROM dc_batch(?)", (ids.tobytes(),)).fetchone()[0]
    assert fn(t4, 6, int(nnz), ia.ctypes.data, va.ctypes.data, 1, None, 0, None, msg, 256) == -1
    # a repeated cell has one place: no placing result
    rep = np.array([5, 6, 5], dtype="<i8").tobytes()
    assert con.execute("SELECT cell_nnz, ticket FROM dc_batch(?, ?, ?, 1)", (rep, None, None)).fetchone() == (None, None)
    with pytest.raises(Exception, match="place .argument 4. must be 0 or 1"):
        con.execute("SELECT n_cells FROM dc_batch(?, ?, ?, 2)", (ids.tobytes(), None, None)).fetchall()
    assert con.execute("SELECT cell_nnz FROM dc_batch(?, ?, ?, 0)", (ids.tobytes(), None, None)).fetchone() == (None,)


def test_corrupt_chunk_is_an_error_naming_it(small, tmp_path):
    """A flipped byte in a chunk's payload: placing fails with the tile, the chunk and why, and
    the loader raises it (never a wrong batch)."""
    bad = tmp_path / "bad.dcdb"
    shutil.copy(small[1], bad)
    con = deltacells.connect(bad)
    blob = bytearray(con.execute("SELECT data FROM tiles_data WHERE tile = 1").fetchone()[0])
    con.close()
    import sqlite3
    raw = sqlite3.connect(bad)
    blob[len(blob) - 40] ^= 0x55                  # inside the last chunk's payload
    raw.execute("UPDATE tiles_data SET data = ? WHERE tile = 1", (bytes(blob),))
    raw.commit()
    raw.close()
    ds = deltacells.CellDataset(bad, batch_size=300, seed=0, prefetch_tiles=0, shuffle=False)
    with pytest.raises((RuntimeError, sqlite3.DatabaseError), match=r"tile 1 chunk \d+: .*checksum"):
        list(ds)


def test_batch_mb_bounds_a_window(small, tmp_path, monkeypatch):
    """A placing request holds its tiles' bytes until it is placed: more than batch_mb of them is
    refused before anything is read; the loader then reads one by one."""
    _, big = gen(tmp_path, 6000, 4000, 13, 1500)
    con = deltacells.connect(big)
    con.execute("SELECT dc_config('batch_mb', 1)").fetchall()
    sizes = [r[0] for r in con.execute("SELECT length(data) FROM tiles_data ORDER BY tile")]
    assert sum(sizes) > 2**20 and sizes[0] < 2**20, sizes
    ids = np.arange(6000, dtype="<i8").tobytes()
    with pytest.raises(Exception, match=r"tile bytes \(4 tiles\), over dc_config\('batch_mb'\) = 1"):
        con.execute("SELECT cell_nnz FROM dc_batch(?, ?, ?, 1)", (ids, None, None)).fetchall()
    one = np.arange(3, dtype="<i8").tobytes()            # one tile's bytes: within 1 MB
    assert con.execute("SELECT length(cell_nnz) FROM dc_batch(?, ?, ?, 1)", (one, None, None)).fetchone() == (12,)
    from deltacells import _place
    calls = []

    def refuse(*a, **k):
        calls.append(1)
        raise __import__("sqlite3").DatabaseError("dc_batch: placing these 600 cells would hold 2.0 MB of tile "
                                                  "bytes (2 tiles), over dc_config('batch_mb') = 1: ...")
    kw = dict(batch_size=300, seed=2, prefetch_tiles=0, obs=["cell_type"])
    old, _ = batches(small[1], "0", **kw)
    monkeypatch.setattr(_place, "place_plan", refuse)
    new, placed = batches(small[1], "1", **kw)
    assert calls == [1] and placed is False
    same(new, old)


def test_an_extension_without_panel_placing_reads_one_by_one(small):
    """An extension older than panel placing refuses dc_batch(cells, genes, obs, 1): place_plan
    then says the cells cannot be placed (the loader reads them one by one); other errors
    still raise."""
    import sqlite3

    class Old:
        def __init__(self, msg):
            self.msg = msg

        def execute(self, *a):
            raise sqlite3.OperationalError(self.msg)
    panel = deltacells.CellDataset(small[1], genes=stored_gene_names(small[1])[:5])._panel
    ids = np.arange(4)
    assert _core.place_plan(Old("dc_batch: place (argument 4) takes no gene panel: pass NULL genes"), ids,
                            None, panel) is None
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _core.place_plan(Old("disk I/O error"), ids, None, panel)
