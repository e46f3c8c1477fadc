"""Edge cases of h5ad input, made with anndata and h5py; each one read back exactly."""
import hashlib
import subprocess
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

from _converter_util import GEN, PY, Dataset, check_matrix, check_obs, convert, run

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)


def counts(n, g, seed=0, density=0.3, high=20):
    rng = np.random.default_rng(seed)
    m = rng.integers(1, high, (n, g)) * (rng.random((n, g)) < density)
    return m.astype(np.int32)


def obs_frame(n, seed=0):
    rng = np.random.default_rng(seed)
    pmt = rng.random(n) * 10
    pmt[::7] = np.nan
    codes = rng.integers(-1, 3, n).astype(np.int8)
    return pd.DataFrame({
        "cell_type": pd.Categorical.from_codes(codes, ["B cell", "NK", "CD4 T"]),
        "age": rng.integers(0, 100, n).astype(np.int64),
        "percent_mt": pmt,
        "is_doublet": rng.random(n) < 0.5,
        "barcode": np.array([f"BC{i}-ü" for i in range(n)], dtype=object),
    }, index=[f"c{i}" for i in range(n)])


def var_frame(g):
    return pd.DataFrame({"gene_ids": [f"ENSG{i:06d}" for i in range(g)]}, index=[f"G{i}" for i in range(g)])


def roundtrip(tmp_path, adata, *opts, name="a", matrix=None, key=None):
    p = tmp_path / f"{name}.h5ad"
    adata.write_h5ad(p)
    out = tmp_path / f"{name}.dcdb"
    convert(p, out, *opts)
    back = ad.read_h5ad(p)
    ds = Dataset(out)
    try:
        check_matrix(ds, [back], None if matrix is None else [matrix(back)], key=key)
        check_obs(ds, [back])
    finally:
        ds.close()
    run("verify", out)
    return out


def test_csr_with_obs_kinds(tmp_path):
    a = ad.AnnData(X=sp.csr_matrix(counts(50, 30)), obs=obs_frame(50), var=var_frame(30))
    out = roundtrip(tmp_path, a, "--tile-cells", "16")
    ds = Dataset(out)
    kinds = {k: v[1] for k, v in ds.columns.items()}
    assert kinds == {"_index": "text", "cell_type": "category", "age": "int", "percent_mt": "real",
                     "is_doublet": "bool", "barcode": "text"}
    assert ds.meta["n_tiles"] == 4 and ds.meta["tile_cells"] == 16
    # var columns are kept in genes
    names = dict(zip(ds.gene_names, ds.genes("gene_ids")))
    assert names == {f"G{i}": f"ENSG{i:06d}" for i in range(30)}
    ds.close()


def test_csc_x(tmp_path):
    m = counts(120, 40, seed=1)
    m[5] = 0
    a = ad.AnnData(X=sp.csc_matrix(m), obs=obs_frame(120), var=var_frame(40))
    roundtrip(tmp_path, a, "--tile-cells", "25")


def test_dense_x(tmp_path):
    a = ad.AnnData(X=counts(40, 25, seed=2), obs=obs_frame(40), var=var_frame(25))
    roundtrip(tmp_path, a, "--tile-cells", "7")


def test_float_x_integral(tmp_path):
    a = ad.AnnData(X=sp.csr_matrix(counts(30, 20, seed=3).astype(np.float32)), obs=obs_frame(30), var=var_frame(20))
    roundtrip(tmp_path, a)
    d = ad.AnnData(X=counts(30, 20, seed=3).astype(np.float64), obs=obs_frame(30), var=var_frame(20))
    roundtrip(tmp_path, d, name="dense64")


def test_integer_dtypes(tmp_path):
    for dt in (np.uint8, np.int16, np.uint16, np.int64, np.uint64):
        a = ad.AnnData(X=sp.csr_matrix(counts(20, 10, seed=4).astype(dt)), obs=obs_frame(20), var=var_frame(10),
                       dtype=dt)
        roundtrip(tmp_path, a, name=f"dt_{np.dtype(dt).name}")


