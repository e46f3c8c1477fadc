"""The loaders read a local dataset through a memory map (CellDataset/CellMapDataset(mmap=True),
the default; deltacells.connect(mmap=True)): PRAGMA mmap_size on their readers' connections, in
the process and its prefetch thread, not in DataLoader workers; mmap=False reads as before; the batches
are the same either way; a spare connection serves only a reader of the same setting; URLs (the
dchttp VFS) ignore it; a file changed between statements is still an error, not a crash."""
import os
import shutil
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT, gen  # noqa: E402
from _subproc import run_python  # noqa: E402

import deltacells  # noqa: E402
from deltacells import _core  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=str(ROOT / "python"))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    # 1,200 cells in 4 tiles, 250 genes
    return str(gen(tmp_path_factory.mktemp("py_mmap"), 1200, 250, 5, 300)[1])


def mapped(con):
    row = con.execute("PRAGMA mmap_size").fetchone()
    return 0 if row is None else row[0]           # no row: a VFS that cannot map


def cap():
    """This SQLite's largest mmap_size (its build's SQLITE_MAX_MMAP_SIZE), asked of a plain
    file database of its own."""
    import sqlite3
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        con = sqlite3.connect(os.path.join(d, "x.db"))
        try:
            return con.execute(f"PRAGMA mmap_size = {deltacells._connect.MMAP_BYTES}").fetchone()[0]
        finally:
            con.close()


def dense_batches(batches):
    out = {}
    for b in batches:
        X = b["X"].to_dense()
        for i, c in enumerate(b["cell_id"].tolist()):
            out[c] = X[i]
    return out


def test_connect_maps_only_when_asked(db):
    assert cap() > 0
    con = deltacells.connect(db)
    assert mapped(con) == 0                       # SQLite's default: a read call per page
    con.close()
    con = deltacells.connect(db, mmap=True)
    assert mapped(con) == cap()
    n = sum(len(b) for (b,) in con.execute("SELECT data FROM tiles_data"))
    assert n > 0
    con.close()


def test_loaders_map_by_default_and_read_the_same(db):
    got = {}
    for mm in (True, False):
        ds = deltacells.CellDataset(db, batch_size=200, seed=4, prefetch_tiles=0, mmap=mm)
        with iter(ds) as it:
            batches = [next(it)]
            assert mapped(it._con) == (cap() if mm else 0), mm
            batches += list(it)
        got[mm] = dense_batches(batches)
        # the prefetch thread's connection too (the batches equal)
        assert dense_batches(list(deltacells.CellDataset(db, batch_size=200, seed=4, mmap=mm))).keys() == got[mm].keys()
        mds = deltacells.CellMapDataset(db, mmap=mm)
        b = mds[[5, 700, 1199]]
        con, _ = mds._slot.get()
        assert mapped(con) == (cap() if mm else 0), mm
        X = b["X"].to_dense()
        for i, c in enumerate(b["cell_id"].tolist()):
            got.setdefault(("map", mm), {})[c] = X[i]
        mds.close()
    assert sorted(got[True]) == sorted(got[False]) == list(range(1200))
    for c in got[True]:
        assert torch.equal(got[True][c], got[False][c]), c
    for c in (5, 700, 1199):
        assert torch.equal(got[("map", True)][c], got[True][c])
        assert torch.equal(got[("map", False)][c], got[True][c])
    assert deltacells.CellDataset(db).mmap is True and deltacells.CellMapDataset(db).mmap is True
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="mmap"):
            deltacells.CellDataset(db, mmap=bad)
        with pytest.raises(TypeError, match="mmap"):
            deltacells.CellMapDataset(db, mmap=bad)


def test_a_spare_connection_serves_only_its_own_setting(db):
    def reader_con(mm):
        ds = deltacells.CellDataset(db, batch_size=400, seed=1, prefetch_tiles=0, mmap=mm)
        with iter(ds) as it:
            next(it)
            con = it._con
            list(it)
        return con
    with _core._spare_cons_lock:
        _core._spare_list()[:] = []
    a = reader_con(True)
    b = reader_con(False)                         # not a's connection: a maps the file
    assert b is not a and mapped(b) == 0
    assert reader_con(True) is a                  # each setting keeps its own spare
    assert reader_con(False) is b


def test_workers_read_with_read_calls(db):
    code = """
        import sys, torch
        from torch.utils.data import DataLoader, IterableDataset
        import deltacells
        class Probe(IterableDataset):
            def __init__(self, ds):
                self.ds = ds
            def __iter__(self):
                it = iter(self.ds)
                for b in it:
                    b["_mmap"] = torch.tensor([it._con.execute("PRAGMA mmap_size").fetchone()[0]])
                    yield b
        for mm in (True, False):
            ds = deltacells.CellDataset(sys.argv[1], batch_size=200, seed=2, mmap=mm)
            with iter(deltacells.CellDataset(sys.argv[1], batch_size=200, prefetch_tiles=0, mmap=mm)) as it:
                next(it)                          # the main process maps (mmap=True)
                assert (it._con.execute("PRAGMA mmap_size").fetchone()[0] > 0) == mm, mm
            for persistent in (False, True):
                dl = DataLoader(Probe(ds), batch_size=None, num_workers=2, persistent_workers=persistent,
                                multiprocessing_context="fork")
                for epoch in range(2):
                    ds.set_epoch(epoch)
                    seen, cells = set(), 0
                    for b in dl:
                        seen.add(int(b["_mmap"][0]))
                        cells += len(b["cell_id"])
                    assert cells == 1200, cells
                    # workers read with read calls: a map is faulted in afresh by every new
                    # process, and counted again in the RSS of each
                    assert seen == {0}, (mm, persistent, seen)
                del dl
        print("ok")
    """
    rc, out = run_python([PY, "-c", textwrap.dedent(code), db], ENV, 180)
    assert rc == 0 and "ok" in out.split(), out[-3000:]


def test_urls_ignore_it(db):
    con = deltacells.connect(db, remote={}, mmap=True)    # the dchttp VFS over the local file
    try:
        assert mapped(con) == 0
        assert sum(len(b) for (b,) in con.execute("SELECT data FROM tiles_data")) > 0
    finally:
        con.close()


def test_a_file_truncated_between_statements_is_an_error(db, tmp_path):
    """SQLite sees the file's new size when a statement begins: an error, not SIGBUS (a file
    cut by another program in the middle of a statement is what mmap=False guards against)."""
    path = tmp_path / "cut.dcdb"
    shutil.copy(db, path)
    code = """
        import os, sys, sqlite3
        import deltacells
        p = sys.argv[1]
        con = deltacells.connect(p, mmap=True)
        assert sum(len(b) for (b,) in con.execute("SELECT data FROM tiles_data")) > 0
        os.truncate(p, os.path.getsize(p) // 2)
        try:
            sum(len(b) for (b,) in con.execute("SELECT data FROM tiles_data"))
        except sqlite3.DatabaseError as e:
            print("error:", e)
        else:
            raise SystemExit("a truncated file was read")
    """
    rc, out = run_python([PY, "-c", textwrap.dedent(code), str(path)], ENV, 120)
    assert rc == 0 and "error:" in out, out[-3000:]
