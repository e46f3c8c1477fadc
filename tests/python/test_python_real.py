"""The Python package on the real PBMC files (skipped when ../shared/data/real is absent):
where-filters equal pandas, outputs and gene panels equal anndata's X, to_anndata
round-trips, a multi-file dataset."""
import os
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import REAL, convert, need_build, read_h5ad, real_file, reindexed_X  # noqa: E402

import deltacells  # noqa: E402

FILES = ["fhil_pbmc3k.h5ad", "soupx_pbmc4k_subset.h5ad", "mudan_sorted_pbmc_reference.h5ad",
         "pisces_pbmc1k.h5ad", "scanpy_10x10k_subset.h5ad"]

# (file, SQL over cells, the same on the pandas obs)
WHERE = [
    ("fhil_pbmc3k.h5ad", "cell_type IN ('B', 'NK') AND percent_mt < 3",
     lambda o: o.cell_type.isin(["B", "NK"]) & (o.percent_mt < 3)),
    ("fhil_pbmc3k.h5ad", "nCount_RNA BETWEEN 2000 AND 4000 OR seurat_cluster = 5",
     lambda o: o.nCount_RNA.between(2000, 4000) | (o.seurat_cluster == 5)),
    ("fhil_pbmc3k.h5ad", "cell_type != 'unlabeled_filtered' AND nFeature_RNA > 1000",
     lambda o: (o.cell_type != "unlabeled_filtered") & (o.nFeature_RNA > 1000)),
    ("fhil_pbmc3k.h5ad", "barcode LIKE 'AAAC%'", lambda o: o.barcode.astype(str).str.startswith("AAAC")),
    ("soupx_pbmc4k_subset.h5ad", "cell_type = 'T_CD8' AND nUMIs >= 3000",
     lambda o: (o.cell_type == "T_CD8") & (o.nUMIs >= 3000)),
    ("soupx_pbmc4k_subset.h5ad", "cluster IN (1, 3, 5) OR cell_type = '?'",
     lambda o: o.cluster.isin([1, 3, 5]) | (o.cell_type == "?")),
    ("mudan_sorted_pbmc_reference.h5ad", "cell_type NOT IN ('nk', 'bcells')",
     lambda o: ~o.cell_type.isin(["nk", "bcells"])),
]


@pytest.fixture(scope="module")
def real_dbs(tmp_path_factory):
    if not REAL.is_dir():
        pytest.skip(f"real data not present: {REAL}")
    need_build()
    d = tmp_path_factory.mktemp("py_real")
    return {f: convert(REAL / f, d / (f[:-5] + ".dcdb")) for f in FILES if (REAL / f).exists()}


_ad_cache = {}


def source(name):
    if name not in _ad_cache:
        a = read_h5ad(real_file(name))
        a.var_names = a.var_names.str.strip()  # as the converter stores them
        _ad_cache[name] = a
    return _ad_cache[name]


def stored_names(db):
    con = deltacells.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    finally:
        con.close()


@pytest.mark.parametrize("name,where,pred", WHERE, ids=[f"{w[0][:8]}:{w[1]}" for w in WHERE])
def test_where_equals_pandas(real_dbs, name, where, pred):
    ad = source(name)
    expect = np.flatnonzero(pred(ad.obs).to_numpy())
    assert 0 < len(expect) < ad.n_obs, "the predicate should select some cells, not all"
    ds = deltacells.CellDataset(real_dbs[name], where=where, batch_size=97, seed=1,
                                obs=["cell_type"])
    assert np.array_equal(ds.cell_ids, expect)
    ids = np.concatenate([np.asarray(b["cell_id"]) for b in DataLoader(ds, batch_size=None,
                                                                        num_workers=2)])
    assert np.array_equal(np.sort(ids), expect)
    sub = deltacells.to_anndata(real_dbs[name], where=where)
    assert list(sub.obs_names) == list(ad.obs_names[expect])


@pytest.mark.parametrize("name", FILES)
def test_outputs_equal_anndata_x(real_dbs, name):
    if name not in real_dbs:
        pytest.skip(f"{name} absent")
    ad = source(name)
    ref = reindexed_X(ad, stored_names(real_dbs[name]))
    ref.sort_indices()
    for output in ("csr", "csr_parts", "scipy", "dense"):
        ds = deltacells.CellDataset(real_dbs[name], batch_size=1500, seed=2, output=output,
                                    shuffle_window=3)
        n = 0
        for b in ds:
            ids = np.asarray(b["cell_id"])
            want = ref[ids]
            X = b["X"]
            if output == "dense":     # dense is big: check the first 100 rows
                assert np.array_equal(X[:100].numpy(), want[:100].toarray())
                n = ad.n_obs
                break
            if output == "csr":
                X = deltacells.CSRBatch(X.crow_indices(), X.col_indices(), X.values(), X.shape)
            if output != "scipy":
                X = X.to_scipy()
            assert X.shape == want.shape
            assert np.array_equal(X.indptr, want.indptr), (name, output)
            assert np.array_equal(X.indices, want.indices), (name, output)
            assert np.array_equal(X.data, want.data), (name, output)
            n += len(ids)
        assert n == ad.n_obs


