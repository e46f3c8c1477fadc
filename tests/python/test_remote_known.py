"""An open of a remote dataset asks the server for its first block, which gives the version (ETag,
Last-Modified, size).  A process that confirmed that version moments ago (another connection, or
the process a DataLoader worker was forked from) already holds the block in its shared block
cache: the open takes the version without a request when the last confirmation is at most
`revalidate_s` seconds old (default 30; 0: every open asks).  Reads stay checked as for any open:
a request that finds another version is an error naming the change, and the next open asks again.

Against the fault server of _remote_util (one per test, so no test sees another's versions): it
counts the requests per file, those of a forked child included."""
import os
import sqlite3
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import gen  # noqa: E402
from _remote_util import alarm, fault_server, reset_vfs_counters, wait_child  # noqa: E402

import deltacells  # noqa: E402

Q = "SELECT * FROM cells ORDER BY cell_id"
NAME = "small.dcdb"


@pytest.fixture(autouse=True)
def time_limit():
    with alarm(120, "test_remote_known"):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("known")
    small = gen(d, 3000, 200, 7, 500)[1]
    big = gen(d, 20000, 400, 8, 2000)[1]
    local = deltacells.connect(small)
    try:
        rows = local.execute(Q).fetchall()
    finally:
        local.close()
    return {"small": small, "big": big, "rows": rows}


@pytest.fixture(scope="module", autouse=True)
def reset_counters(data):
    """The VFS's counters are the process's: this file's refused reads count as errors, which
    other test files run after it in one process check; zero them when it is done."""
    yield
    reset_vfs_counters(data["small"])


@pytest.fixture()
def server(tmp_path, data):
    with fault_server(tmp_path, data["small"], NAME) as s:
        yield s


def asked(server):
    return server.count.get(NAME, 0)


def opened_known(con):
    return deltacells.vfs_stats(con)["opens_known"]


def test_a_second_open_soon_after_asks_nothing_and_reads_the_same(server, data):
    url = server.url(NAME)
    a = deltacells.connect(url)
    try:
        assert a.execute(Q).fetchall() == data["rows"]
        n, k = asked(server), opened_known(a)
        b = deltacells.connect(url)
        try:
            assert asked(server) == n                  # the open made no request
            assert opened_known(b) == k + 1
            assert b.execute(Q).fetchall() == data["rows"]
        finally:
            b.close()
    finally:
        a.close()
    # with revalidate_s=0 an open always asks (its first block: one request)
    n = asked(server)
    c = deltacells.connect(url, remote={"revalidate_s": 0})
    try:
        assert asked(server) == n + 1
        assert c.execute(Q).fetchall() == data["rows"]
    finally:
        c.close()


def test_a_confirmation_older_than_revalidate_s_is_asked_again(server, data):
    url = server.url(NAME)
    a = deltacells.connect(url)
    a.execute(Q).fetchall()
    a.close()
    n = asked(server)
    b = deltacells.connect(url, remote={"revalidate_s": 0.5})   # confirmed just now: taken
    b.close()
    assert asked(server) == n
    time.sleep(0.7)
    c = deltacells.connect(url, remote={"revalidate_s": 0.5})   # older than 0.5 s: asked
    try:
        assert asked(server) == n + 1
        assert c.execute(Q).fetchall() == data["rows"]
    finally:
        c.close()
    # that request confirmed the version again: the next open within the window takes it
    d = deltacells.connect(url, remote={"revalidate_s": 0.5})
    d.close()
    assert asked(server) == n + 1


def test_a_forked_child_opens_what_its_parent_confirmed_without_a_request(server, data):
    """A DataLoader worker forked from a process that opened the dataset: its open asks nothing,
    its reads give the same rows (blocks the parent read come from the inherited cache)."""
    url = server.url(NAME)
    a = deltacells.connect(url)
    try:
        assert a.execute(Q).fetchall() == data["rows"]
        n = asked(server)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                b = deltacells.connect(url)
                code = 2 if asked(server) != n else 3 if b.execute(Q).fetchall() != data["rows"] else 0
                if code == 0 and opened_known(b) < 1:
                    code = 4
                b.close()
            finally:
                os._exit(code)
        status = wait_child(pid, 60)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert asked(server) == n                       # the child's open and reads: no request
    finally:
        a.close()


def test_a_file_replaced_after_the_confirmation_is_an_error_then_read_anew(server, data):
    """The file replaced on the server after another connection confirmed it: an open within the
    window takes the old version, and its first request finds the new one: an error naming the
    change (never rows of two versions).  The open after it asks the server and reads the new file."""
    url = server.url(NAME)
    opts = {"block_kb": 4, "mem_blocks": 2}
    a = deltacells.connect(url, remote=opts)
    try:
        assert a.execute("SELECT count(*) FROM genes").fetchone()[0] == 200
    finally:
        a.close()
    server.replace(NAME, open(data["big"], "rb").read())
    n = asked(server)
    b = deltacells.connect(url, remote=opts)
    try:
        assert asked(server) == n                      # taken without a request
        with pytest.raises(sqlite3.DatabaseError) as e:
            b.execute(Q).fetchall()                    # blocks a did not read: asked, and refused
        assert "changed on the server" in str(e.value) and url in str(e.value)
    finally:
        b.close()
    k = None
    c = deltacells.connect(url, remote=opts)
    try:
        k = opened_known(c)
        assert c.execute("SELECT count(*) FROM cells").fetchone()[0] == 20000
    finally:
        c.close()
    d = deltacells.connect(url, remote=opts)          # the new version, confirmed by c's open
    try:
        assert opened_known(d) == k + 1
        assert d.execute("SELECT count(*) FROM cells").fetchone()[0] == 20000
    finally:
        d.close()


def test_an_open_with_shared_0_or_a_server_without_validators_always_asks(server, data):
    url = server.url(NAME)
    a = deltacells.connect(url)
    a.close()
    n = asked(server)
    b = deltacells.connect(url, remote={"shared": 0})    # keeps out of the shared cache: asks
    b.close()
    assert asked(server) == n + 1
    other = "plain.dcdb"                                   # served without ETag and Last-Modified
    server.faults[other] = {"no_validators": True}
    server.replace(other, open(data["small"], "rb").read())
    c = deltacells.connect(server.url(other))              # asks, and records nothing
    c.execute(Q).fetchall()
    c.close()
    n = server.count[other]
    d = deltacells.connect(server.url(other))
    try:
        assert server.count[other] == n + 1
        assert d.execute(Q).fetchall() == data["rows"]
    finally:
        d.close()


def test_revalidate_s_must_be_a_number(server):
    with pytest.raises(sqlite3.OperationalError, match="revalidate_s='soon'"):
        deltacells.connect(server.url(NAME), remote={"revalidate_s": "soon"})