def test_empty_cells_and_empty_tile(tmp_path):
    m = counts(60, 15, seed=5)
    m[0] = 0
    m[59] = 0
    m[20:40] = 0  # a whole tile of empty cells
    a = ad.AnnData(X=sp.csr_matrix(m), obs=obs_frame(60), var=var_frame(15))
    roundtrip(tmp_path, a, "--tile-cells", "20")


def test_large_counts(tmp_path):
    m = counts(10, 8, seed=6).astype(np.uint32)
    m[0, 0] = 65535
    m[1, 1] = 65536
    m[2, 2] = 70000
    m[3, 3] = 2**31 - 1
    m[4, 4] = 2**32 - 1
    m[5, 5] = 256
    a = ad.AnnData(X=sp.csr_matrix(m), obs=obs_frame(10), var=var_frame(8), dtype=np.uint32)
    roundtrip(tmp_path, a)
    # beyond 2^32-1 a count cannot be stored: refused, naming the cell and gene
    m64 = m.astype(np.int64)
    m64[6, 6] = 2**32
    b = ad.AnnData(X=sp.csr_matrix(m64), obs=obs_frame(10), var=var_frame(8), dtype=np.int64)
    p = tmp_path / "big.h5ad"
    b.write_h5ad(p)
    r = convert(p, tmp_path / "big.dcdb", check=False)
    assert r.returncode == 1 and "exceeds 2^32-1" in r.stderr and "cell 'c6'" in r.stderr and "'G6'" in r.stderr


def test_many_categories(tmp_path):
    n = 70_000
    rng = np.random.default_rng(7)
    m = sp.random(n, 5, density=0.2, format="csr", random_state=1, data_rvs=lambda k: rng.integers(1, 9, k))
    obs = pd.DataFrame({
        "c300": pd.Categorical.from_codes(rng.integers(-1, 300, n).astype(np.int16), [f"t{i}" for i in range(300)]),
        "c70k": pd.Categorical.from_codes(np.arange(n, dtype=np.int32) % 68_000, [f"u{i}" for i in range(68_000)]),
    }, index=[f"cell{i}" for i in range(n)])
    a = ad.AnnData(X=m.astype(np.int32), obs=obs, var=var_frame(5))
    out = roundtrip(tmp_path, a, "--tile-cells", "20000")
    ds = Dataset(out)
    assert ds.columns["c300"][2] == 300 and ds.columns["c70k"][2] == 68_000
    # two obs blocks of 65,536 cells
    assert ds.db.execute("SELECT count(*) FROM cells_blocks WHERE col=1").fetchone()[0] == 2
    ds.close()


def test_unicode(tmp_path):
    obs = pd.DataFrame({
        "label": pd.Categorical(["Zelle ü", "细胞", "🧬 cell", "Zelle ü"]),
        "note": np.array(["naïve", "", "ñ" * 300, "日本語"], dtype=object),
    }, index=["α", "β", "γ", "δ"])
    var = pd.DataFrame(index=["Gène1", "基因2", "G3"])
    a = ad.AnnData(X=sp.csr_matrix(counts(4, 3, seed=8, density=0.9)), obs=obs, var=var)
    out = roundtrip(tmp_path, a)
    ds = Dataset(out)
    assert set(ds.gene_names) == {"Gène1", "基因2", "G3"}
    ds.close()


def test_single_cell(tmp_path):
    a = ad.AnnData(X=sp.csr_matrix(counts(1, 12, seed=9, density=0.9)), obs=obs_frame(1), var=var_frame(12))
    roundtrip(tmp_path, a)


def test_zero_genes(tmp_path):
    a = ad.AnnData(X=sp.csr_matrix((5, 0), dtype=np.int32), obs=obs_frame(5), var=pd.DataFrame(index=[]))
    out = roundtrip(tmp_path, a)
    ds = Dataset(out)
    assert ds.n_genes == 0 and ds.n_cells == 5 and int(ds.meta["nnz"]) == 0
    ds.close()


def test_zero_cells(tmp_path):
    a = ad.AnnData(X=sp.csr_matrix((0, 4), dtype=np.int32), obs=obs_frame(0), var=var_frame(4))
    out = roundtrip(tmp_path, a)
    ds = Dataset(out)
    assert ds.n_cells == 0 and int(ds.meta["n_tiles"]) == 0
    ds.close()


