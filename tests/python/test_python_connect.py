"""deltacells.connect, extension discovery, the no-extension-loading message, installing."""
import os
import shutil
import sqlite3
import subprocess
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import EXTENSION, PY, ROOT, gen  # noqa: E402

import deltacells  # noqa: E402
from deltacells import _connect  # noqa: E402
from deltacells._plan import EpochPlan, interleave  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("py_connect"), 500, 100, 5, 200)[1]


def test_connect_loads_the_extension(db):
    con = deltacells.connect(db)
    assert isinstance(con, sqlite3.Connection)
    assert con.execute("SELECT count(*) FROM cells").fetchone()[0] == 500
    assert con.execute("SELECT count(*) FROM genes").fetchone()[0] == 100
    assert con.execute("SELECT sum(n_cells) FROM tiles").fetchone()[0] == 500
    n, g = con.execute("SELECT n_cells, n_genes FROM dc_batch('[3, 1, 3]')").fetchone()
    assert (n, g) == (3, 100)
    # extension loading is switched off again for SQL on this connection
    with pytest.raises(sqlite3.OperationalError):
        con.execute("SELECT load_extension(?)", (str(EXTENSION),)).fetchall()
    # read-only
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        con.execute("CREATE TABLE x(a)")
    con.close()


def test_a_mistyped_dc_simd_is_refused(db, tmp_path):
    """DC_SIMD that names no decoder path: the extension does not load, the converter and
    bench_decode do not start (each says which value and the names); it used to run the best
    path without a word, so a benchmark of 'avx-2' reported AVX-512.  dc_config('simd') says
    which path decodes take."""
    code = ("import sys; sys.path.insert(0, %r); import deltacells; "
            "c = deltacells.connect(%r); print(c.execute(\"SELECT dc_config('simd')\").fetchone()[0])"
            % (os.path.join(ROOT, "python"), str(db)))
    env = dict(os.environ, DC_SIMD="avx-2")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0 and "DC_SIMD=avx-2 names no decoder path" in p.stderr, p.stderr
    for tool in (os.path.join(ROOT, "build", "deltacells"), os.path.join(ROOT, "build", "bench_decode")):
        if os.path.exists(tool):
            q = subprocess.run([tool, "version"], capture_output=True, text=True, timeout=60, env=env)
            assert q.returncode == 2 and "DC_SIMD=avx-2 names no decoder path" in q.stderr, q.stderr
    env["DC_SIMD"] = "scalar"
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and p.stdout.split() == ["scalar"], p.stderr
    with pytest.raises(sqlite3.OperationalError, match="simd is read-only"):
        deltacells.connect(db).execute("SELECT dc_config('simd', 1)").fetchall()


def test_connect_errors(db, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        deltacells.connect(tmp_path / "nope.dcdb")
    other = tmp_path / "plain.db"
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE t(a)")
    c.commit()
    c.close()
    with pytest.raises(ValueError, match="not a deltacells dataset"):
        deltacells.connect(other)
    junk = tmp_path / "junk.dcdb"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ValueError, match="not a deltacells dataset") as ei:
        deltacells.connect(junk)
    assert "convert it first" not in str(ei.value)
    # an h5ad (HDF5) where a dataset belongs: says so, and how to convert it
    h5 = tmp_path / "cells.h5ad"
    import h5py
    with h5py.File(h5, "w") as f:
        f["X"] = np.zeros(3)
    with pytest.raises(ValueError, match=r"HDF5 file .*convert it first, `deltacells convert .*cells\.h5ad -o"):
        deltacells.connect(h5)
    with pytest.raises(ValueError, match="HDF5 file"):
        deltacells.CellDataset(h5)


