"""Several connections in several threads and several processes read one dataset at the same
time, correctly; a dataset changed by another connection is never served from stale cache."""
import hashlib
import subprocess
import threading

import numpy as np
import pytest

from _batch_util import (PY, ROOT, assert_csr_equal, batch, connect, convert, generated, ids_blob,
                         reference_matrix)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    h5, db = generated(tmp_path_factory.mktemp("conc"), 6000, 1500, 4, 1000)
    return db, reference_matrix(h5, db)


def batches(seed, n_cells, count=12):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        if k % 3 == 2:                           # a run of whole tiles (the direct path)
            t = int(rng.integers(0, n_cells // 1000))
            out.append(np.arange(t * 1000, t * 1000 + 1000))
        else:
            out.append(rng.integers(0, n_cells, int(rng.integers(1, 800))))
    return out


def digest(con, ids_list):
    h = hashlib.sha256()
    for ids in ids_list:
        for v in con.execute("SELECT cell_ids, indptr, indices, data FROM dc_batch(?)", (ids_blob(ids),)).fetchone():
            h.update(v)
    return h.hexdigest()


def reference_digest(X, ids_list):
    """digest() of what dc_batch must return, computed from the reference matrix (anndata's X),
    not by the extension: cell_ids int64, indptr int64, indices int32, data int32 (little-endian)."""
    h = hashlib.sha256()
    for ids in ids_list:
        m = X[np.asarray(ids)].tocsr()
        m.sort_indices()
        for a, t in ((np.asarray(ids), "<i8"), (m.indptr, "<i8"), (m.indices, "<i4"), (m.data, "<i4")):
            assert np.array_equal(np.asarray(a).astype(t), a)
            h.update(np.asarray(a).astype(t).tobytes())
    return h.hexdigest()


def test_threads_with_own_connections(ds):
    db, X = ds
    errors = []

    def work(seed):
        try:
            con = connect(db, check_same_thread=False)
            con.execute("SELECT dc_config('threads', 2), dc_config('cache_mb', ?)", (8 * (seed % 2),))
            for ids in batches(seed, X.shape[0]):
                _, m, _ = batch(con, ids_blob(ids))
                assert_csr_equal(m, X[ids])
            con.close()
        except Exception as e:              # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a reader thread hangs"
    assert not errors, errors


def test_one_connection_shared_by_threads(ds):
    """Serialized mode: threads take turns on one connection; results stay right."""
    db, X = ds
    con = connect(db, check_same_thread=False)
    errors = []

    def work(seed):
        try:
            for ids in batches(seed, X.shape[0], 6):
                _, m, _ = batch(con, ids_blob(ids))
                assert_csr_equal(m, X[ids])
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


WORKER = r"""
import hashlib, sqlite3, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from test_batch_concurrency import batches, digest
from _batch_util import connect
db, seed = sys.argv[1], int(sys.argv[2])
con = connect(db)
n = con.execute("SELECT value FROM dc_meta WHERE key = 'n_cells'").fetchone()[0]
for rnd in range(3):
    print(digest(con, batches(seed, n)), flush=True)
"""


def test_processes(ds):
    db, X = ds
    here = str(ROOT / "tests" / "python")
    procs = [subprocess.Popen([PY, "-c", WORKER, str(db), str(s), here], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for s in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    for s, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, err
        # every round of every process returns the reference matrix's rows, byte for byte
        assert out.split() == [reference_digest(X, batches(s, X.shape[0]))] * 3, (s, err)


def test_change_by_another_connection_invalidates_cache(ds, tmp_path):
    import shutil
    import sqlite3
    db = tmp_path / "swap.dcdb"
    shutil.copy(ds[0], db)
    X = ds[1]
    reader = connect(db)
    reader.execute("SELECT dc_config('cache_mb', 64)")
    _, m, _ = batch(reader, ids_blob([0, 1, 999]))
    assert_csr_equal(m, X[[0, 1, 999]])
    # another connection rewrites tiles 0 and 1 with the cells of tiles 1 and 0: the tiles of
    # the same input with those cells swapped, converted under this dataset's id, so that the
    # new tiles are sealed for their places (a blob merely moved would be SQLITE_CORRUPT)
    import anndata
    a = anndata.read_h5ad(str(ds[0].parent / "gen_6000_1500_4.h5ad"))   # the fixture's input
    order = np.r_[1000:2000, 0:1000, 2000:a.n_obs]
    swapped_h5, swapped = tmp_path / "swapped.h5ad", tmp_path / "swapped.dcdb"
    import scipy.sparse as sp
    Xs = sp.csr_matrix(a.X).astype(np.int64)[order].astype(np.int32)
    anndata.AnnData(X=Xs, obs=a.obs.iloc[order].copy(), var=a.var.copy(), dtype=Xs.dtype).write_h5ad(swapped_h5)
    w = sqlite3.connect(str(db))
    (dataset_id,) = w.execute("SELECT value FROM dc_meta WHERE key = 'dataset_id'").fetchone()
    convert(swapped_h5, swapped, 1000, ["--dataset-id", dataset_id])
    w.execute("ATTACH ? AS s", (str(swapped),))
    w.execute("UPDATE tiles_data SET (nnz, chunks, data, checksum) = (SELECT nnz, chunks, data, checksum FROM"
              " s.tiles_data t WHERE t.tile = tiles_data.tile) WHERE tile IN (0, 1)")
    w.commit()
    w.close()
    _, m, _ = batch(reader, ids_blob([0, 1, 999]))
    assert_csr_equal(m, X[[1000, 1001, 1999]])
    _, m, _ = batch(reader, ids_blob(np.arange(1000)))
    assert_csr_equal(m, X[1000:2000])
