"""expression, expression_long and tiles against the reference matrix; ATTACH of two datasets."""
import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

from _batch_util import assert_csr_equal, batch, connect, generated, ids_blob, reference_matrix


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    d = tmp_path_factory.mktemp("tables")
    h1, db1 = generated(d, 3000, 2000, 1, 1000)
    h2, db2 = generated(d, 1700, 900, 2, 500)
    return (db1, reference_matrix(h1, db1), h1), (db2, reference_matrix(h2, db2), h2)


def rows_of(con, sql, args=()):
    return con.execute(sql, args).fetchall()


def test_expression_in_range_eq(two):
    (db, X, _), _ = two
    con = connect(db)
    ids = [2999, 5, 1000, 5, 1999, 7]
    got = rows_of(con, "SELECT cell_id, genes, counts FROM expression WHERE cell_id IN (SELECT value FROM json_each(?))",
                  (json.dumps(ids),))
    assert [r[0] for r in got] == sorted(set(ids))
    for cid, genes, counts in got:
        row = X[cid]
        assert np.array_equal(np.frombuffer(genes, "<i4"), row.indices)
        assert np.array_equal(np.frombuffer(counts, "<i4"), row.data)
    got = rows_of(con, "SELECT cell_id, length(genes) / 4 FROM expression WHERE cell_id BETWEEN 990 AND 1010.5")
    assert [r[0] for r in got] == list(range(990, 1011))
    assert [r[1] for r in got] == list(X[990:1011].getnnz(axis=1))
    # values of other types compare as on a native INTEGER column
    assert rows_of(con, "SELECT cell_id FROM expression WHERE cell_id = '12'") == [(12,)]
    assert rows_of(con, "SELECT cell_id FROM expression WHERE cell_id = 12.5") == []
    assert rows_of(con, "SELECT cell_id FROM expression WHERE cell_id = NULL") == []
    assert rows_of(con, "SELECT cell_id FROM expression WHERE cell_id > 2997.5") == [(2998,), (2999,)]
    assert rows_of(con, "SELECT count(*) FROM expression WHERE cell_id < 'x'") == [(3000,)]
    assert rows_of(con, "SELECT count(*) FROM expression WHERE cell_id > x'00'") == [(0,)]
    assert rows_of(con, "SELECT cell_id FROM expression WHERE rowid IN (3, -1, 3000, 4)") == [(3,), (4,)]
    n, total = rows_of(con, "SELECT count(*), sum(length(genes)) / 4 FROM expression")[0]
    assert (n, total) == (3000, X.nnz)


def test_expression_long(two):
    (db, X, _), _ = two
    con = connect(db)
    Xc = X.tocsc()
    for g in (0, 7, 1999):
        got = rows_of(con, "SELECT cell_id, count FROM expression_long WHERE gene_id = ?", (g,))
        col = Xc[:, g]
        assert [r[0] for r in got] == list(col.indices)
        assert [r[1] for r in got] == list(col.data)
    got = rows_of(con, "SELECT gene_id, count FROM expression_long WHERE cell_id = 42")
    assert [r[0] for r in got] == list(X[42].indices) and [r[1] for r in got] == list(X[42].data)
    got = rows_of(con, "SELECT cell_id, gene_id, count FROM expression_long WHERE cell_id IN (3, 1500) "
                       "AND gene_id IN (0, 1, 2, 500)")
    want = [(c, g, int(X[c, g])) for c in (3, 1500) for g in (0, 1, 2, 500) if X[c, g] != 0]
    assert got == want
    assert rows_of(con, "SELECT count(*) FROM expression_long WHERE cell_id < 100")[0][0] == X[:100].nnz
    assert rows_of(con, "SELECT count(*) FROM expression_long WHERE gene_id = '7'")[0][0] == Xc[:, 7].nnz
    assert rows_of(con, "SELECT count(*) FROM expression_long WHERE gene_id = 5000")[0][0] == 0