@pytest.mark.parametrize("fraction", [0.9, 0.5, 0.1, 0.0001])
def test_a_truncated_dataset_is_called_damaged(db, tmp_path, fraction):
    """A dataset cut short: SQLite finds the disk image malformed (the extension says just
    that); not "is not a deltacells dataset" but damaged or truncated, with its size."""
    bad = tmp_path / "cut.dcdb"
    shutil.copy(db, bad)
    size = max(20, int(os.path.getsize(db) * fraction))
    os.truncate(bad, size)
    # cut inside SQLite's 100-byte header, the reason SQLite gives depends on which of its
    # fields survived (a 21-byte cut lacks the payload fractions: "file is not a database")
    why = "database disk image is malformed" if size >= 100 else "(database disk image is malformed|file is not a database)"
    for open_it in (deltacells.connect, deltacells.CellDataset, deltacells.CellMapDataset):
        with pytest.raises(ValueError, match=rf"cut\.dcdb' is damaged or truncated: a SQLite file of {size} "
                                             rf"bytes that SQLite reports malformed \({why}"):
            open_it(bad)
    # a SQLite header with a bad page size: SQLITE_NOTADB, damaged too
    shutil.copy(db, bad)
    with open(bad, "r+b") as f:
        f.seek(16)
        f.write(b"\x00\x03")
    with pytest.raises(ValueError, match="is damaged or truncated"):
        deltacells.connect(bad)


@pytest.mark.parametrize("key", ["n_cells", "n_genes"])
@pytest.mark.parametrize("value", [None, "many"])
def test_a_missing_dc_meta_key_is_named(db, tmp_path, key, value):
    """dc_meta without n_cells (or n_genes, or not an integer): an error naming the file and
    the key (was a bare KeyError: 'n_cells')."""
    bad = tmp_path / "nometa.dcdb"
    shutil.copy(db, bad)
    c = sqlite3.connect(bad)
    if value is None:
        c.execute("DELETE FROM dc_meta WHERE key = ?", (key,))
    else:
        c.execute("UPDATE dc_meta SET value = ? WHERE key = ?", (value, key))
    c.commit()
    c.close()
    what = "is missing" if value is None else "is not an integer"
    for open_it in (deltacells.CellDataset, deltacells.CellMapDataset, deltacells.to_anndata):
        with pytest.raises(ValueError, match=rf"nometa\.dcdb: dc_meta\.{key} {what}"):
            open_it(str(bad))


def test_extension_from_environment(db, tmp_path, monkeypatch):
    # any file name works: the entry point is given explicitly
    copy = tmp_path / "libdc-copy-2.so"
    shutil.copy(EXTENSION, copy)
    monkeypatch.setenv("DELTACELLS_EXTENSION", str(copy))
    assert deltacells.find_extension() == str(copy)
    con = deltacells.connect(db)
    assert con.execute("SELECT count(*) FROM cells").fetchone()[0] == 500
    con.close()
    monkeypatch.setenv("DELTACELLS_EXTENSION", str(tmp_path / "missing.so"))
    with pytest.raises(deltacells.ExtensionNotFoundError, match="DELTACELLS_EXTENSION=.*missing.so"):
        deltacells.connect(db)
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"not a library")
    monkeypatch.setenv("DELTACELLS_EXTENSION", str(bad))
    with pytest.raises(RuntimeError, match="could not load the deltacells extension"):
        deltacells.connect(db)


def test_no_extension_loading_message(db, monkeypatch):
    class NoLoadConnection:      # what sqlite3.Connection is on a Python built without it
        pass
    fake = types.SimpleNamespace(Connection=NoLoadConnection, connect=sqlite3.connect,
                                 Error=sqlite3.Error, DatabaseError=sqlite3.DatabaseError)
    monkeypatch.setattr(_connect, "sqlite3", fake)
    with pytest.raises(RuntimeError) as e:
        deltacells.connect(db)
    msg = str(e.value)
    assert "cannot load SQLite extensions" in msg
    assert "/usr/bin/python3" in msg and "--enable-loadable-sqlite-extensions" in msg
    with pytest.raises(RuntimeError, match="cannot load SQLite extensions"):
        deltacells.CellDataset(db)