def test_layers_and_raw(tmp_path):
    m = counts(30, 10, seed=10)
    norm = (m / np.maximum(m.sum(1, keepdims=True), 1) * 1e4).astype(np.float32)
    a = ad.AnnData(X=sp.csr_matrix(norm), obs=obs_frame(30), var=var_frame(10))
    a.layers["counts"] = sp.csr_matrix(m)
    raw_m = counts(30, 14, seed=11)
    a.raw = ad.AnnData(X=sp.csr_matrix(raw_m), var=var_frame(14), obs=a.obs)
    p = tmp_path / "norm.h5ad"
    a.write_h5ad(p)
    back = ad.read_h5ad(p)
    # X is normalised: refused, naming the cell and the gene, suggesting the way out
    r = convert(p, tmp_path / "x.dcdb", check=False)
    assert r.returncode == 1
    assert "not an integer count" in r.stderr and "--layer counts" in r.stderr and "--raw" in r.stderr
    assert "cell 'c" in r.stderr and "gene 'G" in r.stderr
    assert not (tmp_path / "x.dcdb").exists()
    # --layer counts
    out = tmp_path / "layer.dcdb"
    convert(p, out, "--layer", "counts")
    ds = Dataset(out)
    check_matrix(ds, [back], [back.layers["counts"]])
    check_obs(ds, [back])
    ds.close()
    # --raw: raw/X with raw/var (14 genes)
    out = tmp_path / "raw.dcdb"
    convert(p, out, "--raw")
    ds = Dataset(out)
    assert ds.n_genes == 14
    rawad = ad.AnnData(X=back.raw.X, obs=back.obs, var=back.raw.var)
    check_matrix(ds, [rawad])
    check_obs(ds, [back])
    ds.close()
    r = convert(p, tmp_path / "nolayer.dcdb", "--layer", "spliced", check=False)
    assert r.returncode == 1 and "no layer 'spliced'" in r.stderr


def test_nullable_columns(tmp_path):
    obs = pd.DataFrame({
        "n_int": pd.array([1, None, 3, -4, None], dtype="Int64"),
        "n_bool": pd.array([True, None, False, True, None], dtype="boolean"),
    }, index=[f"c{i}" for i in range(5)])
    a = ad.AnnData(X=sp.csr_matrix(counts(5, 4, seed=12)), obs=obs, var=var_frame(4))
    out = roundtrip(tmp_path, a)
    ds = Dataset(out)
    assert ds.obs("n_int") == [1, None, 3, -4, None]
    assert ds.obs("n_bool") == [1, None, 0, 1, None]
    assert ds.columns["n_int"][1] == "int" and ds.columns["n_bool"][1] == "bool"
    ds.close()


def test_old_categories_attribute_and_h5sparse(tmp_path):
    """anndata < 0.8: codes with a `categories` object reference into obs/__categories;
    X without encoding-type, with h5sparse_format/h5sparse_shape."""
    m = sp.csr_matrix(counts(6, 5, seed=13))
    p = tmp_path / "old.h5ad"
    with h5py.File(p, "w") as f:
        x = f.create_group("X")
        x.attrs["h5sparse_format"] = "csr"
        x.attrs["h5sparse_shape"] = np.array(m.shape)
        x["data"], x["indices"], x["indptr"] = m.data, m.indices, m.indptr
        obs = f.create_group("obs")
        obs.attrs["encoding-type"] = "dataframe"
        obs.attrs["encoding-version"] = "0.1.0"
        obs.attrs["_index"] = "index"
        obs.attrs.create("column-order", ["kind", "score"], dtype=h5py.string_dtype())
        obs.create_dataset("index", data=np.array([f"o{i}" for i in range(6)], dtype=object),
                           dtype=h5py.string_dtype())
        cats = obs.create_group("__categories")
        cats.create_dataset("kind", data=np.array(["x", "y"], dtype=object), dtype=h5py.string_dtype())
        codes = obs.create_dataset("kind", data=np.array([0, 1, -1, 1, 0, 0], dtype=np.int8))
        codes.attrs["categories"] = cats["kind"].ref
        obs.create_dataset("score", data=np.array([1.5, np.nan, 2, 3, 4, 5]))
        var = f.create_group("var")
        var.attrs["encoding-type"] = "dataframe"
        var.attrs["encoding-version"] = "0.1.0"
        var.attrs["_index"] = "index"
        var.attrs["column-order"] = np.array([], dtype=np.float64)
        var.create_dataset("index", data=np.array([f"g{i}" for i in range(5)], dtype=object),
                           dtype=h5py.string_dtype())
    out = tmp_path / "old.dcdb"
    convert(p, out)
    back = ad.read_h5ad(p)
    assert list(back.obs["kind"].astype(object).fillna("NA")) == ["x", "y", "NA", "y", "x", "x"]
    ds = Dataset(out)
    check_matrix(ds, [back])
    check_obs(ds, [back])
    assert ds.obs("kind") == ["x", "y", None, "y", "x", "x"]
    ds.close()


