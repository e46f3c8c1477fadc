"""Remote datasets through the dchttp VFS (ext/vfs_http.c), against a real nginx on 127.0.0.1
(a free port, a temporary root; skipped with the reason when nginx cannot start) and a small
fault-injecting HTTP server: remote == local (obs queries, dc_batch, a CellDataset epoch, under
fork), range edges, faults (404, 500s, resets mid-body, a slow server, a file replaced on the
server), the on-disk cache (a second run reads from it, the budget holds), only the bytes of the
columns read, the throttle, and the sqlite3 shell's ATTACH form."""
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _batch_util import EXTENSION, ROOT, assert_csr_equal, batch, convert, ids_blob, real_file  # noqa: E402
from _python_data import gen  # noqa: E402
from _remote_util import alarm, fault_server, nginx_or_skip, wait_child  # noqa: E402

import deltacells  # noqa: E402



@pytest.fixture(autouse=True)
def time_limit():
    """Every test of this file fails after 240 s instead of hanging."""
    with alarm(240, "test_remote"):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("remote")
    small = gen(d, 3000, 200, 7, 500)[1]
    big = gen(d, 20000, 400, 8, 2000)[1]
    www = d / "www"
    www.mkdir()
    shutil.copy(small, www / "small.dcdb")
    shutil.copy(big, www / "big.dcdb")
    return {"dir": d, "www": www, "small": small, "big": big}


@pytest.fixture(scope="module")
def nginx(data):
    n = nginx_or_skip(data["www"], data["dir"] / "nginx")
    yield n
    n.stop()


@pytest.fixture()
def faults(tmp_path, data):
    with fault_server(tmp_path, data["small"], "small.dcdb") as s:
        yield s


def stats(con):
    return deltacells.vfs_stats(con)


def reset(con):
    con.execute("SELECT dc_vfs_stats('reset')").fetchall()


OBS_QUERIES = [
    "SELECT count(*) FROM cells",
    "SELECT * FROM cells ORDER BY cell_id",
    "SELECT cell_type, count(*), avg(n_counts) FROM cells GROUP BY cell_type ORDER BY 1",
    "SELECT cell_id, donor, percent_mt FROM cells WHERE age > 40 AND is_doublet = 0 ORDER BY cell_id",
    "SELECT * FROM genes ORDER BY gene_id",
    "SELECT * FROM tiles ORDER BY 1",
]


@pytest.mark.parametrize("block_kb", [4, 12, 1024])
def test_obs_queries_remote_equal_local(nginx, data, block_kb):
    local = deltacells.connect(data["small"])
    remote = deltacells.connect(nginx.url("small.dcdb"), remote={"block_kb": block_kb})
    try:
        for q in OBS_QUERIES:
            assert remote.execute(q).fetchall() == local.execute(q).fetchall(), q
        s = stats(remote)
        assert s["requests"] >= 1 and s["errors"] == 0
    finally:
        local.close()
        remote.close()


def test_range_edges_every_blob(nginx, data):
    """Every tile blob and obs block read through blocks of a size the file's is not a multiple of
    (the last block is short; many blobs cross block borders) equals the local bytes."""
    size = os.path.getsize(data["small"])
    kb = next(k for k in (12, 20, 28, 36, 44) if size % (k << 10))
    local = sqlite3.connect(data["small"])
    remote = deltacells.connect(nginx.url("small.dcdb"), remote={"block_kb": kb, "mem_blocks": 2})
    try:
        for q in ["SELECT rowid, data FROM tiles_data ORDER BY rowid",
                  "SELECT id, present, data FROM cells_blocks ORDER BY id DESC"]:
            assert remote.execute(q).fetchall() == local.execute(q).fetchall()
        # the last page of the file, through the pager
        n_pages = remote.execute("PRAGMA page_count").fetchone()[0]
        assert n_pages * remote.execute("PRAGMA page_size").fetchone()[0] == size
        assert remote.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        local.close()
        remote.close()


def test_dc_batch_remote_equal_local(nginx, data):
    local = deltacells.connect(data["big"])
    remote = deltacells.connect(nginx.url("big.dcdb"), remote={"block_kb": 256})
    try:
        rng = np.random.default_rng(1)
        for ids in [np.arange(20000), rng.choice(20000, 777, replace=False), np.array([19999, 0, 5])]:
            cl, ml, gl = batch(local, ids_blob(ids))
            cr, mr, gr = batch(remote, ids_blob(ids))
            assert gl == gr and np.array_equal(cl, cr)
            assert_csr_equal(mr, ml)
    finally:
        local.close()
        remote.close()


