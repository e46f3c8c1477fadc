"""dc_batch and dc_config: bad arguments get SQL errors that say what is wrong;
corrupt tiles get SQLITE_CORRUPT naming the tile and the chunk, never a crash."""
import re
import shutil
import sqlite3

import numpy as np
import pytest

from _batch_util import assert_csr_equal, batch, connect, generated, ids_blob, reference_matrix


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("err")
    h5, db = generated(d, 3000, 2000, 1, 1000)
    return db, reference_matrix(h5, db), d


def err_of(con, sql, args=()):
    with pytest.raises(sqlite3.Error) as ei:
        con.execute(sql, args).fetchall()
    return ei.value


@pytest.mark.parametrize("arg, pattern", [
    (b"\x01" * 12, r"cells blob has 12 bytes, not a multiple of 8"),
    (ids_blob([0, -1]), r"cell id -1 \(element 1\) is out of range: the dataset has cells 0\.\.2999"),
    (ids_blob([3000]), r"cell id 3000 .*out of range"),
    ("[1, 2", r"not a JSON array of integers"),
    ("[1, 2.5]", r"element 1 of the JSON array is not an integer"),
    ('["a"]', r"element 0 of the JSON array is not an integer"),
    ("{}", r"not a JSON array"),
    ("[99999999999999999999]", r"element 0 of the JSON array is not an integer"),
    (5, r"cells must be a blob of little-endian int64 cell ids or a JSON array, not an integer"),
    (2.5, r"not a real"),
    (None, r"not NULL"),
])
def test_bad_cells(ds, arg, pattern):
    con = connect(ds[0])
    e = err_of(con, "SELECT n_cells FROM dc_batch(?)", (arg,))
    assert re.search(pattern, str(e)), str(e)
    assert "dc_batch" in str(e)


@pytest.mark.parametrize("arg, pattern", [
    (b"\x01\x00\x00\x00\x02\x00", r"genes blob has 6 bytes, not a multiple of 4"),
    (np.asarray([1, 2000], "<i4").tobytes(), r"gene id 2000 \(element 1 of genes\) is out of range"),
    (np.asarray([7, 7], "<i4").tobytes(), r"gene id 7 appears twice in the panel"),
    ('["GENE1", "NOT_A_GENE"]', r"unknown gene 'NOT_A_GENE'"),
    ('["GENE1", "GENE1"]', r"gene 'GENE1' appears twice"),
    ('["GENE1", 5]', r"element 1 of genes is not a gene name"),
    ("GENE1", r"genes is text but not a JSON array"),
    (3, r"genes must be a JSON array of gene names or a blob of int32 gene ids, not an integer"),
])
def test_bad_genes(ds, arg, pattern):
    con = connect(ds[0])
    e = err_of(con, "SELECT n_cells FROM dc_batch('[1]', ?)", (arg,))
    assert re.search(pattern, str(e)), str(e)


def test_missing_argument_and_empty_batch(ds):
    con = connect(ds[0])
    e = err_of(con, "SELECT * FROM dc_batch")
    assert "missing argument" in str(e)
    n, g, cid, ip, ix, dv = con.execute("SELECT * FROM dc_batch('[]')").fetchone()
    assert (n, g, cid, ix, dv) == (0, 2000, b"", b"", b"")
    assert ip == b"\x00" * 8
    # NULL genes means no panel
    _, m, g = batch(con, "[4, 4]", None)
    _, m2, g2 = batch(con, "[4, 4]")
    assert g == g2 == 2000 and (m != m2).nnz == 0
    # a 5th argument landed on the hidden ticket column: no row, no error
    e = err_of(con, "SELECT n_cells FROM dc_batch('[0]', NULL, NULL, NULL, 5)")
    assert "dc_batch takes at most 4 arguments" in str(e)


