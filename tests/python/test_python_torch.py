"""The datasets behave the way PyTorch users expect (issue 8): len(), one cell per ds[i]
with torch's default collate and samplers, the fast batch path, label codes and their
encoder, cell names, zero-filled panel genes, transforms, train/validation splits and
discoverability.  Small generated datasets; every content check is against anndata."""
import os
import sys
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import gen, read_h5ad, reindexed_X, stored_gene_names  # noqa: E402

import deltacells  # noqa: E402
from deltacells import transforms as T  # noqa: E402

N_CELLS, N_GENES, TILE = 2000, 150, 300


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("py_torch"), N_CELLS, N_GENES, 21, TILE)


@pytest.fixture(scope="module")
def adata(small):
    return read_h5ad(small[0])


@pytest.fixture(scope="module")
def stored_genes(small):
    return stored_gene_names(small[1])


def dense_of(X):
    if isinstance(X, torch.Tensor):
        return (X.to_dense() if X.layout != torch.strided else X).numpy()
    if isinstance(X, deltacells.CSRBatch):
        return X.to_dense().numpy()
    return X.toarray()


# --- len ---------------------------------------------------------------------------------
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_is_exact_for_any_number_of_workers(small, drop_last):
    ds = deltacells.CellDataset(small[1], batch_size=128, seed=1, drop_last=drop_last)
    expect = N_CELLS // 128 if drop_last else -(-N_CELLS // 128)
    assert len(ds) == ds.n_batches == expect
    sets = []
    for nw in (0, 1, 2):
        dl = DataLoader(ds, batch_size=None, num_workers=nw)
        assert len(dl) == expect
        got = [tuple(b["cell_id"].tolist()) for b in dl]
        assert len(got) == expect
        sets.append(set(got))
    assert sets[0] == sets[1] == sets[2], "the epoch's batches depend on the number of workers"
    ranks = [deltacells.CellDataset(small[1], batch_size=128, seed=1, rank=r, world_size=2)
             for r in range(2)]
    assert sum(len(r) for r in ranks) >= expect and all(len(r) > 0 for r in ranks)
    assert sum(len(list(DataLoader(r, batch_size=None, num_workers=2))) for r in ranks) \
        == sum(len(r) for r in ranks)


def test_counts_are_properties(small):
    for cls in (deltacells.CellDataset, deltacells.CellMapDataset):
        assert isinstance(cls.n_cells, property) and isinstance(cls.n_genes, property)
    assert isinstance(deltacells.CellDataset.n_batches, property)
    ds = deltacells.CellDataset(small[1], where="donor = 'D01'", batch_size=50)
    m = deltacells.CellMapDataset(small[1], where="donor = 'D01'")
    assert ds.n_cells == m.n_cells == len(m) > 0
    assert ds.n_genes == m.n_genes == N_GENES


# --- map-style: one cell per index -------------------------------------------------------
def test_map_item_is_one_cell(small, adata, stored_genes):
    ref = reindexed_X(adata, stored_genes)
    m = deltacells.CellMapDataset(small[1], obs=["cell_type", "age", "percent_mt", "is_doublet",
                                                 "barcode", "batch"])
    c = m[17]
    assert c["X"].shape == (N_GENES,) and c["X"].layout == torch.strided
    assert c["X"].dtype == torch.float32
    assert np.array_equal(c["X"].numpy(), ref[17].toarray()[0])
    o = adata.obs.iloc[17]
    assert c["cell_id"] == 17 and isinstance(c["cell_id"], int)
    assert c["cell_type"] == m.categories["cell_type"].index(o["cell_type"])
    assert c["age"] == o["age"] and isinstance(c["age"], int)
    assert c["barcode"] == o["barcode"] and c["is_doublet"] == bool(o["is_doublet"])
    assert m[-1]["cell_id"] == N_CELLS - 1 and m[np.int64(3)]["cell_id"] == 3
    s = deltacells.CellMapDataset(small[1], row="sparse")[17]["X"]
    assert s.layout == torch.sparse_coo and s.shape == (N_GENES,)
    assert np.array_equal(s.to_dense().numpy(), ref[17].toarray()[0])
    with pytest.raises(IndexError, match="out of range"):
        m[N_CELLS]
    with pytest.raises(ValueError, match="row must be one of"):
        deltacells.CellMapDataset(small[1], row="coo")


