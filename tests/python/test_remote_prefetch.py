"""Prefetch in the dchttp VFS (ext/http_prefetch.c): background requests for the blocks ahead of a
sequential reader, at most max_inflight at once per open file.  Against nginx on 127.0.0.1
(skipped with the reason when it cannot start) and the fault-injecting server of _remote_util:
the same answers with prefetch on and off; requests really overlap (the throttle's latency) and
never more than max_inflight at once (the VFS's peak counter and nginx's connections); a server
error during prefetch gives the right answer after retries or a clear error; a file replaced on
the server under prefetch is an error; a forked child reads correctly; close does not wait for a
stalled server."""
import contextlib
import os
import shutil
import sqlite3
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _batch_util import assert_csr_equal, batch, ids_blob  # noqa: E402
from _python_data import gen  # noqa: E402
from _remote_util import alarm, fault_server, nginx_or_skip, settle, wait_child  # noqa: E402

import deltacells  # noqa: E402

TILES = "SELECT rowid, data FROM tiles_data ORDER BY rowid"


@pytest.fixture(autouse=True)
def time_limit():
    """Every test of this file fails after 240 s instead of hanging."""
    with alarm(240, "test_remote_prefetch"):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("prefetch")
    big = gen(d, 20000, 400, 8, 2000, ("--chunks", "8"))[1]   # the layout these tests were sized on
    www = d / "www"
    www.mkdir()
    shutil.copy(big, www / "big.dcdb")
    loc = sqlite3.connect(big)
    tiles = loc.execute(TILES).fetchall()
    loc.close()
    return {"dir": d, "www": www, "big": big, "tiles": tiles}


@pytest.fixture(scope="module")
def nginx(data):
    n = nginx_or_skip(data["www"], data["dir"] / "nginx")
    yield n
    n.stop()


@pytest.fixture()
def faults(tmp_path, data):
    with fault_server(tmp_path, data["big"], "big.dcdb") as s:
        yield s


@pytest.fixture(autouse=True)
def reset_counters_after(data):
    """The VFS's counters are process-wide: leave them at zero (the fault tests count errors) for
    the tests that run after these in the same process."""
    yield
    con = deltacells.connect(data["big"], remote={})
    try:
        reset(con)
    finally:
        con.close()


def stats(con):
    return deltacells.vfs_stats(con)


def reset(con):
    con.execute("SELECT dc_vfs_stats('reset')").fetchall()


# shared=0: every connection reads from the server, not from the blocks an earlier one left in
# the process's shared cache; 16 KiB blocks: a tile is many blocks
OPTS = {"block_kb": 16, "readahead_kb": 256, "shared": 0}


@contextlib.contextmanager
def fault_con(faults, **opts):
    """A connection to the fault server's big.dcdb (OPTS and opts), its counters reset; closed
    afterwards."""
    con = deltacells.connect(faults.url("big.dcdb"), remote=dict(OPTS, **opts))
    try:
        reset(con)
        yield con
    finally:
        con.close()


def test_tile_blobs_span_many_blocks(data):
    """(the other tests rely on it: a tile is a long sequential read of many blocks)"""
    sizes = [len(r[1]) for r in data["tiles"]]
    assert len(sizes) == 10 and min(sizes) > 8 * 16 * 1024, sizes


@pytest.mark.parametrize("mi", [0, 1, 2, 4, 8])
def test_same_answers_prefetch_on_and_off(nginx, data, mi):
    local = deltacells.connect(data["big"])
    remote = deltacells.connect(nginx.url("big.dcdb"), remote=dict(OPTS, max_inflight=mi))
    try:
        reset(remote)
        assert remote.execute(TILES).fetchall() == data["tiles"]
        s = stats(remote)
        if mi:
            assert s["prefetch_requests"] > 0 and s["prefetch_blocks_used"] > 0, s
            assert 1 <= s["prefetch_peak_inflight"] <= mi, s
        else:
            assert s["prefetch_requests"] == 0 and s["prefetch_peak_inflight"] == 0, s
        rng = np.random.default_rng(3)
        for ids in [np.arange(20000), rng.choice(20000, 999, replace=False)]:
            cl, ml, gl = batch(local, ids_blob(ids))
            cr, mr, gr = batch(remote, ids_blob(ids))
            assert gl == gr and np.array_equal(cl, cr)
            assert_csr_equal(mr, ml)
        q = "SELECT * FROM cells ORDER BY cell_id"
        assert remote.execute(q).fetchall() == local.execute(q).fetchall()
    finally:
        local.close()
        remote.close()


def test_readahead_off_means_prefetch_off(nginx, data):
    con = deltacells.connect(nginx.url("big.dcdb"), remote=dict(OPTS, readahead_kb=0, max_inflight=4))
    try:
        reset(con)
        assert con.execute(TILES).fetchall() == data["tiles"]
        assert stats(con)["prefetch_requests"] == 0
    finally:
        con.close()


