"""Seals (format version 3, docs/format.md "Seals"): content moved, swapped or copied to another
place, or statistics edited, is a clear SQLITE_CORRUPT naming the tile, column or block and the
reason, never a wrong answer; `verify` finds it too.  Datasets of version 2 (no seals) still read
as before.  The damage reproduces issue 12's cases 1-3 and variations of them."""
import json
import shutil
import sqlite3
import subprocess

import pytest

from _cells_data import CONVERTER, ROOT, connect, convert

SQLITE_CORRUPT = 11


@pytest.fixture(scope="module")
def h5(tmp_path_factory):
    d = tmp_path_factory.mktemp("integrity")
    p = d / "small.h5ad"
    subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "gen_h5ad.py"), "--cells", "3000", "--genes", "200",
                    "--seed", "5", "-o", str(p)], check=True, capture_output=True, timeout=300)
    return p


@pytest.fixture(scope="module")
def good(h5):
    # three tiles of 1,000 cells each: tiles 0 and 1 have the same cell count, as in the issue
    return convert(h5, h5.parent / "good.dcdb", "--tile-cells", "1000")


def damaged(good, tmp_path, *sql, name="bad.dcdb"):
    p = tmp_path / name
    shutil.copy(good, p)
    con = sqlite3.connect(p)
    for q in sql:
        con.execute(q)
    con.commit()
    con.close()
    return p


def col_id(db, name):
    con = sqlite3.connect(db)
    (c,) = con.execute("SELECT col FROM cells_columns WHERE name = ?", (name,)).fetchone()
    con.close()
    return c


def expect_corrupt(path, query, *words):
    con = connect(path)
    with pytest.raises(sqlite3.DatabaseError) as e:
        con.execute(query).fetchall()
    con.close()
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    assert e.value.sqlite_errorcode & 0xff == SQLITE_CORRUPT, (e.value.sqlite_errorname, msg)
    return msg


def verify(path, *args):
    return subprocess.run([str(CONVERTER), "verify", str(path), *args], capture_output=True, text=True, timeout=600)


def expect_verify_fault(path, *words):
    r = verify(path)
    assert r.returncode != 0, r.stdout + r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    return r.stderr


