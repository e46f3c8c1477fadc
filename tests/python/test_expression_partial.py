"""expression and expression_long decode a chunk that is not cached for the few cells a query
wants (at most a quarter of the chunk's; dc_reader_fetch's `want`), keep nothing of it, and
decode it whole and cache it when it is asked for in part again.  Every answer equals the
reference matrix: with the cache on and off, for point queries, short IN lists, a join that
probes one cell per lookup (the cursor's window then holds a chunk decoded in part, which must
not answer for a cell it lacks), gene lists, and a damaged chunk."""
import re
import shutil
import sqlite3

import numpy as np
import pytest

from _batch_util import connect, generated, reference_matrix


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("partial")
    h5, db = generated(d, 3000, 400, 11, 1000)      # 3 tiles of 1,000 cells, 2 chunks of 500 each
    con = connect(db)
    assert con.execute("SELECT min(chunks), max(chunks) FROM tiles_data").fetchone() == (2, 2)
    return db, reference_matrix(h5, db), d


def stats(con):
    return tuple(con.execute(f"SELECT dc_config('{k}')").fetchone()[0]
                 for k in ("cache_entries", "cache_hits", "cache_misses"))


def row(con, cell):
    r = con.execute("SELECT genes, counts FROM expression WHERE cell_id = ?", (cell,)).fetchone()
    return np.frombuffer(r[0], "<i4"), np.frombuffer(r[1], "<i4")


def check(X, cell, got):
    g, c = got
    assert np.array_equal(g, X[cell].indices), cell
    assert np.array_equal(c, X[cell].data), cell


def test_point_query_decodes_in_part_then_whole_on_a_second_look(ds):
    db, X, _ = ds
    con = connect(db)
    con.execute("SELECT dc_config('cache_mb', 256)")
    assert stats(con)[0] == 0
    check(X, 1010, row(con, 1010))
    assert stats(con)[0] == 0                       # decoded for cell 1010 alone, not kept
    check(X, 1200, row(con, 1200))                  # the same chunk asked for again: whole
    e, h, _ = stats(con)
    assert e == 1
    check(X, 1499, row(con, 1499))                  # and served from the cache since
    check(X, 1010, row(con, 1010))
    e2, h2, _ = stats(con)
    assert e2 == 1 and h2 == h + 2
    # a chunk of which more than a quarter is wanted is decoded whole at once
    ids = list(range(2000, 2200))
    got = con.execute(f"SELECT cell_id, genes, counts FROM expression WHERE cell_id IN "
                      f"({','.join(map(str, ids))})").fetchall()
    assert [r[0] for r in got] == ids
    for cid, g, c in got:
        check(X, cid, (np.frombuffer(g, "<i4"), np.frombuffer(c, "<i4")))
    assert stats(con)[0] == 2
    # room for one chunk: the first goes.  Asked for again, it is decoded whole at once (it was
    # asked for before) and cached in place of the other, so its next cell is a hit
    con.execute("SELECT dc_config('cache_mb', 1)")
    assert stats(con)[0] == 1
    check(X, 1300, row(con, 1300))
    e, h, _ = stats(con)
    assert e == 1
    check(X, 1301, row(con, 1301))
    assert stats(con)[1] == h + 1