def test_reserved_obs_names(tmp_path):
    obs = pd.DataFrame({"name": ["a", "b"], "tile": [1, 2], "Cell_ID": [3, 4]}, index=["c0", "c1"])
    a = ad.AnnData(X=sp.csr_matrix(counts(2, 3, seed=14)), obs=obs, var=var_frame(3))
    p = tmp_path / "r.h5ad"
    a.write_h5ad(p)
    out = tmp_path / "r.dcdb"
    convert(p, out)
    ds = Dataset(out)
    assert set(ds.columns) == {"_index", "name_1", "tile_1", "Cell_ID_1"}
    assert ds.obs("name_1") == ["a", "b"] and ds.obs("tile_1") == [1, 2]
    ds.close()


def test_several_inputs_union(tmp_path):
    """Genes joined by name, obs columns united with NULLs, kinds widened, `source`."""
    a = ad.AnnData(X=sp.csr_matrix(counts(30, 6, seed=15)),
                   obs=pd.DataFrame({"ct": pd.Categorical(["B"] * 15 + ["NK"] * 15), "n": np.arange(30),
                                     "mix": np.arange(30), "only_a": np.ones(30)},
                                    index=[f"a{i}" for i in range(30)]),
                   var=pd.DataFrame(index=["G0", "G1", "G2", "G3", "G4", "G5"]))
    b = ad.AnnData(X=sp.csc_matrix(counts(25, 5, seed=16)),
                   obs=pd.DataFrame({"ct": pd.Categorical(["T"] * 5 + ["NK"] * 20), "n": np.arange(25) * 0.5,
                                     "mix": pd.Categorical(["x"] * 25)},
                                    index=[f"b{i}" for i in range(25)]),
                   var=pd.DataFrame(index=["G4", "G9", "G0", "G7", "G8"]))
    pa, pb = tmp_path / "a.h5ad", tmp_path / "b.h5ad"
    a.write_h5ad(pa)
    b.write_h5ad(pb)
    out = tmp_path / "ab.dcdb"
    convert([pa, pb], out, "--tile-cells", "8")
    ds = Dataset(out)
    assert ds.n_cells == 55 and ds.n_genes == 9
    check_matrix(ds, [a, b])
    cols = {k: v[1] for k, v in ds.columns.items()}
    assert cols == {"_index": "text", "ct": "category", "n": "real", "mix": "text", "only_a": "real",
                    "source": "category"}
    assert ds.obs("ct") == ["B"] * 15 + ["NK"] * 15 + ["T"] * 5 + ["NK"] * 20
    assert ds.obs("n") == [float(i) for i in range(30)] + [i * 0.5 for i in range(25)]
    assert ds.obs("mix") == [str(i) for i in range(30)] + ["x"] * 25
    assert ds.obs("only_a") == [1.0] * 30 + [None] * 25
    assert ds.obs("source") == [pa.name] * 30 + [pb.name] * 25  # base names; full paths in dc_meta
    assert ds.obs("_index") == list(a.obs_names) + list(b.obs_names)
    ds.close()
    run("verify", out)


