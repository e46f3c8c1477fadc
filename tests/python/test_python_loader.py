"""CellDataset, CellMapDataset, GroupBatchSampler and to_anndata on small generated datasets."""
import os
import pickle
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT, gen, read_h5ad, reindexed_X, stored_gene_names  # noqa: E402

import deltacells  # noqa: E402

N_CELLS, N_GENES, TILE = 3000, 300, 400


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    h5, db = gen(tmp_path_factory.mktemp("py_small"), N_CELLS, N_GENES, 11, TILE)
    return h5, db


@pytest.fixture(scope="module")
def adata(small):
    return read_h5ad(small[0])


@pytest.fixture(scope="module")
def stored_genes(small):
    return stored_gene_names(small[1])


def epoch_ids(ds, num_workers=0, **kw):
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers, **kw)
    out = []
    for b in loader:
        assert set(b) >= {"X", "cell_id"}
        assert b["X"].shape[0] == len(b["cell_id"])
        out.append(np.asarray(b["cell_id"]))
    return out


def check_epoch(batches, ref):
    """The batches hold every cell once, each row equal to the reference's."""
    ids = np.concatenate([np.asarray(b["cell_id"]) for b in batches])
    assert np.array_equal(np.sort(ids), np.arange(N_CELLS))
    for b in batches:
        assert np.array_equal(b["X"].to_dense().numpy(), ref[np.asarray(b["cell_id"])].toarray())


# --- coverage and order -------------------------------------------------------
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_epoch_covers_every_cell_once(small, num_workers, prefetch):
    ds = deltacells.CellDataset(small[1], batch_size=256, shuffle=True, seed=3,
                                prefetch_tiles=prefetch, output="csr_parts")
    batches = epoch_ids(ds, num_workers)
    ids = np.concatenate(batches)
    assert len(ids) == N_CELLS
    assert np.array_equal(np.sort(ids), np.arange(N_CELLS))
    assert all(len(b) <= 256 for b in batches)
    assert not np.array_equal(ids, np.arange(N_CELLS)), "shuffle=True returned stored order"
    assert ds.n_batches == len(ds) == len(batches)
    assert len(DataLoader(ds, batch_size=None, num_workers=num_workers)) == len(batches)


def test_where_selection_covered_once_with_workers(small, adata):
    where = "cell_type IN ('B cell', 'NK') AND percent_mt < 5"
    ds = deltacells.CellDataset(small[1], where=where, batch_size=100, seed=1)
    ids = np.concatenate(epoch_ids(ds, 2))
    obs = adata.obs
    mask = obs["cell_type"].isin(["B cell", "NK"]).to_numpy() & (obs["percent_mt"] < 5).to_numpy()
    assert np.array_equal(np.sort(ids), np.flatnonzero(mask))
    assert ds.n_cells == mask.sum() > 0


def test_unshuffled_is_stored_order(small):
    ds = deltacells.CellDataset(small[1], batch_size=500, shuffle=False)
    ids = np.concatenate(epoch_ids(ds))
    assert np.array_equal(ids, np.arange(N_CELLS))


def test_drop_last(small):
    ds = deltacells.CellDataset(small[1], batch_size=256, seed=2, drop_last=True)
    batches = epoch_ids(ds, 2)
    assert all(len(b) == 256 for b in batches)
    ids = np.concatenate(batches)
    assert len(np.unique(ids)) == len(ids)
    assert len(ids) == N_CELLS // 256 * 256 == len(ds) * 256   # only the one short batch


def test_order_reproducible_and_changes_with_epoch(small):
    def order(seed, epoch, workers=0):
        ds = deltacells.CellDataset(small[1], batch_size=300, seed=seed)
        ds.set_epoch(epoch)
        return np.concatenate(epoch_ids(ds, workers))
    a = order(5, 0)
    assert np.array_equal(a, order(5, 0))
    assert np.array_equal(order(5, 0, workers=2), order(5, 0, workers=2))
    b = order(5, 1)
    assert not np.array_equal(a, b)
    assert np.array_equal(np.sort(a), np.sort(b))
    assert not np.array_equal(a, order(6, 0))


