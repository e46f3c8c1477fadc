"""dc_aggregate on the real PBMC files (skipped when ../shared/data/real is absent), against
numpy/scipy computed from each h5ad: exact sums and counts, means within 1e-12 relative, for
every file (by cell_type where the file has one, else one group, and a random selection) and
for the five files merged into one dataset (by source)."""
import json

import anndata
import numpy as np
import pytest
import scipy.sparse as sp

from _aggregate_ref import assert_matches, long, reference, wide
from _batch_util import REAL_FILES, connect, convert, real_file, reference_matrix


def _matrix(ad, matrix):
    """X and its gene names as the converter stores them (surrounding whitespace removed)."""
    if matrix == "X":
        return ad.X, ad.var_names.str.strip()
    if matrix == "raw/X":
        return ad.raw.X, ad.raw.var_names.str.strip()
    return ad.layers[matrix.split("/", 1)[1]], ad.var_names.str.strip()


@pytest.fixture(scope="module", params=REAL_FILES)
def real(request, tmp_path_factory):
    h5 = real_file(request.param)
    db = convert(h5, tmp_path_factory.mktemp("aggreal") / (request.param + ".dcdb"), tile_cells=512)
    obs = anndata.read_h5ad(str(h5), backed="r").obs
    return db, reference_matrix(h5, db), obs


def test_each_file(real):
    db, X, obs = real
    con = connect(db)
    col = "cell_type" if "cell_type" in obs.columns else None
    ref, ref_order = reference(X, None if col is None else obs[col].values)
    order, got = wide(con, col)
    assert_matches(order, got, ref_order, ref, gene_ids=np.arange(X.shape[1]))
    # a random half of the cells and a panel, long form
    rng = np.random.default_rng(2)
    cells = rng.choice(X.shape[0], X.shape[0] // 2, replace=False)
    panel = rng.permutation(X.shape[1])[:100]
    ref, ref_order = reference(X, None if col is None else obs[col].values, cells=cells, panel=panel)
    order, got = long(con, col, json.dumps(cells.tolist()), np.asarray(panel, "<i4").tobytes())
    assert_matches(order, got, ref_order, ref, gene_ids=panel, long_form=True)


def test_five_files_merged_by_source(tmp_path_factory):
    paths = [real_file(f) for f in REAL_FILES]
    db = tmp_path_factory.mktemp("aggmerged") / "merged.dcdb"
    convert(paths[0], db, extra=[str(p) for p in paths[1:]])
    con = connect(db)
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    sources = json.loads(con.execute("SELECT value FROM dc_meta WHERE key = 'sources'").fetchone()[0])
    pos = {}
    for g, n in enumerate(names):
        pos.setdefault(n, []).append(g)
    blocks, labels = [], []
    for p, s in zip(paths, sources):
        Xf, var = _matrix(anndata.read_h5ad(str(p)), s.get("matrix", "X"))
        Xf = sp.csr_matrix(Xf)
        assert np.all(Xf.data == np.round(Xf.data))
        seen = {}
        cols = np.empty(len(var), dtype=np.int64)
        for i, n in enumerate(var):          # k-th occurrence of a name joins the k-th
            k = seen.get(n, 0)
            cols[i] = pos[n][k]
            seen[n] = k + 1
        coo = Xf.tocoo()
        blocks.append(sp.csr_matrix((coo.data.astype(np.int64), (coo.row, cols[coo.col])),
                                    shape=(Xf.shape[0], len(names))))
        labels += [p.name] * Xf.shape[0]  # `source` holds base names
    X = sp.vstack(blocks).tocsr()
    X.eliminate_zeros()
    import pandas as pd
    lab = pd.Categorical(labels, categories=[p.name for p in paths])
    ref, ref_order = reference(X, lab)
    order, got = wide(con, "source")
    assert_matches(order, got, ref_order, ref, gene_ids=np.arange(len(names)))
    # one group over everything, without log1p
    ref, ref_order = reference(X, None, log1p=False)
    order, got = wide(con, None, log1p=False)
    assert_matches(order, got, ref_order, ref, log1p=False)
