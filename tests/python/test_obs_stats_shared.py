"""The obs statistics (columns, block statistics, dictionaries, decoded obs blocks) live in the
connection's dataset object of a schema, beside the tile index, loaded once per data version
and shared by every `cells` cursor and by dc_batch's obs values; another connection's change
reloads them once, and the answers follow the new data (dc_config('obs_loads') counts the
loads; before, `cells` kept them in its table object and counted nothing)."""
import json
import sqlite3

import numpy as np

from _batch_util import connect, generated, replace_rows

QUERIES = [
    "SELECT cell_id, cell_type, age FROM cells WHERE cell_type = 'B' AND age > 40 ORDER BY cell_id",
    "SELECT count(*), sum(n_counts), count(DISTINCT donor) FROM cells WHERE is_doublet = 0",
    "SELECT a.cell_id, b.cell_type FROM cells a JOIN cells b ON b.cell_id = a.cell_id + 1 "
    "WHERE a.cell_id BETWEEN 100 AND 140 ORDER BY 1",
]


def loads(con):
    return tuple(con.execute(f"SELECT dc_config('{k}')").fetchone()[0] for k in ("obs_loads", "index_loads"))


def obs_values(con, ids, cols):
    n, blob = con.execute("SELECT n_cells, obs_values FROM dc_batch(?, NULL, ?)",
                          (np.asarray(ids, dtype="<i8").tobytes(), json.dumps(cols))).fetchone()
    m = len(cols)
    return [np.frombuffer(blob, dtype="<i8", count=n, offset=8 * (m + j * n)).tolist() for j in range(m)]


def answers(con):
    return [con.execute(q).fetchall() for q in QUERIES] + [obs_values(con, [3, 700, 1199, 5], ["cell_type", "age"])]


def test_obs_stats_loaded_once_per_data_version(tmp_path):
    _, a = generated(tmp_path, 1200, 100, 61, 400)
    _, b = generated(tmp_path, 1200, 100, 62, 400)
    want_a, want_b = answers(connect(a)), answers(connect(b))
    assert want_a != want_b   # the two datasets tell apart
    live = tmp_path / "live.dcdb"
    live.write_bytes(a.read_bytes())
    con = connect(live)
    assert loads(con) == (0, 0)
    # cells queries (one with two cursors on the table) and dc_batch's obs values: one load
    assert answers(con) == want_a
    assert loads(con) == (1, 1)
    assert answers(con) == want_a
    assert loads(con) == (1, 1)
    # another connection changes the data: the next statement reloads both, once
    replace_rows(live, b)
    assert answers(con) == want_b
    assert loads(con) == (2, 2)
    assert answers(con) == want_b
    assert loads(con) == (2, 2)
    # the same file attached under another name is another schema: its own dataset object
    con.execute("ATTACH ? AS other", (str(live),))
    assert con.execute("SELECT count(*) FROM other.cells WHERE cell_type = 'B'").fetchone() == \
        con.execute("SELECT count(*) FROM main.cells WHERE cell_type = 'B'").fetchone()
    assert loads(con) == (3, 3)


def test_obs_loads_is_read_only(tmp_path):
    _, a = generated(tmp_path, 300, 50, 63, 100)
    con = connect(a)
    try:
        con.execute("SELECT dc_config('obs_loads', 5)")
        raise AssertionError("obs_loads was set")
    except sqlite3.OperationalError as e:
        assert "obs_loads is read-only" in str(e)