def test_dc_config(ds):
    con = connect(ds[0])
    assert con.execute("SELECT dc_config('threads', 2)").fetchone()[0] == 2
    assert con.execute("SELECT dc_config('threads')").fetchone()[0] == 2
    assert con.execute("SELECT dc_config('threads', 0)").fetchone()[0] >= 1
    assert con.execute("SELECT dc_config('cache_mb', 64)").fetchone()[0] == 64
    assert con.execute("SELECT dc_config('cache_mb')").fetchone()[0] == 64
    assert con.execute("SELECT dc_config('decode_mb', 8)").fetchone()[0] == 8
    for sql, pat in [("SELECT dc_config('bogus')", r"unknown setting 'bogus'"),
                     ("SELECT dc_config('threads', 'many')", r"threads must be an integer"),
                     ("SELECT dc_config('threads', -1)", r"threads must be 0 \(one per core\) \.\. 256, got -1"),
                     ("SELECT dc_config('cache_mb', 1e12)", r"cache_mb must be 0 \.\. 1048576"),
                     ("SELECT dc_config('decode_mb', 0)", r"decode_mb must be 1"),
                     ("SELECT dc_config('cache_hits', 3)", r"cache_hits is read-only"),
                     # a value that is not a number: a read-only or unknown setting says what it is
                     ("SELECT dc_config('simd', 'scalar')", r"simd is read-only"),
                     ("SELECT dc_config('bogus', 'x')", r"unknown setting 'bogus'"),
                     ("SELECT dc_config(5)", r"first argument must be a setting name")]:
        assert re.search(pat, str(err_of(con, sql))), sql
    # the cache counts hits: the same batch twice
    con.execute("SELECT dc_config('cache_mb', 64)")
    h0 = con.execute("SELECT dc_config('cache_hits')").fetchone()[0]
    batch(con, "[5, 1500]")
    batch(con, "[5, 1500]")
    assert con.execute("SELECT dc_config('cache_hits')").fetchone()[0] - h0 == 2
    assert con.execute("SELECT dc_config('cache_entries')").fetchone()[0] >= 2
    con.execute("SELECT dc_config('cache_mb', 0)")
    assert con.execute("SELECT dc_config('cache_entries')").fetchone()[0] == 0


def test_config_is_directonly(ds):
    """dc_config changes connection state: a view in the database cannot call it."""
    db = ds[2] / "view.dcdb"
    shutil.copy(ds[0], db)
    con = connect(db)
    con.execute("CREATE VIEW v AS SELECT dc_config('cache_mb', 1) AS x")
    e = err_of(con, "SELECT * FROM v")
    assert "unsafe use of dc_config" in str(e)


def corrupt_copy(ds, name, sql, args=()):
    db = ds[2] / name
    shutil.copy(ds[0], db)
    con = sqlite3.connect(str(db))
    con.execute(sql, args)
    con.commit()
    con.close()
    return db


def is_corrupt(e):
    return getattr(e, "sqlite_errorname", "").startswith("SQLITE_CORRUPT")


