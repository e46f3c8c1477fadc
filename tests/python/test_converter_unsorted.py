"""CSR rows (and CSC columns) whose indices are not sorted, as scipy and anndata allow:
the converter sorts them itself and stores the same dataset as from the sorted matrix.
A gene given twice in a cell stays an error that names the cell and the gene."""
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _converter_util import Dataset, check_matrix, convert

warnings.filterwarnings("ignore")


def write(tmp_path, name, X, n, g):
    a = ad.AnnData(X=X, obs=pd.DataFrame(index=[f"c{i}" for i in range(n)]),
                   var=pd.DataFrame(index=[f"G{i}" for i in range(g)]), dtype=np.int32)
    p = tmp_path / name
    a.write_h5ad(p)
    return p, a


def shuffle_within(ind, ptr, rng):
    """Indices permuted inside each row (column) segment; returns how many segments changed."""
    changed = 0
    for i in range(len(ptr) - 1):
        a, b = ptr[i], ptr[i + 1]
        if b - a >= 2:
            seg = ind[a:b].copy()
            perm = rng.permutation(b - a)
            while np.array_equal(perm, np.arange(b - a)):
                perm = rng.permutation(b - a)
            ind[a:b] = seg[perm]
            changed += 1
    return changed


def permute_file(p, rng):
    """Shuffles X's indices (and data with them) within every row of the file on disk."""
    with h5py.File(p, "r+") as f:
        ind = f["X/indices"][:]
        dat = f["X/data"][:]
        ptr = f["X/indptr"][:]
        order = np.arange(len(ind))
        changed = shuffle_within(order, ptr, rng)
        f["X/indices"][:] = ind[order]
        f["X/data"][:] = dat[order]
    return changed, len(ptr) - 1


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("genes", [12, 300])  # short rows (insertion) and long ones
def test_unsorted_indices_are_sorted(tmp_path, fmt, genes):
    rng = np.random.default_rng(7)
    n = 80
    m = (rng.integers(1, 50, (n, genes)) * (rng.random((n, genes)) < 0.5)).astype(np.int32)
    X = sp.csr_matrix(m) if fmt == "csr" else sp.csc_matrix(m)
    p, a = write(tmp_path, "u.h5ad", X, n, genes)
    ps, _ = write(tmp_path, "s.h5ad", X, n, genes)
    changed, segments = permute_file(p, rng)
    assert changed > segments // 2
    with h5py.File(p) as f:  # the file really is unsorted now
        M = (sp.csr_matrix if fmt == "csr" else sp.csc_matrix)(
            (f["X/data"][:], f["X/indices"][:], f["X/indptr"][:]), shape=(n, genes))
        assert not M.has_sorted_indices
        assert (M != X).nnz == 0
    convert(p, tmp_path / "u.dcdb", "--tile-cells", "30", "--dataset-id", "0123456789abcdef")
    convert(ps, tmp_path / "s.dcdb", "--tile-cells", "30", "--dataset-id", "0123456789abcdef")
    ds = Dataset(tmp_path / "u.dcdb")
    check_matrix(ds, [a])
    ref = Dataset(tmp_path / "s.dcdb")
    assert ds.gene_names == ref.gene_names
    assert (ds.X() != ref.X()).nnz == 0
    # the tiles are the same bytes as from the sorted file
    assert (list(ds.db.execute("SELECT data FROM tiles_data ORDER BY tile")) ==
            list(ref.db.execute("SELECT data FROM tiles_data ORDER BY tile")))


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_duplicate_apart_in_unsorted_row(tmp_path, fmt):
    """A repeat that is not next to its first (the row is unsorted) is still found."""
    n, g = 10, 8
    m = np.zeros((n, g), np.int32)
    m[3, [1, 4, 6]] = [5, 6, 7]
    X = sp.csr_matrix(m) if fmt == "csr" else sp.csc_matrix(m)
    p, _ = write(tmp_path, "d.h5ad", X, n, g)
    with h5py.File(p, "r+") as f:
        if fmt == "csr":  # row 3 holds genes 1, 4, 6: make it 6, 4, 6
            ind = f["X/indices"][:]
            a = f["X/indptr"][3]
            ind[a:a + 3] = [6, 4, 6]
            f["X/indices"][:] = ind
            want = ("cell 'c3'", "gene 'G6'")
        else:  # gene 1's column lists cells 7, 3, 7
            del f["X"]
            grp = f.create_group("X")
            grp.attrs["encoding-type"] = "csc_matrix"
            grp.attrs["encoding-version"] = "0.1.0"
            grp.attrs["shape"] = np.array([n, g])
            grp["data"] = np.array([1, 2, 3], np.int32)
            grp["indices"] = np.array([7, 3, 7], np.int32)
            grp["indptr"] = np.array([0, 0, 3, 3, 3, 3, 3, 3, 3], np.int64)
            want = ("cell 'c7'", "gene 'G1'")
    out = tmp_path / "d.dcdb"
    r = convert(p, out, check=False)
    assert r.returncode == 1, r.stderr
    assert "appears twice" in r.stderr and "sum_duplicates" in r.stderr
    for w in want:
        assert w in r.stderr, r.stderr
    assert not out.exists()