def test_max_inflight_bounds_concurrent_requests(nginx, data):
    """With 40 ms per request the requests of the prefetch threads overlap: the VFS's peak of
    requests in flight reaches max_inflight and never passes it, and nginx sees at most
    max_inflight + 1 client connections (the threads' and the reading thread's own)."""
    for mi in (1, 2, 4):
        before = len(nginx.requests())
        con = deltacells.connect(nginx.url("big.dcdb"), remote=dict(OPTS, max_inflight=mi, latency_ms=40))
        try:
            reset(con)
            assert con.execute(TILES).fetchall() == data["tiles"]
            s = stats(con)
        finally:
            con.close()
        assert s["prefetch_peak_inflight"] == mi, (mi, s)
        conns = {ln.split()[0] for ln in nginx.requests()[before:]}
        assert 2 <= len(conns) <= mi + 1, (mi, conns)


def test_requests_overlap_on_a_throttled_local_file(data):
    """A throttled local file: without prefetch the read takes at least the sum of the requests'
    latencies; with 4 in flight, well under it (the same bytes)."""
    out = {}
    for mi in (0, 4):
        con = deltacells.connect(data["big"], remote=dict(OPTS, max_inflight=mi, latency_ms=30))
        try:
            reset(con)
            t = time.monotonic()
            rows = con.execute(TILES).fetchall()
            dt = time.monotonic() - t
            out[mi] = (rows, dt, stats(con))
        finally:
            con.close()
    assert out[0][0] == out[4][0] == data["tiles"]
    s0, s4 = out[0][2], out[4][2]
    assert out[0][1] >= 0.95 * 0.030 * s0["requests"], (out[0][1], s0)
    assert s4["prefetch_requests"] > 0 and s4["prefetch_peak_inflight"] == 4, s4
    assert out[4][1] < 0.6 * 0.030 * s4["requests"], (out[4][1], s4)