@pytest.mark.parametrize("name", ["fhil_pbmc3k.h5ad", "pisces_pbmc1k.h5ad"])
def test_gene_panel_equals_anndata_reindexed(real_dbs, name):
    ad = source(name)
    rng = np.random.default_rng(3)
    # a panel in arbitrary order, including the most and least expressed genes
    stored = stored_names(real_dbs[name])
    panel = [stored[0], stored[-1]] + list(rng.choice(ad.var_names.to_numpy(), 200, replace=False))
    panel = list(dict.fromkeys(panel))
    ref = reindexed_X(ad, panel)
    ds = deltacells.CellMapDataset(real_dbs[name], genes=panel, output="scipy")
    idx = rng.integers(0, ad.n_obs, 700)          # random order, with repeats
    b = ds[idx]
    assert b["X"].shape == (700, len(panel))
    assert np.array_equal(b["X"].toarray(), ref[idx].toarray())
    ad2 = deltacells.to_anndata(real_dbs[name], genes=panel)
    assert list(ad2.var_names) == panel
    assert (ad2.X != ref).nnz == 0


def test_to_anndata_round_trip(real_dbs):
    ad = source("soupx_pbmc4k_subset.h5ad")
    back = deltacells.to_anndata(real_dbs["soupx_pbmc4k_subset.h5ad"])
    assert list(back.obs_names) == list(ad.obs_names)
    assert list(back.obs.columns) == list(ad.obs.columns)
    for c in ad.obs.columns:
        if hasattr(ad.obs[c], "cat"):
            assert list(back.obs[c].cat.categories) == list(ad.obs[c].cat.categories)
        assert list(back.obs[c].astype(str)) == list(ad.obs[c].astype(str))
    assert (back.X != reindexed_X(ad, back.var_names)).nnz == 0
    assert back.var["total_counts"].is_monotonic_decreasing


def test_cell_type_codes_and_categories(real_dbs):
    ad = source("mudan_sorted_pbmc_reference.h5ad")
    ds = deltacells.CellDataset(real_dbs["mudan_sorted_pbmc_reference.h5ad"], obs=["cell_type"],
                                batch_size=512, seed=0, output="csr_parts")
    assert ds.categories["cell_type"] == list(ad.obs.cell_type.cat.categories)
    codes = ad.obs.cell_type.cat.codes.to_numpy()
    for b in ds:
        assert b["cell_type"].dtype == torch.int64
        assert np.array_equal(b["cell_type"].numpy(), codes[b["cell_id"].numpy()])


def test_group_batches_from_one_cell_type(real_dbs):
    ad = source("fhil_pbmc3k.h5ad")
    ds = deltacells.CellMapDataset(real_dbs["fhil_pbmc3k.h5ad"], obs=["cell_type"],
                                   where="cell_type != 'unlabeled_filtered'")
    sampler = deltacells.GroupBatchSampler(ds, "cell_type", batch_size=100, seed=0)
    seen = []
    for b in DataLoader(ds, batch_sampler=sampler, collate_fn=deltacells.collate):
        assert len(set(b["cell_type"].tolist())) == 1
        seen.append(b["cell_id"].numpy())
    ids = np.concatenate(seen)
    expect = np.flatnonzero((ad.obs.cell_type != "unlabeled_filtered").to_numpy())
    assert np.array_equal(np.sort(ids), expect)


def test_two_files_one_dataset_with_a_panel(real_dbs, tmp_path):
    """Two real files joined by gene name: a panel reads both in one vocabulary."""
    a, b = real_file("fhil_pbmc3k.h5ad"), real_file("soupx_pbmc4k_subset.h5ad")
    db = convert_many([a, b], tmp_path / "two.dcdb")
    ada, adb = source(a.name), source(b.name)
    common = sorted(set(ada.var_names) & set(adb.var_names))
    panel = common[::97]
    ds = deltacells.CellDataset(db, where="source LIKE '%soupx_pbmc4k_subset%'", genes=panel,
                                output="scipy", batch_size=4096, shuffle=False)
    X = next(iter(ds))["X"]
    assert X.shape == (adb.n_obs, len(panel))
    assert np.array_equal(X.toarray(), reindexed_X(adb, panel).toarray())


def convert_many(files, out):
    import subprocess
    from _python_data import CONVERTER
    r = subprocess.run([str(CONVERTER), "convert", *map(str, files), "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out
