"""The page map (tiles_data_pages, ext/dc_format.h; converter/pagemap.c) and dc_vfs_fetch
(ext/vfs_http.c): where each tile's pages lie, so that a remote tile costs one round trip to the
store, not two one after the other (its row's leaf page, then the overflow pages it names).

- convert, append and merge write a map that agrees with SQLite's own account of the pages
  (dbstat, read here independently of the converter's code); tiles whose blob fits in its leaf
  have no overflow pages (0 0 0);
- _fetchahead.page_map gives each tile's byte ranges, leaves out tiles whose pages lie apart, and
  refuses a map that names pages past the file's end;
- dc_vfs_fetch(schema, offset, nbytes, ...) brings a tile's pages in at once: reading the tile
  afterwards asks the store for nothing; its arguments are checked; NULL for a local file; it
  works with prefetch off (max_inflight 0) too;
- with blocks larger than pages, dc_vfs_fetch asks for a tile's own bytes, its edge blocks' parts
  alone (a neighbour's pages in them are fetched when read, never taken from a part); not with a
  disk cache (whole blocks); an epoch with such parts equals the local file's;
- `deltacells info` says whether the map is current, retired or absent;
- a CellDataset epoch over a remote dataset whose map is wrong (moved pages: a VACUUM, an older
  writer) gives the same batches as the local file: the map is a hint, never data.
Remote parts against nginx on 127.0.0.1 (skipped with the reason when it cannot start).
"""
import json
import os
import shutil
import sqlite3
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _converter_util import need_converter, run  # noqa: E402
from _python_data import ROOT  # noqa: E402
from _remote_util import alarm, nginx_or_skip  # noqa: E402
from test_append_merge import write_h5ad  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "python"))
import deltacells  # noqa: E402
from deltacells import _fetchahead  # noqa: E402


@pytest.fixture(autouse=True)
def time_limit():
    with alarm(300, "test_remote_pagemap"):
        yield


