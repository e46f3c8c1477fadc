"""A gene name the dataset repeats (10x feature lists do; the converter keeps such genes) is
ambiguous in a Python gene panel, as in dc_batch and dc_aggregate: every path that resolves gene
names (CellDataset, CellMapDataset, missing_genes='zeros', aggregate, to_anndata) refuses it and
says to pass gene ids, which pick either gene."""
import os
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import convert, need_build  # noqa: E402

import deltacells  # noqa: E402

N_CELLS, N_GENES = 400, 300
DUP = (50, 299)        # the columns named G250 (column 250 is H250)


@pytest.fixture(scope="module")
def dup(tmp_path_factory):
    need_build()
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    r = np.random.default_rng(4)
    X = r.integers(1, 6, (N_CELLS, N_GENES)) * (r.random((N_CELLS, N_GENES)) < 0.3)
    X[:, DUP[0]] *= 10                         # the two G250 differ
    names = [f"G{j}" for j in range(N_GENES)]
    names[250] = "H250"
    for j in DUP:
        names[j] = "G250"
    obs = pd.DataFrame({"kind": pd.Categorical(r.choice(["a", "b"], N_CELLS))},
                       index=[f"c{i}" for i in range(N_CELLS)])
    d = tmp_path_factory.mktemp("dupgenes")
    h5, db = d / "c.h5ad", d / "c.dcdb"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # anndata: "Variable names are not unique"
        ad.AnnData(X=sp.csr_matrix(X.astype(np.int32)), obs=obs, var=pd.DataFrame(index=names),
                   dtype=np.int32).write_h5ad(h5)
    convert(h5, db)
    con = deltacells.connect(str(db))
    ids = dict(con.execute("SELECT orig_index, gene_id FROM genes WHERE name = 'G250'").fetchall())
    con.close()
    return str(db), X, [ids[j] for j in DUP]


AMBIGUOUS = "gene name 'G250' is not unique in this dataset.*pass gene ids"
PATHS = {
    "CellDataset": lambda db, g: deltacells.CellDataset(db, genes=g, batch_size=5000),
    "zeros": lambda db, g: deltacells.CellDataset(db, genes=g, missing_genes="zeros"),
    "CellMapDataset": lambda db, g: deltacells.CellMapDataset(db, genes=g),
    "aggregate": lambda db, g: deltacells.aggregate(db, by="kind", genes=g),
    "to_anndata": lambda db, g: deltacells.to_anndata(db, genes=g),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_repeated_gene_name_is_refused(dup, path):
    db = dup[0]
    for panel in (["G250"], ["G1", "G250"], ["NOT_A_GENE", "G250"] if path == "zeros" else ["G250", "G7"]):
        with pytest.raises(ValueError, match=AMBIGUOUS):
            PATHS[path](db, panel)


@pytest.mark.filterwarnings("ignore:Variable names are not unique")
def test_gene_ids_pick_either_gene(dup):
    db, X, ids = dup
    want = X[:, [DUP[1], DUP[0], 1]]
    con = deltacells.connect(db)
    g1 = con.execute("SELECT gene_id FROM genes WHERE name = 'G1'").fetchone()[0]
    con.close()
    panel = [ids[1], ids[0], g1]
    ds = deltacells.CellDataset(db, genes=panel, batch_size=5000, shuffle=False, output="dense")
    b = next(iter(ds))
    assert np.array_equal(b["X"].numpy(), want[b["cell_id"].numpy()])
    m = deltacells.CellMapDataset(db, genes=panel, output="dense")
    assert np.array_equal(m.batch(list(range(N_CELLS)))["X"].numpy(), want)
    a = deltacells.to_anndata(db, genes=panel)
    assert list(a.var_names) == ["G250", "G250", "G1"]
    assert np.array_equal(a.X.toarray(), want)
    agg = deltacells.aggregate(db, by=None, genes=panel, as_anndata=True)
    assert np.array_equal(agg.layers["sum"].ravel(), want.sum(axis=0))
    # unique names beside a repeated one still resolve by name
    a = deltacells.to_anndata(db, genes=["H250", "G1"])
    assert np.array_equal(a.X.toarray(), X[:, [250, 1]])
