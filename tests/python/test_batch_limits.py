"""dc_batch early limits (issue 12 case 8): the output's size is computed from the tile index before
anything is decoded; a request over dc_config('batch_mb') or SQLite's blob limit is refused at once
(SQLITE_TOOBIG) with a message naming the size, the cells and the setting.  Limit behaviour only:
the timings are in bench/bench_batch_limits.py."""
import json
import sqlite3
import subprocess

import pytest

from _cells_data import ROOT, connect, convert

SQLITE_TOOBIG = 18


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("limits")
    h5 = d / "small.h5ad"
    subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "gen_h5ad.py"), "--cells", "3000", "--genes", "200",
                    "--seed", "11", "-o", str(h5)], check=True, capture_output=True, timeout=300)
    return convert(h5, d / "small.dcdb", "--tile-cells", "1000")


def refused(con, *args):
    with pytest.raises(sqlite3.DataError) as e:
        con.execute(f"SELECT n_cells FROM dc_batch({', '.join('?' * len(args))})", args).fetchall()
    assert e.value.sqlite_errorcode == SQLITE_TOOBIG, e.value.sqlite_errorname
    return str(e.value)


def test_setting(ds):
    con = connect(ds)
    assert con.execute("SELECT dc_config('batch_mb')").fetchone() == (1024,)
    assert con.execute("SELECT dc_config('batch_mb', 5)").fetchone() == (5,)
    for bad in (0, -1, 1 << 21):
        with pytest.raises(sqlite3.OperationalError, match="batch_mb must be 1 .. 1048576"):
            con.execute("SELECT dc_config('batch_mb', ?)", (bad,))
    con.close()


def test_million_ids_refused_before_decoding(ds):
    con = connect(ds)
    ids = json.dumps([i % 3000 for i in range(1000000)])
    msg = refused(con, ids)
    assert "1000000 cells" in msg and "dc_config('batch_mb') = 1024" in msg and "by the tile index" in msg, msg
    # nothing was decoded: the cache is still empty
    assert con.execute("SELECT dc_config('cache_entries')").fetchone() == (0,)
    # the same as an int64 blob
    blob = b"".join((i % 3000).to_bytes(8, "little") for i in range(1000000))
    assert "1000000 cells" in refused(con, blob)
    # a panel makes the rows narrow: then it fits
    (n, g, nnz) = con.execute("SELECT n_cells, n_genes, length(indices) / 4 FROM dc_batch(?, '[\"GENE1\", \"GENE2\"]')",
                              (ids,)).fetchone()
    assert (n, g) == (1000000, 2) and nnz <= 2000000
    con.close()


def test_budget_is_the_limit(ds):
    con = connect(ds)
    ids = json.dumps(list(range(3000)))
    want = con.execute("SELECT n_cells, indptr, indices, data FROM dc_batch(?)", (ids,)).fetchone()
    size = 16 * 3000 + 8 + 8 * (len(want[2]) // 4)          # bytes of the whole output
    con.execute("SELECT dc_config('batch_mb', 1)")
    assert size > 1 << 20
    msg = refused(con, ids)
    assert "over dc_config('batch_mb') = 1" in msg and "3000 cells" in msg
    # within budget: the same answer as before
    con.execute("SELECT dc_config('batch_mb', ?)", (size // (1 << 20) + 2,))
    assert con.execute("SELECT n_cells, indptr, indices, data FROM dc_batch(?)", (ids,)).fetchone() == want
    # decode groups (decode_mb) stage rows: the staged rows count too, and the answer is unchanged
    con.execute("SELECT dc_config('decode_mb', 1), dc_config('cache_mb', 0)")
    assert con.execute("SELECT n_cells, indptr, indices, data FROM dc_batch(?)", (ids,)).fetchone() == want
    con.close()


def test_sqlite_blob_limit(ds):
    con = connect(ds)
    con.execute("SELECT dc_config('batch_mb', 1048576)")
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100000)
    msg = refused(con, json.dumps(list(range(2000))))
    assert "SQLite's blob limit (SQLITE_LIMIT_LENGTH, 100000 bytes)" in msg, msg
    con.close()
