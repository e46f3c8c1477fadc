"""deltacells.WindowBatchSampler: a CellMapDataset's batches in CellDataset's order (tiles
shuffled, cells shuffled within windows of tiles), so that a batch's chunks are the window's and
the decoded-chunk cache serves them.  Checked: the batches equal CellDataset's for the same
arguments (with a where selection, drop_last, windows, epochs), DDP ranks, the order for
DataLoader workers (each worker a contiguous run of whole windows) and a forked DataLoader
epoch under a timeout, argument errors, and the warning when the cache cannot hold a window."""
import os
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT, gen  # noqa: E402
from _subproc import run_python  # noqa: E402

import deltacells  # noqa: E402
from deltacells._plan import EpochPlan, interleave  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT / "python"))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    # 1,500 cells in 6 tiles of 250, 200 genes
    return str(gen(tmp_path_factory.mktemp("window_sampler"), 1500, 200, 9, 250)[1])


def sampler_ids(m, s):
    return [m.cell_ids[np.asarray(b, dtype=np.int64)].tolist() for b in s]


def dataset_ids(ds):
    return [b["cell_id"].tolist() for b in ds]


@pytest.mark.parametrize("bs,window,drop_last,where", [
    (100, 2, False, None), (64, 1, True, None), (333, 3, False, "cell_id % 3 = 1"), (1500, 2, False, None)])
def test_batches_equal_cell_datasets(db, bs, window, drop_last, where):
    m = deltacells.CellMapDataset(db, where=where, cache_mb=64)
    s = deltacells.WindowBatchSampler(m, batch_size=bs, seed=7, shuffle_window=window, drop_last=drop_last)
    ds = deltacells.CellDataset(db, where=where, batch_size=bs, seed=7, shuffle_window=window,
                                drop_last=drop_last, prefetch_tiles=0)
    seen = []
    for epoch in range(3):
        s.set_epoch(epoch)
        ds.set_epoch(epoch)
        got = sampler_ids(m, s)
        assert got == dataset_ids(ds), epoch
        assert len(s) == len(got) == ds.n_batches
        seen.append(got)
        flat = [c for b in got for c in b]
        assert len(flat) == len(set(flat))                    # each cell at most once
        if not drop_last:
            assert sorted(flat) == m.cell_ids.tolist()
    if bs < 1500:
        assert seen[0] != seen[1]                             # the epoch changes the order
    s.set_epoch(1)
    assert sampler_ids(m, s) == seen[1]                       # and the same epoch repeats it
    # the positions read the cells they name
    b = next(iter(s))
    got = m.batch(b)
    assert got["cell_id"].tolist() == m.cell_ids[b].tolist()
    m.close()


def test_unshuffled_is_stored_order(db):
    m = deltacells.CellMapDataset(db)
    s = deltacells.WindowBatchSampler(m, batch_size=400, shuffle=False)
    assert [p for b in s for p in b] == list(range(1500))


def test_ddp_ranks_read_disjoint_tiles(db):
    m = deltacells.CellMapDataset(db)
    for eq in (False, "pad", "drop"):
        per = []
        for rank in range(2):
            s = deltacells.WindowBatchSampler(m, batch_size=100, seed=3, num_replicas=2, rank=rank,
                                              equal_batches=eq)
            ds = deltacells.CellDataset(db, batch_size=100, seed=3, rank=rank, world_size=2,
                                        equal_batches=eq, prefetch_tiles=0)
            got = sampler_ids(m, s)
            assert got == dataset_ids(ds) and len(s) == ds.n_batches, (eq, rank)
            per.append(got)
        a = {c for b in per[0] for c in b}
        b = {c for b in per[1] for c in b}
        if eq != "pad":
            assert not a & b
        if not eq:
            assert sorted(a | b) == list(range(1500))
        else:
            assert len(per[0]) == len(per[1])


def test_worker_order_gives_each_worker_its_own_windows(db):
    m = deltacells.CellMapDataset(db)
    s = deltacells.WindowBatchSampler(m, batch_size=100, seed=5, num_workers=2, shuffle_window=2)
    plan = EpochPlan(m._cat.per_tile(m._selected), seed=5, epoch=0, shuffle=True, window=2,
                     batch_size=100, drop_last=False)
    runs = [plan.batches(0, w, 2) for w in range(2)]
    assert sampler_ids(m, s) == [b.tolist() for b in interleave(runs)]
    # batch k goes to worker k % 2 (DataLoader's round robin): worker 0's are its own run
    got = sampler_ids(m, s)
    assert got[0::2][:len(runs[0])] == [b.tolist() for b in runs[0]][:len(got[0::2])]
    # the same batches as without workers, in another order
    s0 = deltacells.WindowBatchSampler(m, batch_size=100, seed=5, shuffle_window=2)
    assert sorted(map(tuple, got)) == sorted(map(tuple, sampler_ids(m, s0)))