@pytest.mark.parametrize("cache_mb", [0, 256])
def test_every_way_of_asking_for_few_cells_answers_as_the_matrix(ds, cache_mb):
    db, X, _ = ds
    con = connect(db)
    con.execute("SELECT dc_config('cache_mb', ?)", (cache_mb,))
    rng = np.random.default_rng(5)
    for cell in rng.choice(3000, 40, replace=False):
        check(X, int(cell), row(con, int(cell)))
    # a short IN list: several candidates of one chunk served from one chunk decoded in part
    ids = [3, 4, 700, 999, 1000, 2998, 2999]
    got = con.execute("SELECT cell_id, genes, counts FROM expression WHERE cell_id IN "
                      "(999, 3, 700, 4, 1000, 2999, 2998, 4)").fetchall()
    assert [r[0] for r in got] == ids
    for cid, g, c in got:
        check(X, cid, (np.frombuffer(g, "<i4"), np.frombuffer(c, "<i4")))
    # a join probes one cell per lookup: each probe's window may hold a chunk decoded for
    # another cell of the same chunk, which must not answer for this one
    probe = [10, 11, 12, 500, 10, 1200, 1201, 13, 2999, 0]
    got = con.execute("SELECT j.value, e.genes, e.counts FROM json_each(?) AS j "
                      "JOIN expression AS e ON e.cell_id = j.value ORDER BY j.key",
                      (str(probe),)).fetchall()
    assert [r[0] for r in got] == probe
    for cid, g, c in got:
        check(X, cid, (np.frombuffer(g, "<i4"), np.frombuffer(c, "<i4")))
    # the long form, with and without a gene list
    for cell in (7, 1234, 2500):
        want = [(cell, int(g), int(v)) for g, v in zip(X[cell].indices, X[cell].data)]
        got = con.execute("SELECT cell_id, gene_id, count FROM expression_long WHERE cell_id = ?",
                          (cell,)).fetchall()
        assert got == want
        genes = [int(g) for g in X[cell].indices[::3]] + [399]
        got = con.execute(f"SELECT cell_id, gene_id, count FROM expression_long WHERE cell_id = ? "
                          f"AND gene_id IN ({','.join(map(str, genes))})", (cell,)).fetchall()
        assert got == [w for w in want if w[1] in genes]
    got = con.execute("SELECT j.value, l.gene_id, l.count FROM json_each(?) AS j JOIN expression_long AS l "
                      "ON l.cell_id = j.value ORDER BY j.key, l.gene_id", (str([20, 21, 1500]),)).fetchall()
    assert got == [(c, int(g), int(v)) for c in (20, 21, 1500) for g, v in zip(X[c].indices, X[c].data)]
    if cache_mb == 0:
        assert stats(con)[0] == 0


def test_a_damaged_chunk_decoded_in_part_is_an_error_naming_it(ds):
    db, _, d = ds
    src = sqlite3.connect(str(db))
    blob = bytearray(src.execute("SELECT data FROM tiles_data WHERE tile = 1").fetchone()[0])
    src.close()
    blob[len(blob) * 5 // 8] ^= 0x5A
    bad = d / "partial_flip.dcdb"
    shutil.copy(db, bad)
    w = sqlite3.connect(str(bad))
    w.execute("UPDATE tiles_data SET data = ? WHERE tile = 1", (bytes(blob),))
    w.commit()
    w.close()
    con = connect(bad)
    for cache_mb in (0, 256):
        con.execute("SELECT dc_config('cache_mb', ?)", (cache_mb,))
        failed = {}
        for cell in (1200, 1700):       # chunk 0 and chunk 1 of tile 1: one of them is damaged
            for sql in ("SELECT genes FROM expression WHERE cell_id = ?",
                        "SELECT count(*) FROM expression_long WHERE cell_id IN (?, 2001)"):
                try:
                    con.execute(sql, (cell,)).fetchall()
                except sqlite3.DatabaseError as e:
                    assert getattr(e, "sqlite_errorname", "").startswith("SQLITE_CORRUPT"), e
                    failed.setdefault(cell, set()).add(str(e))
        assert len(failed) == 1, failed
        (cell, msgs), = failed.items()
        assert len(msgs) == 2, failed           # both tables, each naming itself, the tile and the chunk
        assert all(re.search(rf"^expression(_long)?: tile 1 chunk {(cell - 1000) // 500}: .*checksum", m)
                   for m in msgs), failed
        # the other tiles still answer
        assert con.execute("SELECT count(*) FROM expression WHERE cell_id IN (5, 2500)").fetchone()[0] == 2
