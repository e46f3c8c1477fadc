"""Corrupt obs data read through the `cells` table: a SQL error (SQLITE_CORRUPT for bad stored
bytes) whose message names the column and the block, never a crash or a wrong answer."""
import random
import shutil
import sqlite3
import subprocess

import pytest

from _cells_data import CONVERTER, EXTENSION, ROOT, connect, convert

SQLITE_CORRUPT = 11


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("cells_corrupt")
    h5 = d / "small.h5ad"
    subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "gen_h5ad.py"), "--cells", "3000", "--genes", "200",
                    "--seed", "3", "-o", str(h5)], check=True, capture_output=True, timeout=300)
    return convert(h5, d / "good.dcdb", "--tile-cells", "1000")


def damaged(good, tmp_path, sql, params=()):
    p = tmp_path / "bad.dcdb"
    shutil.copy(good, p)
    con = sqlite3.connect(p)
    con.execute(sql, params)
    con.commit()
    con.close()
    return p


def col_id(good, name):
    con = sqlite3.connect(good)
    (c,) = con.execute("SELECT col FROM cells_columns WHERE name = ?", (name,)).fetchone()
    con.close()
    return c


def expect_error(path, query, *words, corrupt=True):
    con = connect(path)
    with pytest.raises(sqlite3.DatabaseError) as e:
        con.execute(query).fetchall()
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    if corrupt:
        assert e.value.sqlite_errorcode & 0xff == SQLITE_CORRUPT, (e.value.sqlite_errorname, msg)
    con.close()
    return msg