def test_map_default_collate_shuffle_two_workers_each_cell_once(small, adata, stored_genes):
    """The issue's target: DataLoader(m, batch_size=64, shuffle=True, num_workers=2) with
    torch's default collate yields every selected cell exactly once per epoch, and the
    rows equal anndata's X by gene name."""
    where = "cell_type != 'CD4 T'"
    sel = np.flatnonzero((adata.obs["cell_type"] != "CD4 T").to_numpy())
    panel = list(np.random.default_rng(1).choice(adata.var_names.to_numpy(), 40, replace=False))
    m = deltacells.CellMapDataset(small[1], where=where, genes=panel, obs=["cell_type"])
    ref = reindexed_X(adata, panel)
    codes = adata.obs["cell_type"].cat.codes.to_numpy()
    assert len(m) == len(sel)
    for epoch in range(2):
        torch.manual_seed(epoch)
        seen = []
        for b in DataLoader(m, batch_size=64, shuffle=True, num_workers=2):
            ids = b["cell_id"].numpy()
            assert b["X"].shape == (len(ids), 40) and len(ids) <= 64
            assert np.array_equal(b["X"].numpy(), ref[ids].toarray())
            assert np.array_equal(b["cell_type"].numpy(), codes[ids])
            seen.append(ids)
        seen = np.concatenate(seen)
        assert len(seen) == len(sel) and np.array_equal(np.sort(seen), sel)
        assert not np.array_equal(seen, sel)


def test_map_samplers_and_fast_path_agree(small, adata, stored_genes):
    m = deltacells.CellMapDataset(small[1], obs=["cell_type"])
    ref = reindexed_X(adata, stored_genes)
    def sampler():
        return torch.utils.data.SubsetRandomSampler(range(0, N_CELLS, 7),
                                                    generator=torch.Generator().manual_seed(0))
    slow = list(DataLoader(m, batch_size=50, sampler=sampler()))
    fast = list(DataLoader(m, batch_size=50, sampler=sampler(), collate_fn=deltacells.collate))
    assert len(slow) == len(fast)
    for a, b in zip(slow, fast):
        assert b["X"].layout == torch.sparse_csr            # output='csr' (the default)
        assert torch.equal(a["cell_id"], b["cell_id"])
        assert np.array_equal(a["X"].numpy(), dense_of(b["X"]))
        assert np.array_equal(a["X"].numpy(), ref[a["cell_id"].numpy()].toarray())
        assert torch.equal(a["cell_type"], b["cell_type"])
    # a WeightedRandomSampler with replacement: repeats in one batch are fine
    w = torch.ones(N_CELLS)
    b = next(iter(DataLoader(m, batch_size=300, sampler=torch.utils.data.WeightedRandomSampler(
        w, 300, generator=torch.Generator().manual_seed(2)))))
    assert np.array_equal(b["X"].numpy(), ref[b["cell_id"].numpy()].toarray())


def test_map_sparse_rows_with_deltacells_collate_in_workers(small, adata, stored_genes):
    ref = reindexed_X(adata, stored_genes)
    m = deltacells.CellMapDataset(small[1], row="sparse", output="csr_parts")
    n = 0
    for b in DataLoader(m, batch_size=100, shuffle=True, num_workers=2,
                        collate_fn=deltacells.collate):
        assert isinstance(b["X"], deltacells.CSRBatch)
        assert np.array_equal(dense_of(b["X"]), ref[b["cell_id"].numpy()].toarray())
        n += len(b["cell_id"])
    assert n == N_CELLS
    # single sparse cells collated by deltacells.collate (e.g. a torch without __getitems__)
    cells = [m[i] for i in (4, 9, 4)]
    b = deltacells.collate(cells)
    assert b["X"].layout == torch.sparse_csr and b["cell_id"].tolist() == [4, 9, 4]
    assert np.array_equal(b["X"].to_dense().numpy(), ref[[4, 9, 4]].toarray())
    # torch's default collate stacks sparse rows in the main process
    d = torch.utils.data.default_collate(cells)
    assert np.array_equal(d["X"].to_dense().numpy(), ref[[4, 9, 4]].toarray())