def test_dc_batch_real_file(nginx, data):
    h5 = real_file("fhil_pbmc3k.h5ad")
    db = data["dir"] / "pbmc3k.dcdb"
    if not db.exists():
        convert(h5, db)
    shutil.copy(db, data["www"] / "pbmc3k.dcdb")
    local = deltacells.connect(db)
    remote = deltacells.connect(nginx.url("pbmc3k.dcdb"))
    try:
        n = local.execute("SELECT count(*) FROM cells").fetchone()[0]
        ids = ids_blob(np.random.default_rng(2).permutation(n))
        cl, ml, _ = batch(local, ids)
        cr, mr, _ = batch(remote, ids)
        assert np.array_equal(cl, cr)
        assert_csr_equal(mr, ml)
        q = "SELECT * FROM cells ORDER BY cell_id"
        assert remote.execute(q).fetchall() == local.execute(q).fetchall()
    finally:
        local.close()
        remote.close()


def _epoch(path, workers):
    import torch
    from torch.utils.data import DataLoader
    ds = deltacells.CellDataset(path, batch_size=700, shuffle=True, seed=5, obs=["cell_type", "n_counts"])
    out = []
    for b in DataLoader(ds, batch_size=None, num_workers=workers, timeout=120 if workers else 0):
        X = b["X"]
        X = X.to_dense() if X.layout != torch.strided else X
        out.append((np.asarray(b["cell_id"]), X.numpy(), np.asarray(b["n_counts"])))
    return sorted(out, key=lambda t: int(t[0][0]))


@pytest.mark.parametrize("workers", [0, 2])
def test_celldataset_epoch_remote_equal_local(nginx, data, workers):
    """A CellDataset epoch over the URL equals the local one; with 2 forked DataLoader workers
    each worker opens its own connection (and curl handle) after the fork."""
    pytest.importorskip("torch")
    # the parent reads first, so its connection and curl handle exist before the fork
    deltacells.connect(nginx.url("small.dcdb")).execute("SELECT count(*) FROM cells").fetchall()
    loc, rem = _epoch(data["small"], workers), _epoch(nginx.url("small.dcdb"), workers)
    assert len(loc) == len(rem) and sum(len(t[0]) for t in rem) == 3000
    for a, b in zip(loc, rem):
        for x, y in zip(a, b):
            assert np.array_equal(x, y)


# --- faults ----------------------------------------------------------------------------------
def test_404_names_url_and_status(faults):
    url = faults.url("missing.dcdb")
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect(url)
    assert url in str(e.value) and "HTTP 404" in str(e.value)


def test_500_then_success(faults, data):
    faults.faults["small.dcdb"] = {"status": 500, "fail_first": 2}
    con = deltacells.connect(faults.url("small.dcdb"), remote={"retries": 3})
    try:
        reset(con)
        local = deltacells.connect(data["small"])
        q = "SELECT * FROM cells ORDER BY cell_id"
        assert con.execute(q).fetchall() == local.execute(q).fetchall()
        local.close()
    finally:
        con.close()
    assert faults.count["small.dcdb"] >= 3


def test_500_every_time_is_a_clear_error(faults):
    faults.faults["small.dcdb"] = {"status": 500}
    t = time.monotonic()
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect(faults.url("small.dcdb"), remote={"retries": 2})
    assert "HTTP 500" in str(e.value) and "3 attempts" in str(e.value) and faults.url("small.dcdb") in str(e.value)
    assert faults.count["small.dcdb"] == 3
    assert time.monotonic() - t < 30


def test_reset_mid_body_is_retried(faults, data):
    faults.faults["small.dcdb"] = {"reset_first": 3}
    con = deltacells.connect(faults.url("small.dcdb"), remote={"block_kb": 64, "retries": 4})
    local = deltacells.connect(data["small"])
    try:
        for q in OBS_QUERIES:
            assert con.execute(q).fetchall() == local.execute(q).fetchall()
        assert stats(con)["retries"] >= 3
    finally:
        con.close()
        local.close()


def test_slow_server_times_out_with_a_clear_error(faults):
    faults.faults["small.dcdb"] = {"slow_s": 3}
    t = time.monotonic()
    with pytest.raises(sqlite3.OperationalError) as e:
        deltacells.connect(faults.url("small.dcdb"), remote={"timeout_ms": 400, "retries": 1})
    assert "Timeout" in str(e.value) or "timed out" in str(e.value), str(e.value)
    assert time.monotonic() - t < 10