@pytest.mark.parametrize("column", ["cell_type", "age", "percent_mt", "is_doublet", "barcode", "_index"])
@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage", "other_kind"])
def test_damaged_block(good, tmp_path, column, damage):
    c = col_id(good, column)
    bid = c << 32
    other = col_id(good, "age" if column != "age" else "cell_type") << 32
    sql = {
        "flip": "UPDATE cells_blocks SET data = substr(data, 1, length(data) / 2) || "
                "unhex(printf('%02x', (unicode(substr(data, length(data) / 2 + 1, 1)) + 1) % 256)) || "
                "substr(data, length(data) / 2 + 2) WHERE id = ?",
        "truncate": "UPDATE cells_blocks SET data = substr(data, 1, length(data) - 3) WHERE id = ?",
        "empty": "UPDATE cells_blocks SET data = x'' WHERE id = ?",
        "garbage": "UPDATE cells_blocks SET data = randomblob(100) WHERE id = ?",
        "other_kind": f"UPDATE cells_blocks SET data = (SELECT data FROM cells_blocks WHERE id = {other}) WHERE id = ?",
    }[damage]
    if damage == "flip":   # SQLite 3.40 has no unhex(): flip a byte through a blob built in Python
        con = sqlite3.connect(good)
        (data,) = con.execute("SELECT data FROM cells_blocks WHERE id = ?", (bid,)).fetchone()
        con.close()
        b = bytearray(data)
        b[len(b) // 2] ^= 0x10
        p = damaged(good, tmp_path, "UPDATE cells_blocks SET data = ? WHERE id = ?", (bytes(b), bid))
    else:
        p = damaged(good, tmp_path, sql, (bid,))
    shown = "name" if column == "_index" else column
    msg = expect_error(p, f"SELECT {shown} FROM cells", f"column '{column}' block 0")
    assert "cells:" in msg
    # other columns still read
    other_col = "donor" if column != "donor" else "age"
    con = connect(p)
    assert con.execute(f"SELECT count({other_col}) FROM cells").fetchone()[0] > 0
    # and a filter on the damaged column fails the same way
    if column not in ("_index", "barcode"):
        with pytest.raises(sqlite3.DatabaseError):
            con.execute(f"SELECT count(*) FROM cells WHERE {column} IS NOT NULL").fetchall()
    con.close()


def test_random_flips_never_crash(good, tmp_path):
    """Random byte flips in random blocks: an error naming the column, or (never silently)
    the right values."""
    rng = random.Random(11)
    ref = connect(good).execute("SELECT * FROM cells ORDER BY cell_id").fetchall()
    con = sqlite3.connect(good)
    blocks = con.execute("SELECT b.id, c.name, length(b.data) FROM cells_blocks b JOIN cells_columns c USING(col)").fetchall()
    con.close()
    p = tmp_path / "flip.dcdb"
    errors = 0
    for _ in range(60):
        bid, name, n = rng.choice(blocks)
        shutil.copy(good, p)
        con = sqlite3.connect(p)
        (data,) = con.execute("SELECT data FROM cells_blocks WHERE id = ?", (bid,)).fetchone()
        b = bytearray(data)
        b[rng.randrange(n)] ^= 1 << rng.randrange(8)
        con.execute("UPDATE cells_blocks SET data = ? WHERE id = ?", (bytes(b), bid))
        con.commit()
        con.close()
        c = connect(p)
        try:
            got = c.execute("SELECT * FROM cells ORDER BY cell_id").fetchall()
            assert got == ref
        except sqlite3.DatabaseError as e:
            assert f"column '{name}' block 0" in str(e), str(e)
            errors += 1
        c.close()
    assert errors == 60   # every flip is detected (header checks and the payload checksum)


def test_bad_block_rows(good, tmp_path):
    ct = col_id(good, "cell_type") << 32
    age = col_id(good, "age") << 32
    cases = [
        ("UPDATE cells_blocks SET n_cells = n_cells - 1 WHERE id = ?", (age,), "age"),
        ("UPDATE cells_blocks SET null_count = null_count + 1 WHERE id = ?", (age,), "age"),
        ("UPDATE cells_blocks SET min = 99, max = 5 WHERE id = ?", (ct,), "cell_type"),
        ("UPDATE cells_blocks SET min = 'x' WHERE id = ?", (age,), "age"),
        ("UPDATE cells_blocks SET id = id + 7 WHERE id = ?", (age,), "age"),
        ("UPDATE cells_blocks SET present = zeroblob(100) WHERE id = ?", (ct,), "cell_type"),
    ]
    for sql, params, name in cases:
        p = damaged(good, tmp_path, sql, params)
        # (a wrong null count shows when the block is decoded)
        expect_error(p, f"SELECT count(*), max({name}) FROM cells", f"'{name}'")


def test_bad_dictionary_and_columns(good, tmp_path):
    ct = col_id(good, "cell_type")
    p = damaged(good, tmp_path, "DELETE FROM cells_dict WHERE col = ? AND code = 1", (ct,))
    expect_error(p, "SELECT cell_type FROM cells", "dictionary of column 'cell_type'")
    p = damaged(good, tmp_path, "UPDATE cells_columns SET n_categories = 2 WHERE col = ?", (ct,))
    expect_error(p, "SELECT cell_type FROM cells", "cell_type")
    p = damaged(good, tmp_path, "UPDATE cells_columns SET kind = 'float' WHERE col = ?", (ct,))
    expect_error(p, "SELECT * FROM cells", "kind 'float'")


@pytest.mark.parametrize("field", ["name", "kind"])
def test_column_without_name_or_kind(good, tmp_path, field):
    """A cells_columns row whose name or kind is NULL (bytes of its page overwritten can do it;
    here the NOT NULL is taken off the schema to write one): the cells table says which is
    missing (it said "kind 'category'" for a missing name), and export fails naming it (it
    died of SIGSEGV, strdup of NULL)."""
    p = tmp_path / "bad.dcdb"
    shutil.copy(good, p)
    con = sqlite3.connect(p)
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_schema SET sql = replace(replace(sql, 'name TEXT NOT NULL', 'name TEXT'),"
                " 'kind TEXT NOT NULL', 'kind TEXT') WHERE name = 'cells_columns'")
    con.commit()
    con.close()
    ct = col_id(good, "cell_type")
    con = sqlite3.connect(p)
    con.execute(f"UPDATE cells_columns SET {field} = NULL WHERE col = ?", (ct,))
    con.commit()
    con.close()
    words = "has no name" if field == "name" else "has kind 'NULL'"
    expect_error(p, "SELECT count(*) FROM cells", f"column {ct} {words}")
    r = subprocess.run([str(CONVERTER), "export", str(p), "-o", str(tmp_path / "x.h5ad")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"cells_columns row of col {ct} has no {field}" in r.stderr, r.stderr


def test_where_over_damaged_column_is_not_a_bad_clause(good, tmp_path):
    """CellDataset(where=...) over a damaged obs column raises the table's corruption error (a
    sqlite3.DatabaseError naming the column), not ValueError("bad where clause ...") that
    blamed the caller's clause."""
    import deltacells
    ct = col_id(good, "cell_type")
    p = damaged(good, tmp_path, "UPDATE cells_dict SET value = value || 'x' WHERE col = ? AND code = 0", (ct,))
    with pytest.raises(sqlite3.DatabaseError, match="column 'cell_type'.*checksum mismatch") as e:
        deltacells.CellDataset(p, where="cell_type = 'NK'")
    assert e.value.sqlite_errorcode & 0xff == SQLITE_CORRUPT
    with pytest.raises(ValueError, match="bad where clause .*cell_typo"):
        deltacells.CellDataset(good, where="cell_typo = 'NK'")


def test_missing_shadow_table(good, tmp_path):
    for t in ["cells_blocks", "cells_columns", "cells_dict"]:
        p = damaged(good, tmp_path, f"DROP TABLE {t}")
        expect_error(p, "SELECT count(*) FROM cells", f"main.{t} is missing", corrupt=False)


def test_attached_and_defensive(good, tmp_path):
    """The table works in an ATTACHed dataset; with SQLITE_DBCONFIG_DEFENSIVE (what careful
    users set) its shadow tables are read-only to SQL."""
    p = tmp_path / "copy.dcdb"
    shutil.copy(good, p)
    con = connect(good)
    con.execute("ATTACH ? AS other", (str(p),))
    a = con.execute("SELECT count(*), count(DISTINCT cell_type) FROM main.cells WHERE age > 40").fetchone()
    b = con.execute("SELECT count(*), count(DISTINCT cell_type) FROM other.cells WHERE age > 40").fetchone()
    assert a == b and a[0] > 0
    assert con.execute("SELECT count(*) FROM main.cells m JOIN other.cells o USING (cell_id) "
                       "WHERE m.barcode = o.barcode").fetchone()[0] == 3000
    con.close()
    # Python 3.11's sqlite3 cannot set DEFENSIVE (Connection.setconfig is 3.12): the sqlite3
    # shell can, on the same libsqlite3. The write fails and the data reads back unchanged.
    script = (f".load {EXTENSION.with_suffix('')}\nATTACH '{p}' AS other;\n.dbconfig defensive on\n"
              "UPDATE other.cells_blocks SET data = x'';\n"
              "SELECT 'after', count(*), count(DISTINCT cell_type) FROM other.cells WHERE age > 40;\n")
    r = subprocess.run(["sqlite3", "-batch", str(good)], input=script, capture_output=True, text=True,
                       timeout=60)
    assert "table cells_blocks may not be modified" in r.stderr, r.stderr
    assert r.returncode != 0
    assert f"after|{b[0]}|{b[1]}" in r.stdout.splitlines(), r.stdout
    raw = sqlite3.connect(p)
    assert raw.execute("SELECT count(*) FROM cells_blocks WHERE length(data) = 0").fetchone()[0] == 0
    raw.close()