def truth(db):
    """{tile: (leaf, first, last, pages)} from dbstat: each overflow page's path names its cell
    (leaf path + cell number in hex), each leaf path its page; cells in path order are the rows
    in tile order."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT path, pageno, pagetype, ncell FROM dbstat WHERE name = 'tiles_data'").fetchall()
    tiles = [t for (t,) in con.execute("SELECT tile FROM tiles_data ORDER BY tile")]
    con.close()
    leaves = sorted((p, n, c) for p, n, t, c in rows if t == "leaf")
    cells = []                                   # (leaf path, cell number) in order
    for p, n, c in leaves:
        cells += [(p, k) for k in range(c)]
    leaf_page = {p: n for p, n, _ in leaves}
    over = {}
    for p, n, t, _ in rows:
        if t == "overflow":
            cell = p.split("+")[0]
            lp, k = cell[:cell.rindex("/") + 1], int(cell[cell.rindex("/") + 1:], 16)
            over.setdefault((lp, k), []).append(n)
    assert len(cells) == len(tiles)
    out = {}
    for tile, (lp, k) in zip(tiles, cells):
        v = over.get((lp, k), [])
        out[tile] = (leaf_page[lp], min(v) if v else 0, max(v) if v else 0, len(v))
    return out


def stored(db):
    """The map's tile rows; checks its row of tile -1: the file's schema_version."""
    con = sqlite3.connect(db)
    try:
        rows = {t: (a, b, c, d) for t, a, b, c, d in con.execute("SELECT * FROM tiles_data_pages")}
        assert rows.pop(-1) == (con.execute("PRAGMA schema_version").fetchone()[0], 0, 0, 0)
        return rows
    finally:
        con.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    need_converter()
    d = tmp_path_factory.mktemp("pagemap")
    genes = [f"G{i}" for i in range(400)]
    a = write_h5ad(d / "a.h5ad", 3000, genes, 1)                      # blobs of many pages
    b = write_h5ad(d / "b.h5ad", 1500, genes[100:] + ["X1"], 2)
    small = write_h5ad(d / "s.h5ad", 40, genes[:30], 3, density=0.1)    # a blob that fits in its leaf
    return d, a, b, small


def catalogue_truth(db):
    """The pages the catalogue hint must cover, from dbstat: every page of every b-tree but the
    tiles table's and the obs blocks' overflow pages."""
    con = sqlite3.connect(db)
    try:
        out = set()
        for (name,) in con.execute("SELECT name FROM sqlite_schema WHERE rootpage > 0").fetchall():
            for pg, t in con.execute("SELECT pageno, pagetype FROM dbstat WHERE name = ?", (name,)):
                if name == "tiles_data" or (name == "cells_blocks" and t == "overflow"):
                    continue
                out.add(pg)
        return out
    finally:
        con.close()


def check_catalogue(db):
    con = sqlite3.connect(db)
    try:
        hint = json.loads(con.execute("SELECT value FROM dc_meta WHERE key = 'catalogue_pages'").fetchone()[0])
        assert hint["schema_version"] == con.execute("PRAGMA schema_version").fetchone()[0]
    finally:
        con.close()
    runs = hint["runs"]
    assert 0 < len(runs) <= 32 and all(a <= b for a, b in runs)
    assert all(runs[i][1] < runs[i + 1][0] for i in range(len(runs) - 1))
    covered = {p for a, b in runs for p in range(a, b + 1)}
    assert catalogue_truth(db) <= covered


def test_convert_append_merge_write_a_map_that_agrees_with_dbstat(files, tmp_path):
    d, a, b, small = files
    x = tmp_path / "x.dcdb"
    run("convert", a, "-o", x, "--quiet", "--tile-cells", "700")
    got = stored(x)
    assert got == truth(x) and len(got) >= 4
    assert all(p > 0 and last - first + 1 == p for _, first, last, p in got.values()), got
    check_catalogue(x)                               # and the catalogue hint covers what it must
    run("append", x, b, "--quiet")                   # rows and leaves after the old ones
    got = stored(x)
    assert got == truth(x) and len(got) >= 7
    check_catalogue(x)
    s = tmp_path / "s.dcdb"
    run("convert", small, "-o", s, "--quiet")
    assert stored(s) == truth(s)
    assert [v[1:] for v in stored(s).values()] == [(0, 0, 0)]   # all in the leaf
    m = tmp_path / "m.dcdb"
    run("merge", x, s, "-o", m, "--quiet")
    got = stored(m)
    assert got == truth(m) and len(got) == len(stored(x)) + 1
    check_catalogue(m)
    csv = tmp_path / "t.csv"                         # annotate: new obs pages, the hint written again
    with open(csv, "w") as f:
        f.write("cell_id,score\n" + "".join(f"{i},{i * 0.5}\n" for i in range(100)))
    run("annotate", m, csv, "--key", "cell_id", "--quiet")
    check_catalogue(m)


def test_page_map_gives_byte_ranges_and_refuses_a_map_past_the_end(files, tmp_path):
    d, a, b, small = files
    x = tmp_path / "x.dcdb"
    run("convert", a, "-o", x, "--quiet", "--tile-cells", "700")
    con = sqlite3.connect(x)
    ps = con.execute("PRAGMA page_size").fetchone()[0]
    want = stored(x)
    pm = _fetchahead.page_map(con)
    assert set(pm) == set(want)
    for t, (leaf, first, last, pages) in want.items():
        assert pm[t] == ((leaf - 1) * ps, ps, (first - 1) * ps, pages * ps)
    # a tile whose overflow pages lie apart: read without the map (the others keep it)
    t0 = min(want)
    con.execute("UPDATE tiles_data_pages SET last = last + 5 WHERE tile = ?", (t0,))
    pm = _fetchahead.page_map(con)
    assert t0 not in pm and len(pm) == len(want) - 1
    # a page past the file's end: a map this file has outlived, not used at all
    con.execute("UPDATE tiles_data_pages SET leaf = 1 << 40 WHERE tile = ?", (t0,))
    assert _fetchahead.page_map(con) is None
    con.execute("DROP TABLE tiles_data_pages")
    assert _fetchahead.page_map(con) is None                     # a file without a map
    con.close()


def test_a_schema_change_retires_the_map_and_annotate_keeps_it(files, tmp_path):
    """A VACUUM moves pages (and changes the schema_version): the map is not used after it; nor
    after any other schema change (an index made by hand).  annotate changes the schema but
    moves no tile page: its map stays in use."""
    d, a, b, small = files
    x = tmp_path / "x.dcdb"
    run("convert", a, "-o", x, "--quiet", "--tile-cells", "700")
    con = sqlite3.connect(x)
    assert _fetchahead.page_map(con) is not None
    con.close()
    csv = tmp_path / "t.csv"
    with open(csv, "w") as f:
        f.write("cell_id,score\n" + "".join(f"{i},{i * 0.5}\n" for i in range(100)))
    run("annotate", x, csv, "--key", "cell_id", "--quiet")
    want = stored(x)                                             # its version is the file's again
    assert want == truth(x)
    assert map_state(x) == "current"                             # `info` says so
    con = sqlite3.connect(x)
    assert _fetchahead.page_map(con) is not None
    con.execute("CREATE INDEX by_hand ON cells_columns(kind)")
    assert _fetchahead.page_map(con) is None
    con.execute("DROP INDEX by_hand")
    con.commit()
    con.close()
    v = tmp_path / "v.dcdb"
    shutil.copy(x, v)
    con = sqlite3.connect(v)
    con.execute("VACUUM")
    assert _fetchahead.page_map(con) is None
    con.close()
    # `info` says which: retired after the hand-made index (dropped again: the schema changed) and
    # the VACUUM, current again once an append wrote a new map, none where the table is gone
    assert map_state(x) == "retired"
    assert map_state(v) == "retired"
    assert "retired (written under schema version" in run("info", v).stdout
    run("append", v, b, "--quiet")
    assert map_state(v) == "current" and stored(v) == truth(v)
    con = sqlite3.connect(v)
    con.execute("DROP TABLE tiles_data_pages")
    con.commit()
    con.close()
    assert map_state(v) == "none"
    assert "page map     none" in run("info", v).stdout


def map_state(db):
    return json.loads(run("info", db, "--json").stdout)["page_map"]


@pytest.fixture(scope="module")
def served(files, tmp_path_factory):
    d, a, b, small = files
    w = tmp_path_factory.mktemp("pagemap_www")
    x = w / "x.dcdb"
    run("convert", a, "-o", x, "--quiet", "--tile-cells", "300")
    for name in ("f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "f10", "c1"):   # one name per test: the block cache is the process's
        shutil.copy(x, w / f"{name}.dcdb")
    ng = nginx_or_skip(w, tmp_path_factory.mktemp("pagemap_nginx"))
    yield ng, x
    ng.stop()


def _requests(con):
    return deltacells.vfs_stats(con)["requests"]


def _read_tile(con, t):
    return con.execute("SELECT length(data), checksum FROM tiles_data NOT INDEXED WHERE tile = ?", (t,)).fetchone()


def _reads(url, x, fetch):
    """Reads every tile but the first (which brings in the b-tree's upper pages), from the last
    back, each after dc_vfs_fetch of its map's ranges when fetch: (the requests the reads made,
    the blocks the fetches fetched).  Checks the bytes against the local file."""
    local = sqlite3.connect(x)
    con = deltacells.connect(url)
    try:
        pm = _fetchahead.page_map(con)
        tiles = sorted(pm)
        assert _read_tile(con, tiles[0]) == _read_tile(local, tiles[0])
        reads = fetched = 0
        for t in tiles[:0:-1]:
            if fetch:
                fetched += con.execute("SELECT dc_vfs_fetch('main', ?, ?, ?, ?)", pm[t]).fetchone()[0]
                # again: all held, nothing fetched
                assert con.execute("SELECT dc_vfs_fetch('main', ?, ?, ?, ?)", pm[t]).fetchone()[0] == 0
            n0 = _requests(con)
            assert _read_tile(con, t) == _read_tile(local, t)
            reads += _requests(con) - n0
        blob = con.execute("SELECT data FROM tiles_data WHERE tile = ?", (tiles[-1],)).fetchone()[0]
        assert blob == local.execute("SELECT data FROM tiles_data WHERE tile = ?", (tiles[-1],)).fetchone()[0]
        return reads, fetched
    finally:
        con.close()
        local.close()


@pytest.mark.parametrize("inflight", ["4", "0"])
def test_vfs_fetch_brings_a_tile_in_at_once(served, monkeypatch, inflight):
    """Blocks of 16 KiB and read-ahead of one block, so that a tile's leaf page and its overflow
    pages are blocks apart and a read brings in little more than it needs: after dc_vfs_fetch of
    its two ranges, reading a tile asks the store for nothing, where the same reads without it
    ask.  With max_inflight 0 (no prefetch threads) the fetch runs on the calling thread."""
    ng, x = served
    monkeypatch.setenv("DC_HTTP_BLOCK_KB", "16")
    monkeypatch.setenv("DC_HTTP_READAHEAD_KB", "16")
    monkeypatch.setenv("DC_HTTP_MAX_INFLIGHT", inflight)
    reads, fetched = _reads(ng.url("f1.dcdb" if inflight == "4" else "f2.dcdb"), x, True)
    assert reads == 0 and fetched > 0, (reads, fetched)
    reads, fetched = _reads(ng.url("f5.dcdb" if inflight == "4" else "f6.dcdb"), x, False)
    assert reads > 0, reads


def test_vfs_fetch_arguments(served, tmp_path):
    ng, x = served
    con = deltacells.connect(ng.url("f3.dcdb"))
    try:
        size = os.path.getsize(x)
        # past the end, empty: nothing to fetch; a range that runs past the end: up to it
        assert con.execute("SELECT dc_vfs_fetch('main', ?, 100)", (size + 10,)).fetchone()[0] == 0
        assert con.execute("SELECT dc_vfs_fetch('main', 0, 0)").fetchone()[0] == 0
        assert con.execute("SELECT dc_vfs_fetch('main', ?, 1 << 40)", (size - 1,)).fetchone()[0] in (0, 1)
        assert con.execute("SELECT dc_vfs_fetch('main', 0, ?)", (size,)).fetchone()[0] >= 0   # the whole file
        assert con.execute("SELECT dc_vfs_fetch('main', 0, ?, 5, 10)", (size,)).fetchone()[0] == 0  # held now
        for bad, why in [("'main'", "schema, then offset and nbytes pairs"),
                         ("'main', 1", "schema, then offset and nbytes pairs"),
                         ("'main', -1, 5", "integers >= 0"), ("'main', 0, 'x'", "integers >= 0"),
                         ("'main', 0, 1.5", "integers >= 0"),
                         ("'main'" + ", 0, 1" * 33, "at most 32 ranges")]:
            with pytest.raises(sqlite3.Error, match=why):
                con.execute(f"SELECT dc_vfs_fetch({bad})").fetchone()
        assert con.execute("SELECT dc_vfs_fetch('nosuch', 0, 1)").fetchone()[0] is None
    finally:
        con.close()
    loc = deltacells.connect(str(x))
    try:
        assert loc.execute("SELECT dc_vfs_fetch('main', 0, 100)").fetchone()[0] is None   # not read through dchttp
    finally:
        loc.close()


def _epoch(path, **kw):
    ds = deltacells.CellDataset(str(path), batch_size=800, shuffle=True, seed=3, output="csr", **kw)
    out = []
    for b in ds:
        x = b["X"]
        out.append((np.asarray(b["cell_id"]).copy(), x.crow_indices().numpy().copy(),
                    x.col_indices().numpy().copy(), x.values().numpy().copy()))
    return out


def test_an_epoch_over_a_wrong_map_equals_the_local_file(served, tmp_path, monkeypatch):
    """Every tile's map row names the pages of another tile (a map that no longer fits the file,
    its version left as it was): the fetch-ahead asks for the wrong blocks and the loader reads
    the right ones itself."""
    ng, x = served
    monkeypatch.setenv("DC_HTTP_BLOCK_KB", "16")
    want = _epoch(x)
    w = ng.root
    wrong = os.path.join(w, "f4.dcdb")
    con = sqlite3.connect(wrong)
    m = stored(wrong)
    ts = sorted(m)
    for t, u in zip(ts, ts[1:] + ts[:1]):   # (rows, not the schema: the version still matches)
        con.execute("UPDATE tiles_data_pages SET leaf = ?, first = ?, last = ?, pages = ? WHERE tile = ?", m[u] + (t,))
    con.commit()
    con.close()
    url = ng.url("f4.dcdb")
    c = deltacells.connect(url)
    assert _fetchahead.page_map(c) is not None           # used: it fits the file
    c.close()
    got = _epoch(url, prefetch_tiles=2)
    assert len(got) == len(want)
    for g, e in zip(got, want):
        for p, q in zip(g, e):
            assert np.array_equal(p, q)


@pytest.mark.parametrize("inflight", ["4", "0"])
def test_vfs_fetch_takes_a_tiles_bytes_not_its_edge_blocks_whole(served, monkeypatch, inflight):
    """Blocks of 64 KiB, four pages each, so that a tile's pages begin and end inside blocks whose
    other pages are the tiles before and after it: dc_vfs_fetch asks the store for the tile's own
    bytes (its whole blocks into the shared cache, the parts of its edge blocks into the parts),
    not for the edge blocks whole, which another process reading the neighbours would fetch again.
    Reading the tile then asks for nothing; reading its neighbours, whose pages in those blocks no
    part holds, asks and gets the right bytes (a part never stands in for its block)."""
    ng, x = served
    monkeypatch.setenv("DC_HTTP_BLOCK_KB", "64")
    monkeypatch.setenv("DC_HTTP_READAHEAD_KB", "64")
    monkeypatch.setenv("DC_HTTP_MAX_INFLIGHT", inflight)
    local = sqlite3.connect(x)
    con = deltacells.connect(ng.url("f7.dcdb" if inflight == "4" else "f8.dcdb"))
    try:
        pm = _fetchahead.page_map(con)
        bs = 64 << 10
        tiles = sorted(pm)
        assert _read_tile(con, tiles[0]) == _read_tile(local, tiles[0])     # the b-tree's upper pages
        # tiles whose pages begin and end inside blocks, far enough from tile 0 and each other
        # that no block of theirs came in before
        cand = [t for t in tiles[2:-1] if pm[t][3] and pm[t][2] % bs and (pm[t][2] + pm[t][3]) % bs]
        assert len(cand) >= 2, pm
        t = cand[len(cand) // 2]
        s0 = deltacells.vfs_stats(con)
        assert con.execute("SELECT dc_vfs_fetch('main', ?, ?, ?, ?)", pm[t]).fetchone()[0] > 0
        s1 = deltacells.vfs_stats(con)
        leaf, ps, lo, n = pm[t]
        own = n + (0 if lo <= leaf < lo + n else ps)
        blocks = {b for a, m in ((leaf, ps), (lo, n)) for b in range(a // bs, (a + m - 1) // bs + 1)}
        got = s1["bytes"] - s0["bytes"]
        assert s1["spans"] > s0["spans"]
        assert got <= own + ps and got < len(blocks) * bs, (got, own, len(blocks) * bs)
        assert con.execute("SELECT dc_vfs_fetch('main', ?, ?, ?, ?)", pm[t]).fetchone()[0] == 0   # all here
        n0 = _requests(con)
        assert _read_tile(con, t) == _read_tile(local, t)
        assert _requests(con) == n0
        assert deltacells.vfs_stats(con)["part_hits"] > s1["part_hits"]
        for u in (t - 1, t + 1):                                          # their pages in the edge blocks
            q = "SELECT data FROM tiles_data WHERE tile = ?"
            assert con.execute(q, (u,)).fetchone()[0] == local.execute(q, (u,)).fetchone()[0]
    finally:
        con.close()
        local.close()


def test_with_a_disk_cache_the_fetch_takes_whole_blocks(served, monkeypatch, tmp_path):
    """A disk cache keeps whole blocks across runs: there the fetch asks for whole blocks, as before."""
    ng, x = served
    monkeypatch.setenv("DC_HTTP_BLOCK_KB", "64")
    monkeypatch.setenv("DC_CACHE_DIR", str(tmp_path / "cache"))
    con = deltacells.connect(ng.url("f9.dcdb"))
    try:
        pm = _fetchahead.page_map(con)
        s0 = deltacells.vfs_stats(con)
        t = sorted(pm)[len(pm) // 2]
        assert con.execute("SELECT dc_vfs_fetch('main', ?, ?, ?, ?)", pm[t]).fetchone()[0] > 0
        s1 = deltacells.vfs_stats(con)
        assert s1["spans"] == s0["spans"] and (s1["bytes"] - s0["bytes"]) % (64 << 10) == 0
    finally:
        con.close()


def test_an_epoch_with_edge_parts_equals_the_local_file(served, monkeypatch):
    """The fetch-ahead over 64 KiB blocks (tiles' edges fetched as parts, the loader reading them
    and fetching its neighbours' pages itself): the same batches as the local file."""
    ng, x = served
    monkeypatch.setenv("DC_HTTP_BLOCK_KB", "64")
    monkeypatch.setenv("DC_HTTP_READAHEAD_KB", "64")     # (the file is small: opening it reads no tile ahead)
    want = _epoch(x)
    url = ng.url("f10.dcdb")
    s0 = deltacells.vfs_stats(deltacells.connect(url))
    got = _epoch(url, prefetch_tiles=2)
    c = deltacells.connect(url)
    s1 = deltacells.vfs_stats(c)
    c.close()
    assert s1["spans"] > s0["spans"]
    assert len(got) == len(want)
    for g, e in zip(got, want):
        for p, q in zip(g, e):
            assert np.array_equal(p, q)


def test_connect_asks_for_the_catalogue_at_once(served, monkeypatch, tmp_path):
    """Blocks of 16 KiB, one read ahead: opening a dataset and reading its genes, tile index and
    obs columns (what CellDataset reads before its first batch) costs a request per b-tree level
    as SQLite meets them; with the catalogue hint (dc_meta catalogue_pages) connect() asks for
    those pages at once, and the reads after it ask for nothing.  A file whose schema changed since
    the hint was written (a VACUUM) reads as without it."""
    ng, x = served
    monkeypatch.setenv("DC_HTTP_BLOCK_KB", "16")
    monkeypatch.setenv("DC_HTTP_READAHEAD_KB", "16")
    w = ng.root
    for name, edit in (("c2", "DELETE FROM dc_meta WHERE key = 'catalogue_pages'"), ("c3", "VACUUM")):
        shutil.copy(x, os.path.join(w, f"{name}.dcdb"))
        c = sqlite3.connect(os.path.join(w, f"{name}.dcdb"))
        c.execute(edit)
        c.commit()
        c.close()

    def open_and_read(name):
        """(the requests the open made, the requests the reads after it made)"""
        n0 = _requests(local)
        con = deltacells.connect(ng.url(f"{name}.dcdb"))
        try:
            n1 = _requests(con)
            con.execute("SELECT count(*), max(name) FROM genes").fetchone()
            con.execute("SELECT tile, first_cell, n_cells, nnz FROM tiles_data ORDER BY tile").fetchall()   # (Catalogue's)
            con.execute("SELECT col, name FROM cells_columns").fetchall()
            return n1 - n0, _requests(con) - n1
        finally:
            con.close()

    local = deltacells.connect(str(x))               # (the counters are the process's)
    s0 = deltacells.vfs_stats(local)["spans"]
    _, after = open_and_read("c1")
    assert after == 0 and deltacells.vfs_stats(local)["spans"] > s0
    _, after_none = open_and_read("c2")              # no hint: the reads ask
    assert after_none > 0
    _, after_vac = open_and_read("c3")               # a hint for another schema: not used
    assert after_vac > 0
    local.close()
