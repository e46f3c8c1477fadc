"""One decoded-chunk cache per connection, shared by dc_batch, expression and expression_long:
a chunk decoded for one table is a cache hit for the others (it used to be decoded once per
table: cache_entries 3, cache_hits 0); and a changed tile is never served from the cache."""
import sqlite3

import numpy as np

from _batch_util import batch, connect, generated, ids_blob, reference_matrix, replace_rows


def stats(con):
    return tuple(con.execute(f"SELECT dc_config('{k}')").fetchone()[0] for k in ("cache_entries", "cache_hits"))


def test_tables_share_decoded_chunks(tmp_path):
    h5, db = generated(tmp_path, 1500, 300, 51, 500)
    X = reference_matrix(h5, db)
    con = connect(db)
    con.execute("SELECT dc_config('cache_mb', 256)")
    e0, h0 = stats(con)
    _, got, _ = batch(con, ids_blob([10, 11, 12]))
    assert np.array_equal(got.toarray(), X[[10, 11, 12]].toarray())
    e1, h1 = stats(con)
    assert e1 > e0
    # the same cells through expression and expression_long: hits, no new entries
    rows = con.execute("SELECT cell_id, genes, counts FROM expression WHERE cell_id IN (10, 11, 12)").fetchall()
    assert [r[0] for r in rows] == [10, 11, 12]
    for cid, g, c in rows:
        assert np.array_equal(np.frombuffer(g, "<i4"), X[cid].indices)
        assert np.array_equal(np.frombuffer(c, "<i4"), X[cid].data)
    e2, h2 = stats(con)
    assert e2 == e1 and h2 > h1
    n = con.execute("SELECT count(*) FROM expression_long WHERE cell_id = 11").fetchone()[0]
    assert n == X[11].nnz
    e3, h3 = stats(con)
    assert e3 == e1 and h3 > h2
    # the same file attached under another name has an index (and chunks) of its own
    # (a point query on a chunk not cached decodes that cell alone and keeps nothing; asked
    # again, the chunk is decoded whole and kept)
    con.execute("ATTACH ? AS other", (str(db),))
    assert con.execute("SELECT count(*) FROM other.expression_long WHERE cell_id = 12").fetchone()[0] == X[12].nnz
    e4, h4 = stats(con)
    assert e4 == e1
    assert con.execute("SELECT count(*) FROM other.expression_long WHERE cell_id = 12").fetchone()[0] == X[12].nnz
    e5, h5 = stats(con)
    assert e5 > e1


def test_changed_tile_is_not_served_from_cache(tmp_path):
    """two datasets whose tiles differ: after the file's rows are replaced, the reader's
    answers follow the new data although the old chunks are still cached"""
    h_a, a = generated(tmp_path, 1200, 300, 52, 400)
    h_b, b = generated(tmp_path, 1200, 300, 53, 400)
    Xa, Xb = reference_matrix(h_a, a), reference_matrix(h_b, b)
    path = tmp_path / "live.dcdb"
    path.write_bytes(a.read_bytes())
    con = connect(path)
    con.execute("SELECT dc_config('cache_mb', 256)")
    assert np.array_equal(batch(con, ids_blob([5, 600]))[1].toarray(), Xa[[5, 600]].toarray())
    replace_rows(path, b)
    assert np.array_equal(batch(con, ids_blob([5, 600]))[1].toarray(), Xb[[5, 600]].toarray())
    n = con.execute("SELECT count(*) FROM expression_long WHERE cell_id = 600").fetchone()[0]
    assert n == Xb[600].nnz


def test_one_tile_index_per_schema(tmp_path):
    """every table that reads counts shares one tile index per schema and data version
    (it used to be loaded once per table: dc_batch, expression, expression_long, tiles, ...)"""
    h5, db = generated(tmp_path, 1300, 300, 54, 400)
    X = reference_matrix(h5, db)
    con = connect(db)
    loads = lambda: con.execute("SELECT dc_config('index_loads')").fetchone()[0]
    assert loads() == 0
    batch(con, ids_blob([1, 2]))
    con.execute("SELECT count(*) FROM expression WHERE cell_id < 10").fetchone()
    con.execute("SELECT count(*) FROM expression_long WHERE cell_id = 3").fetchone()
    con.execute("SELECT count(*) FROM tiles").fetchone()
    con.execute("SELECT count(*) FROM dc_aggregate(NULL, ?)", (ids_blob([1, 2, 3]),)).fetchall()
    assert loads() == 1
    con.execute("ATTACH ? AS other", (str(db),))
    assert con.execute("SELECT count(*) FROM other.expression_long WHERE cell_id = 4").fetchone()[0] == X[4].nnz
    batch(con, ids_blob([5]), schema="other")
    assert loads() == 2
    # a change of the data: one reload for all tables, and answers from the new data
    w = sqlite3.connect(str(db), isolation_level=None)
    w.execute("INSERT INTO dc_meta VALUES ('x_touch', 1)")   # two commits: a new data version,
    w.execute("DELETE FROM dc_meta WHERE key = 'x_touch'")   # the same rows
    w.close()
    assert con.execute("SELECT count(*) FROM expression_long WHERE cell_id = 3").fetchone()[0] == X[3].nnz
    _, m, _ = batch(con, ids_blob([3]))
    assert np.array_equal(m.toarray(), X[[3]].toarray())
    assert loads() == 3


def test_cells_uses_the_connection_tile_index(tmp_path):
    """`cells` takes its tile boundaries from the connection's tile index (it used to load
    tiles_data itself: a fourth copy per connection); its tile column and tile terms answer as
    before, and a change of the data reloads the index once for cells and expression alike"""
    h5, db = generated(tmp_path, 1300, 300, 55, 400)
    X = reference_matrix(h5, db)
    con = connect(db)
    loads = lambda: con.execute("SELECT dc_config('index_loads')").fetchone()[0]
    assert loads() == 0
    got = con.execute("SELECT cell_id, tile FROM cells ORDER BY cell_id").fetchall()
    assert loads() == 1          # cells loaded the connection's index (it used to load its own)
    tiles = con.execute("SELECT tile, first_cell, n_cells FROM tiles ORDER BY tile").fetchall()
    assert len(tiles) > 2
    assert loads() == 1          # tiles joined it
    want = [(c, t) for t, first, n in tiles for c in range(first, first + n)]
    assert got == want
    t, first, n = tiles[1]
    assert con.execute("SELECT min(cell_id), max(cell_id), count(*) FROM cells WHERE tile = ?", (t,)).fetchone() \
        == (first, first + n - 1, n)
    assert loads() == 1
    w = sqlite3.connect(str(db), isolation_level=None)
    w.execute("INSERT INTO dc_meta VALUES ('x_touch', 1)")
    w.execute("DELETE FROM dc_meta WHERE key = 'x_touch'")
    w.close()
    assert con.execute("SELECT tile FROM cells WHERE cell_id = ?", (first,)).fetchone()[0] == t
    assert loads() == 2          # cells saw the new data version and reloaded the one index
    assert con.execute("SELECT count(*) FROM expression_long WHERE cell_id = 3").fetchone()[0] == X[3].nnz
    assert loads() == 2
