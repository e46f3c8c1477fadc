"""Counts from 2^31 to 2^32-1: the format stores counts as uint32 and the converter takes them
(docs/format.md), so every reader must give them back exactly or refuse with an error that
names the cell, never wrap them to negative numbers.  int32 cannot hold them: a batch read as
int32 is a DtypeOverflow, int64/float64 are exact on every path (placed, taken, through
sqlite3's blobs), to_anndata returns int64 for such a dataset (its input's X dtype, dc_meta
x_dtype; int64 too where that is not recorded) and int32 for an int32 input."""
import os
import sqlite3
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

import deltacells  # noqa: E402
from deltacells import _core  # noqa: E402

from _converter_util import convert, run  # noqa: E402

warnings.filterwarnings("ignore")

BIG = [2**31 - 1, 2**31, 3_000_000_000, 2**32 - 1]


def matrix():
    """60 cells x 40 genes, small counts everywhere, and one of BIG in each of cells 7, 23,
    41 and 59 (gene 5, 17, 0, 39)."""
    rng = np.random.default_rng(3)
    X = (rng.random((60, 40)) < 0.3) * rng.integers(1, 20, (60, 40))
    for (c, g), v in zip([(7, 5), (23, 17), (41, 0), (59, 39)], BIG):
        X[c, g] = v
    return sp.csr_matrix(X, dtype=np.int64)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("bigcounts")
    X = matrix()
    a = ad.AnnData(X=X, obs=pd.DataFrame(index=[f"c{i}" for i in range(X.shape[0])]),
                   var=pd.DataFrame(index=[f"G{i}" for i in range(X.shape[1])]), dtype=np.int64)
    a.write_h5ad(d / "big.h5ad")
    convert(d / "big.h5ad", d / "big.dcdb", "--tile-cells", "25")
    return d / "big.dcdb", X


def by_name(db):
    """column of each input gene in the stored (gene_id) order"""
    con = deltacells.connect(db)
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    con.close()
    return np.array([int(n[1:]) for n in names])


def dense(X):
    if isinstance(X, torch.Tensor):
        X = X.to_dense() if X.layout != torch.strided else X
        return X.numpy()
    return X.toarray()


def read_all(db, dtype, output, **kw):
    ds = deltacells.CellDataset(str(db), batch_size=16, shuffle=False, dtype=dtype, output=output,
                                prefetch_tiles=0, **kw)
    out = []
    for b in ds:
        out.append((b["cell_id"].numpy() if isinstance(b["cell_id"], torch.Tensor)
                    else np.asarray(b["cell_id"]), dense(b["X"])))
    ids = np.concatenate([i for i, _ in out])
    return ids, np.concatenate([x for _, x in out])


def test_sql_gives_the_counts(big):
    db, X = big
    con = deltacells.connect(db)
    got = con.execute("SELECT max(count), sum(count) FROM expression_long").fetchone()
    assert got == (2**32 - 1, int(X.sum()))
    row = con.execute("SELECT counts FROM expression WHERE cell_id = 59").fetchone()[0]
    assert 2**32 - 1 in np.frombuffer(row, "<u4").tolist()
    con.close()