def test_getitems_returns_cells_and_the_batch(small):
    m = deltacells.CellMapDataset(small[1], obs=["donor"])
    cb = m.__getitems__([3, 1, 3])
    assert isinstance(cb, deltacells.CellBatch) and len(cb) == 3
    assert [c["cell_id"] for c in cb] == [3, 1, 3]
    assert cb.batch["cell_id"].tolist() == [3, 1, 3]
    assert deltacells.collate(cb) is cb.batch
    assert m[[3, 1, 3]]["cell_id"].tolist() == [3, 1, 3]       # a list index: one batch dict
    assert m[2:5]["cell_id"].tolist() == [2, 3, 4]



@pytest.mark.parametrize("output", ["csr", "csr_parts", "dense", "scipy"])
@pytest.mark.parametrize("ticket", [True, False])
def test_empty_index_gives_an_empty_batch(small, monkeypatch, output, ticket):
    """m[5:2], m[[]]: an empty batch of a normal batch's structure (as numpy and torch give
    an empty result), through deltacells.collate too; it was "an empty batch of indices"."""
    if not ticket:
        monkeypatch.setattr(deltacells._core, "_ticket_take_fn", lambda: None)
    m = deltacells.CellMapDataset(small[1], obs=["cell_type", "name", "donor"], output=output)
    full = m[[3, 1]]
    for idx in (slice(5, 2), [], np.array([], dtype=np.int64), torch.tensor([], dtype=torch.long)):
        ways = [m[idx]] if isinstance(idx, slice) else [m[idx], m.batch(idx),
                                                         deltacells.collate(m.__getitems__(idx))]
        for b in ways:
            assert list(b) == list(full)
            assert type(b["X"]) is type(full["X"]) and tuple(b["X"].shape) == (0, N_GENES)
            assert dense_of(b["X"]).dtype == dense_of(full["X"]).dtype
            for k in full:
                if k != "X":
                    assert type(b[k]) is type(full[k]) and len(b[k]) == 0
                    assert b[k].dtype == full[k].dtype, k
    assert len(m.__getitems__([])) == 0


def test_transform_returning_none_is_named(small):
    """A transform that returns None: a TypeError naming it where it returns (was
    "'NoneType' object is not subscriptable" later), in Compose too."""
    def forgets_return(b):
        b["n"] = 1
    ds = deltacells.CellDataset(small[1], batch_size=600, transform=forgets_return, prefetch_tiles=0)
    with pytest.raises(TypeError, match="transform .*forgets_return returned None"):
        next(iter(ds))
    m = deltacells.CellMapDataset(small[1], transform=T.Compose([T.NormalizeLog1p(), forgets_return]))
    for idx in (3, [1, 2]):
        with pytest.raises(TypeError, match="transform .*forgets_return returned None"):
            m[idx]
    m = deltacells.CellMapDataset(small[1], transform=lambda b: None)
    with pytest.raises(TypeError, match="transform .*<lambda> returned None"):
        m[3]


# --- labels ----------------------------------------------------------------------------------
def test_missing_label_code_and_encoder(small, adata):
    obs = adata.obs["batch"]
    assert obs.isna().any(), "the generated data should have missing batch labels"
    ds = deltacells.CellDataset(small[1], obs=["batch"], batch_size=N_CELLS, shuffle=False)
    cats = ds.categories["batch"]
    assert isinstance(cats, deltacells.Categories)
    assert list(cats) == list(obs.cat.categories) and len(cats) == len(obs.cat.categories)
    assert cats.missing_code == -100
    b = next(iter(ds))
    want = obs.cat.codes.to_numpy().astype(np.int64)
    want[want == -1] = -100
    assert np.array_equal(b["batch"].numpy(), want)
    assert cats.decode(b["batch"][:20]) == [None if v != v else v for v in obs.iloc[:20]]
    assert np.array_equal(cats.encode(cats.decode(b["batch"])), want)
    # CrossEntropyLoss skips the missing labels by default
    logits = torch.zeros(len(want), len(cats))
    loss = torch.nn.functional.cross_entropy(logits, b["batch"])
    assert torch.isfinite(loss)
    ds7 = deltacells.CellDataset(small[1], obs=["batch"], batch_size=N_CELLS, shuffle=False,
                                 missing_code=len(cats))
    got = next(iter(ds7))["batch"].numpy()
    assert np.array_equal(got[want == -100], np.full((want == -100).sum(), len(cats)))
    m = deltacells.CellMapDataset(small[1], obs=["batch"], missing_code=-1)
    assert m.categories["batch"].missing_code == -1
    assert np.array_equal(m.obs_values("batch"), obs.cat.codes.to_numpy())
    with pytest.raises(ValueError, match="missing_code 0 is a code of obs column 'batch'"):
        deltacells.CellDataset(small[1], obs=["batch"], missing_code=0)
    with pytest.raises(ValueError, match="is not a category"):
        cats.encode(["no such batch"])