def test_gene_key(tmp_path):
    a = ad.AnnData(X=sp.csr_matrix(counts(10, 3, seed=17)),
                   var=pd.DataFrame({"gene_ids": ["E1", "E2", "E3"]}, index=["A", "B", "C"]))
    b = ad.AnnData(X=sp.csr_matrix(counts(10, 3, seed=18)),
                   var=pd.DataFrame({"gene_ids": ["E3", "E1", "E4"]}, index=["c", "a", "d"]))
    a.obs_names = [f"a{i}" for i in range(10)]
    b.obs_names = [f"b{i}" for i in range(10)]
    pa, pb = tmp_path / "a.h5ad", tmp_path / "b.h5ad"
    a.write_h5ad(pa)
    b.write_h5ad(pb)
    out = tmp_path / "k.dcdb"
    convert([pa, pb], out, "--gene-key", "gene_ids")
    ds = Dataset(out)
    assert sorted(ds.gene_names) == ["E1", "E2", "E3", "E4"]
    check_matrix(ds, [a, b], key="gene_ids")
    # the var index of the first file holding the gene is kept
    vi = dict(zip(ds.gene_names, ds.genes("var_index")))
    assert vi == {"E1": "A", "E2": "B", "E3": "C", "E4": "d"}
    ds.close()
    r = convert([pa], tmp_path / "bad.dcdb", "--gene-key", "nope", check=False)
    assert r.returncode == 1 and "no column 'nope'" in r.stderr


def test_duplicate_gene_names(tmp_path):
    """The k-th repeat of a name joins the k-th repeat in the other file."""
    a = ad.AnnData(X=sp.csr_matrix(np.array([[1, 2, 3]], dtype=np.int32)), var=pd.DataFrame(index=["X", "Y", "X"]))
    b = ad.AnnData(X=sp.csr_matrix(np.array([[10, 20]], dtype=np.int32)), var=pd.DataFrame(index=["X", "X"]))
    a.obs_names, b.obs_names = ["a"], ["b"]
    pa, pb = tmp_path / "a.h5ad", tmp_path / "b.h5ad"
    a.write_h5ad(pa)
    b.write_h5ad(pb)
    out = tmp_path / "d.dcdb"
    convert([pa, pb], out)
    ds = Dataset(out)
    X = ds.X().toarray()
    names = ds.gene_names
    assert sorted(names) == ["X", "X", "Y"]
    # totals: first X = 1 + 10, second X = 3 + 20, Y = 2
    assert sorted(ds.gene_total.tolist()) == [2, 11, 23]
    assert sorted(X[0].tolist()) == [1, 2, 3] and sorted(X[1].tolist()) == [0, 10, 20]
    ds.close()


def test_csc_across_tiles_and_files(tmp_path):
    """CSC inputs whose cells start mid-tile (the transpose spool aligns to dataset tiles)."""
    m1 = counts(13, 9, seed=19)
    m2 = counts(22, 9, seed=20)
    a = ad.AnnData(X=sp.csr_matrix(m1), var=var_frame(9))
    b = ad.AnnData(X=sp.csc_matrix(m2), var=var_frame(9))
    a.obs_names = [f"a{i}" for i in range(13)]
    b.obs_names = [f"b{i}" for i in range(22)]
    pa, pb = tmp_path / "a.h5ad", tmp_path / "b.h5ad"
    a.write_h5ad(pa)
    b.write_h5ad(pb)
    out = tmp_path / "c.dcdb"
    convert([pa, pb, pb], out, "--tile-cells", "5")
    ds = Dataset(out)
    check_matrix(ds, [a, b, b])
    ds.close()


def test_deterministic_output(tmp_path):
    p = tmp_path / "g.h5ad"
    subprocess.run([PY, GEN, "--cells", "700", "--genes", "300", "--seed", "3", "-o", p], check=True,
                   capture_output=True)
    digests = set()
    for i, threads in enumerate(("1", "2", "3")):
        out = tmp_path / f"g{i}.dcdb"
        # the dataset id (the key of the seals) is random unless given
        convert(p, out, "--tile-cells", "100", "--threads", threads, "--dataset-id", "00c0ffee12345678")
        digests.add(hashlib.sha256(out.read_bytes()).hexdigest())
    assert len(digests) == 1
    out = tmp_path / "random-id.dcdb"
    convert(p, out, "--tile-cells", "100")
    assert hashlib.sha256(out.read_bytes()).hexdigest() not in digests