def test_a_forked_dataloader_epoch(db):
    code = """
        import sys, numpy as np, torch
        from torch.utils.data import DataLoader
        import deltacells
        m = deltacells.CellMapDataset(sys.argv[1], obs=["cell_type"])
        s = deltacells.WindowBatchSampler(m, batch_size=128, seed=2, num_workers=2)
        m.cache_mb = s.cache_mb
        for persistent in (False, True):
            dl = DataLoader(m, batch_sampler=s, collate_fn=deltacells.collate, num_workers=2,
                            persistent_workers=persistent, multiprocessing_context="fork")
            for epoch in range(2):
                s.set_epoch(epoch)
                want = list(s)
                got = list(dl)
                assert len(got) == len(want) == len(s)
                for b, pos in zip(got, want):        # DataLoader keeps the sampler's order
                    assert b["cell_id"].tolist() == m.cell_ids[pos].tolist()
                    ref = m.batch(pos)
                    assert torch.equal(b["X"].to_dense(), ref["X"].to_dense())
                    assert torch.equal(b["cell_type"], ref["cell_type"])
            del dl
        print("ok")
    """
    rc, out = run_python([PY, "-c", textwrap.dedent(code), db], ENV, 180)
    assert rc == 0 and "ok" in out.split(), out[-3000:]


def test_bad_arguments(db):
    m = deltacells.CellMapDataset(db)
    with pytest.raises(TypeError, match="CellMapDataset"):
        deltacells.WindowBatchSampler(deltacells.CellDataset(db), batch_size=10)
    with pytest.raises(TypeError, match="CellMapDataset"):
        deltacells.WindowBatchSampler(np.arange(10), batch_size=10)
    for kw, err in ((dict(batch_size=0), "batch_size"), (dict(shuffle_window=0), "shuffle_window"),
                    (dict(num_workers=-1), "num_workers"), (dict(num_replicas=2, rank=2), "rank"),
                    (dict(equal_batches="some"), "equal_batches"), (dict(seed=-1), "seed")):
        with pytest.raises(ValueError, match=err):
            deltacells.WindowBatchSampler(m, **kw)
    s = deltacells.WindowBatchSampler(m, batch_size=10)
    with pytest.raises(ValueError, match="epoch"):
        s.set_epoch(-1)


def test_a_cache_smaller_than_a_window_warns_once(db):
    m = deltacells.CellMapDataset(db, cache_mb=0)
    s = deltacells.WindowBatchSampler(m, batch_size=100, shuffle_window=3)
    with pytest.warns(UserWarning, match=r"cache \(0 MB per process\).*cache_mb = sampler.cache_mb"):
        list(s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(s)                                   # once
        m2 = deltacells.CellMapDataset(db)
        s2 = deltacells.WindowBatchSampler(m2, batch_size=100, num_workers=2)
        m2.cache_mb = s2.cache_mb
        list(s2)                                  # the sampler's own size: no warning
    assert s2.cache_mb >= 16 and s2._window_mb > 0


def test_the_default_window_holds_about_20000_cells(db):
    """shuffle_window=None (the default of both): the tiles of about 20,000 cells, at least 2:
    2 of the converter's 10,000-cell tiles, 10 of 2,000-cell ones (a merged atlas of small
    samples), rounded from the median tile; the dataset and the sampler resolve it alike, and
    give the same batches."""
    from types import SimpleNamespace
    from deltacells.dataset import WINDOW_CELLS, resolve_window

    def cat(*n):
        return SimpleNamespace(tile_n=np.array(n, dtype=np.int64))
    assert WINDOW_CELLS == 20000
    assert resolve_window(None, cat(10000, 10000, 10000, 3)) == 2        # a short last tile: the median
    assert resolve_window(None, cat(*[2000] * 50)) == 10
    assert resolve_window(None, cat(3000, 3000)) == 7                   # 6.67 rounded
    assert resolve_window(None, cat(9999)) == 2
    assert resolve_window(None, cat(50000)) == 2                        # at least 2
    assert resolve_window(None, cat(100, 0, 100)) == 200                # empty tiles do not count
    assert resolve_window(None, cat()) == 2
    assert resolve_window(5, cat(2000)) == 5                            # given: kept
    with pytest.raises(ValueError, match="shuffle_window"):
        resolve_window(0, cat(2000))
    m = deltacells.CellMapDataset(db)
    s = deltacells.WindowBatchSampler(m, batch_size=100, seed=5)
    ds = deltacells.CellDataset(db, batch_size=100, seed=5)
    want = resolve_window(None, m._cat)
    assert s.shuffle_window == ds.shuffle_window == want
    assert want == max(2, int(WINDOW_CELLS / float(np.median(m._cat.tile_n)) + 0.5))
    assert sampler_ids(m, s) == [b["cell_id"].tolist() for b in ds]


def test_window_cache_counts_the_largest_tiles_not_the_largest_tile_times_the_window():
    """A window's decoded-chunk budget: the dataset's `window` (+ spare) largest tiles.  A merged
    atlas of one large input and many small ones gets a default window of many tiles; counting
    each as the largest (as before) made that budget the large tile times the window."""
    from types import SimpleNamespace
    from deltacells.dataset import resolve_window, window_cache_mb
    mb = 8 * 1.25 / 2 ** 20                     # per nonzero: 8 bytes, size classes and maps
    cat = SimpleNamespace(tile_nnz=np.array([1000] + [10] * 199), tile_n=np.array([10000] + [100] * 199))
    w = resolve_window(None, cat)
    assert w == 200
    assert window_cache_mb(cat, w, 200, 1) == pytest.approx((1000 + 199 * 10 + 1000) * mb)
    assert window_cache_mb(cat, 2, 200, 1) == pytest.approx((1000 + 10 + 10) * mb)
    assert window_cache_mb(cat, 2, 1, 0) == pytest.approx(1000 * mb)    # a window past the last tile
    even = SimpleNamespace(tile_nnz=np.array([500] * 10))
    assert window_cache_mb(even, 2, 10, 1) == pytest.approx(3 * 500 * mb)  # equal tiles: as before