@pytest.mark.parametrize("place", ["1", "0"])
@pytest.mark.parametrize("output", ["csr", "dense", "scipy"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_wide_dtypes_are_exact(big, monkeypatch, place, output, dtype):
    db, X = big
    monkeypatch.setenv("DELTACELLS_PLACE", place)
    ids, got = read_all(db, dtype, output)
    want = X.toarray()[ids][:, by_name(db)]
    assert got.dtype == np.dtype(str(dtype).split(".")[1])
    np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize("simd", ["scalar", "avx2", None])
@pytest.mark.parametrize("place", ["1", "0"])
def test_float32_is_the_nearest_float(big, monkeypatch, place, simd):
    db, X = big
    monkeypatch.setenv("DELTACELLS_PLACE", place)
    if simd:
        monkeypatch.setenv("DC_SIMD", simd)
    ids, got = read_all(db, torch.float32, "csr")
    want = X.toarray()[ids][:, by_name(db)].astype(np.float32)   # numpy rounds uint32 -> float32
    np.testing.assert_array_equal(got, want)
    assert got.min() >= 0


@pytest.mark.parametrize("place", ["1", "0"])
@pytest.mark.parametrize("dtype,first", [(torch.int32, 2**31), (torch.int16, 2**31 - 1)])
def test_narrower_dtypes_name_the_cell(big, monkeypatch, place, dtype, first):
    db, _ = big
    monkeypatch.setenv("DELTACELLS_PLACE", place)
    with pytest.raises(_core.DtypeOverflow, match=rf"cell (7|23) has a count of {first}, which does not fit"):
        read_all(db, dtype, "csr")


@pytest.mark.parametrize("place", ["1", "0"])
@pytest.mark.parametrize("output", ["csr", "dense"])
def test_float16_names_the_exact_count(big, monkeypatch, place, output):
    """float16 values come as float32, which rounds 2^31-1 to 2^31 and 2^32-1 to 2^32: the
    error said "a count of 2147483648"; it names the cell and the stored count."""
    db, _ = big
    monkeypatch.setenv("DELTACELLS_PLACE", place)
    with pytest.raises(_core.DtypeOverflow, match=r"cell 7 has a count of 2147483647, which does not fit float16"):
        read_all(db, torch.float16, output)
    for cell, count in ((59, 2**32 - 1), (23, 2**31)):
        with pytest.raises(_core.DtypeOverflow, match=rf"cell {cell} has a count of {count}, which"):
            read_all(db, torch.float16, output, cells=[3, cell])
        with pytest.raises(_core.DtypeOverflow, match=rf"cell {cell} has a count of {count}, which"):
            deltacells.CellMapDataset(str(db), dtype=torch.float16, genes=["G0", "G17", "G39"])[cell]
    ids, got = read_all(db, torch.float16, output, cells=[0, 1, 30])
    assert got.dtype == np.float16 and len(ids) == 3


def test_int32_reads_cells_whose_counts_fit(big):
    db, X = big
    cells = [0, 1, 2, 3, 24, 30]
    ds = deltacells.CellDataset(str(db), cells=cells, batch_size=16, shuffle=False, dtype=torch.int32,
                                prefetch_tiles=0)
    (b,) = list(ds)
    np.testing.assert_array_equal(b["X"].to_dense().numpy(), X.toarray()[cells][:, by_name(db)])
    m = deltacells.CellMapDataset(str(db), dtype=torch.int32)
    np.testing.assert_array_equal(m[1]["X"].numpy(), X.toarray()[1][by_name(db)])
    with pytest.raises(_core.DtypeOverflow, match="cell 41 has a count of 3000000000"):
        m[41]
    assert deltacells.CellMapDataset(str(db), dtype=torch.int64)[41]["X"].max().item() == 3_000_000_000


def test_without_the_ticket_path(big, monkeypatch):
    """Through sqlite3's blobs (an extension without deltacells_ticket_take)."""
    db, X = big
    monkeypatch.setattr(_core, "_ticket_take_fn", lambda: None)
    monkeypatch.setenv("DELTACELLS_PLACE", "0")
    ids, got = read_all(db, torch.int64, "csr")
    np.testing.assert_array_equal(got, X.toarray()[ids][:, by_name(db)])
    with pytest.raises(_core.DtypeOverflow, match="cell 23 has a count of 2147483648"):
        read_all(db, torch.int32, "csr")
    a = deltacells.to_anndata(str(db), gene_order="original")
    assert a.X.dtype == np.int64
    np.testing.assert_array_equal(a.X.toarray(), X.toarray())


def test_to_anndata_and_export(big, tmp_path):
    db, X = big
    a = deltacells.to_anndata(str(db), gene_order="original")
    assert a.X.dtype == np.int64
    np.testing.assert_array_equal(a.X.toarray(), X.toarray())
    run("export", db, "-o", tmp_path / "out.h5ad", "--quiet")
    b = ad.read_h5ad(tmp_path / "out.h5ad")
    assert b.X.dtype == np.int64
    np.testing.assert_array_equal(b.X.toarray(), X.toarray())


def test_small_counts_stay_int32(tmp_path):
    X = sp.csr_matrix(np.array([[0, 5, 1], [2, 0, 0]], dtype=np.int32))
    a = ad.AnnData(X=X, obs=pd.DataFrame(index=["a", "b"]), var=pd.DataFrame(index=["x", "y", "z"]),
                   dtype=np.int32)
    a.write_h5ad(tmp_path / "s.h5ad")
    convert(tmp_path / "s.h5ad", tmp_path / "s.dcdb")
    got = deltacells.to_anndata(str(tmp_path / "s.dcdb"), gene_order="original")
    assert got.X.dtype == np.int32
    np.testing.assert_array_equal(got.X.toarray(), X.toarray())