def test_corrupt_chunk_payload(ds):
    """A byte flipped inside tile 1: exactly the cells of one chunk fail, with
    SQLITE_CORRUPT naming tile 1 and that chunk; every other cell still decodes."""
    src = sqlite3.connect(str(ds[0]))
    blob = bytearray(src.execute("SELECT data FROM tiles_data WHERE tile = 1").fetchone()[0])
    src.close()
    pos = len(blob) * 5 // 8
    blob[pos] ^= 0x5A
    db = corrupt_copy(ds, "flip.dcdb", "UPDATE tiles_data SET data = ? WHERE tile = 1", (bytes(blob),))
    X = ds[1]
    con = connect(db)
    con.execute("SELECT dc_config('cache_mb', 0)")
    failed, messages = [], set()
    for cell in range(1000, 2000):
        try:
            _, m, _ = batch(con, ids_blob([cell]))
            assert_csr_equal(m, X[[cell]])
        except sqlite3.DatabaseError as e:
            assert is_corrupt(e), (e, getattr(e, "sqlite_errorname", None))
            failed.append(cell)
            messages.add(str(e))
    assert failed, "the flipped byte was not detected"
    assert failed == list(range(failed[0], failed[-1] + 1)), "failing cells are not one chunk"
    assert len(failed) < 1000
    assert len(messages) == 1
    msg = messages.pop()
    assert re.search(r"tile 1 chunk \d+", msg), msg
    # cells of the other tiles, and a batch around the damage, behave
    _, m, _ = batch(con, ids_blob([0, 2999, 5]))
    assert_csr_equal(m, X[[0, 2999, 5]])
    e = err_of(con, "SELECT n_cells FROM dc_batch(?)", (ids_blob([0, failed[0], 2999]),))
    assert is_corrupt(e) and str(e) == msg
    # the expression tables report it the same way
    e = err_of(con, "SELECT count(*) FROM expression WHERE cell_id = ?", (failed[0],))
    assert is_corrupt(e) and re.search(r"tile 1 chunk \d+", str(e))
    # whole-tile requests (the direct decoding path) too
    e = err_of(con, "SELECT n_cells FROM dc_batch(?)", (ids_blob(np.arange(1000, 2000)),))
    assert is_corrupt(e) and re.search(r"tile 1 chunk \d+", str(e))


def test_corrupt_last_chunk(ds):
    src = sqlite3.connect(str(ds[0]))
    blob = bytearray(src.execute("SELECT data FROM tiles_data WHERE tile = 2").fetchone()[0])
    chunks = src.execute("SELECT chunks FROM tiles_data WHERE tile = 2").fetchone()[0]
    src.close()
    blob[-1] ^= 0xFF
    db = corrupt_copy(ds, "last.dcdb", "UPDATE tiles_data SET data = ? WHERE tile = 2", (bytes(blob),))
    con = connect(db)
    e = err_of(con, "SELECT n_cells FROM dc_batch(?)", (ids_blob([2999]),))
    assert is_corrupt(e)
    assert f"tile 2 chunk {chunks - 1}" in str(e), str(e)


@pytest.mark.parametrize("name, sql, others_ok", [
    ("hdr.dcdb", "UPDATE tiles_data SET data = x'00' || substr(data, 2) WHERE tile = 0", True),
    ("trunc.dcdb", "UPDATE tiles_data SET data = substr(data, 1, length(data) / 2) WHERE tile = 0", True),
    ("tiny.dcdb", "UPDATE tiles_data SET data = x'0102' WHERE tile = 0", True),
    ("empty.dcdb", "UPDATE tiles_data SET data = x'' WHERE tile = 0", True),
    ("text.dcdb", "UPDATE tiles_data SET data = 'not a tile' WHERE tile = 0", True),
    ("nnz.dcdb", "UPDATE tiles_data SET nnz = nnz + 1 WHERE tile = 0", True),
    ("rows.dcdb", "UPDATE tiles_data SET n_cells = 999 WHERE tile = 0", False),
    ("gap.dcdb", "DELETE FROM tiles_data WHERE tile = 1", False),
    ("meta.dcdb", "UPDATE dc_meta SET value = 7 WHERE key = 'n_tiles'", False),
])
def test_corrupt_tile_rows(ds, name, sql, others_ok):
    db = corrupt_copy(ds, name, sql)
    con = connect(db)
    e = err_of(con, "SELECT n_cells FROM dc_batch(?)", (ids_blob([3, 2500]),))
    assert is_corrupt(e), (str(e), getattr(e, "sqlite_errorname", None))
    assert re.search(r"tile 0|tile 1|tiles_data", str(e)), str(e)
    if others_ok:
        # the damage is confined to tile 0: tile 2 still reads
        _, m, _ = batch(con, ids_blob([2500]))
        assert_csr_equal(m, ds[1][[2500]])
