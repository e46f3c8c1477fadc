"""A file of one tile (the common small append): its genes are sorted and its model counted on
every --threads thread, and the bytes are those of one thread, for convert and for append."""
import hashlib
import subprocess

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp

from _converter_util import GEN, PY, Dataset, check_matrix, convert, need_converter, run

DATASET_ID = "00c0ffee12345678"


def gen(path, cells, genes, seed):
    subprocess.run([PY, GEN, "--cells", str(cells), "--genes", str(genes), "--seed", str(seed), "-o", path],
                   check=True, capture_output=True)
    return path


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    need_converter()
    d = tmp_path_factory.mktemp("lone")
    # one tile each (default --tile-cells 10000); the second file's genes partly new, in another order
    return gen(d / "a.h5ad", 1500, 2000, 11), gen(d / "b.h5ad", 2200, 2500, 12), d


def test_convert_one_tile_same_bytes_any_threads(files):
    a, _, d = files
    digests = {}
    for t in ("1", "2", "3", "8"):
        out = d / f"c{t}.dcdb"
        convert(a, out, "--threads", t, "--dataset-id", DATASET_ID, "--force")
        digests[t] = sha(out)
    assert len(set(digests.values())) == 1, digests
    ds = Dataset(d / "c2.dcdb")
    check_matrix(ds, [ad.read_h5ad(a)])
    ds.close()


def test_append_one_tile_same_bytes_any_threads(files):
    a, b, d = files
    digests = {}
    for t in ("1", "2", "3"):
        out = d / f"ap{t}.dcdb"
        convert(a, out, "--dataset-id", DATASET_ID, "--force")
        run("append", out, b, "--threads", t, "--quiet")
        digests[t] = sha(out)
        assert "ok" in run("verify", out).stdout.lower()
    assert len(set(digests.values())) == 1, digests
    # X by gene name (an append keeps the dataset's gene ids: not numbered by totals, so not check_matrix)
    ds = Dataset(d / "ap2.dcdb")
    X, gid, r0 = ds.X(), {n: i for i, n in enumerate(ds.gene_names)}, 0
    for f in (a, b):
        A = ad.read_h5ad(f)
        M = sp.csr_matrix(A.X).tocoo()
        cols = np.array([gid[n] for n in A.var_names], dtype=np.int64)
        exp = sp.csr_matrix((M.data.astype(np.int64), (M.row, cols[M.col])), shape=(A.n_obs, ds.n_genes))
        assert (X[r0:r0 + A.n_obs] - exp).count_nonzero() == 0, f
        r0 += A.n_obs
    assert r0 == ds.n_cells
    ds.close()
