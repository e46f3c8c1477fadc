"""Opening a dataset over a store costs a few requests, not a read of its tiles.

The tile index (the rows of tiles_data without their blobs) is what every reader loads first: the
extension's reader (tile_rows.c) and the Python catalogue.  tiles_data's leaf pages lie scattered
between the tiles' overflow pages, so a scan of the table reads one page in each of several far
apart places.  Two things keep that cheap:
- a covering index of the small columns (DC_TILES_INDEX_SQL, dc_format.h), made by the tiles
  table's xCreate (convert, merge, a dataset written by SQL) and by append, whose few pages lie
  together: the load reads it, not the table;
- the VFS's prefetcher deepens a stream only for a reader that goes on where it left off: a reader
  that skips blocks (those leaf pages, each found in the stream's window) drops the stream.  Before,
  each such read deepened it, and the load of a dataset without the index fetched everything from
  the first leaf page to the last (a 100,000-cell dataset's open, 50 ms per request: 1.19 s,
  64 MiB fetched -> 0.66 s without the index -> 0.13 s with it).
Local files through the dchttp VFS (its counters, no server needed): exact and deterministic."""
import os
import shutil
import sqlite3
import subprocess
import time
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _batch_util import CONVERTER as CLI, connect, generated  # noqa: E402
from _remote_util import alarm, nginx_or_skip  # noqa: E402

import deltacells  # noqa: E402

LOAD = "SELECT tile, first_cell, n_cells, nnz FROM tiles_data ORDER BY tile"
# 16 KiB blocks: a tile is many blocks, a leaf page two; shared=0: each connection counts its own
OPTS = {"block_kb": 16, "readahead_kb": 256, "shared": 0, "max_inflight": 4}


@pytest.fixture(autouse=True)
def time_limit():
    with alarm(240, "test_remote_open"):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("open")
    # 8 chunks of 125 cells per tile, as the tests below count blocks for (a cell's chunk is a
    # few blocks of the tile); by default a 1,000-cell tile has 2 chunks (`two`: the same cells)
    h5, db = generated(d, 20000, 400, 8, 1000, ("--chunks", "8"))
    two = generated(d, 20000, 400, 8, 1000)[1]
    con = sqlite3.connect(db)
    rows = con.execute(LOAD).fetchall()
    tile_bytes = con.execute("SELECT sum(length(data)) FROM tiles_data").fetchone()[0]
    con.close()
    bare = d / "bare.dcdb"          # the same dataset as written before the index existed
    shutil.copy(db, bare)
    con = sqlite3.connect(bare)
    con.execute("DROP INDEX tiles_data_meta")
    con.commit()
    con.close()
    return {"dir": d, "h5": h5, "db": db, "bare": bare, "rows": rows, "tile_bytes": tile_bytes, "two": two}


def index_names(path):
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'index' AND "
                                          "tbl_name = 'tiles_data' AND sql IS NOT NULL")}
    finally:
        con.close()


def load_over_vfs(path, opts=OPTS):
    """The tile index loaded through the dchttp VFS: (rows, the VFS's counters)."""
    con = deltacells.connect(path, remote=opts)
    try:
        con.execute("SELECT dc_vfs_stats('reset')").fetchall()
        rows = con.execute(LOAD).fetchall()
        return rows, deltacells.vfs_stats(con)
    finally:
        con.close()


def test_convert_makes_the_index_and_the_load_uses_it(data):
    assert index_names(data["db"]) == {"tiles_data_meta"}
    con = sqlite3.connect(data["db"])
    try:
        for q in (LOAD, "SELECT tile, first_cell, n_cells, nnz, chunks, NULL FROM main.tiles_data ORDER BY tile"):
            plan = " ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + q))
            assert "COVERING INDEX tiles_data_meta" in plan, (q, plan)
    finally:
        con.close()


def test_tiles_are_many_blocks_and_leaf_pages_far_apart(data):
    """(what the next tests rely on: without the index the load reads pages in several places)"""
    con = sqlite3.connect(data["bare"])
    try:
        assert len(data["rows"]) == 20
        assert min(r[0] for r in con.execute("SELECT length(data) FROM tiles_data")) > 4 * 16384
        plan = " ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + LOAD))
        assert "INDEX" not in plan, plan
    finally:
        con.close()