def fault_offsets(data, tiles):
    """Byte offsets inside the blobs of the given tiles (60% into each, on a 16 KiB block border),
    where a fault meets a sequential reader mid-tile.  A plain scan of the tiles reads each row's
    leaf page, past the end of the row's overflow chain, before the chain: the prefetcher must
    run ahead in every tile all the same (until 2026-12-05 it did so in every other tile of this
    file only), so the fault tests expect a prefetch request to meet the fault in each tile."""
    raw = open(data["big"], "rb").read()
    out = []
    for k in tiles:
        blob = data["tiles"][k][1]
        for o in range(int(len(blob) * 0.6), len(blob) - 64, 997):
            at = raw.find(blob[o:o + 64])
            if at >= 0:
                out.append((at // 16384 + 1) * 16384)
                break
    assert len(out) == len(tiles)
    return out


def mid_tile_faults(data):
    """fault_offsets of four tiles from the middle of the file on."""
    n = len(data["tiles"])
    return fault_offsets(data, range(n // 2, n // 2 + 4))


def test_transient_server_errors_under_prefetch(faults, data):
    """500s from the middle of a tile on (the first three such requests): the prefetch requests
    that meet them fail, the reader fetches those blocks itself with retries: the right bytes,
    wherever the fault starts."""
    got = []
    for fb in mid_tile_faults(data):
        with fault_con(faults, max_inflight=2, retries=4) as con:
            faults.count.clear()
            faults.faults["big.dcdb"] = {"from_byte": fb, "fail_first": 3, "status": 500}
            assert con.execute(TILES).fetchall() == data["tiles"]
            got.append(stats(con))
    assert all(s["prefetch_requests"] > s["prefetch_failed"] >= 1 for s in got), got


def test_persistent_server_error_under_prefetch_is_a_clear_error(faults, data):
    """500s from the middle of a tile on, for good: a clear error, soon, wherever the fault starts
    (and in each try a prefetch request has met it first)."""
    failed = []
    for fb in mid_tile_faults(data):
        # (the last round's fault off before connecting: connect() reads the catalogue's pages,
        # which lie past it)
        faults.faults.pop("big.dcdb", None)
        with fault_con(faults, max_inflight=4, retries=1) as con:
            faults.faults["big.dcdb"] = {"from_byte": fb, "status": 500}
            t = time.monotonic()
            with pytest.raises(sqlite3.Error, match="HTTP 500"):
                con.execute(TILES).fetchall()
            assert time.monotonic() - t < 60
            failed.append(stats(con)["prefetch_failed"])
    assert min(failed) >= 1, failed


def test_file_replaced_on_the_server_under_prefetch(faults, data):
    """The file changes between reads while prefetch threads fetch ahead: the threads' requests
    see the new version and fail (they check it like any request), the reader's own request
    then reports the change: an error, never rows of two versions.  Replaced after the first,
    second, ... tile: a prefetch request meets the change each time (fault_offsets)."""
    raw0 = open(data["big"], "rb").read()
    failed = []
    for k in range(1, 5):
        raw = bytearray(raw0)
        faults.replace("big.dcdb", bytes(raw))
        with fault_con(faults, max_inflight=4) as con:
            cur = con.execute(TILES)
            for i in range(k):
                assert cur.fetchone() == data["tiles"][i]
            raw[-1] ^= 0xFF                      # same size, new ETag and Last-Modified
            faults.replace("big.dcdb", bytes(raw))
            with pytest.raises(sqlite3.Error, match="changed on the server"):
                cur.fetchall()
            s = stats(con)
            assert s["prefetch_requests"] > 0, s
            failed.append(s["prefetch_failed"])
    assert min(failed) >= 1, failed


def test_prefetch_under_fork(nginx, data):
    """A connection whose prefetch threads are running is inherited by a forked child (as a
    DataLoader worker would, against the package's rule): the child starts its own threads and
    reads every tile right; the parent's connection keeps working."""
    con = deltacells.connect(nginx.url("big.dcdb"), remote=dict(OPTS, max_inflight=4, latency_ms=20))
    try:
        cur = con.execute(TILES)
        assert cur.fetchone() == data["tiles"][0]      # prefetch threads started, requests in flight
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                con.execute("SELECT dc_vfs_stats('reset')").fetchall()
                got = con.execute(TILES).fetchall()
                s = deltacells.vfs_stats(con)
                code = 0 if got == data["tiles"] else 2
                if code == 0 and s["prefetch_requests"] == 0:
                    code = 3
            finally:
                os._exit(code)
        status = wait_child(pid, 120)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert [data["tiles"][0]] + cur.fetchall() == data["tiles"]
        assert con.execute(TILES).fetchall() == data["tiles"]
    finally:
        con.close()


def test_close_does_not_wait_for_a_stalled_server(faults, data):
    """Prefetch requests stuck on a server that takes 30 s to send a body: closing the
    connection aborts them (it does not wait out the 60 s request timeout)."""
    raw = open(data["big"], "rb").read()
    t0 = data["tiles"][0][1]
    end0 = raw.find(t0[-64:]) + 64              # where tile 0's last overflow page ends
    assert end0 > 64
    con = deltacells.connect(faults.url("big.dcdb"), remote=dict(OPTS, max_inflight=4, timeout_ms=60000))
    try:
        # the table's b-tree pages (NOT INDEXED: the tile index's covering index would be read instead)
        con.execute("SELECT rowid, n_cells FROM tiles_data NOT INDEXED").fetchall()
        # every request from the block after tile 0's end on stalls (the reader of tile 0 needs none)
        faults.faults["big.dcdb"] = {"from_byte": -(-end0 // 16384) * 16384, "slow_s": 30}
        t = time.monotonic()
        assert con.execute("SELECT rowid, data FROM tiles_data WHERE rowid = 0").fetchall() == [data["tiles"][0]]
        assert time.monotonic() - t < 5
        # the threads ask past it
        settle(lambda: faults.count.get(("big.dcdb", "from"), 0) >= 1, faults.count)
    finally:
        t = time.monotonic()
        con.close()
        dt = time.monotonic() - t
    assert dt < 5, dt


@pytest.mark.parametrize("shared_mb", [8, 256])
def test_prefetched_blocks_are_fetched_once_whatever_the_shared_cache(nginx, data, shared_mb):
    """A reader reads prefetched blocks from the process's shared cache in place when that
    cache is roomy (256 slots); with a small one (8 slots here) they are kept in the file's
    memory too, since the prefetch threads' next blocks may evict them before the reader has
    read them all.  Either way every tile comes over the network about once, and the answers
    are right.  (A subprocess: the shared cache's size is read once per process.)"""
    import json
    from _python_data import PY, ROOT
    from _subproc import run_python
    url = nginx.url("big.dcdb")
    code = (
        "import json, deltacells\n"
        f"con = deltacells.connect({url!r}, remote={{'block_kb': 16, 'readahead_kb': 256, 'max_inflight': 4}})\n"
        "con.execute(\"SELECT dc_vfs_stats('reset')\").fetchall()\n"
        f"n = sum(len(b) for _, b in con.execute({TILES!r}))\n"
        "s = deltacells.vfs_stats(con)\n"
        "print(json.dumps({'n': n, 'bytes': s['bytes'], 'prefetch': s['prefetch_requests']}))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), DC_HTTP_SHARED_MB=str(shared_mb))
    rc, out = run_python([PY, "-c", code], env, 200, "a remote read")
    assert rc == 0, out
    r = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    assert r["n"] == sum(len(b) for _, b in data["tiles"])
    assert r["prefetch"] > 0, r
    assert r["bytes"] <= 1.15 * r["n"] + (1 << 20), r     # each tile about once (plus pages around)