def test_expression_long_join_by_cell_type(two):
    """The issue's query, with the cell types in a native table built from the h5ad, and in
    `cells`: both equal pandas' group means."""
    import anndata
    (db, X, h5), _ = two
    con = connect(db)
    obs = anndata.read_h5ad(str(h5), backed="r").obs
    con.execute("CREATE TEMP TABLE ct(cell_id INTEGER PRIMARY KEY, cell_type TEXT)")
    con.executemany("INSERT INTO ct VALUES(?, ?)", enumerate(obs["cell_type"].astype(str)))
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    gname = names[3]
    sql = ("SELECT c.cell_type, avg(e.count) FROM expression_long e JOIN {t} c USING (cell_id) "
           "WHERE e.gene_id = (SELECT gene_id FROM genes WHERE name = ?) GROUP BY 1 ORDER BY 1")
    got = rows_of(con, sql.format(t="temp.ct"), (gname,))
    col = X.tocsc()[:, 3]
    df = pd.DataFrame({"t": np.asarray(obs["cell_type"].astype(str))[col.indices], "v": col.data})
    want = df.groupby("t")["v"].mean()
    assert [r[0] for r in got] == list(want.index)
    assert np.allclose([r[1] for r in got], want.values)
    assert rows_of(con, sql.format(t="cells"), (gname,)) == got


def test_tiles(two):
    (db, X, _), _ = two
    con = connect(db)
    got = rows_of(con, "SELECT tile, first_cell, n_cells, nnz, bytes, chunks FROM tiles")
    raw = rows_of(con, "SELECT tile, first_cell, n_cells, nnz, length(data), chunks FROM tiles_data ORDER BY tile")
    assert got == raw
    assert [r[2] for r in got] == [1000, 1000, 1000]
    assert [r[3] for r in got] == [X[i * 1000:(i + 1) * 1000].nnz for i in range(3)]
    assert rows_of(con, "SELECT tile FROM tiles WHERE tile = 1") == [(1,)]
    assert rows_of(con, "SELECT tile FROM tiles WHERE tile = '2'") == [(2,)]
    assert rows_of(con, "SELECT tile FROM tiles WHERE tile >= 1 ORDER BY tile DESC") == [(2,), (1,)]
    assert rows_of(con, "SELECT tile FROM tiles WHERE tile = 1.5") == []


def test_attach_two_datasets(two):
    (db1, X1, _), (db2, X2, _) = two
    con = connect(db1)
    con.execute("ATTACH ? AS aux", (str(db2),))
    rng = np.random.default_rng(2)
    for _ in range(3):
        a = rng.integers(0, X1.shape[0], 300)
        b = rng.integers(0, X2.shape[0], 300)
        _, m1, g1 = batch(con, ids_blob(a))
        _, m2, g2 = batch(con, ids_blob(b), schema="aux")
        _, m1b, _ = batch(con, ids_blob(a), schema="main")
        assert (g1, g2) == (2000, 900)
        assert_csr_equal(m1, X1[a])
        assert_csr_equal(m1b, X1[a])
        assert_csr_equal(m2, X2[b])
    assert rows_of(con, "SELECT count(*) FROM aux.tiles")[0][0] == 4
    assert rows_of(con, "SELECT count(*) FROM main.tiles")[0][0] == 3
    assert rows_of(con, "SELECT sum(length(genes)) / 4 FROM aux.expression")[0][0] == X2.nnz
    # an out-of-range id is judged against the right dataset
    with pytest.raises(sqlite3.Error, match=r"cells 0\.\.1699"):
        batch(con, ids_blob([2000]), schema="aux")
    # detach and attach another file under the same name: no stale cache
    con.execute("DETACH aux")
    con.execute("ATTACH ? AS aux", (str(db1),))
    _, m, g = batch(con, ids_blob([5, 6]), schema="aux")
    assert g == 2000
    assert_csr_equal(m, X1[[5, 6]])
