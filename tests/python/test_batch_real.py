"""dc_batch against anndata's X on the real PBMC files: random order, repeats, gene panels."""
import json

import numpy as np
import pytest

from _batch_util import (REAL_FILES, assert_csr_equal, batch, connect, convert, ids_blob, real_file,
                         reference_matrix)


@pytest.fixture(scope="module", params=REAL_FILES)
def real(request, tmp_path_factory):
    h5 = real_file(request.param)
    db = convert(h5, tmp_path_factory.mktemp("real") / (request.param + ".dcdb"), tile_cells=512)
    return db, reference_matrix(h5, db)


def test_random_order_with_repeats(real):
    db, X = real
    con = connect(db)
    rng = np.random.default_rng(11)
    n = X.shape[0]
    for size in (1, 17, 500, 3 * n):
        ids = rng.integers(0, n, size)              # repeats for sure at 3n
        cid, m, g = batch(con, ids_blob(ids))
        assert g == X.shape[1]
        assert np.array_equal(cid, ids)
        assert_csr_equal(m, X[ids])


def test_whole_dataset_in_order_and_json(real):
    db, X = real
    con = connect(db)
    n = X.shape[0]
    cid, m, _ = batch(con, ids_blob(np.arange(n)))
    assert_csr_equal(m, X)
    perm = np.random.default_rng(5).permutation(n)
    cid, m, _ = batch(con, json.dumps(perm.tolist()))
    assert np.array_equal(cid, perm)
    assert_csr_equal(m, X[perm])


def test_gene_panels(real):
    db, X = real
    con = connect(db)
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    unique = [g for g, nm in enumerate(names) if names.count(nm) == 1] if len(names) < 5000 else None
    rng = np.random.default_rng(3)
    n, G = X.shape
    ids = rng.integers(0, n, 400)
    # panel by int32 ids in random order, including genes nobody expresses
    panel = rng.permutation(G)[: min(G, 300)]
    cid, m, g = batch(con, ids_blob(ids), np.asarray(panel, "<i4").tobytes())
    assert g == len(panel)
    assert_csr_equal(m, X[ids][:, panel])
    # panel by names (JSON), a model vocabulary in its own order
    if unique is None:
        name_count = {}
        for nm in names:
            name_count[nm] = name_count.get(nm, 0) + 1
        unique = [gg for gg, nm in enumerate(names) if name_count[nm] == 1]
    pick = rng.permutation(np.asarray(unique))[:200]
    cid, m, g = batch(con, ids_blob(ids), json.dumps([names[i] for i in pick]))
    assert g == len(pick)
    assert_csr_equal(m, X[ids][:, pick])


def test_cache_and_threads_do_not_change_results(real):
    db, X = real
    con = connect(db)
    rng = np.random.default_rng(8)
    ids = rng.integers(0, X.shape[0], 700)
    ref = X[ids]
    for threads, cache_mb, decode_mb in ((1, 0, 1), (2, 512, 256), (2, 1, 1), (3, 64, 1)):
        con.execute("SELECT dc_config('threads', ?), dc_config('cache_mb', ?), dc_config('decode_mb', ?)",
                    (threads, cache_mb, decode_mb))
        for _ in range(2):                          # second round: from the cache where it is on
            _, m, _ = batch(con, ids_blob(ids))
            assert_csr_equal(m, ref)