def test_generator_fixture_shape(tmp_path):
    """gen_h5ad.py's output is what the demo and the SQL tests expect."""
    p = tmp_path / "s.h5ad"
    subprocess.run([PY, GEN, "--cells", "500", "--genes", "400", "--seed", "1", "-o", p], check=True,
                   capture_output=True)
    a = ad.read_h5ad(p)
    assert a.shape == (500, 400)
    assert {"cell_type", "donor", "batch", "age", "n_counts", "percent_mt", "is_doublet", "barcode"} <= set(a.obs)
    assert {"B cell", "NK", "CD4 T"} <= set(a.obs["cell_type"].cat.categories)
    assert a.obs["batch"].isna().any() and a.obs["percent_mt"].isna().any()
    assert np.array_equal(np.asarray(a.X.sum(1)).ravel(), a.obs["n_counts"].to_numpy())
    libs = np.asarray(a.X.sum(1)).ravel()
    assert 2000 < libs.mean() < 5000
    out = tmp_path / "s.dcdb"
    convert(p, out, "--tile-cells", "100")
    ds = Dataset(out)
    check_matrix(ds, [a])
    check_obs(ds, [a])
    ds.close()


def test_fixed_length_strings_and_numeric_index(tmp_path):
    """Fixed-length byte strings (numpy 'S') and an integer obs index, written by h5py."""
    m = sp.csr_matrix(counts(4, 3, seed=21, density=0.9))
    p = tmp_path / "fixed.h5ad"
    with h5py.File(p, "w") as f:
        x = f.create_group("X")
        x.attrs["encoding-type"] = "csr_matrix"
        x.attrs["encoding-version"] = "0.1.0"
        x.attrs["shape"] = np.array(m.shape)
        x["data"], x["indices"], x["indptr"] = m.data, m.indices, m.indptr
        for name, n in (("obs", 4), ("var", 3)):
            g = f.create_group(name)
            g.attrs["encoding-type"] = "dataframe"
            g.attrs["encoding-version"] = "0.2.0"
            g.attrs["_index"] = "_index"
            if name == "obs":
                g.attrs.create("column-order", ["code", "ratio"], dtype=h5py.string_dtype())
                g["_index"] = np.array([10, 20, 30, 40], dtype=np.int64)
                g["code"] = np.array([b"AB", b"CDE", b"", b"FGHIJ"], dtype="S5")
                g["ratio"] = np.array([0.5, np.nan, 1.0, -2.0], dtype=np.float32)
            else:
                g.attrs["column-order"] = np.array([], dtype=np.float64)
                g["_index"] = np.array([b"g0", b"g1", b"g2"], dtype="S2")
    out = tmp_path / "fixed.dcdb"
    convert(p, out)
    ds = Dataset(out)
    assert ds.obs("_index") == ["10", "20", "30", "40"]
    assert ds.obs("code") == ["AB", "CDE", "", "FGHIJ"]
    assert ds.obs("ratio") == [0.5, None, 1.0, -2.0]
    assert sorted(ds.gene_names) == ["g0", "g1", "g2"]
    back = ad.read_h5ad(p)
    check_matrix(ds, [back])
    ds.close()


def test_unsupported_obs_column_is_skipped_with_a_warning(tmp_path):
    a = ad.AnnData(X=sp.csr_matrix(counts(5, 3, seed=22)), obs=obs_frame(5), var=var_frame(3))
    p = tmp_path / "w.h5ad"
    a.write_h5ad(p)
    with h5py.File(p, "r+") as f:
        f["obs/matrix_col"] = np.zeros((5, 2))
        order = list(f["obs"].attrs["column-order"]) + ["matrix_col"]
        f["obs"].attrs.create("column-order", order, dtype=h5py.string_dtype())
    out = tmp_path / "w.dcdb"
    r = convert(p, out)
    assert "matrix_col" in r.stderr and "skipped" in r.stderr
    ds = Dataset(out)
    assert "matrix_col" not in ds.columns and "age" in ds.columns
    ds.close()