def append_or_merge(op, bad, good, h5, out):
    """op 'append': h5 appended to bad; 'merge_first' / 'merge_second': bad merged with good into
    out, bad first or second."""
    if op == "append":
        cmd = [str(CONVERTER), "append", str(bad), str(h5), "--quiet"]
    else:
        ins = [bad, good] if op == "merge_first" else [good, bad]
        cmd = [str(CONVERTER), "merge", *map(str, ins), "-o", str(out), "--quiet"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


SWAP_TILES = ("CREATE TEMP TABLE s AS SELECT tile, nnz, data FROM tiles_data WHERE tile IN (0, 1)",
              "UPDATE tiles_data SET data = (SELECT data FROM s WHERE s.tile = 1 - tiles_data.tile),"
              " nnz = (SELECT nnz FROM s WHERE s.tile = 1 - tiles_data.tile) WHERE tile IN (0, 1)")


def test_written_sealed(good):
    con = sqlite3.connect(good)
    meta = dict(con.execute("SELECT key, value FROM dc_meta"))
    assert meta["format_version"] == 3
    assert len(meta["dataset_id"]) == 16 and int(meta["dataset_id"], 16) >= 0
    for t in ("tiles_data", "cells_blocks", "genes_blocks", "cells_columns"):
        n, sealed = con.execute(f"SELECT count(*), count(checksum) FROM {t}").fetchone()
        assert n > 0 and sealed == n, t
    con.close()
    assert verify(good).returncode == 0


def test_dataset_ids_differ(h5, tmp_path):
    a = convert(h5, tmp_path / "a.dcdb", "--tile-cells", "1000")
    b = convert(h5, tmp_path / "b.dcdb", "--tile-cells", "1000")
    ids = [sqlite3.connect(p).execute("SELECT value FROM dc_meta WHERE key = 'dataset_id'").fetchone()[0] for p in (a, b)]
    assert ids[0] != ids[1]


def test_case1_tiles_swapped_with_nnz(good, tmp_path):
    bad = damaged(good, tmp_path, *SWAP_TILES)
    con = sqlite3.connect(bad)
    assert con.execute("SELECT n_cells FROM tiles_data WHERE tile IN (0, 1)").fetchall() == [(1000,), (1000,)]
    con.close()
    for q in ("SELECT indices, data FROM dc_batch('[0]')", "SELECT * FROM dc_batch('[1500]')",
              "SELECT count(*) FROM expression", "SELECT * FROM expression WHERE cell_id = 5", "SELECT * FROM tiles",
              "SELECT nnz FROM tiles WHERE tile = 1", "SELECT count(*) FROM expression_long WHERE gene_id = 0"):
        expect_corrupt(bad, q, "tile ", "checksum mismatch")
    expect_corrupt(bad, "SELECT indices FROM dc_batch('[0]')", "tile 0:")
    # tile 2 was not touched: it still reads
    con = connect(bad)
    assert con.execute("SELECT n_cells FROM dc_batch('[2500]')").fetchone() == (1,)
    con.close()
    expect_verify_fault(bad, "tile 0", "tile 1", "checksum mismatch")


def test_tile_row_copied_whole(good, tmp_path):
    # blob and checksum moved together to another tile number: the tile number is sealed too
    bad = damaged(good, tmp_path, "CREATE TEMP TABLE s AS SELECT * FROM tiles_data WHERE tile IN (0, 1)",
                  "UPDATE tiles_data SET (nnz, chunks, data, checksum) = (SELECT nnz, chunks, data, checksum FROM s"
                  " WHERE s.tile = 1 - tiles_data.tile) WHERE tile IN (0, 1)")
    expect_corrupt(bad, "SELECT * FROM dc_batch('[0]')", "tile 0", "checksum mismatch")
    expect_verify_fault(bad, "tile 0", "checksum mismatch")


def test_tile_from_another_dataset(h5, good, tmp_path):
    # the same input converted again: same bytes, but another dataset id
    other = convert(h5, tmp_path / "other.dcdb", "--tile-cells", "1000")
    bad = damaged(good, tmp_path, f"ATTACH '{other}' AS o",
                  "UPDATE tiles_data SET (data, checksum) = (SELECT data, checksum FROM o.tiles_data t"
                  " WHERE t.tile = tiles_data.tile) WHERE tile = 1")
    expect_corrupt(bad, "SELECT * FROM dc_batch('[1000]')", "tile 1", "checksum mismatch")
    con = connect(bad)
    assert con.execute("SELECT n_cells FROM dc_batch('[0]')").fetchone() == (1,)
    con.close()


def test_tile_first_cell_edited(good, tmp_path):
    # tiles 1 and 2 shifted by one cell: contiguous still, but not where they were written
    bad = damaged(good, tmp_path, "UPDATE tiles_data SET first_cell = 999, n_cells = 1001 WHERE tile = 1",
                  "UPDATE tiles_data SET first_cell = 2000 WHERE tile = 2")
    expect_corrupt(bad, "SELECT * FROM dc_batch('[1500]')", "tile 1")


def test_tile_row_value_not_an_integer(good, tmp_path):
    """Tile 0's first_cell stored as 'x' read as 0 (its right value), so the seal held; the tiles
    table showed 'x' and CellMapDataset failed with "invalid literal for int()".  A tiles_data
    row's numbers must be integers: the tables and verify say which row is wrong."""
    import deltacells
    bad = damaged(good, tmp_path, "UPDATE tiles_data SET first_cell = 'x' WHERE tile = 0")
    expect_corrupt(bad, "SELECT * FROM tiles", "tiles_data row of tile 0 is inconsistent")
    expect_corrupt(bad, "SELECT * FROM dc_batch('[5]')", "tiles_data row of tile 0 is inconsistent")
    with pytest.raises(sqlite3.DatabaseError, match="tiles_data row of tile 0"):
        deltacells.CellMapDataset(bad)
    expect_verify_fault(bad, "tile 0: tile, first_cell, n_cells, nnz or chunks is not stored as an integer")


@pytest.mark.parametrize("a,b", [("age", "n_counts"), ("cell_type", "donor")])
def test_case2_obs_blocks_swapped_same_kind(good, tmp_path, a, b):
    ca, cb = col_id(good, a), col_id(good, b)
    bad = damaged(good, tmp_path, f"CREATE TEMP TABLE s AS SELECT col, data FROM cells_blocks WHERE col IN ({ca}, {cb})",
                  f"UPDATE cells_blocks SET data = (SELECT data FROM s WHERE s.col = {ca + cb} - cells_blocks.col)"
                  f" WHERE col IN ({ca}, {cb})")
    for col in (a, b):
        where = f'"{col}" > 30' if col in ("age", "n_counts") else f'"{col}" IS NOT NULL'
        expect_corrupt(bad, f"SELECT count(*) FROM cells WHERE {where}", f"column '{col}' block 0", "checksum mismatch")
        expect_corrupt(bad, f'SELECT "{col}" FROM cells', f"column '{col}' block 0", "checksum mismatch")
    expect_verify_fault(bad, f"'{a}'", f"'{b}'", "checksum mismatch")


def test_case2_obs_block_copied_over_another(good, tmp_path):
    ca, cb = col_id(good, "age"), col_id(good, "n_counts")
    # the data alone, and the whole row (data, statistics and checksum)
    for sql in (f"UPDATE cells_blocks SET data = (SELECT data FROM cells_blocks WHERE col = {ca}) WHERE col = {cb}",
                f"UPDATE cells_blocks SET (null_count, min, max, present, data, checksum) = (SELECT null_count, min, max,"
                f" present, data, checksum FROM cells_blocks WHERE col = {ca}) WHERE col = {cb}"):
        bad = damaged(good, tmp_path, sql)
        expect_corrupt(bad, "SELECT count(*) FROM cells WHERE n_counts > 100", "column 'n_counts' block 0",
                       "checksum mismatch")
        expect_corrupt(bad, "SELECT sum(n_counts) FROM cells", "column 'n_counts'", "checksum mismatch")
        expect_verify_fault(bad, "'n_counts'", "checksum mismatch")


def test_case2_min_max_edited(good, tmp_path):
    # statistics that would prune every block: the answer would be 0 rows
    c = col_id(good, "n_counts")
    bad = damaged(good, tmp_path, f"UPDATE cells_blocks SET min = 0, max = 1 WHERE col = {c}")
    expect_corrupt(bad, "SELECT count(*) FROM cells WHERE n_counts > 10", "column 'n_counts' block 0", "checksum mismatch")
    expect_verify_fault(bad, "'n_counts'")


def test_case3_zeroed_present_bitmap(good, tmp_path):
    c = col_id(good, "cell_type")
    bad = damaged(good, tmp_path, f"UPDATE cells_blocks SET present = zeroblob(length(present)) WHERE col = {c}")
    con = connect(good)
    (label,) = con.execute("SELECT cell_type FROM cells WHERE cell_type IS NOT NULL LIMIT 1").fetchone()
    con.close()
    expect_corrupt(bad, f"SELECT count(*) FROM cells WHERE cell_type = '{label}'", "column 'cell_type' block 0",
                   "checksum mismatch")
    expect_verify_fault(bad, "'cell_type'")


def test_present_bitmap_where_none_belongs(good, tmp_path):
    c = col_id(good, "age")
    bad = damaged(good, tmp_path, f"UPDATE cells_blocks SET present = x'ff' WHERE col = {c}")
    expect_corrupt(bad, "SELECT count(*) FROM cells WHERE age > 3", "column 'age'", "present")


def test_dictionary_edited(good, tmp_path):
    c = col_id(good, "cell_type")
    bad = damaged(good, tmp_path, f"UPDATE cells_dict SET value = value || 'x' WHERE col = {c} AND code = 0")
    expect_corrupt(bad, "SELECT cell_type FROM cells", "column 'cell_type'", "checksum mismatch", "dictionary")
    expect_verify_fault(bad, "'cell_type'", "dictionary")


@pytest.mark.parametrize("op", ["append", "merge_first", "merge_second"])
@pytest.mark.parametrize("damage", ["dictionary", "blocks_swapped"])
def test_append_and_merge_do_not_seal_damage_again(h5, good, tmp_path, op, damage):
    """append and merge store a column's last blocks (and the first dataset's dictionaries) again
    under a new dataset id: what they read is checked against its seal first.  Before, an edited
    dictionary or two columns' blocks swapped came out sealed anew: wrong values that neither the
    tables nor verify could tell any more."""
    if damage == "dictionary":
        c = col_id(good, "cell_type")
        bad = damaged(good, tmp_path, f"UPDATE cells_dict SET value = value || 'x' WHERE col = {c} AND code = 0")
        words = "obs column 'cell_type': its dictionary"
    else:
        ca, cb = col_id(good, "age"), col_id(good, "n_counts")
        bad = damaged(good, tmp_path, f"CREATE TEMP TABLE s AS SELECT col, data FROM cells_blocks WHERE col IN ({ca}, {cb})",
                      f"UPDATE cells_blocks SET data = (SELECT data FROM s WHERE s.col = {ca + cb} - cells_blocks.col)"
                      f" WHERE col IN ({ca}, {cb})")
        words = "block 0: its seal does not match"
    out = tmp_path / "merged.dcdb"
    r = append_or_merge(op, bad, good, h5, out)
    assert r.returncode == 1, (r.returncode, r.stderr, verify(bad if op == "append" else out).stderr)
    assert words in r.stderr, r.stderr
    assert not out.exists()
    expect_verify_fault(bad, "checksum mismatch")   # append changed nothing: the damage still shows


@pytest.mark.parametrize("op", ["append", "merge_first", "merge_second"])
def test_append_and_merge_refuse_blocks_without_their_column(h5, good, tmp_path, op):
    """A cells_columns row deleted leaves its blocks behind: append and merge refuse them, as the
    cells table does; before, merge with it second stored NULL for all its cells' values."""
    c = col_id(good, "age")
    bad = damaged(good, tmp_path, f"DELETE FROM cells_columns WHERE col = {c}")
    out = tmp_path / "merged.dcdb"
    r = append_or_merge(op, bad, good, h5, out)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"cells_blocks has blocks of column {c}, which cells_columns lacks" in r.stderr, r.stderr
    assert not out.exists()


def test_dictionary_values_swapped(good, tmp_path):
    c = col_id(good, "cell_type")
    bad = damaged(good, tmp_path, f"CREATE TEMP TABLE s AS SELECT code, value FROM cells_dict WHERE col = {c} AND code < 2",
                  f"UPDATE cells_dict SET value = (SELECT value FROM s WHERE s.code = 1 - cells_dict.code)"
                  f" WHERE col = {c} AND code < 2")
    expect_corrupt(bad, "SELECT count(*) FROM cells WHERE cell_type IS NOT NULL AND cell_type != ''",
                   "column 'cell_type'", "checksum mismatch")


def test_column_names_swapped(good, tmp_path):
    ca, cb = col_id(good, "age"), col_id(good, "n_counts")
    bad = damaged(good, tmp_path, f"UPDATE cells_columns SET name = 'tmp' WHERE col = {ca}",
                  f"UPDATE cells_columns SET name = 'age' WHERE col = {cb}",
                  f"UPDATE cells_columns SET name = 'n_counts' WHERE col = {ca}")
    expect_corrupt(bad, "SELECT count(*) FROM cells WHERE n_counts > 100", "column 'n_counts'", "checksum mismatch")
    expect_verify_fault(bad, "checksum mismatch")


def test_genes_block_copied(good, tmp_path):
    bad = damaged(good, tmp_path, "UPDATE genes_blocks SET data = (SELECT data FROM genes_blocks WHERE col = 1)"
                                  " WHERE col = 2")
    expect_corrupt(bad, "SELECT sum(n_cells) FROM genes", "column 'n_cells' block 0", "checksum mismatch")
    expect_verify_fault(bad, "genes column 'n_cells'", "checksum mismatch")


def test_genes_column_row_deleted(good, tmp_path):
    """A genes_columns row deleted (the last: no gap in col shows it) leaves its blocks behind: the
    genes table refuses them instead of reading without the column (export and to_anndata lost
    feature_types without a word)."""
    con = sqlite3.connect(good)
    (last, name) = con.execute("SELECT col, name FROM genes_columns ORDER BY col DESC LIMIT 1").fetchone()
    con.close()
    assert last >= 3
    bad = damaged(good, tmp_path, f"DELETE FROM genes_columns WHERE col = {last}")
    expect_corrupt(bad, "SELECT count(*) FROM genes", f"genes_blocks has blocks of column {last}",
                   "which genes_columns lacks")
    r = subprocess.run([str(CONVERTER), "export", str(bad), "-o", str(tmp_path / "x.h5ad")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and f"blocks of column {last}" in r.stderr, (r.returncode, r.stderr)
    expect_verify_fault(bad, "genes_blocks")


@pytest.mark.parametrize("op", ["append", "merge"])
def test_append_and_merge_with_a_nameless_genes_column(h5, good, tmp_path, op):
    """A genes_columns row whose name is NULL (bytes of its page overwritten can do it; here the
    NOT NULL is taken off the schema to write one): append and merge fail naming it (they died
    of SIGSEGV, strdup of NULL)."""
    bad = damaged(good, tmp_path, "PRAGMA writable_schema = ON",
                  "UPDATE sqlite_schema SET sql = replace(sql, 'name TEXT NOT NULL', 'name TEXT')"
                  " WHERE name = 'genes_columns'")
    con = sqlite3.connect(bad)
    con.execute("UPDATE genes_columns SET name = NULL WHERE col = 3")
    con.commit()
    con.close()
    cmd = ([str(CONVERTER), "append", str(bad), str(h5), "--quiet"] if op == "append" else
           [str(CONVERTER), "merge", str(good), str(bad), "-o", str(tmp_path / "m.dcdb"), "--quiet"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "genes_columns row of col 3 has no name" in r.stderr, r.stderr


def test_missing_dataset_id(good, tmp_path):
    bad = damaged(good, tmp_path, "DELETE FROM dc_meta WHERE key = 'dataset_id'")
    for q in ("SELECT count(*) FROM cells WHERE age > 3", "SELECT * FROM dc_batch('[0]')", "SELECT * FROM tiles",
              "SELECT name FROM genes"):
        expect_corrupt(bad, q, "dataset_id")
    expect_verify_fault(bad, "dataset_id")


def test_dataset_id_edited(good, tmp_path):
    bad = damaged(good, tmp_path, "UPDATE dc_meta SET value = '0123456789abcdef' WHERE key = 'dataset_id'")
    expect_corrupt(bad, "SELECT * FROM dc_batch('[0]')", "checksum mismatch")
    expect_corrupt(bad, "SELECT sum(age) FROM cells", "checksum mismatch")


def downgrade(good, tmp_path):
    """The dataset as version 2 wrote it: no checksum columns, no dataset_id (and no covering
    index of the tile index, which holds the checksums)."""
    return damaged(good, tmp_path, "DROP INDEX tiles_data_meta", *[f"ALTER TABLE {t} DROP COLUMN checksum"
                                     for t in ("tiles_data", "cells_blocks", "genes_blocks", "cells_columns")],
                   "DELETE FROM dc_meta WHERE key = 'dataset_id'",
                   "UPDATE dc_meta SET value = 2 WHERE key = 'format_version'", name="v2.dcdb")


QUERIES = ["SELECT * FROM cells ORDER BY cell_id", "SELECT count(*) FROM cells WHERE n_counts > 100 AND cell_type IS NOT NULL",
           "SELECT * FROM genes ORDER BY gene_id", "SELECT * FROM tiles ORDER BY tile",
           "SELECT n_cells, n_genes, cell_ids, indptr, indices, data FROM dc_batch('[0, 999, 1000, 2999]')",
           "SELECT cell_id, genes, counts FROM expression WHERE cell_id IN (3, 1500, 2999)"]


def test_version2_reads_as_before(good, tmp_path):
    old = downgrade(good, tmp_path)
    a, b = connect(good), connect(old)
    for q in QUERIES:
        assert a.execute(q).fetchall() == b.execute(q).fetchall(), q
    a.close()
    b.close()
    r = verify(old)
    assert r.returncode == 0, r.stderr
    # without seals, the swap of issue 12 case 1 is not detectable by the reader (as before)
    con = sqlite3.connect(old)
    assert con.execute("SELECT value FROM dc_meta WHERE key = 'format_version'").fetchone() == (2,)
    con.close()


def test_newer_version_refused(good, tmp_path):
    bad = damaged(good, tmp_path, "UPDATE dc_meta SET value = 4 WHERE key = 'format_version'")
    con = connect(bad)
    with pytest.raises(sqlite3.DatabaseError, match="format_version 4.*upgrade deltacells"):
        con.execute("SELECT * FROM dc_batch('[0]')").fetchall()
    con.close()


def test_version_lowered_under_seals_refused(good, tmp_path):
    """format_version edited down to 2 on a sealed dataset turned every seal off: tiles swapped
    with their checksums read as good data (cell 0 gave cell 200's row) and verify said ok.
    Only version 3 and later have a dataset_id, so the pair is refused by readers, export and
    verify."""
    bad = damaged(good, tmp_path, "UPDATE dc_meta SET value = 2 WHERE key = 'format_version'",
                  "CREATE TEMP TABLE s AS SELECT tile, nnz, checksum, data FROM tiles_data WHERE tile IN (0, 1)",
                  "UPDATE tiles_data SET data = (SELECT data FROM s WHERE s.tile = 1 - tiles_data.tile),"
                  " nnz = (SELECT nnz FROM s WHERE s.tile = 1 - tiles_data.tile),"
                  " checksum = (SELECT checksum FROM s WHERE s.tile = 1 - tiles_data.tile) WHERE tile IN (0, 1)")
    for q in ("SELECT data FROM dc_batch('[0]')", "SELECT * FROM cells WHERE cell_id = 0"):
        expect_corrupt(bad, q, "format_version is 2", "dataset_id", "changed")
    expect_verify_fault(bad, "format_version is 2", "dataset_id")
    r = subprocess.run([str(CONVERTER), "export", str(bad), "-o", str(tmp_path / "x.h5ad")], capture_output=True, text=True)
    assert r.returncode == 1 and "dataset_id" in r.stderr, r.stderr


def test_n_genes_raised_refused(good, tmp_path):
    """A larger dc_meta.n_genes was taken by the genes table (count(*) counted genes that do not
    exist); only verify noticed.  The genes table compares it with its blocks when it connects.
    (The tile index's load does not: over dchttp that read would start a prefetch stream on
    every open; verify reports it.)"""
    (n,) = sqlite3.connect(good).execute("SELECT value FROM dc_meta WHERE key = 'n_genes'").fetchone()
    bad = damaged(good, tmp_path, f"UPDATE dc_meta SET value = {int(n) + 100} WHERE key = 'n_genes'")
    expect_corrupt(bad, "SELECT count(*) FROM genes", f"n_genes is {int(n) + 100}", f"holds {n} genes")
    expect_verify_fault(bad, "n_genes")


# --- issue 12 case 9: DROP TABLE of a dataset's tables is refused unless asked for -------------

@pytest.mark.parametrize("table,shadows", [("cells", ["cells_columns", "cells_dict", "cells_blocks"]),
                                           ("tiles", ["tiles_data"]), ("genes", ["genes_columns", "genes_blocks"]),
                                           ("expression", []), ("expression_long", []), ("dc_batch", [])])
def test_case9_drop_refused(good, tmp_path, table, shadows):
    p = tmp_path / "d.dcdb"
    shutil.copy(good, p)
    con = connect(p)
    before = con.execute("SELECT count(*) FROM cells WHERE age > 30").fetchone()
    with pytest.raises(sqlite3.OperationalError, match="access permission denied"):
        con.execute(f"DROP TABLE {table}")
    why = con.execute("SELECT dc_config('last_refusal')").fetchone()[0]
    assert f"DROP TABLE main.{table} refused" in why and "dc_config('allow_drop', 1)" in why, why
    con.close()
    # nothing was dropped: a new connection sees the whole dataset
    con = connect(p)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_schema")}
    assert {table, *shadows} <= names
    assert con.execute("SELECT count(*) FROM cells WHERE age > 30").fetchone() == before
    assert con.execute("SELECT n_cells FROM dc_batch('[0, 2999]')").fetchone() == (2,)
    con.close()
    assert verify(p).returncode == 0
    # asked for: dropped with its shadow tables
    con = connect(p)
    assert con.execute("SELECT dc_config('allow_drop')").fetchone() == (0,)
    assert con.execute("SELECT dc_config('allow_drop', 1)").fetchone() == (1,)
    con.execute(f"DROP TABLE {table}")
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_schema")}
    assert not ({table, *shadows} & names)
    con.close()
    r = verify(p)
    assert r.returncode == 1 and f"table {table} is missing" in r.stderr


def test_drop_of_attached_dataset_refused(good, tmp_path):
    p = tmp_path / "a.dcdb"
    shutil.copy(good, p)
    con = connect(good)
    con.execute("ATTACH ? AS aux", (str(p),))
    with pytest.raises(sqlite3.OperationalError, match="access permission denied"):
        con.execute("DROP TABLE aux.cells")
    assert "DROP TABLE aux.cells refused" in con.execute("SELECT dc_config('last_refusal')").fetchone()[0]
    assert con.execute("SELECT count(*) FROM aux.cells").fetchone() == (3000,)
    with pytest.raises(sqlite3.OperationalError, match="allow_drop must be 0 or 1"):
        con.execute("SELECT dc_config('allow_drop', 2)")
    con.close()


def test_defensive_protects_shadow_tables(good, tmp_path):
    """A plain shadow table is not a virtual table: the extension cannot refuse its DROP by itself,
    but dc_config('defensive', 1) turns on SQLite's SQLITE_DBCONFIG_DEFENSIVE on request; and
    without tiles_data the cells table fails instead of showing tile NULL (issue 12 case 4)."""
    p = tmp_path / "s.dcdb"
    shutil.copy(good, p)
    con = connect(p)
    assert con.execute("SELECT dc_config('defensive')").fetchone() == (0,)
    assert con.execute("SELECT dc_config('defensive', 1)").fetchone() == (1,)
    for t in ("tiles_data", "cells_blocks", "genes_blocks"):
        with pytest.raises(sqlite3.OperationalError, match=f"table {t} may not be dropped"):
            con.execute(f"DROP TABLE {t}")
        with pytest.raises(sqlite3.OperationalError, match="may not be modified"):
            con.execute(f"DELETE FROM {t}")
    con.execute("SELECT dc_config('defensive', 0)")
    con.execute("DROP TABLE tiles_data")
    con.commit()
    with pytest.raises(sqlite3.DatabaseError, match="tiles_data is missing"):
        con.execute("SELECT tile FROM cells WHERE cell_id = 0").fetchall()
    con.close()


@pytest.mark.parametrize("delta", [1, -1])
def test_n_genes_edited_refused_by_the_python_readers(good, tmp_path, delta):
    """The Python readers shaped their rows by dc_meta.n_genes: raised by one, CellDataset and
    CellMapDataset gave every cell an extra all-zero gene.  Their catalogue now asks the genes
    table, which compares n_genes with its blocks."""
    import deltacells
    (n,) = sqlite3.connect(good).execute("SELECT value FROM dc_meta WHERE key = 'n_genes'").fetchone()
    bad = damaged(good, tmp_path, f"UPDATE dc_meta SET value = {int(n) + delta} WHERE key = 'n_genes'")
    for make in (lambda: next(iter(deltacells.CellDataset(str(bad), batch_size=100))),
                 lambda: deltacells.CellMapDataset(str(bad))[0],
                 lambda: deltacells.to_anndata(str(bad))):
        with pytest.raises(sqlite3.DatabaseError) as e:
            make()
        assert f"n_genes is {int(n) + delta}" in str(e.value) and f"holds {n} genes" in str(e.value), str(e.value)


@pytest.mark.parametrize("op", ["append", "merge_first", "merge_second"])
@pytest.mark.parametrize("damage", ["renamed", "block_copied", "row_deleted"])
def test_append_and_merge_do_not_seal_genes_damage_again(h5, good, tmp_path, op, damage):
    """append and merge store the genes table again, sealed under a new dataset id: each genes
    block is checked against its seal first, and blocks of a column genes_columns lacks are
    refused.  Before, a var column renamed or deleted, or a block copied over another, came out
    sealed anew and verify passed the result."""
    con = sqlite3.connect(good)
    (last, name) = con.execute("SELECT col, name FROM genes_columns ORDER BY col DESC LIMIT 1").fetchone()
    con.close()
    if damage == "renamed":
        bad = damaged(good, tmp_path, f"UPDATE genes_columns SET name = 'renamed' WHERE col = {last}")
        words = "genes column 'renamed', block 0: its seal does not match"
    elif damage == "block_copied":
        bad = damaged(good, tmp_path, "UPDATE genes_blocks SET data = (SELECT data FROM genes_blocks WHERE col = 1)"
                                      " WHERE col = 2")
        words = "genes column 'n_cells', block 0: its seal does not match"
    else:
        bad = damaged(good, tmp_path, f"DELETE FROM genes_columns WHERE col = {last}")
        words = f"genes_blocks has blocks of column {last}, which genes_columns lacks"
    out = tmp_path / "merged.dcdb"
    r = append_or_merge(op, bad, good, h5, out)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert words in r.stderr, r.stderr
    assert not out.exists()
