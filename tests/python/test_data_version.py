"""A connection that has read a dataset sees the data another connection writes afterwards:
`cells` (its block statistics, tile index and category dictionaries), `expression` and
`dc_batch` reload when SQLite's data version changes, never answer from stale state."""
import sqlite3

import pytest

from _batch_util import connect, generated


def _snapshot(con):
    return (con.execute("SELECT count(*), max(cell_id), count(DISTINCT tile) FROM cells").fetchone(),
            con.execute("SELECT cell_id, name FROM cells WHERE cell_id IN (0, 1500, 2999) ORDER BY 1").fetchall(),
            con.execute("SELECT cell_id, length(genes) FROM expression WHERE cell_id IN (0, 1500, 2999) ORDER BY 1").fetchall())


def _replace_rows(path, src):
    """Replaces every stored row of the dataset at path with src's, in one transaction of a
    plain connection (no extension): the data changes, the schema (and its cookie) does not."""
    con = sqlite3.connect(str(path), isolation_level=None)
    con.execute("ATTACH ? AS src", (str(src),))
    tables = [r[0] for r in con.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'")]
    cookie = con.execute("PRAGMA main.schema_version").fetchone()[0]
    con.execute("BEGIN IMMEDIATE")
    for t in tables:
        con.execute(f'DELETE FROM main."{t}"')
        con.execute(f'INSERT INTO main."{t}" SELECT * FROM src."{t}"')
    con.execute("COMMIT")
    assert con.execute("PRAGMA main.schema_version").fetchone()[0] == cookie
    con.close()


def test_reader_sees_changed_data(tmp_path):
    _, small = generated(tmp_path, 1600, 400, 31, 500)
    _, big = generated(tmp_path, 3000, 400, 32, 700)
    path = tmp_path / "live.dcdb"
    path.write_bytes(small.read_bytes())
    want_small = _snapshot(connect(small))
    want_big = _snapshot(connect(big))
    assert want_small != want_big

    reader = connect(path)
    assert _snapshot(reader) == want_small
    _replace_rows(path, big)
    assert _snapshot(reader) == want_big
    _replace_rows(path, small)
    assert _snapshot(reader) == want_small
