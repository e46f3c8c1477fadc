"""deltacells.aggregate: the long DataFrame and the AnnData form against numpy/scipy
computed from the h5ad, with where-filters, panels, NULL groups, and a dataset made before
dc_aggregate existed."""
import shutil
import sqlite3

import anndata
import numpy as np
import pandas as pd
import pytest

from _aggregate_ref import close, reference
from _batch_util import EXTENSION, generated, reference_matrix

import deltacells


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    h5, db = generated(tmp_path_factory.mktemp("pyagg"), 2000, 800, 3, 400)
    X = reference_matrix(h5, db)
    obs = anndata.read_h5ad(str(h5)).obs
    con = deltacells.connect(db)
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    con.close()
    return db, X, obs, names


def check_frame(df, ref, ref_order, names, gene_ids, log1p):
    cols = ["group", "gene", "n_cells", "sum", "mean", "n_expressing", "frac_expressing"]
    assert list(df.columns) == cols + (["mean_log1p_cpm"] if log1p else [])
    J = len(gene_ids)
    assert len(df) == len(ref_order) * J
    for i, g in enumerate(ref_order):
        part = df.iloc[i * J:(i + 1) * J]
        assert all((v is None) if g is None else v == g for v in part["group"])
        assert list(part["gene"]) == [names[j] for j in gene_ids]
        r = ref[g]
        assert (part["n_cells"] == r["n_cells"]).all()
        assert np.array_equal(part["sum"].to_numpy(), r["sum"])
        assert np.array_equal(part["n_expressing"].to_numpy(), r["n_expr"])
        assert close(part["mean"], r["mean"]) and close(part["frac_expressing"], r["frac"])
        if log1p:
            assert close(part["mean_log1p_cpm"], r["mean_log1p"])


def test_dataframe_with_where_and_nulls(data):
    db, X, obs, names = data
    df = deltacells.aggregate(db, by="batch", where="age >= 40 AND donor != 'D03'", log1p_cpm=True)
    mask = ((obs["age"] >= 40) & (obs["donor"] != "D03")).to_numpy()
    ref, ref_order = reference(X, obs["batch"], cells=np.flatnonzero(mask))
    assert ref_order[-1] is None
    check_frame(df, ref, ref_order, names, np.arange(X.shape[1]), True)


def test_dataframe_panel_and_one_group(data):
    db, X, obs, names = data
    panel = [names[g] for g in (5, 700, 0, 33)]
    df = deltacells.aggregate(db, by=None, genes=panel)
    ref, ref_order = reference(X, None, panel=[5, 700, 0, 33], log1p=False)
    check_frame(df, ref, ref_order, names, [5, 700, 0, 33], False)
    # the mean with zeros against the nonzero-only average of expression_long
    con = deltacells.connect(db)
    nz = con.execute("SELECT avg(count) FROM expression_long WHERE gene_id = 700").fetchone()[0]
    con.close()
    row = df[df.gene == names[700]].iloc[0]
    assert row["mean"] == pytest.approx(nz * row["frac_expressing"], rel=1e-9) and row["mean"] < nz


def test_anndata_like_scanpy(data):
    db, X, obs, names = data
    ad = deltacells.aggregate(db, by="cell_type", as_anndata=True, log1p_cpm=True)
    ref, ref_order = reference(X, obs["cell_type"])
    assert list(ad.obs_names) == [str(g) for g in ref_order]
    assert list(ad.obs["cell_type"]) == ref_order
    assert list(ad.var_names) == names and np.array_equal(ad.var["gene_id"], np.arange(len(names)))
    assert ad.X is None
    for i, g in enumerate(ref_order):
        r = ref[g]
        assert ad.obs["n_cells"].iloc[i] == r["n_cells"]
        assert np.array_equal(ad.layers["sum"][i], r["sum"])
        assert np.array_equal(ad.layers["count_nonzero"][i], r["n_expr"])
        assert close(ad.layers["mean"][i], r["mean"]) and close(ad.layers["frac_expressing"][i], r["frac"])
        assert close(ad.layers["mean_log1p_cpm"][i], r["mean_log1p"])
    # scanpy's sum and mean from the AnnData of the same cells
    full = deltacells.to_anndata(db, obs=["cell_type"])
    for i, g in enumerate(ref_order):
        sub = full.X[(full.obs["cell_type"] == g).to_numpy()]
        assert np.array_equal(np.asarray(sub.sum(axis=0)).ravel(), ad.layers["sum"][i])