def test_open_reads_a_few_blocks_with_the_index(data):
    # no prefetch threads: a request in flight from the open's reads cannot reach the counters
    rows, s = load_over_vfs(data["db"], dict(OPTS, max_inflight=0))
    assert rows == data["rows"]
    # the index's pages: a block or two, nothing of the tiles
    assert s["bytes"] <= 2 * 16384 and s["requests"] <= 1, s


def test_sparse_reads_do_not_run_a_prefetch_stream(data):
    """Without the index: the leaf pages are read, each with a block or two around it, and not the
    tiles between them (before: most of the file, as prefetched stream blocks)."""
    rows, s = load_over_vfs(data["bare"])
    assert rows == data["rows"]
    # measured: 0.40x the tiles' bytes (before: 1.14x, every block of the file)
    assert s["bytes"] < 0.6 * data["tile_bytes"], (s, data["tile_bytes"])
    rows2, s2 = load_over_vfs(data["db"])
    assert rows2 == rows and s2["bytes"] < s["bytes"], (s2, s)


def test_a_sequential_tile_read_still_prefetches(data):
    con = deltacells.connect(data["db"], remote=OPTS)
    try:
        con.execute("SELECT dc_vfs_stats('reset')").fetchall()
        n = sum(len(b) for (b,) in con.execute("SELECT data FROM tiles_data ORDER BY tile"))
        s = deltacells.vfs_stats(con)
    finally:
        con.close()
    assert n == data["tile_bytes"]
    assert s["prefetch_requests"] > 0 and s["prefetch_blocks_used"] > 0.5 * n / 16384, s
    assert s["bytes"] < 1.2 * n + 256 * 1024, s


def cli(*args):
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_append_to_a_dataset_without_the_index_adds_it(data, tmp_path):
    ds = tmp_path / "a.dcdb"
    shutil.copy(data["bare"], ds)
    cli("append", ds, data["h5"])
    assert index_names(ds) == {"tiles_data_meta"}
    cli("verify", ds)
    con = sqlite3.connect(ds)
    try:
        n, total = con.execute("SELECT count(*), sum(n_cells) FROM tiles_data").fetchone()
        assert (n, total) == (40, 40000)
        assert con.execute(LOAD).fetchall()[:20] == data["rows"]
    finally:
        con.close()


def test_merge_output_has_the_index(data, tmp_path):
    for first in ("db", "bare"):
        out = tmp_path / f"m_{first}.dcdb"
        cli("merge", data[first], data["db"], "-o", out)
        assert index_names(out) == {"tiles_data_meta"}, first


def test_tiles_table_made_by_sql_has_the_index_and_drop_removes_it(tmp_path):
    path = tmp_path / "sql.dcdb"
    con = connect(path)
    try:
        con.execute("CREATE VIRTUAL TABLE tiles USING deltacells_tiles")
        con.commit()
        assert index_names(path) == {"tiles_data_meta"}
        con.execute("SELECT dc_config('allow_drop', 1)").fetchall()
        con.execute("DROP TABLE tiles")
        con.commit()
        assert con.execute("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'tiles%'").fetchone() == (0,)
    finally:
        con.close()


# --- dc_vfs_expect: a read of known length announced to the VFS -------------------------------
def _tile_read(path, tile, announce, opts=None):
    """Reads one tile's blob through the VFS (the leaf page first, as the fetch-ahead does):
    (blob, counters of the blob's read alone)."""
    con = deltacells.connect(path, remote=opts or OPTS)
    try:
        (n,) = con.execute("SELECT length(data) FROM tiles_data WHERE tile = ?", (tile,)).fetchone()
        con.execute("SELECT dc_vfs_stats('reset')").fetchall()
        if announce:
            assert con.execute("SELECT dc_vfs_expect('main', ?)", (n,)).fetchone()[0] == n // 16384 + 2
        (b,) = con.execute("SELECT data FROM tiles_data WHERE tile = ?", (tile,)).fetchone()
        return b, deltacells.vfs_stats(con)
    finally:
        con.close()