def test_cell_names_as_obs(small, adata):
    ds = deltacells.CellDataset(small[1], obs=["name", "cell_type"], batch_size=300, seed=2)
    for b in ds:
        ids = b["cell_id"].numpy()
        assert list(b["name"]) == list(adata.obs_names[ids])
    m = deltacells.CellMapDataset(small[1], obs=["name"])
    assert m[11]["name"] == adata.obs_names[11]
    batch = next(iter(DataLoader(m, batch_size=4)))
    assert batch["name"] == list(adata.obs_names[batch["cell_id"].numpy()])
    s = deltacells.CellDataset(small[1], obs=["name"], output="scipy", batch_size=5, shuffle=False)
    assert list(next(iter(s))["name"]) == list(adata.obs_names[:5])


# --- panels with genes the dataset lacks ------------------------------------------------------
def test_zero_filled_panel_genes(small, adata):
    panel = ["GENE7", "NOT_A_GENE", "GENE3", "ALSO_MISSING", "GENE100"]
    with pytest.raises(ValueError, match="unknown genes in the panel.*missing_genes='zeros'"):
        deltacells.CellDataset(small[1], genes=panel)
    with pytest.warns(UserWarning, match="2 of the 5 panel genes .* NOT_A_GENE, ALSO_MISSING"):
        ds = deltacells.CellDataset(small[1], genes=panel, missing_genes="zeros",
                                    batch_size=700, output="csr")
    assert ds.filled_genes == ["NOT_A_GENE", "ALSO_MISSING"]
    assert ds.gene_names == panel and ds.n_genes == 5
    known = reindexed_X(adata, ["GENE7", "GENE3", "GENE100"]).toarray()
    n = 0
    for b in ds:
        ids = b["cell_id"].numpy()
        X = b["X"]
        crow, col = X.crow_indices().numpy(), X.col_indices().numpy()
        for r in range(len(ids)):                       # sorted columns in every row
            assert np.all(np.diff(col[crow[r]:crow[r + 1]]) > 0)
        X = dense_of(X)
        assert np.array_equal(X[:, [0, 2, 4]], known[ids])
        assert not X[:, [1, 3]].any()
        n += len(ids)
    assert n == N_CELLS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = deltacells.CellMapDataset(small[1], genes=["NOPE", "GENE3"], missing_genes="zeros")
        only = deltacells.CellMapDataset(small[1], genes=["NOPE"], missing_genes="zeros")
    assert np.array_equal(m[5]["X"].numpy(), [0, known[5, 1]])
    assert only[5]["X"].tolist() == [0.0] and only.filled_genes == ["NOPE"]
    with pytest.raises(ValueError, match="missing_genes must be one of"):
        deltacells.CellDataset(small[1], genes=panel, missing_genes="skip")
    assert deltacells.CellDataset(small[1], genes=["GENE3"], missing_genes="zeros").filled_genes == []