def test_shuffle_window_mixes_tiles(small):
    ds = deltacells.CellDataset(small[1], batch_size=400, seed=0, shuffle_window=2)
    first = np.asarray(next(iter(ds))["cell_id"])
    tiles = np.unique(first // TILE)
    assert 1 < len(tiles) <= 2
    ds1 = deltacells.CellDataset(small[1], batch_size=400, seed=0, shuffle_window=1)
    b0 = np.asarray(next(iter(ds1))["cell_id"])
    assert len(np.unique(b0 // TILE)) == 1          # one tile, in shuffled order
    assert not np.array_equal(b0, np.sort(b0))


# --- contents -------------------------------------------------------------------
@pytest.mark.parametrize("output", ["csr", "csr_parts", "dense", "scipy"])
def test_outputs_equal_anndata(small, adata, stored_genes, output):
    ref = reindexed_X(adata, stored_genes)
    ds = deltacells.CellDataset(small[1], batch_size=700, seed=4, output=output,
                                obs=["cell_type", "age", "percent_mt", "is_doublet", "barcode"])
    seen = 0
    for b in ds:
        ids = np.asarray(b["cell_id"])
        X = b["X"]
        if output == "csr":
            assert X.layout == torch.sparse_csr
            X = X.to_dense().numpy()
        elif output == "csr_parts":
            assert isinstance(X, deltacells.CSRBatch)
            X = X.to_dense().numpy()
        elif output == "dense":
            assert X.layout == torch.strided and X.dtype == torch.float32
            X = X.numpy()
        else:
            assert X.format == "csr" and X.dtype == np.float32
            X = X.toarray()
        assert np.array_equal(X, ref[ids].toarray())
        obs = adata.obs.iloc[ids]
        cats = ds.categories["cell_type"]
        assert list(cats) == list(adata.obs["cell_type"].cat.categories)
        assert np.array_equal(np.asarray(b["cell_type"]), obs["cell_type"].cat.codes.to_numpy())
        assert np.array_equal(np.asarray(b["age"]), obs["age"].to_numpy())
        np.testing.assert_array_equal(np.asarray(b["percent_mt"]), obs["percent_mt"].to_numpy())
        assert np.array_equal(np.asarray(b["is_doublet"]).astype(bool), obs["is_doublet"].to_numpy())
        assert list(b["barcode"]) == list(obs["barcode"])
        seen += len(ids)
    assert seen == N_CELLS


@pytest.mark.parametrize("threads,cache_mb", [(1, 0), (2, 3)])
def test_threads_and_cache_mb_reach_the_extension(small, adata, stored_genes, threads, cache_mb):
    """CellDataset(threads=, cache_mb=) set the connection's decoder threads and decoded-chunk
    cache (read back with dc_config on the iterator's own connection); the batches equal
    anndata's rows whatever the settings, in the process, in the prefetch thread and in workers."""
    ref = reindexed_X(adata, stored_genes)

    def check(batches):
        check_epoch(batches, ref)

    kw = dict(batch_size=500, seed=8, threads=threads, cache_mb=cache_mb)
    ds = deltacells.CellDataset(small[1], prefetch_tiles=0, **kw)
    with iter(ds) as it:
        batches = [next(it)]
        con = it._con
        assert con.execute("SELECT dc_config('threads'), dc_config('cache_mb')").fetchone() == (threads, cache_mb)
        batches += [next(it) for _ in range(len(ds) - 2)]     # all but the last: still open
        used, entries, misses = con.execute("SELECT dc_config('cache_used_mb'), dc_config('cache_entries'), "
                                            "dc_config('cache_misses')").fetchone()
        if cache_mb == 0:
            assert used == 0 and entries == 0          # no cache at all
        elif it._placer is not None:
            assert entries == 0                        # placed: decoded into the batches, not the cache
        else:
            assert 0 < used <= cache_mb and entries > 0 and misses > 0
        batches += list(it)
    assert len(batches) == len(ds)
    check(batches)
    check(list(deltacells.CellDataset(small[1], prefetch_tiles=2, **kw)))
    check(list(DataLoader(deltacells.CellDataset(small[1], **kw), batch_size=None, num_workers=2)))
    with pytest.raises(ValueError, match="threads"):
        deltacells.CellDataset(small[1], threads=0)
    with pytest.raises(ValueError, match="cache_mb"):
        deltacells.CellDataset(small[1], cache_mb=-1)


def test_readers_reuse_the_last_readers_connection(small, adata, stored_genes, tmp_path, monkeypatch):
    """A reader without a prefetch thread (prefetch_tiles=0, and every DataLoader worker) takes
    the connection its process's last reader left (its decoded-chunk cache and decoder threads
    warm; a persistent worker's next epoch opened a new one, whose fresh memory cost about a
    window's decode time), and leaves it for the next one, unless an error came from inside it.
    Opens are counted per process in a file (workers are forked: the patch reaches them)."""
    import sqlite3
    from deltacells import _core, dataset as dsmod
    log = tmp_path / "opens"
    real = _core.with_connection

    def counted(*a, **k):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*a, **k)
    monkeypatch.setattr(_core, "with_connection", counted)
    if hasattr(dsmod, "with_connection"):
        monkeypatch.setattr(dsmod, "with_connection", counted)
    ref = reindexed_X(adata, stored_genes)

    def check(batches):
        check_epoch(batches, ref)

    ds = deltacells.CellDataset(small[1], batch_size=500, seed=3, prefetch_tiles=0, threads=1)
    cons = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        with iter(ds) as it:
            batches = [next(it)]
            cons.append(it._con)
            batches += list(it)
        check(batches)
    assert cons[1] is cons[0] and cons[2] is cons[0]
    assert cons[0].execute("SELECT dc_config('threads')").fetchone()[0] == 1

    # an error inside a batch: that connection is closed, never handed to the next reader
    calls = {"n": 0}
    real_next = dsmod._next_batch

    def failing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise sqlite3.OperationalError("injected")
        return real_next(*a, **k)
    monkeypatch.setattr(dsmod, "_next_batch", failing)
    it = iter(ds)
    next(it)
    bad = it._con
    with pytest.raises(sqlite3.OperationalError, match="injected"):
        next(it)
    it.close()
    monkeypatch.setattr(dsmod, "_next_batch", real_next)
    with iter(ds) as it:
        batches = [next(it)]
        assert it._con is not bad
        batches += list(it)
    check(batches)

    # persistent DataLoader workers: one connection each for all their epochs
    log.write_text("")
    dl = DataLoader(deltacells.CellDataset(small[1], batch_size=250, seed=5, threads=1, shuffle_window=2),
                    batch_size=None, num_workers=2, persistent_workers=True)   # windows for both
    for epoch in range(3):
        dl.dataset.set_epoch(epoch)
        check(list(dl))
    opens = [p for p in log.read_text().split() if p != str(os.getpid())]   # the workers'
    assert len(set(opens)) == 2 and len(opens) == 2, opens


def test_dtype_int32_returns_counts(small, adata, stored_genes):
    ref = reindexed_X(adata, stored_genes)
    ds = deltacells.CellDataset(small[1], batch_size=1000, dtype=torch.int32, output="csr_parts")
    b = next(iter(ds))
    assert b["X"].values.dtype == torch.int32
    assert np.array_equal(b["X"].to_dense().numpy(), ref[np.asarray(b["cell_id"])].toarray())


def test_gene_panel_equals_anndata_reindexed(small, adata):
    rng = np.random.default_rng(0)
    panel = list(rng.choice(adata.var_names.to_numpy(), 40, replace=False))
    ds = deltacells.CellDataset(small[1], batch_size=1000, genes=panel, output="dense")
    assert ds.gene_names == panel and ds.n_genes == 40
    ref = reindexed_X(adata, panel)
    n = 0
    for b in ds:
        ids = np.asarray(b["cell_id"])
        assert b["X"].shape == (len(ids), 40)
        assert np.array_equal(b["X"].numpy(), ref[ids].toarray())
        n += len(ids)
    assert n == N_CELLS


# --- resuming -------------------------------------------------------------------
def test_resume_mid_epoch_in_process(small):
    ds = deltacells.CellDataset(small[1], batch_size=200, seed=9)
    ds.set_epoch(2)
    full = epoch_ids(ds)
    it = iter(DataLoader(ds, batch_size=None))
    got = [np.asarray(next(it)["cell_id"]) for _ in range(5)]
    state = ds.state_dict()
    assert state["batches_done"] == 5 and state["epoch"] == 2
    del it
    for a, b in zip(got, full[:5]):
        assert np.array_equal(a, b)
    state = pickle.loads(pickle.dumps(state))
    ds2 = deltacells.CellDataset(small[1], batch_size=200, seed=9)
    ds2.load_state_dict(state)
    ds2.set_epoch(2)       # the usual loop calls set_epoch again: the resume point stays
    rest = epoch_ids(ds2)
    assert len(rest) == len(full) - 5
    for a, b in zip(rest, full[5:]):
        assert np.array_equal(a, b)
    # the resume applies once: the next epoch is whole
    ds2.set_epoch(3)
    assert sum(len(b) for b in epoch_ids(ds2)) == N_CELLS


def test_resume_mid_epoch_with_workers(small):
    ds = deltacells.CellDataset(small[1], batch_size=200, seed=9)
    full = epoch_ids(ds, 2)
    with pytest.raises(RuntimeError, match="batches_done"):
        ds.state_dict()
    state = ds.state_dict(batches_done=7)
    ds2 = deltacells.CellDataset(small[1], batch_size=200, seed=9)
    ds2.load_state_dict(state)
    rest = epoch_ids(ds2, 2)
    assert len(rest) == len(full) - 7
    for a, b in zip(rest, full[7:]):
        assert np.array_equal(a, b)


def test_resume_rejects_other_settings(small):
    ds = deltacells.CellDataset(small[1], batch_size=200, seed=9)
    state = ds.state_dict(batches_done=1)
    other = deltacells.CellDataset(small[1], batch_size=100, seed=9)
    with pytest.raises(ValueError, match="batch_size"):
        other.load_state_dict(state)
    # not a state_dict of CellDataset at all (a model's, say): named as such, not as a setting
    with pytest.raises(ValueError, match="not a CellDataset state_dict .*lacks format, epoch"):
        other.load_state_dict({"weight": 1})
    with pytest.raises(ValueError, match="not a CellDataset state_dict"):
        other.load_state_dict([1, 2])
    with pytest.raises(ValueError, match="state_dict format 2"):
        other.load_state_dict(dict(state, format=2))


# --- errors -------------------------------------------------------------------
def test_bad_arguments(small):
    db = small[1]
    with pytest.raises(ValueError, match="bad where clause .*cell_typo"):
        deltacells.CellDataset(db, where="cell_typo = 'B cell'")
    with pytest.raises(ValueError, match="bad where clause"):
        deltacells.CellDataset(db, where="cell_type = = 'B cell'")
    with pytest.raises(ValueError, match="unknown obs column 'celltype'.*cell_type"):
        deltacells.CellDataset(db, obs=["celltype"])
    with pytest.raises(ValueError, match="unknown gene in the panel: 'NOT_A_GENE'"):
        deltacells.CellDataset(db, genes=["GENE1", "NOT_A_GENE"])
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        deltacells.CellDataset(db, batch_size=0)
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        deltacells.CellDataset(db, batch_size=2.5)
    with pytest.raises(ValueError, match="output must be one of"):
        deltacells.CellDataset(db, output="coo")
    with pytest.raises(ValueError, match="unsupported dtype"):
        deltacells.CellDataset(db, dtype="complex64")
    with pytest.raises(ValueError, match="repeats genes"):
        deltacells.CellDataset(db, genes=["GENE1", "GENE1"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        deltacells.CellDataset(str(db) + ".missing")
    with pytest.raises(ValueError, match="rank 2 is not below world_size 2"):
        deltacells.CellDataset(db, rank=2, world_size=2)
    with pytest.raises(ValueError, match="bad where clause"):
        deltacells.CellDataset(db, where="1; DROP TABLE genes")
    with pytest.raises(ValueError, match="bad where clause"):
        deltacells.CellDataset(db, where="cell_type = 'x' --")
    assert deltacells.CellDataset(db, where="barcode != 'A;B'").n_cells == N_CELLS


def test_empty_selection_yields_nothing(small):
    ds = deltacells.CellDataset(small[1], where="age < -1000")
    assert ds.n_cells == 0
    assert epoch_ids(ds, 0) == [] and epoch_ids(ds, 2) == []


# --- pinning, prefetch ------------------------------------------------------------
def test_pin_memory_loader(small):
    ds = deltacells.CellDataset(small[1], batch_size=500, seed=1, output="csr_parts",
                                obs=["cell_type"])
    n = 0
    for b in DataLoader(ds, batch_size=None, num_workers=2, pin_memory=True):
        assert isinstance(b["X"], deltacells.CSRBatch)
        if torch.cuda.is_available():
            assert b["X"].is_pinned() and b["cell_id"].is_pinned()
        n += len(b["cell_id"])
    assert n == N_CELLS
    # the container forwards pin_memory() to its three tensors
    b = next(iter(ds))
    if torch.cuda.is_available():
        assert b["X"].pin_memory().is_pinned()
    else:
        moved = b["X"].to("cpu", dtype=torch.float16)
        assert moved.values.dtype == torch.float16 and moved.shape == b["X"].shape


def test_early_break_stops_prefetch_thread(small):
    import gc
    import threading

    def prefetchers():
        return {t for t in threading.enumerate() if t.name == "deltacells-prefetch"}
    before = prefetchers()
    ds = deltacells.CellDataset(small[1], batch_size=100, prefetch_tiles=4)
    it = iter(ds)
    next(it)
    assert len(prefetchers() - before) == 1
    it.close()
    assert prefetchers() - before == set()
    for _ in range(3):          # dropped without close(): the thread ends too
        it = iter(ds)
        next(it)
        del it
    gc.collect()
    deadline = time.time() + 10
    while prefetchers() - before and time.time() < deadline:
        time.sleep(0.05)
    assert prefetchers() - before == set()
    for b in DataLoader(ds, batch_size=None):   # breaking out of a DataLoader loop
        break
    del b
    gc.collect()
    deadline = time.time() + 10
    while prefetchers() - before and time.time() < deadline:
        time.sleep(0.05)
    assert prefetchers() - before == set()


def test_loader_error_reaches_the_training_loop(small, tmp_path):
    import shutil
    db = tmp_path / "gone.dcdb"
    shutil.copy(small[1], db)
    ds = deltacells.CellDataset(db, batch_size=100)
    os.remove(db)
    with pytest.raises(Exception, match="gone.dcdb"):
        for _ in ds:
            pass


# --- distributed ------------------------------------------------------------------
DDP_SCRIPT = textwrap.dedent("""
    import os, sys, json
    import numpy as np, torch, torch.distributed as dist
    sys.path.insert(0, {py!r})
    import deltacells
    from torch.utils.data import DataLoader
    dist.init_process_group("gloo", rank=int(sys.argv[1]), world_size=2)
    out = {{}}
    for mode in (False, "pad", "drop"):
        ds = deltacells.CellDataset({db!r}, batch_size=128, seed=1, equal_batches=mode)
        ids = [np.asarray(b["cell_id"]).tolist() for b in DataLoader(ds, batch_size=None, num_workers=2)]
        out[str(mode)] = ids
    dist.barrier()
    json.dump(out, open(sys.argv[2], "w"))
    dist.destroy_process_group()
""")


def test_two_ranks_gloo_cover_every_cell_once(small, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT.format(py=str(ROOT / "python"), db=str(small[1])))
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = [subprocess.Popen([PY, str(script), str(r), str(tmp_path / f"r{r}.json")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    try:
        outs = [p.communicate(timeout=180)[0].decode() for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, o in zip(procs, outs):
        assert p.returncode == 0, o
    import json
    res = [json.load(open(tmp_path / f"r{r}.json")) for r in range(2)]
    # default: disjoint tiles, all cells exactly once
    r0 = np.concatenate(res[0]["False"]); r1 = np.concatenate(res[1]["False"])
    assert np.array_equal(np.sort(np.concatenate([r0, r1])), np.arange(N_CELLS))
    assert not set((r0 // TILE).tolist()) & set((r1 // TILE).tolist())
    # the ranks' shares differ (whole tiles of 400 dealt to two ranks), so pad and drop do something
    n0, n1 = -(-len(r0) // 128), -(-len(r1) // 128)
    assert n0 != n1, (len(r0), len(r1))
    # pad: as many batches as the larger rank, every cell at least once, and each rank's extra
    # cells are repeats of the rank's own (the cells it holds without padding), none of the other's
    p0, p1 = res[0]["pad"], res[1]["pad"]
    assert len(p0) == len(p1) == max(n0, n1)
    for pad, own in ((p0, r0), (p1, r1)):
        got = np.concatenate(pad)
        assert np.array_equal(np.unique(got), np.sort(own))     # all its own cells, nothing else
        n_extra = len(got) - len(own)
        assert n_extra == 128 * (max(n0, n1) - -(-len(own) // 128))
    allp = np.concatenate([np.concatenate(p0), np.concatenate(p1)])
    assert np.array_equal(np.unique(allp), np.arange(N_CELLS))
    # drop: as many batches as the smaller rank, no cell twice, each rank's cells its own
    d0, d1 = res[0]["drop"], res[1]["drop"]
    assert len(d0) == len(d1) == min(n0, n1)
    for drop, own in ((d0, r0), (d1, r1)):
        assert np.isin(np.concatenate(drop), own).all()
    alld = np.concatenate([np.concatenate(d0), np.concatenate(d1)])
    assert len(np.unique(alld)) == len(alld)


# --- map-style ------------------------------------------------------------------
def test_map_dataset_getitems(small, adata, stored_genes):
    ref = reindexed_X(adata, stored_genes)
    ds = deltacells.CellMapDataset(small[1], obs=["cell_type"], output="scipy")
    assert len(ds) == N_CELLS
    idx = [5, 2999, 5, 1200, 0, 401]
    b = ds.batch(idx)
    assert list(b["cell_id"]) == idx
    assert np.array_equal(b["X"].toarray(), ref[idx].toarray())
    assert np.array_equal(b["cell_type"], adata.obs["cell_type"].cat.codes.to_numpy()[idx])
    one = ds[7]          # one cell: a 1-D row
    assert one["X"].shape == (N_GENES,) and one["cell_id"] == 7
    assert np.array_equal(one["X"].numpy(), ref[7].toarray()[0])
    assert one["cell_type"] == adata.obs["cell_type"].cat.codes.to_numpy()[7]
    b = deltacells.collate(ds.__getitems__(idx))     # the fast path: one batch dict
    assert list(b["cell_id"]) == idx
    with pytest.raises(IndexError, match="out of range"):
        ds[[0, N_CELLS]]


def test_map_dataset_where_positions(small, adata):
    ds = deltacells.CellMapDataset(small[1], where="donor = 'D03'", output="csr_parts")
    expect = np.flatnonzero((adata.obs["donor"] == "D03").to_numpy())
    assert len(ds) == len(expect) > 0
    b = ds[[0, len(ds) - 1]]
    assert list(np.asarray(b["cell_id"])) == [expect[0], expect[-1]]


@pytest.mark.parametrize("path", ["batch_sampler", "sampler"])
def test_group_batch_sampler(small, adata, path):
    ds = deltacells.CellMapDataset(small[1], obs=["cell_type"], output="csr_parts")
    sampler = deltacells.GroupBatchSampler(ds, "cell_type", batch_size=64, seed=2)
    if path == "batch_sampler":
        loader = DataLoader(ds, batch_sampler=sampler, collate_fn=deltacells.collate, num_workers=2)
    else:
        loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
    seen = []
    nb = 0
    for b in loader:
        codes = np.asarray(b["cell_type"])
        assert len(np.unique(codes)) == 1
        assert len(codes) <= 64
        seen.append(np.asarray(b["cell_id"]))
        nb += 1
    assert nb == len(sampler)
    ids = np.concatenate(seen)
    assert np.array_equal(np.sort(ids), np.arange(N_CELLS))
    first = next(iter(sampler))
    sampler.set_epoch(1)
    assert next(iter(sampler)) != first


def test_group_batch_sampler_ranks():
    labels = np.repeat(np.arange(5), [10, 33, 7, 64, 1])
    parts = [list(deltacells.GroupBatchSampler(labels, batch_size=8, num_replicas=2, rank=r, seed=0))
             for r in range(2)]
    assert len(parts[0]) == len(parts[1])
    for p in parts:
        for b in p:
            assert len(set(labels[b].tolist())) == 1
    union = np.concatenate([np.concatenate([np.asarray(b) for b in p]) for p in parts])
    assert set(union.tolist()) == set(range(len(labels)))


# --- to_anndata -----------------------------------------------------------------------
def test_to_anndata_equals_source(small, adata):
    where = "cell_type = 'CD14 Mono' OR age > 60"
    ad = deltacells.to_anndata(small[1], where=where)
    mask = ((adata.obs["cell_type"] == "CD14 Mono") | (adata.obs["age"] > 60)).to_numpy()
    src_obs = adata.obs[mask]
    assert list(ad.obs_names) == list(src_obs.index)
    X = reindexed_X(adata, ad.var_names)[np.flatnonzero(mask)]
    assert ad.X.shape == X.shape and (ad.X != X).nnz == 0
    for c in adata.obs.columns:
        a, b = ad.obs[c], src_obs[c]
        if hasattr(b, "cat"):
            assert list(a.cat.categories) == list(b.cat.categories)
            assert np.array_equal(a.cat.codes.to_numpy(), b.cat.codes.to_numpy())
        else:
            np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
    sub = deltacells.to_anndata(small[1], where="donor = 'D01'", obs=["donor"],
                                genes=["GENE3", "GENE1"], cell_id=True)
    assert list(sub.var_names) == ["GENE3", "GENE1"] and list(sub.obs.columns) == ["donor", "cell_id"]


def test_import_with_pythonpath():
    r = subprocess.run([PY, "-c", "import deltacells, sys; print(deltacells.find_extension())"],
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(ROOT / "build" / "deltacells.so")