def test_pyenv_python_gets_the_message(db):
    """The python3 first on PATH here cannot load extensions: the real thing, when present."""
    exe = shutil.which("python3")
    if exe is None or os.path.realpath(exe) == os.path.realpath(PY):
        pytest.skip("no second Python on PATH")
    probe = subprocess.run([exe, "-c", "import sqlite3; print(hasattr(sqlite3.Connection, 'enable_load_extension'))"],
                           capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != "False":
        pytest.skip(f"{exe} can load extensions")
    r = subprocess.run([exe, "-c", f"import deltacells; deltacells.connect({str(db)!r})"],
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "cannot load SQLite extensions" in r.stderr and "/usr/bin/python3" in r.stderr


def test_pip_install_offline(tmp_path, db):
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    src = tmp_path / "src"
    shutil.copytree(ROOT / "python", src / "python", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (src / "build").mkdir()
    shutil.copy(EXTENSION, src / "build" / "deltacells.so")
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-cache-dir", str(src / "python")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([py, "-c", "import deltacells; print(deltacells.find_extension()); "
                        f"print(deltacells.connect({str(db)!r}).execute('SELECT count(*) FROM cells').fetchone()[0])"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DELTACELLS_EXTENSION")})
    assert r.returncode == 0, r.stderr
    path, n = r.stdout.split()
    assert path.startswith(str(venv)) and path.endswith("_lib/deltacells.so") and n == "500"


# --- the epoch plan (pure numpy) ---------------------------------------------------------
def _tiles(sizes, gap=0):
    out, first = [], 0
    for t, n in enumerate(sizes):
        out.append((t, np.arange(first, first + n, dtype=np.int64)))
        first += n + gap
    return out


@pytest.mark.parametrize("world,workers", [(1, 1), (1, 3), (2, 2), (3, 1), (4, 2)])
def test_plan_partitions_cells(world, workers):
    tiles = _tiles([100, 100, 37, 100, 5, 100, 64])
    every = np.concatenate([c for _, c in tiles])
    tile_of = {int(c): t for t, cs in tiles for c in cs}
    for drop_last in (False, True):
        p = EpochPlan(tiles, seed=1, epoch=3, shuffle=True, window=2, batch_size=32,
                      drop_last=drop_last, world_size=world)
        got = []
        tiles_of = []
        for r in range(world):
            whole = p.batches(r)                   # the rank's epoch, as one worker sees it
            assert len(whole) == p.n_batches(r)
            parts = [p.batches(r, w, workers) for w in range(workers)]
            # the workers deliver exactly the rank's batches: contiguous runs, each starting
            # at a window's first batch, within a window's batches of the equal share
            assert sum(len(x) for x in parts) == len(whole)
            starts = set(p.worker_starts(r).tolist())
            lo = 0
            for x in parts:
                assert lo in starts
                lo += len(x)
            gaps = np.diff(sorted(starts))
            widest = int(gaps.max()) if len(gaps) else 0
            assert max(map(len, parts)) - min(map(len, parts)) <= widest + 1
            flat = [b for x in parts for b in x]
            assert all(np.array_equal(a, b) for a, b in zip(flat, whole))
            for b in flat:
                assert len(b) == 32 or not drop_last
                got.append(b)
            short = [b for b in whole if len(b) < 32]
            assert len(short) <= 1 and (not short or np.array_equal(short[0], whole[-1]))
            tiles_of.append({tile_of[int(c)] for b in flat for c in b})
        ids = np.concatenate(got)
        assert len(np.unique(ids)) == len(ids)
        if not drop_last:
            assert np.array_equal(np.sort(ids), every)
        else:
            assert len(ids) == sum(n // 32 * 32 for n in p.rank_cells)
        for a in range(world):
            for b in range(a + 1, world):
                assert not tiles_of[a] & tiles_of[b]


def test_plan_worker_reads_its_own_stretch():
    # 8 tiles of 100 cells, window 1, batches of 50: each worker's cells come from its own
    # tiles (the batches do not straddle workers' tiles when the split falls on a tile edge)
    tiles = _tiles([100] * 8)
    p = EpochPlan(tiles, seed=4, epoch=0, shuffle=True, window=1, batch_size=50,
                  drop_last=False)
    seen = [set((np.concatenate(p.batches(0, w, 4)) // 100).tolist()) for w in range(4)]
    assert all(len(s) == 2 for s in seen)
    assert not any(seen[a] & seen[b] for a in range(4) for b in range(a + 1, 4))


@pytest.mark.parametrize("mode", ["pad", "drop"])
def test_plan_equal_batches(mode):
    tiles = _tiles([300, 10, 10, 10])
    p = EpochPlan(tiles, seed=0, epoch=0, shuffle=True, window=1, batch_size=16, drop_last=False,
                  world_size=2, equal_batches=mode)
    counts = [sum(len(p.batches(r, w, 2)) for w in range(2)) for r in range(2)]
    assert counts[0] == counts[1] == p.n_batches(0) == p.n_batches(1)
    ids = np.concatenate([b for r in range(2) for w in range(2) for b in p.batches(r, w, 2)])
    if mode == "pad":
        assert set(ids.tolist()) == set(range(330))
    else:
        assert len(np.unique(ids)) == len(ids)


def test_interleave_is_dataloader_order():
    assert interleave([[1, 2, 3], [4], [5, 6]]) == [1, 4, 5, 2, 6, 3]
    assert interleave([[], [1, 2]]) == [1, 2]
    assert interleave([]) == []


def test_plan_workers_own_whole_windows():
    # 10 tiles of 100 cells, window 2, batches of 50: 5 windows of 4 batches.  2 workers:
    # the cut (ideally after batch 10, inside the third window) moves to a window's
    # start, so no tile is read by both workers (a cut inside a window made both decode
    # all of its tiles); every batch still comes exactly once, in the same batches
    tiles = _tiles([100] * 10)
    for seed in range(4):
        p = EpochPlan(tiles, seed=seed, epoch=1, shuffle=True, window=2, batch_size=50,
                      drop_last=False)
        whole = p.batches(0)
        for nw in (2, 3, 4):
            parts = [p.batches(0, w, nw) for w in range(nw)]
            flat = [b for x in parts for b in x]
            assert len(flat) == len(whole) == 20
            assert all(np.array_equal(a, b) for a, b in zip(flat, whole))
            seen = [set((np.concatenate(x) // 100).tolist()) if x else set() for x in parts]
            for a in range(nw):
                for b in range(a + 1, nw):
                    assert not seen[a] & seen[b], (nw, seen)
                assert len(parts[a]) % 4 == 0
            # busy workers: no worker is left without batches while another has 2 windows
            assert min(map(len, parts)) >= 4


def test_worker_range_snaps_to_window_starts():
    from deltacells._plan import worker_range
    assert [worker_range(20, w, 2) for w in range(2)] == [(0, 10), (10, 20)]
    starts = np.array([0, 4, 8, 12, 16, 20])
    assert [worker_range(20, w, 2, starts) for w in range(2)] == [(0, 8), (8, 20)]
    assert [worker_range(20, w, 3, starts) for w in range(3)] == [(0, 4), (4, 12), (12, 20)]
    # fewer windows than workers: some workers get none
    assert [worker_range(8, w, 4, np.array([0, 4, 8])) for w in range(4)] == \
        [(0, 0), (0, 4), (4, 4), (4, 8)]


def test_worker_thread_schedule_keeps_the_cores_busy():
    from deltacells.dataset import worker_thread_schedule
    # 2 cores, 2 workers with 8 and 12 batches: 1 thread each while both run, the
    # second gets both cores for its last 4 batches
    assert worker_thread_schedule([8, 12], 0, cores=2) == [(0, 1)]
    assert worker_thread_schedule([8, 12], 1, cores=2) == [(0, 1), (8, 2)]
    assert worker_thread_schedule([4, 8, 8], 2, cores=6) == [(0, 2), (4, 3)]
    assert worker_thread_schedule([0, 4], 1, cores=2) == [(0, 2)]
    assert worker_thread_schedule([5, 5], 0, cores=1) == [(0, 1)]