# --- transforms -----------------------------------------------------------------------------
def _normlog(X, target=1e4, tot=None):
    X = X.astype(np.float64)
    tot = X.sum(1) if tot is None else np.asarray(tot, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(tot > 0, target / tot, 0.0)
    return np.log1p(X * s[:, None])


@pytest.mark.parametrize("output", ["csr", "csr_parts", "dense", "scipy"])
def test_normalize_log1p(small, adata, stored_genes, output):
    ref = reindexed_X(adata, stored_genes).toarray()
    ds = deltacells.CellDataset(small[1], batch_size=500, output=output, seed=1,
                                transform=T.NormalizeLog1p())
    raw = deltacells.CellDataset(small[1], batch_size=500, output=output, seed=1)
    for b, r in zip(ds, raw):
        ids = np.asarray(b["cell_id"])
        if output != "dense":                        # sparse stays sparse: same pattern
            assert type(b["X"]) is type(r["X"])
            if output == "csr":
                assert b["X"].layout == torch.sparse_csr
                assert b["X"].values().shape == r["X"].values().shape
        np.testing.assert_allclose(dense_of(b["X"]), _normlog(ref[ids]), rtol=1e-5, atol=1e-6)
    # totals from an obs column (the count over all genes) with a panel
    panel = stored_genes[:20]
    ds = deltacells.CellDataset(small[1], batch_size=500, genes=panel, obs=["n_counts"],
                                transform=T.NormalizeLog1p(target_sum=100, total="n_counts"))
    b = next(iter(ds))
    ids = b["cell_id"].numpy()
    want = _normlog(reindexed_X(adata, panel)[ids].toarray(), 100, adata.obs["n_counts"].to_numpy()[ids])
    np.testing.assert_allclose(b["X"].to_dense().numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(KeyError, match="request it with obs"):
        next(iter(deltacells.CellDataset(small[1], transform=T.NormalizeLog1p(total="n_counts"))))


def test_top_genes(small, adata, stored_genes):
    con = deltacells.connect(small[1])
    tot = dict(con.execute("SELECT name, total_counts FROM genes").fetchall())
    ncell = dict(con.execute("SELECT name, n_cells FROM genes").fetchall())
    con.close()
    top = T.TopGenes(25)
    ds = deltacells.CellDataset(small[1], batch_size=400, transform=top, seed=3)
    want = sorted(stored_genes, key=lambda g: -tot[g])[:25]
    assert set(ds.gene_names) == set(want) and ds.n_genes == 25 == len(top.gene_names)
    assert ds.gene_names == top.gene_names == [g for g in stored_genes if g in set(want)]
    ref = reindexed_X(adata, ds.gene_names).toarray()
    n = 0
    for b in ds:
        assert b["X"].layout == torch.sparse_csr and b["X"].shape[1] == 25
        assert np.array_equal(b["X"].to_dense().numpy(), ref[b["cell_id"].numpy()])
        n += len(b["cell_id"])
    assert n == N_CELLS
    # by n_cells, on a panel, composed with the normalisation, through the map dataset
    panel = stored_genes[::-3]
    pipe = T.Compose([T.TopGenes(10, by="n_cells"), T.NormalizeLog1p()])
    m = deltacells.CellMapDataset(small[1], genes=panel, transform=pipe, output="scipy")
    exp = [g for g in panel if g in set(sorted(panel, key=lambda g: (-ncell[g], panel.index(g)))[:10])]
    assert m.gene_names == exp and m.n_genes == 10
    c = m[9]
    assert c["X"].shape == (10,)
    np.testing.assert_allclose(c["X"].numpy(), _normlog(reindexed_X(adata, exp)[[9]].toarray())[0],
                               rtol=1e-5, atol=1e-6)
    d = deltacells.CellDataset(small[1], output="dense", transform=T.TopGenes(5), batch_size=10)
    assert next(iter(d))["X"].shape == (10, 5)
    with pytest.raises(RuntimeError, match="bind"):
        T.TopGenes(3)({"X": torch.zeros(2, 4)})
    with pytest.raises(ValueError, match="already bound"):
        deltacells.CellDataset(small[1], genes=panel, transform=top)
    with pytest.raises(ValueError, match="no numeric column 'nope'"):
        deltacells.CellDataset(small[1], transform=T.TopGenes(3, by="nope"))


def test_user_transform_per_batch(small):
    calls = []

    def tr(b):
        calls.append(len(b["cell_id"]))
        b = dict(b)
        b["n"] = torch.full((len(b["cell_id"]),), 7)
        return b
    ds = deltacells.CellDataset(small[1], batch_size=600, transform=tr, prefetch_tiles=0)
    assert sum(len(b["n"]) for b in ds) == N_CELLS and sum(calls) == N_CELLS
    m = deltacells.CellMapDataset(small[1], transform=tr)
    assert m[3]["n"] == 7
    with pytest.raises(TypeError, match="transform must be callable"):
        deltacells.CellDataset(small[1], transform="log1p")


# --- splits ----------------------------------------------------------------------------------
def test_split_by_cell(small):
    s = deltacells.train_val_split(small[1], val_fraction=0.25, seed=3)
    train, val = s
    assert len(val) == 500 and len(train) == 1500
    assert not set(train.tolist()) & set(val.tolist())
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(N_CELLS))
    again = deltacells.train_val_split(small[1], val_fraction=0.25, seed=3)
    assert np.array_equal(again.val, val)
    assert not np.array_equal(deltacells.train_val_split(small[1], val_fraction=0.25, seed=4).val, val)
    tr = deltacells.CellDataset(small[1], cells=train, batch_size=256)
    va = deltacells.CellMapDataset(small[1], cells=val)
    assert tr.n_cells == 1500 and len(va) == 500
    ids = np.concatenate([b["cell_id"].numpy() for b in DataLoader(tr, batch_size=None, num_workers=2)])
    assert np.array_equal(np.sort(ids), train)
    assert np.array_equal(va.cell_ids, val)


def test_split_by_group_with_where(small, adata):
    where = "cell_type != 'NK'"
    s = deltacells.train_val_split(small[1], val_fraction=0.3, by="donor", where=where, seed=1)
    sel = np.flatnonzero((adata.obs["cell_type"] != "NK").to_numpy())
    assert np.array_equal(np.sort(np.concatenate([s.train, s.val])), sel)
    donors = adata.obs["donor"].to_numpy()
    assert set(donors[s.train]) == set(s.train_groups) and set(donors[s.val]) == set(s.val_groups)
    assert not set(s.train_groups) & set(s.val_groups) and s.val_groups and s.train_groups
    assert abs(len(s.val) / len(sel) - 0.3) < 0.15
    # batch has NULLs: a group of its own
    b = deltacells.train_val_split(small[1], val_fraction=0.5, by="batch", seed=0)
    assert None in b.train_groups + b.val_groups
    ds = deltacells.CellDataset(small[1], cells=s.val, where="age > 40")
    assert ds.n_cells == len(np.intersect1d(s.val, np.flatnonzero(adata.obs["age"].to_numpy() > 40)))
    with pytest.raises(ValueError, match="val_fraction"):
        deltacells.train_val_split(small[1], val_fraction=1.0)
    with pytest.raises(ValueError, match="unknown obs column 'donr'"):
        deltacells.train_val_split(small[1], by="donr")
    with pytest.raises(ValueError, match="cell ids out of range"):
        deltacells.CellDataset(small[1], cells=[0, N_CELLS])


# --- discoverability --------------------------------------------------------------------------
def test_dir_shows_the_api():
    names = dir(deltacells)
    for n in ("CellDataset", "CellMapDataset", "connect", "to_anndata", "GroupBatchSampler",
              "collate", "CSRBatch", "CellBatch", "Categories", "train_val_split", "transforms"):
        assert n in names, n
        assert getattr(deltacells, n) is not None
    assert set(deltacells.__all__) <= set(names)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_workers(small, start):
    ds = deltacells.CellDataset(small[1], batch_size=250, seed=5)
    dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                    multiprocessing_context=start)
    orders = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        ids = np.concatenate([b["cell_id"].numpy() for b in dl])
        assert np.array_equal(np.sort(ids), np.arange(N_CELLS))
        orders.append(ids)
        ref = deltacells.CellDataset(small[1], batch_size=250, seed=5)
        ref.set_epoch(epoch)
        assert np.array_equal(ids, np.concatenate([b["cell_id"].numpy() for b in
                                                   DataLoader(ref, batch_size=None, num_workers=2)]))
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])
    import pickle
    assert pickle.loads(pickle.dumps(ds)).epoch == 2     # outside spawning: a plain int