def test_file_replaced_between_reads(faults, data, tmp_path):
    """A file replaced on the server after the open: the next read that goes to the server is an
    error naming the change (never a mix of two versions); a fresh connection reads the new one."""
    url = faults.url("small.dcdb")
    con = deltacells.connect(url, remote={"block_kb": 4, "mem_blocks": 2})
    try:
        n = con.execute("SELECT count(*) FROM genes").fetchone()[0]
        faults.replace("small.dcdb", open(data["big"], "rb").read())
        with pytest.raises(sqlite3.DatabaseError) as e:
            con.execute("SELECT * FROM cells ORDER BY cell_id").fetchall()
        assert "changed on the server" in str(e.value) and url in str(e.value)
        # dc_batch's message carries the reason too
        with pytest.raises(sqlite3.DatabaseError) as e:
            batch(con, ids_blob(np.arange(3000)))
        assert "changed on the server" in str(e.value)
    finally:
        con.close()
    con = deltacells.connect(url)
    try:
        assert con.execute("SELECT count(*) FROM cells").fetchone()[0] == 20000
        assert n == 200
    finally:
        con.close()


def test_a_server_without_validators_is_not_cached_across_opens(faults, data, tmp_path):
    """A server that sends neither ETag nor Last-Modified cannot tell a replaced file of the
    same size from the old one: its blocks went to the disk cache and the process's shared
    cache, and every later open read the old blocks (then failed on checksums, as a corrupt
    dataset).  They are kept for the connection only."""
    import shutil as sh
    other = tmp_path / "other.dcdb"      # the same input converted again: same size, new dataset_id
    sh.copy(data["small"], other)
    c = sqlite3.connect(other)
    c.execute("UPDATE dc_meta SET value = 'nope' WHERE key = 'created_by'")
    c.commit()
    c.close()
    faults.faults["small.dcdb"] = {"no_validators": True}
    url = faults.url("small.dcdb")
    opts = {"cache_dir": str(tmp_path / "cache"), "block_kb": 64}
    con = deltacells.connect(url, remote=opts)
    try:
        first = con.execute("SELECT value FROM dc_meta WHERE key = 'created_by'").fetchone()
        con.execute("SELECT * FROM cells").fetchall()
        assert stats(con)["disk_writes"] == 0
    finally:
        con.close()
    assert os.path.getsize(other) == os.path.getsize(data["small"])
    faults.replace("small.dcdb", other.read_bytes())
    con = deltacells.connect(url, remote=opts)
    try:
        assert con.execute("SELECT value FROM dc_meta WHERE key = 'created_by'").fetchone() == ("nope",) != first
        assert len(con.execute("SELECT * FROM cells").fetchall()) == 3000
    finally:
        con.close()