def test_dataset_made_before_dc_aggregate(data, tmp_path):
    db, X, obs, names = data
    old = tmp_path / "old.dcdb"
    shutil.copy(db, old)
    con = sqlite3.connect(str(old))
    con.enable_load_extension(True)
    con.execute("SELECT load_extension(?, 'sqlite3_deltacells_init')", (str(EXTENSION),))
    con.execute("DROP TABLE dc_aggregate")
    con.execute("DROP TABLE dc_aggregate_wide")
    con.commit()
    con.close()
    df = deltacells.aggregate(old, by="donor")
    ref, ref_order = reference(X, obs["donor"], log1p=False)
    check_frame(df, ref, ref_order, names, np.arange(X.shape[1]), False)


def test_errors(data):
    db, *_ = data
    with pytest.raises(ValueError, match="unknown obs column 'nope'"):
        deltacells.aggregate(db, by="nope")
    with pytest.raises(ValueError, match="bad where clause"):
        deltacells.aggregate(db, where="no_such_column > 1")
    with pytest.raises(TypeError):
        deltacells.aggregate(db, by=3)
    with pytest.raises(ValueError):
        deltacells.aggregate(db, genes=["NOT_A_GENE"])
    assert isinstance(deltacells.aggregate(db, where="age > 1000"), pd.DataFrame)
    assert len(deltacells.aggregate(db, where="age > 1000")) == 0


def test_kept_connection_follows_a_rewritten_file(data, tmp_path):
    db, X, obs, names = data
    path = tmp_path / "d.dcdb"
    shutil.copy(db, path)
    first = deltacells.aggregate(path, by=None)
    assert first["n_cells"].iloc[0] == X.shape[0]
    # another dataset moved over the same path (as the converter writes: a rename)
    h5, other = generated(tmp_path, 500, 300, 9, 200)
    tmp = tmp_path / "d.tmp"
    shutil.copy(other, tmp)
    import os
    os.replace(tmp, path)
    second = deltacells.aggregate(path, by=None)
    assert second["n_cells"].iloc[0] == 500 and len(second) == 300
    from deltacells import _aggregate
    _aggregate.close_connections()
    assert deltacells.aggregate(path, by=None)["n_cells"].iloc[0] == 500


def _child_sum(path, q):
    try:
        q.put(int(deltacells.aggregate(path, by=None)["sum"].sum()))
    except BaseException as e:     # reported to the parent
        q.put(repr(e))


def test_forked_child_uses_its_own_connection(data):
    """The connection kept by the parent is never used in a forked child (no hang, same sums)."""
    import multiprocessing
    db, X, *_ = data
    total = int(deltacells.aggregate(db, by=None)["sum"].sum())   # the parent keeps a connection
    assert total == int(X.sum())
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_sum, args=(db, q))
    p.start()
    p.join(timeout=120)
    if p.is_alive():
        p.kill()
        pytest.fail("the forked child hung")
    assert q.get(timeout=5) == total
    assert int(deltacells.aggregate(db, by=None)["sum"].sum()) == total    # the parent's still works


def test_anndata_group_names_stay_unique_with_a_label_spelled_na(data, tmp_path):
    """A real label "NA" (kept as text by annotate) beside cells with no label named two groups
    "NA" in as_anndata's obs; the missing-label group is then "<NA>"."""
    db, X, obs, names = data
    db2 = tmp_path / "na.dcdb"
    shutil.copy(db, db2)
    con = deltacells.connect(str(db2))
    cells = [r[0] for r in con.execute("SELECT name FROM cells ORDER BY cell_id")]
    con.close()
    grp = pd.Categorical(["NA", "x"] * 300)
    deltacells.annotate(str(db2), pd.DataFrame({"grp": grp}, index=cells[:600]))   # the rest: missing
    ad = deltacells.aggregate(str(db2), by="grp", genes=[names[0]], as_anndata=True)
    assert sorted(ad.obs_names) == ["<NA>", "NA", "x"] and ad.obs_names.is_unique
    assert ad.obs.loc["NA", "n_cells"] == 300 and ad.obs.loc["<NA>", "n_cells"] == len(cells) - 600
