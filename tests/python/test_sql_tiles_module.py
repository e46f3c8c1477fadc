"""The tiles module (deltacells_tiles) beyond the converter's own `tiles`: every pushed-down
constraint on tile/rowid against the same query on its shadow table tiles_data (a native table,
the answer SQLite itself gives), values of other types, a table made with CREATE VIRTUAL TABLE
(its shadow table created, and dropped with it), and the errors: arguments, a missing shadow
table, the plan string."""
import sqlite3

import pytest

from _batch_util import connect, generated

NATIVE = "SELECT tile, first_cell, n_cells, nnz, length(data), chunks FROM tiles_data"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    _, db = generated(tmp_path_factory.mktemp("tiles_mod"), 2300, 300, 3, 400)   # 6 tiles
    return db


@pytest.mark.parametrize("where", [
    "", "tile = 2", "tile > 3", "tile >= 3", "tile < 2", "tile <= 2", "tile > 1 AND tile <= 4",
    "tile >= 2 AND tile < 2", "rowid = 5", "rowid > 4", "tile = '3'", "tile = 2.5", "tile > '1'",
    "tile IN (0, 5, 9)", "tile = NULL", "tile < 2.5", "tile > -1 AND tile < 100",
])
@pytest.mark.parametrize("order", ["", " ORDER BY tile", " ORDER BY tile DESC"])
def test_constraints_as_on_the_native_table(db, where, order):
    con = connect(db)
    w = f" WHERE {where}" if where else ""
    got = con.execute(f"SELECT tile, first_cell, n_cells, nnz, bytes, chunks FROM tiles{w}{order}").fetchall()
    want = con.execute(f"{NATIVE}{w.replace('rowid', 'tile')}{order}").fetchall()
    if order:
        assert got == want
    else:
        assert sorted(got) == sorted(want)
    assert con.execute(f"SELECT count(*) FROM tiles{w}").fetchone()[0] == len(want)
    if not where:
        assert len(want) == 6
    con.close()


def test_rowid_is_the_tile(db):
    con = connect(db)
    assert con.execute("SELECT rowid, tile FROM tiles WHERE tile > 3").fetchall() == [(4, 4), (5, 5)]
    con.close()


def test_arguments_are_refused(db):
    con = connect(db)
    with pytest.raises(sqlite3.OperationalError, match="deltacells_tiles: takes no arguments"):
        con.execute("CREATE VIRTUAL TABLE temp.t2 USING deltacells_tiles(x)")
    con.close()


def test_created_table_and_its_shadow(tmp_path, db):
    """CREATE VIRTUAL TABLE makes <name>_data; rows put there show through; DROP TABLE drops
    both; a missing shadow table is an error that names it."""
    con = connect(tmp_path / "new.db")
    con.execute("CREATE VIRTUAL TABLE t USING deltacells_tiles")
    assert con.execute("SELECT name FROM sqlite_master WHERE name = 't_data'").fetchone() == ("t_data",)
    assert con.execute("SELECT * FROM t").fetchall() == []
    con.execute("INSERT INTO t_data VALUES (0, 0, 10, 25, 1, x'00010203', 0), (1, 10, 5, 7, 2, x'0506', 0)")
    assert con.execute("SELECT * FROM t ORDER BY tile DESC").fetchall() == [(1, 10, 5, 7, 2, 2), (0, 0, 10, 25, 4, 1)]
    with pytest.raises(sqlite3.OperationalError):            # refused unless allowed
        con.execute("DROP TABLE t")
    con.execute("SELECT dc_config('allow_drop', 1)").fetchall()
    con.execute("DROP TABLE t")
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE name IN ('t', 't_data')").fetchone() == (0,)
    # the shadow table gone from under the table
    con.execute("CREATE VIRTUAL TABLE u USING deltacells_tiles")
    con.execute("DROP TABLE u_data")
    with pytest.raises(sqlite3.OperationalError, match=r"tiles: cannot read main\.u_data: no such table"):
        con.execute("SELECT * FROM u").fetchall()
    con.commit()
    con.close()
    con = connect(tmp_path / "new.db")      # xConnect (not xCreate): a table without its shadow
    with pytest.raises(sqlite3.OperationalError, match=r"u_data"):
        con.execute("SELECT * FROM u WHERE tile > 0").fetchall()
    con.close()


def test_attached_dataset_has_its_own_tiles(tmp_path, db):
    con = connect(tmp_path / "other.db")
    con.execute("ATTACH ? AS d", (str(db),))
    assert con.execute("SELECT count(*), sum(nnz) FROM d.tiles").fetchone() == \
        con.execute("SELECT count(*), sum(nnz) FROM d.tiles_data").fetchone()
    con.close()