# --- the on-disk cache ----------------------------------------------------------------------
def test_second_run_reads_from_the_cache(nginx, data, tmp_path):
    cache = tmp_path / "cache"
    opts = {"cache_dir": str(cache), "block_kb": 64}
    q = "SELECT * FROM cells ORDER BY cell_id"
    con = deltacells.connect(nginx.url("small.dcdb"), remote=opts)
    reset(con)
    first = con.execute(q).fetchall()
    s1 = stats(con)
    con.close()
    assert s1["requests"] > 0 and s1["disk_writes"] > 0
    before = len(nginx.requests())
    # the second run: another process (nothing in memory)
    code = ("import deltacells, json, sys\n"
            f"con = deltacells.connect({nginx.url('small.dcdb')!r}, remote={opts!r})\n"
            "con.execute(\"SELECT dc_vfs_stats('reset')\").fetchall()\n"
            f"rows = con.execute({q!r}).fetchall()\n"
            "print(json.dumps([deltacells.vfs_stats(con), [list(r) for r in rows]]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    assert r.returncode == 0, r.stderr
    import json
    s2, rows = json.loads(r.stdout)
    assert [tuple(x) for x in rows] == first
    # the open's one request (it checks the version) and nothing else
    assert s2["requests"] == 0 and s2["disk_hits"] >= s1["requests"] - 1
    assert len(nginx.requests()) - before == 1


def test_cache_budget_is_respected(nginx, data, tmp_path):
    cache = tmp_path / "cache"
    budget = 0.25   # MiB
    con = deltacells.connect(nginx.url("big.dcdb"), remote={"cache_dir": str(cache), "cache_mb": budget,
                                                            "block_kb": 16, "mem_blocks": 4})
    try:
        reset(con)
        con.execute("SELECT data FROM tiles_data").fetchall()
        s = stats(con)
    finally:
        con.close()
    used = sum(f.stat().st_size for f in cache.iterdir() if f.name.endswith(".blk"))
    assert os.path.getsize(data["big"]) > 4 * budget * (1 << 20)
    assert s["evictions"] > 0 and 0 < used <= budget * (1 << 20)


def test_connections_of_a_process_share_blocks(nginx, data):
    """A second connection of the same process to the same file version reads the blocks the
    first fetched from the shared in-memory cache, not the server."""
    q = "SELECT data FROM tiles_data ORDER BY rowid"
    a = deltacells.connect(nginx.url("small.dcdb"), remote={"block_kb": 64})
    b = None
    try:
        want = a.execute(q).fetchall()
        b = deltacells.connect(nginx.url("small.dcdb"), remote={"block_kb": 64})
        reset(b)
        assert b.execute(q).fetchall() == want
        s = stats(b)
        assert s["requests"] == 0 and s["shared_hits"] > 0, s
    finally:
        a.close()
        if b is not None:
            b.close()


def test_sequential_read_ahead(nginx, data):
    """Reading the tiles (long overflow chains) with 64 KiB blocks: read-ahead makes far fewer
    requests than one per block, and the bytes are the same as without it."""
    q = "SELECT rowid, data FROM tiles_data ORDER BY rowid"
    out = {}
    for ra in (0, 4096):
        con = deltacells.connect(nginx.url("big.dcdb"), remote={"block_kb": 64, "readahead_kb": ra,
                                                                "shared": 0})
        try:
            reset(con)
            rows = con.execute(q).fetchall()
            out[ra] = (rows, stats(con)["requests"])
        finally:
            con.close()
    assert out[0][0] == out[4096][0]
    tile_blocks = sum(len(r[1]) for r in out[0][0]) / (64 << 10)
    assert out[0][1] >= tile_blocks * 0.9, (out[0][1], tile_blocks)
    assert out[4096][1] * 2 <= out[0][1], (out[4096][1], out[0][1])


def test_three_obs_columns_fetch_only_their_bytes(nginx, data):
    """Reading three obs columns fetches those columns' bytes plus a few metadata pages (schema,
    the blocks' b-tree, the tile index): not the other columns' data, nor the expression tiles."""
    local = sqlite3.connect(data["big"])
    cols = ["cell_type", "age", "percent_mt"]
    q = ("SELECT sum(length(data) + ifnull(length(present), 0)) FROM cells_blocks b JOIN cells_columns c "
         "ON b.col = c.col WHERE c.name {} (?, ?, ?)")
    col_bytes = local.execute(q.format("IN"), cols).fetchone()[0]
    other_bytes = local.execute(q.format("NOT IN"), cols).fetchone()[0]
    page = local.execute("PRAGMA page_size").fetchone()[0]
    size = os.path.getsize(data["big"])
    local.close()

    def fetched(sql):
        # 4 KiB blocks and no sequential read-ahead: reads at the precision of the pages
        con = deltacells.connect(nginx.url("big.dcdb"), remote={"block_kb": 4, "readahead_kb": 0,
                                                                       "shared": 0})
        try:
            con.execute("SELECT count(*) FROM genes").fetchall()     # schema and dc_meta read
            reset(con)
            rows = con.execute(sql).fetchall()
            return len(rows), stats(con)["bytes"]
        finally:
            con.close()
    n3, b3 = fetched(f"SELECT {', '.join(cols)} FROM cells")
    n_all, b_all = fetched("SELECT * FROM cells")
    assert n3 == n_all == 20000
    assert b3 <= col_bytes + 12 * page, (b3, col_bytes, page)
    assert b_all - b3 >= other_bytes / 2, (b_all, b3, other_bytes)
    assert b3 < size / 4, (b3, size)


# --- the throttle -----------------------------------------------------------------------------
def test_throttle_local_file(data):
    """latency_ms and mbps on a local file: each block read waits latency + bytes / bandwidth
    (one request at a time: max_inflight=0; test_remote_prefetch.py overlaps them)."""
    con = deltacells.connect(data["small"], remote={"latency_ms": 20, "mbps": 1, "block_kb": 64,
                                                    "max_inflight": 0})
    try:
        reset(con)
        t = time.monotonic()
        con.execute("SELECT data FROM tiles_data").fetchall()
        dt = time.monotonic() - t
        s = stats(con)
    finally:
        con.close()
    want = s["requests"] * 0.020 + s["bytes"] / 1e6
    assert s["requests"] > 0 and dt >= 0.95 * want and s["throttle_s"] > 0


def test_dchttp_is_read_only(data, tmp_path):
    p = tmp_path / "copy.dcdb"
    shutil.copy(data["small"], p)
    con = deltacells.connect(p, remote={})
    try:
        with pytest.raises(sqlite3.OperationalError):
            con.execute("CREATE TABLE t(x)")
    finally:
        con.close()
    with pytest.raises(ValueError, match="read-only"):
        deltacells.connect("http://127.0.0.1:1/x.dcdb", readonly=False)
    with pytest.raises(ValueError, match="unknown remote parameter"):
        deltacells.connect(p, remote={"bogus": 1})


def test_sqlite3_shell_attach(nginx):
    shell = shutil.which("sqlite3")
    if not shell:
        pytest.skip("the sqlite3 shell is not installed")
    sql = (f".load {EXTENSION}\n"
           f"ATTACH 'file:{nginx.url('small.dcdb')}?vfs=dchttp' AS r;\n"
           "SELECT count(*) FROM r.cells;\nSELECT count(*) FROM r.genes;\n")
    r = subprocess.run([shell, ":memory:"], input=sql, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3000", "200"]


def test_curl_handle_not_used_across_fork(nginx, data):
    """The VFS detects a fork: a child that (against the package's rule) reads through a connection
    its parent opened makes its own curl handle and connection (the server sees a second client
    connection), and the parent's keeps working afterwards."""
    url = nginx.url("small.dcdb")
    local = deltacells.connect(data["small"])
    want = local.execute("SELECT * FROM cells ORDER BY cell_id").fetchall()
    local.close()
    # shared=0: the child's reads cannot come from the process's shared cache (earlier tests of
    # this file read the same blocks), so it must make requests; max_inflight=0: no prefetch
    # thread runs at the fork (this test is about the handle; test_remote_prefetch.py forks with
    # requests in flight), since under ASan a fork with other threads running can deadlock the
    # child in ASan's allocator (_subproc.py): the ASan run once hung here for 120 s
    con = deltacells.connect(url, remote={"block_kb": 4, "mem_blocks": 1, "shared": 0, "max_inflight": 0})
    con.execute("SELECT count(*) FROM genes").fetchall()
    before = nginx.requests()
    parent_conn = before[-1].split()[0]
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            got = con.execute("SELECT * FROM cells ORDER BY cell_id").fetchall()
            code = 0 if got == want else 2
        finally:
            os._exit(code)
    status = wait_child(pid, 120)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    child = [ln.split()[0] for ln in nginx.requests()[len(before):]]
    # (nginx may log the parent's own last request after `before` was read: at most one line)
    assert any(c != parent_conn for c in child) and child.count(parent_conn) <= 1, (parent_conn, child)
    try:
        assert con.execute("SELECT * FROM cells ORDER BY cell_id").fetchall() == want
    finally:
        con.close()


def test_aggregate_remote_equal_local(nginx, data):
    """deltacells.aggregate over a URL (its connection cache keys a URL by name) equals the local."""
    pytest.importorskip("pandas")
    loc = deltacells.aggregate(data["small"], by="cell_type")
    rem = deltacells.aggregate(nginx.url("small.dcdb"), by="cell_type")
    assert list(loc.columns) == list(rem.columns) and len(loc) == len(rem) > 0
    assert loc.reset_index(drop=True).equals(rem.reset_index(drop=True))


def test_a_damaged_cache_block_is_fetched_again(nginx, data, tmp_path):
    """A block file of the on-disk cache that was damaged (a flipped byte), cut short, or swapped
    with another block's file is a miss: deleted, fetched again, never read as data."""
    cache = tmp_path / "cache"
    opts = {"cache_dir": str(cache), "block_kb": 16}
    q = "SELECT * FROM cells ORDER BY cell_id"
    con = deltacells.connect(nginx.url("small.dcdb"), remote=opts)
    first = con.execute(q).fetchall()
    tiles = con.execute("SELECT tile, nnz FROM tiles ORDER BY tile").fetchall()
    con.close()
    blocks = sorted(cache.glob("*.blk"))
    assert len(blocks) >= 6
    raw = [b.read_bytes() for b in blocks]
    for b in blocks[0::3]:                      # a flipped byte in the block's data
        d = bytearray(b.read_bytes())
        d[len(d) // 3] ^= 0x40
        b.write_bytes(bytes(d))
    for b in blocks[1::3]:                      # cut short by 8 bytes: the data without its check
        b.write_bytes(b.read_bytes()[:-8])
    blocks[2].write_bytes(raw[5])               # another block's file under this one's name
    code = ("import deltacells, json\n"
            f"con = deltacells.connect({nginx.url('small.dcdb')!r}, remote={opts!r})\n"
            "con.execute(\"SELECT dc_vfs_stats('reset')\").fetchall()\n"
            f"rows = con.execute({q!r}).fetchall()\n"
            "tiles = con.execute('SELECT tile, nnz FROM tiles ORDER BY tile').fetchall()\n"
            "print(json.dumps([deltacells.vfs_stats(con), [list(r) for r in rows], tiles]))\n")
    import json

    def run():
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
        assert r.returncode == 0, r.stderr
        st, rows, tl = json.loads(r.stdout)
        assert [tuple(x) for x in rows] == first and [tuple(x) for x in tl] == tiles
        return st

    s = run()
    assert 3 <= s["disk_bad"] <= len(blocks[0::3]) + len(blocks[1::3]) + 1
    assert s["requests"] >= s["disk_bad"] > 0
    s = run()                                   # fetched again, and whole in the cache again
    assert s["disk_bad"] == 0 and s["requests"] <= 1


@pytest.mark.parametrize("opts,words", [
    ({"block_kb": 3}, "block_kb='3': an integer from 4 to 65536"),
    ({"block_kb": "1k"}, "block_kb='1k': an integer"),
    ({"max_inflight": -1}, "max_inflight='-1': an integer from 0 to 64"),
    ({"mem_blocks": 0}, "mem_blocks='0'"),
    ({"latency_ms": "x"}, "latency_ms='x': a number"),
    ({"mbps": -5}, "mbps='-5': a number from 0"),
    ({"cache_mb": 0, "cache_dir": "CACHE"}, "cache_mb='0'"),
    ({"shared": 2}, "shared='2': an integer from 0 to 1"),
    ({"retries": -1}, "retries='-1'"),
])
def test_remote_parameters_out_of_range_are_errors(nginx, data, tmp_path, opts, words):
    """A parameter out of its range or not a number fails the open, naming it (it used to be
    clamped or read as 0 without a word)."""
    opts = {k: (str(tmp_path / "c") if v == "CACHE" else v) for k, v in opts.items()}
    with pytest.raises(sqlite3.OperationalError, match=words.replace("(", r"\(")):
        deltacells.connect(nginx.url("small.dcdb"), remote=opts).execute("SELECT 1 FROM cells").fetchall()
    with pytest.raises(sqlite3.OperationalError, match="latency_ms='x'"):   # a throttled local file
        deltacells.connect(str(data["small"]), remote={"latency_ms": "x"}).execute("SELECT 1").fetchall()


def test_cache_dir_is_made_or_must_be_a_directory(nginx, data, tmp_path, monkeypatch):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(sqlite3.OperationalError, match="cache directory .*a_file: not a directory"):
        deltacells.connect(nginx.url("small.dcdb"), remote={"cache_dir": str(f)}).execute("SELECT 1").fetchall()
    nested = tmp_path / "new" / "nested"
    con = deltacells.connect(nginx.url("small.dcdb"), remote={"cache_dir": str(nested)})
    assert con.execute("SELECT count(*) FROM cells").fetchone()[0] > 0
    con.close()
    assert nested.is_dir() and any(nested.glob("*.blk"))
    monkeypatch.setenv("DC_HTTP_BLOCK_KB", "abc")
    with pytest.raises(sqlite3.OperationalError, match="environment variable DC_HTTP_BLOCK_KB='abc'"):
        deltacells.connect(nginx.url("small.dcdb")).execute("SELECT 1").fetchall()
    monkeypatch.delenv("DC_HTTP_BLOCK_KB")
    # the shared block cache's size: it was read with strtoll, so '256MB' or 'lots' silently
    # turned the cache off (or made it 256 MiB)
    for bad in ("lots", "256MB", "-1"):
        monkeypatch.setenv("DC_HTTP_SHARED_MB", bad)
        with pytest.raises(sqlite3.OperationalError, match=f"environment variable DC_HTTP_SHARED_MB='{bad}'"):
            deltacells.connect(nginx.url("small.dcdb")).execute("SELECT 1").fetchall()