def test_an_announced_read_is_requested_at_once_and_not_past_its_end(data):
    tile = 7
    slow = dict(OPTS, latency_ms=30)         # requests last long enough to overlap
    plain, _ = _tile_read(data["db"], tile, False, slow)
    got, s1 = _tile_read(data["db"], tile, True, slow)
    assert got == plain and len(got) > 4 * 16384
    blocks = len(got) // 16384 + 2
    # the blob's requests in flight together (4 blocks each, at most max_inflight; one may
    # finish before the last starts), where the unannounced stream starts with one block
    assert s1["prefetch_peak_inflight"] >= max(2, min(4, -(-blocks // 4)) - 1), s1
    # nothing past the announced end (a block of slack at each side)
    assert s1["bytes"] <= (blocks + 1) * 16384, (s1, len(got))


def _blob_blocks(path, bsize):
    """Per tile blob, in file order: (first block, last block) of its overflow pages, and of the
    leaf page that holds its row."""
    con = sqlite3.connect(path)
    try:
        ps = con.execute("PRAGMA page_size").fetchone()[0]
        pages = {}
        for p, pg in con.execute("SELECT path, pageno FROM dbstat WHERE name = 'tiles_data' AND pagetype = 'overflow'"):
            pages.setdefault(p.split("+")[0], []).append(pg)
    finally:
        con.close()
    return sorted(((min(v) - 1) * ps // bsize, (max(v) * ps - 1) // bsize) for v in pages.values()), ps


@pytest.mark.parametrize("layout", ["db", "two"])
@pytest.mark.parametrize("max_inflight", [0, 2, 4])
def test_announced_reads_of_tiles_in_a_row_fetch_nothing_past_them(data, tmp_path, max_inflight, layout):
    """Tiles read one after another, each announced, as a worker's fetch-ahead reads its tiles (the
    next tile's first blocks came with the last one's, so its first miss lies inside it): nothing
    past the last tile is fetched, also once every request in flight has ended.  Before, a prefetch
    request ran past an announced end and taking it let the stream go on (an epoch of 2 workers
    fetched 1.37x the tiles' bytes: each worker about 10 blocks of 1 MiB past each of its tiles,
    into tiles the other one reads), and the end was counted from the first miss.
    `two`: the same cells in tiles of 2 chunks, laid out so that each tile's first blocks came
    with the tile before and no block of theirs missed: the end was set only at a miss, and the
    stream went 19 blocks past the last tile at max_inflight 4.  Now a block taken from the stream
    sets it too."""
    www = tmp_path / "www"
    www.mkdir()
    shutil.copy(data[layout], www / "d.dcdb")
    n = nginx_or_skip(www, tmp_path / "nginx")
    try:
        blobs, ps = _blob_blocks(www / "d.dcdb", 16384)
        con = deltacells.connect(n.url("d.dcdb"), remote=dict(OPTS, max_inflight=max_inflight))
        try:
            rows = con.execute("SELECT tile, length(data) FROM tiles_data ORDER BY tile").fetchall()
            assert len(rows) == len(blobs) >= 8
            time.sleep(0.3)             # the open's requests in flight end
            before = len(n.requests())
            for tile, size in rows[3:7]:
                con.execute("SELECT length(data) FROM tiles_data WHERE tile = ?", (tile,)).fetchone()
                con.execute("SELECT dc_vfs_expect('main', ?)", (size,)).fetchone()
                (b,) = con.execute("SELECT data FROM tiles_data WHERE tile = ?", (tile,)).fetchone()
                con.execute("SELECT dc_vfs_expect('main', 0)").fetchone()
                assert len(b) == size
            time.sleep(0.5)             # the requests still in flight end and are logged
            log = n.requests()[before:]
        finally:
            con.close()
    finally:
        n.stop()
    assert log
    ends = [int(line.split('"')[1].split("-")[1]) for line in log]
    # the blobs lie in tile order, each followed by its row's leaf page; the last one read ends at
    # blobs[6][1]: past it, its leaf page, and a page and a block of slack
    assert all(blobs[i][1] < blobs[i + 1][0] for i in range(len(blobs) - 1)), blobs
    limit = (blobs[6][1] + 2 * (ps // 16384) + 1) * 16384
    assert max(ends) < limit, (max(ends) // 16384, blobs[3:8], log)


def test_an_announcement_without_prefetch_is_one_request(data):
    opts = dict(OPTS, max_inflight=0, readahead_kb=1024)
    plain, s0 = _tile_read(data["db"], 3, False, opts)
    got, s1 = _tile_read(data["db"], 3, True, opts)
    assert got == plain
    assert s1["requests"] == 1 and s0["requests"] > 1, (s0, s1)


def test_a_withdrawn_announcement_leaves_the_next_read_alone(data):
    """An announcement is for one read: withdrawn (0) when no miss used it, the next read fetches
    what it would have fetched unannounced; left standing, it would fetch the announced length
    there.  (No prefetch threads: nothing in flight from an earlier statement can reach the
    counters.)"""
    def leaf_read(announce):
        con = deltacells.connect(data["db"], remote=dict(OPTS, max_inflight=0))
        try:
            con.execute("SELECT count(*) FROM cells_columns").fetchone()     # schema, open reads
            for v in announce:
                con.execute("SELECT dc_vfs_expect('main', ?)", (v,)).fetchone()
            con.execute("SELECT dc_vfs_stats('reset')").fetchall()
            con.execute("SELECT length(data) FROM tiles_data WHERE tile = 5").fetchone()   # a leaf page
            s = deltacells.vfs_stats(con)
            return s["bytes"], s["prefetch_requests"]
        finally:
            con.close()
    plain = leaf_read([])
    assert leaf_read([1000000, 0]) == plain
    standing = leaf_read([1000000])
    assert standing[0] > plain[0] + 4 * 16384, (standing, plain)


@pytest.mark.parametrize("max_inflight", [0, 4])
def test_a_finished_announcement_leaves_later_reads_elsewhere_alone(data, max_inflight):
    """After an announced read, a read before it in the file (a leaf page of an earlier tile)
    fetches what it would have fetched on a fresh connection: the announced read's end applies
    inside that read only (it once made such a miss fetch as far as that end, up to readahead_kb)."""
    opts = dict(OPTS, max_inflight=max_inflight)

    def leaf_read(first_tile):
        con = deltacells.connect(data["db"], remote=opts)
        try:
            con.execute("SELECT count(*) FROM cells_columns").fetchone()     # schema, open reads
            if first_tile is not None:
                (n,) = con.execute("SELECT length(data) FROM tiles_data WHERE tile = ?", (first_tile,)).fetchone()
                con.execute("SELECT dc_vfs_expect('main', ?)", (n,)).fetchone()
                con.execute("SELECT data FROM tiles_data WHERE tile = ?", (first_tile,)).fetchone()
                con.execute("SELECT dc_vfs_expect('main', 0)").fetchone()
            time.sleep(0.2)        # requests in flight end before the counters are reset
            con.execute("SELECT dc_vfs_stats('reset')").fetchall()
            con.execute("SELECT length(data) FROM tiles_data WHERE tile = 1").fetchone()   # a leaf page before it
            time.sleep(0.2)
            return deltacells.vfs_stats(con)["bytes"]
        finally:
            con.close()
    plain = leaf_read(None)
    after = leaf_read(12)
    assert after <= plain, (after, plain)


def test_expect_arguments(data):
    con = deltacells.connect(data["db"])                  # a plain local connection
    try:
        assert con.execute("SELECT dc_vfs_expect('main', 10)").fetchone() == (None,)
    finally:
        con.close()
    con = deltacells.connect(data["db"], remote=OPTS)
    try:
        for bad in (-1, 1.5, "x"):
            with pytest.raises(sqlite3.OperationalError, match="nbytes must be an integer >= 0"):
                con.execute("SELECT dc_vfs_expect('main', ?)", (bad,)).fetchone()
        assert con.execute("SELECT dc_vfs_expect('nosuch', 10)").fetchone() == (None,)
    finally:
        con.close()


def _one_cell(data, cell):
    from _batch_util import ids_blob
    con = deltacells.connect(data["db"], remote=dict(OPTS, latency_ms=30))
    try:
        (n,) = con.execute("SELECT length(data) FROM tiles_data WHERE tile = 7").fetchone()
        con.execute("SELECT dc_vfs_stats('reset')").fetchall()
        assert con.execute("SELECT n_cells FROM dc_batch(?)", (ids_blob([cell]),)).fetchall() == [(1,)]
        return n, deltacells.vfs_stats(con)
    finally:
        con.close()


def test_one_cell_reads_its_chunk_not_its_tile(data):
    """dc_batch of one cell over dchttp: the tile's checksum comes from the covering index (before,
    it was read after the blob, walking every page of the tile), so a cell of the tile's first
    chunk costs the pages up to that chunk, not the whole tile."""
    n, s = _one_cell(data, 7005)
    assert s["bytes"] <= 3 * 16384 < n, (s, n)


def test_the_reader_announces_the_chunks_it_reads(data):
    """A cell of the tile's last chunk: every page up to it is read (a blob read at an offset walks
    the pages before it), so the reader announces that range: requested together (peak in flight
    as many requests as it takes, at most max_inflight), and nothing past the tile."""
    n, s = _one_cell(data, 7995)
    blocks = n // 16384 + 2
    assert s["prefetch_peak_inflight"] >= min(4, -(-(blocks - 2) // 4)), s
    # the tile, and a few pages of the tile index, dc_meta and the row's leaf
    assert s["bytes"] <= (blocks + 6) * 16384, (s, n)


def test_without_the_index_the_reader_walks_the_tile_announced(data):
    """A dataset written before the index: the checksum is read from the table, after the blob,
    so the whole tile is read, and the reader announces it (requested together)."""
    from _batch_util import ids_blob
    con = deltacells.connect(data["bare"], remote=dict(OPTS, latency_ms=30))
    try:
        (n,) = con.execute("SELECT length(data) FROM tiles_data WHERE tile = 7").fetchone()
        # the tile index loaded first (from the table's scattered leaf pages)
        assert con.execute("SELECT n_cells FROM dc_batch(?)", (ids_blob([5]),)).fetchall() == [(1,)]
        con.execute("SELECT dc_vfs_stats('reset')").fetchall()
        assert con.execute("SELECT n_cells FROM dc_batch(?)", (ids_blob([7005]),)).fetchall() == [(1,)]
        s = deltacells.vfs_stats(con)
    finally:
        con.close()
    assert n <= s["bytes"] <= n + 8 * 16384, (s, n)
    assert s["prefetch_peak_inflight"] >= 2, s


def _flip_index_checksum(path, tile):
    """Damages the covering index only: one byte of tile's checksum in its (single) page."""
    con = sqlite3.connect(path)
    try:
        root = con.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'tiles_data_meta'").fetchone()[0]
        psize = con.execute("PRAGMA page_size").fetchone()[0]
        (seal,) = con.execute("SELECT checksum FROM tiles_data NOT INDEXED WHERE tile = ?", (tile,)).fetchone()
    finally:
        con.close()
    raw = bytearray(open(path, "rb").read())
    page = raw[(root - 1) * psize:root * psize]
    for size in (8, 6, 4):
        try:
            pat = seal.to_bytes(size, "big", signed=True)
        except OverflowError:
            continue
        at = page.find(pat)
        if at >= 0 and page.find(pat, at + 1) < 0:
            raw[(root - 1) * psize + at + size - 1] ^= 0x01
            open(path, "wb").write(bytes(raw))
            return
    raise AssertionError("checksum not found once in the index page")


def test_a_damaged_index_is_an_error_never_a_wrong_answer(data, tmp_path):
    from _batch_util import ids_blob
    ds = tmp_path / "bad.dcdb"
    shutil.copy(data["db"], ds)
    _flip_index_checksum(ds, 3)
    con = deltacells.connect(ds)
    try:
        assert con.execute("SELECT n_cells FROM dc_batch(?)", (ids_blob([2005]),)).fetchall() == [(1,)]
        with pytest.raises(sqlite3.DatabaseError, match="tile 3: checksum mismatch"):
            con.execute("SELECT n_cells FROM dc_batch(?)", (ids_blob([3005]),)).fetchall()
    finally:
        con.close()
    p = subprocess.run([str(CLI), "verify", str(ds)], capture_output=True, text=True, timeout=600)
    assert p.returncode != 0 and "index tiles_data_meta disagrees with tiles_data in 1 row" in p.stdout + p.stderr, p.stdout + p.stderr
    cli("verify", data["db"])                      # the undamaged dataset passes


def test_an_index_without_checksums_is_not_used_for_them(data, tmp_path):
    """An index of that name without the checksum column (made by hand): the reader reads each
    checksum with its tile as without the index; it does not load them through it (which would
    look every tile's row up in the table and walk all of their pages at the load)."""
    from _batch_util import ids_blob
    ds = tmp_path / "noseal.dcdb"
    shutil.copy(data["db"], ds)
    con = sqlite3.connect(ds)
    con.execute("DROP INDEX tiles_data_meta")
    con.execute("CREATE INDEX tiles_data_meta ON tiles_data(tile, first_cell, n_cells, nnz, chunks)")
    con.commit()
    con.close()
    con = deltacells.connect(ds, remote=dict(OPTS, max_inflight=0))
    try:
        con.execute("SELECT dc_vfs_stats('reset')").fetchall()
        assert con.execute("SELECT n_cells FROM dc_batch(?)", (ids_blob([7005]),)).fetchall() == [(1,)]
        s = deltacells.vfs_stats(con)
    finally:
        con.close()
    assert s["bytes"] < 3 * data["tile_bytes"] / 20, (s, data["tile_bytes"])
