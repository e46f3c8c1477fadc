"""deltacells export / genes, and the original gene order (genes.orig_index).

Round trips h5ad -> dataset -> export -> anndata.read_h5ad on synthetic files (several tiles and
chunks, every obs kind, several X dtypes, two inputs with different genes) and on every real file
when ../shared/data/real is there; the subsets (--where, --genes, --obs); the errors; a dataset
written before the original order was recorded; to_anndata(gene_order=...).
"""
import json
import warnings
import os
import sqlite3
import subprocess

import anndata
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _batch_util import REAL, REAL_FILES, connect
from _converter_util import CONVERTER, need_converter

anndata = pytest.importorskip("anndata")


def dc(*args, check=True):
    need_converter()
    p = subprocess.run([CONVERTER, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"deltacells {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def make_adata(n_cells=300, n_genes=60, dtype=np.int32, seed=0, prefix="g", cell_prefix="c"):
    rng = np.random.default_rng(seed)
    # genes of very different totals, in an order unrelated to them (stored order != input order)
    scale = rng.permutation(np.geomspace(0.01, 3, n_genes))
    dense = rng.poisson(scale[None, :] * rng.uniform(0.5, 2, (n_cells, 1))).astype(np.int64)
    dense[:, 3] = 0  # a gene without counts
    dense[7] = 0     # a cell without counts
    X = sp.csr_matrix(dense.astype(dtype))
    cats = pd.Categorical(rng.choice(["T cell", "B cell", "NK"], n_cells),
                          categories=["B cell", "NK", "T cell", "unused"])
    nullable = pd.array([None if i % 11 == 0 else int(i * 3) for i in range(n_cells)], dtype="Int64")
    obs = pd.DataFrame({
        "cell_type": cats,
        "n_counts": dense.sum(1).astype(np.int64),
        "frac": rng.uniform(0, 1, n_cells),
        "flag": rng.uniform(0, 1, n_cells) > 0.5,
        "note": [f"note {i % 7}" for i in range(n_cells)],
        "maybe": nullable,
    }, index=[f"{cell_prefix}{i:05d}" for i in range(n_cells)])
    var = pd.DataFrame({
        "gene_ids": [f"ENSG{i:08d}" for i in range(n_genes)],
        "length": rng.integers(100, 5000, n_genes).astype(np.int64),
        "gc": rng.uniform(0.3, 0.6, n_genes),
        "feature_types": pd.Categorical(rng.choice(["Gene Expression", "Antibody Capture"], n_genes),
                                        categories=["Gene Expression", "Antibody Capture", "CRISPR"]),
    }, index=[f"{prefix}{i:03d}" for i in range(n_genes)])
    return anndata.AnnData(X=X, obs=obs, var=var, dtype=dtype)


def write(ad, path):
    ad.write_h5ad(path)
    return path


def assert_obs_equal(a, b, subset=False):
    """Same index, columns, values; categoricals with the same categories in the same order (a
    subset keeps the dataset's categories, where anndata's a[mask] drops the unused ones)."""
    assert list(b.obs_names) == list(a.obs_names)
    assert list(b.obs.columns) == list(a.obs.columns)
    for c in a.obs.columns:
        x, y = a.obs[c], b.obs[c]
        if isinstance(x.dtype, pd.CategoricalDtype):
            assert isinstance(y.dtype, pd.CategoricalDtype), c
            if subset:
                assert set(x.cat.categories) <= set(y.cat.categories), c
                assert list(y.astype(object)) == list(x.astype(object)), c
            else:
                assert list(y.cat.categories) == list(x.cat.categories), c
                assert np.array_equal(y.cat.codes.values, x.cat.codes.values), c
        elif np.issubdtype(np.asarray(x).dtype, np.floating):
            assert np.allclose(np.asarray(y, dtype=float), np.asarray(x, dtype=float), equal_nan=True, rtol=0, atol=0), c
        else:
            xs = [None if pd.isna(v) else v for v in x.astype(object)]
            ys = [None if pd.isna(v) else v for v in y.astype(object)]
            assert ys == xs, c


def assert_same(a, b, check_dtype=True, subset=False):
    assert b.shape == a.shape
    assert list(b.var_names) == list(a.var_names)
    if check_dtype:
        assert b.X.dtype == a.X.dtype
    assert sp.issparse(b.X) and b.X.format == "csr"
    assert b.X.has_sorted_indices  # scipy checks each row's column order
    d = sp.csr_matrix(b.X, dtype=np.float64) - sp.csr_matrix(a.X, dtype=np.float64)
    assert d.count_nonzero() == 0
    assert_obs_equal(a, b, subset)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    a = make_adata()
    h5 = write(a, d / "a.h5ad")
    db = d / "a.dcdb"
    dc("convert", h5, "-o", db, "--quiet", "--tile-cells", "64", "--chunks", "3")
    return d, a, db


def export(db, out, *opts):
    return dc("export", db, "-o", out, "--quiet", "--force", *opts)


def test_round_trip_synthetic(synth):
    d, a, db = synth
    out = d / "out.h5ad"
    p = dc("export", db, "-o", out, "--force")       # its summary on stdout, as every command's
    assert p.stdout.startswith(f"{out}: ") and "cells x" in p.stdout and p.stderr == "", (p.stdout, p.stderr)
    b = anndata.read_h5ad(out)
    assert_same(a, b)
    # var columns come back (the dataset's own total_counts / n_cells / orig_index do not)
    assert list(b.var.columns) == ["gene_ids", "length", "gc", "feature_types"]
    assert list(b.var["gene_ids"]) == list(a.var["gene_ids"])
    # a categorical var column comes back categorical, with its categories in order (unused kept)
    assert list(b.var["feature_types"].cat.categories) == list(a.var["feature_types"].cat.categories)
    assert np.array_equal(b.var["feature_types"].cat.codes.values, a.var["feature_types"].cat.codes.values)
    assert np.array_equal(b.var["length"].values, a.var["length"].values)
    assert np.array_equal(b.var["gc"].values, a.var["gc"].values)
    assert str(b.obs["maybe"].dtype) == "Int64"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.uint16, np.int64, np.int8, np.uint8,
                                   np.int16, np.int32, np.uint32, np.uint64])
def test_dtype_kept(tmp_path, dtype):
    """export and to_anndata give X the input's dtype (dc_meta x_dtype); to_anndata gave int32
    whatever the input had."""
    import deltacells
    a = make_adata(n_cells=120, n_genes=30, dtype=dtype, seed=3)
    db = tmp_path / "d.dcdb"
    dc("convert", write(a, tmp_path / "a.h5ad"), "-o", db, "--quiet", "--tile-cells", "50")
    export(db, tmp_path / "o.h5ad")
    b = anndata.read_h5ad(tmp_path / "o.h5ad")
    assert b.X.dtype == np.dtype(dtype)
    assert_same(a, b)
    t = deltacells.to_anndata(str(db), gene_order="original")
    assert t.X.dtype == np.dtype(dtype) and list(t.var_names) == list(a.var_names)
    assert (sp.csr_matrix(t.X, dtype=np.float64) != sp.csr_matrix(a.X, dtype=np.float64)).nnz == 0
    # a subset: the same dtype (every count of a gene panel and a where read the same way)
    s = deltacells.to_anndata(str(db), where="cell_id < 40", genes=list(a.var_names[:5]))
    assert s.X.dtype == np.dtype(dtype)
    want = sp.csr_matrix(a.X, dtype=np.float64)[:40][:, :5]
    assert (sp.csr_matrix(s.X, dtype=np.float64) != want).nnz == 0


def test_float16_round_trip(tmp_path):
    """An h5ad whose X and number columns are float16 comes back so: export wrote X as int32 (dc_meta
    x_dtype float16 was a name it did not know) and the obs and var columns as float64, and
    to_anndata gave the columns as float64.  Values are equal: counts up to 2048 and the larger
    ones float16 holds (4096, 65504), columns with fractions.  Two float16 inputs stay float16."""
    import h5py
    import deltacells

    def adata(seed):
        a = make_adata(n_cells=70, n_genes=12, dtype=np.float16, seed=seed, cell_prefix=f"h{seed}c")
        X = a.X.astype(np.float32).toarray()          # (scipy cannot index or densify float16)
        X[1, 2], X[2, 5], X[3, 0] = 2048, 4096, 65504
        rng = np.random.default_rng(seed)
        a.obs["h16"] = rng.uniform(-10, 10, 70).astype(np.float16)
        a.var["v16"] = np.linspace(0, 1, 12).astype(np.float16)
        a = anndata.AnnData(X=sp.csr_matrix(X.astype(np.float16)), obs=a.obs, var=a.var, dtype=np.float16)
        path = write(a, tmp_path / f"h{seed}.h5ad")
        assert anndata.read_h5ad(path).X.dtype == np.float16
        return path, a

    (p1, a1), (p2, a2) = adata(1), adata(2)
    one, two = tmp_path / "one.dcdb", tmp_path / "two.dcdb"
    dc("convert", p1, "-o", one, "--quiet", "--tile-cells", "32")
    dc("convert", p1, p2, "-o", two, "--quiet", "--tile-cells", "32")
    for db, parts in ((one, [a1]), (two, [a1, a2])):
        b, t = exported_and_loaded(db, tmp_path)
        assert b.X.dtype == np.float16
        with h5py.File(tmp_path / "o.h5ad") as f:   # numpy's float16, as h5py writes it
            assert f["X/data"].dtype == np.float16 and f["obs/h16"].dtype == np.float16
        want = np.vstack([a.X.astype(np.float64).toarray() for a in parts])
        names = [n for a in parts for n in a.obs_names]
        got = pd.DataFrame(b.X.astype(np.float64).toarray(), index=b.obs_names, columns=b.var_names)
        assert np.array_equal(got.loc[names, a1.var_names].values, want)
        for x in (b, t):
            assert x.obs["h16"].dtype == np.float16 and x.var["v16"].dtype == np.float16
            assert x.obs["h16"].loc[names].tolist() == [v for a in parts for v in a.obs["h16"].tolist()]
            assert x.var["v16"].loc[a1.var_names].equals(a1.var["v16"])
        v = dc("verify", db, check=False)
        assert v.returncode == 0, v.stdout + v.stderr
    # a float16 column annotate adds (deltacells.annotate gives its --schema) comes back so too
    deltacells.annotate(str(one), pd.DataFrame({"q16": np.array([1.5, -2.25], dtype=np.float16)},
                                               index=a1.obs_names[:2]))
    for x in exported_and_loaded(one, tmp_path):
        assert x.obs["q16"].dtype == np.float16 and x.obs["q16"].iloc[:2].tolist() == [1.5, -2.25]


def wrong_x_dtype(tmp_path, count, x_dtype, big_dtype=np.int32):
    """A dataset of counts [[1, count, 0], [0, 3, 7]] whose dc_meta x_dtype is set to x_dtype."""
    X = sp.csr_matrix(np.array([[1, count, 0], [0, 3, 7]], dtype=big_dtype))
    a = anndata.AnnData(X=X, obs=pd.DataFrame(index=["a", "b"]), var=pd.DataFrame(index=["G0", "G1", "G2"]),
                        dtype=big_dtype)
    db = tmp_path / f"w_{x_dtype}.dcdb"
    dc("convert", write(a, tmp_path / "w.h5ad"), "-o", db, "--quiet")
    con = sqlite3.connect(db)
    con.execute("UPDATE dc_meta SET value = ? WHERE key = 'x_dtype'", (x_dtype,))
    con.commit()
    con.close()
    return db


# (x_dtype, a count it does not hold): past an integer's range; between two floats' values;
# beyond a float's largest
NOT_HELD = [("int8", 1000), ("uint8", 256), ("int16", 40000), ("uint16", 70000), ("int32", 2**31),
            ("float16", 2049), ("float16", 131072), ("float32", 2**24 + 1)]


@pytest.mark.parametrize("x_dtype,count", NOT_HELD)
def test_count_x_dtype_cannot_hold_is_refused(tmp_path, x_dtype, count):
    """A dc_meta x_dtype that cannot hold a stored count (only a wrong x_dtype gives one: the
    converter records the type the input's counts were in): export refuses it naming the
    dataset, the count and the dtype, and writes nothing (it already did so); to_anndata, which
    now gives X the recorded dtype, refuses it the same way: a ValueError, never a wrapped or
    rounded count.  Also through sqlite3's blobs (no ticket path)."""
    import deltacells
    from deltacells import _core
    db = wrong_x_dtype(tmp_path, count, x_dtype, np.int64 if count > 2**31 - 1 else np.int32)
    out = tmp_path / "bad.h5ad"
    p = dc("export", db, "-o", out, check=False)
    assert p.returncode == 1, p.stderr
    assert str(db) in p.stderr and f"count of {count}," in p.stderr and f"dtype {x_dtype} " in p.stderr, p.stderr
    assert "x_dtype" in p.stderr and not out.exists(), p.stderr
    with pytest.raises(ValueError, match=rf"cell 0 has a count of {count}, which X's dtype {x_dtype} "
                                         r"\(dc_meta.x_dtype\) does not hold") as e:
        deltacells.to_anndata(str(db))
    assert str(db) in str(e.value) and ("exactly" in str(e.value)) == x_dtype.startswith("float")
    with pytest.raises(ValueError, match=rf"count of {count}, which X's dtype {x_dtype} "):
        deltacells.to_anndata(str(db), genes=["G1"], where="cell_id = 0")
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(_core, "_ticket_take_fn", lambda: None)
        with pytest.raises(ValueError, match=rf"count of {count}, which X's dtype {x_dtype} "):
            deltacells.to_anndata(str(db))
    finally:
        mp.undo()
    # the cells without it read well, in the recorded dtype
    ok = deltacells.to_anndata(str(db), where="cell_id = 1", gene_order="original")
    assert ok.X.dtype == np.dtype(x_dtype) and ok.X.astype(np.float64).toarray().tolist() == [[0, 3, 7]]


@pytest.mark.parametrize("x_dtype", [None, "bool", "int12"])
def test_x_dtype_absent_or_unknown(tmp_path, x_dtype):
    """Without dc_meta x_dtype (a dataset written before it was recorded), or with a name the
    converter's dtype table lacks, export and to_anndata both give int32 (int64 where a gene's
    total passes 2^31-1: test_large_counts.py); verify reports an unknown name."""
    import deltacells
    db = wrong_x_dtype(tmp_path, 1000, x_dtype or "int32")
    if x_dtype is None:
        con = sqlite3.connect(db)
        con.execute("DELETE FROM dc_meta WHERE key = 'x_dtype'")
        con.commit()
        con.close()
    p = export(db, tmp_path / "o.h5ad")
    b = anndata.read_h5ad(tmp_path / "o.h5ad")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = deltacells.to_anndata(str(db), gene_order="original")
    said = [str(x.message) for x in w if "x_dtype" in str(x.message)]
    if x_dtype is None:   # an older dataset: nothing to say
        assert "x_dtype" not in p.stderr and not said
    else:                 # a name this version does not know: said, not silent
        assert f"dc_meta.x_dtype '{x_dtype}' is not a dtype this version knows; X is written as int32" in p.stderr
        assert said and f"{x_dtype!r} is not a dtype this version knows; X is given as int32" in said[0]
    assert b.X.dtype == t.X.dtype == np.int32
    assert b.X.toarray().tolist() == t.X.toarray().tolist() == [[1, 1000, 0], [0, 3, 7]]
    v = dc("verify", db, check=False)
    if x_dtype is None:
        assert v.returncode == 0, v.stderr
    else:
        assert v.returncode == 1 and f"dc_meta.x_dtype is '{x_dtype}', which is not a dtype" in v.stderr, v.stderr


@pytest.mark.parametrize("count", [2049, 131072])
def test_float16_count_it_cannot_hold_is_refused(tmp_path, count):
    """X of dtype float16 with a count float16 does not hold exactly (2049 lies between two of its
    values; 131072 is beyond its largest, 65504) is an error naming the dataset, the count and
    why, and nothing is written: a rounded count (or an infinity) would be a wrong value.  Only
    a wrong dc_meta x_dtype gives one: float16 inputs hold their counts."""
    X = sp.csr_matrix(np.array([[1, count, 0], [0, 3, 7]], dtype=np.int32))
    a = anndata.AnnData(X=X, obs=pd.DataFrame(index=["a", "b"]), var=pd.DataFrame(index=["G0", "G1", "G2"]),
                        dtype=np.int32)
    db = tmp_path / "i.dcdb"
    dc("convert", write(a, tmp_path / "i.h5ad"), "-o", db, "--quiet")
    con = sqlite3.connect(db)
    con.execute("UPDATE dc_meta SET value = 'float16' WHERE key = 'x_dtype'")
    con.commit()
    con.close()
    out = tmp_path / "bad.h5ad"
    p = dc("export", db, "-o", out, check=False)
    assert p.returncode == 1, p.stderr
    assert str(db) in p.stderr and f"count of {count}" in p.stderr and "float16" in p.stderr, p.stderr
    assert "does not hold exactly" in p.stderr and "x_dtype" in p.stderr, p.stderr
    assert not out.exists()


def test_stored_order_differs_and_genes_command(synth):
    d, a, db = synth
    g = json.loads(dc("genes", db, "--json").stdout)
    assert g["original_order"] == "recorded" and g["n_genes"] == a.n_vars
    rows = g["genes"]
    assert [r["gene_id"] for r in rows] == list(range(a.n_vars))
    totals = np.asarray(a.X.sum(0)).ravel()
    for r in rows:  # orig_index is the place in the input's var; totals and n_cells agree
        assert a.var_names[r["orig_index"]] == r["name"]
        assert r["total_counts"] == totals[r["orig_index"]]
        assert r["n_cells"] == (a.X[:, r["orig_index"]] != 0).sum()
    assert [r["orig_index"] for r in rows] != list(range(a.n_vars))  # the test means something
    orig = json.loads(dc("genes", db, "--json", "--order", "original").stdout)["genes"]
    assert [r["name"] for r in orig] == list(a.var_names)
    text = dc("genes", db).stdout.splitlines()
    assert text[0].split("\t") == ["gene_id", "orig_index", "name", "total_counts", "n_cells"]
    assert len(text) == a.n_vars + 1
    # the genes virtual table shows the column
    con = connect(db)
    got = con.execute("SELECT name FROM genes ORDER BY orig_index").fetchall()
    assert [r[0] for r in got] == list(a.var_names)
    # --order stored: X in the stored order
    export(db, d / "stored.h5ad", "--order", "stored")
    b = anndata.read_h5ad(d / "stored.h5ad")
    assert list(b.var_names) == [r["name"] for r in rows]
    assert (sp.csr_matrix(b.X) - sp.csr_matrix(a[:, [r["name"] for r in rows]].X)).count_nonzero() == 0


def test_where_genes_obs_subsets(synth):
    d, a, db = synth
    out = d / "w.h5ad"
    export(db, out, "--where", "cell_type = 'NK' AND frac > 0.3")
    b = anndata.read_h5ad(out)
    m = ((a.obs.cell_type == "NK") & (a.obs.frac > 0.3)).values
    assert 0 < m.sum() < a.n_obs
    assert_same(a[m].copy(), b, subset=True)
    # genes from a file, in the file's order (a blank line is skipped)
    pick = [a.var_names[i] for i in (17, 2, 40, 3, 0)]
    (d / "genes.txt").write_text("\n".join(pick[:2]) + "\n\n" + "\n".join(pick[2:]) + "\n")
    export(db, out, "--genes", d / "genes.txt", "--obs", "flag,cell_type", "--where", "cell_id % 3 = 0")
    b = anndata.read_h5ad(out)
    rows = np.arange(a.n_obs) % 3 == 0
    assert list(b.var_names) == pick
    assert list(b.obs.columns) == ["flag", "cell_type"]
    exp = a[rows][:, pick].copy()
    assert (sp.csr_matrix(b.X, dtype=np.int64) - sp.csr_matrix(exp.X, dtype=np.int64)).count_nonzero() == 0
    assert list(b.obs_names) == list(exp.obs_names)
    assert list(b.obs.cell_type.cat.categories) == list(a.obs.cell_type.cat.categories)
    assert list(b.obs.flag) == list(exp.obs.flag)
    # the same file saved with a UTF-8 byte-order mark (Excel, PowerShell): its first gene was
    # "not in the dataset" ('\ufeff' + name)
    (d / "bom.txt").write_bytes(b"\xef\xbb\xbf" + (d / "genes.txt").read_bytes())
    export(db, out, "--genes", d / "bom.txt")
    assert list(anndata.read_h5ad(out).var_names) == pick
    # no cells, no obs columns
    export(db, out, "--where", "0", "--obs", "")
    b = anndata.read_h5ad(out)
    assert b.shape == (0, a.n_vars) and list(b.obs.columns) == []


def test_obs_list_names_a_column_with_spaces_around_its_name(tmp_path):
    """--obs trimmed every name in its list, so a column named ' sp ace' (pandas keeps such
    names) could not be asked for; a name as it is comes first, trimmed ones after."""
    a = make_adata(n_cells=20, n_genes=6)
    a.obs[" sp ace"] = np.arange(20, dtype=np.int64)
    db = tmp_path / "s.dcdb"
    dc("convert", write(a, tmp_path / "s.h5ad"), "-o", db, "--quiet")
    export(db, tmp_path / "o.h5ad", "--obs", " sp ace,cell_type")
    b = anndata.read_h5ad(tmp_path / "o.h5ad")
    assert list(b.obs.columns) == [" sp ace", "cell_type"]
    assert list(b.obs[" sp ace"]) == list(range(20))
    export(db, tmp_path / "o.h5ad", "--obs", "frac , cell_type")     # spaces around a list's names
    assert list(anndata.read_h5ad(tmp_path / "o.h5ad").obs.columns) == ["frac", "cell_type"]


@pytest.mark.parametrize("opts, words", [
    (["--where", "no_such_column > 1"], ["--where", "no such column: no_such_column"]),
    (["--where", "cell_type = "], ["--where", "syntax error"]),
    (["--where", "1; DROP TABLE cells"], ["--where", "syntax error"]),
    (["--where", "1) UNION SELECT 5 --"], ["--where", "syntax error"]),
    (["--obs", "cell_type,bogus"], ["--obs", "unknown obs column 'bogus'", "cell_type", "frac"]),
    (["--obs", "flag,flag"], ["--obs", "named twice"]),
    (["--order", "sideways"], ["--order", "sideways"]),
])
def test_errors(synth, opts, words):
    d, a, db = synth
    out = d / "err.h5ad"
    p = dc("export", db, "-o", out, "--force", *opts, check=False)
    assert p.returncode == 1, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)
    assert not out.exists()
    assert not [f for f in os.listdir(d) if f.startswith(".err.h5ad.tmp")]


def test_unknown_gene_and_existing_output(synth):
    d, a, db = synth
    (d / "bad.txt").write_text(f"{a.var_names[0]}\nNOPE\n")
    p = dc("export", db, "-o", d / "bad.h5ad", "--genes", d / "bad.txt", check=False)
    assert p.returncode == 1 and "line 2: gene 'NOPE' is not in the dataset" in p.stderr
    (d / "case.txt").write_text(a.var_names[5].upper() + "\n")
    p = dc("export", db, "-o", d / "bad.h5ad", "--genes", d / "case.txt", check=False)
    assert p.returncode == 1 and f"did you mean '{a.var_names[5]}'" in p.stderr
    (d / "twice.txt").write_text(f"{a.var_names[1]}\n{a.var_names[1]}\n")
    p = dc("export", db, "-o", d / "bad.h5ad", "--genes", d / "twice.txt", check=False)
    assert p.returncode == 1 and "listed more often" in p.stderr
    (d / "exists.h5ad").write_text("keep me")
    p = dc("export", db, "-o", d / "exists.h5ad", check=False)
    assert p.returncode == 1 and "exists (use --force" in p.stderr
    assert (d / "exists.h5ad").read_text() == "keep me"
    p = dc("export", d / "exists.h5ad", "-o", d / "x.h5ad", check=False)
    assert p.returncode == 1 and "not a deltacells dataset" in p.stderr


def test_a_killed_exports_temporary_file_is_removed(synth, tmp_path):
    """`.OUT.tmp-PID` left by an export that was killed (SIGKILL: no cleanup) is removed by the
    next export to OUT, once PID is gone; one whose process lives (a concurrent export) stays."""
    import signal
    import time
    d, a, db = synth
    out = tmp_path / "o.h5ad"
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    stale = tmp_path / f".o.h5ad.tmp-{dead.pid}"
    live = tmp_path / f".o.h5ad.tmp-{os.getpid()}"
    other = tmp_path / f".p.h5ad.tmp-{dead.pid}"        # another output's: not ours to remove
    for f in (stale, live, other):
        f.write_bytes(b"\x89HDF half written")
    p = dc("export", db, "-o", out, "--force")
    assert "removed" in p.stderr and str(stale.name) in p.stderr, p.stderr
    assert not stale.exists() and live.exists() and other.exists()
    assert anndata.read_h5ad(out).shape == a.shape
    # a real kill: the next export cleans up after it
    big = tmp_path / "big.h5ad"
    write(make_adata(n_cells=20000, n_genes=400, seed=3), big)
    bdb = tmp_path / "big.dcdb"
    dc("convert", big, "-o", bdb, "--quiet")
    for delay in (0.05, 0.1, 0.2, 0.4):
        q = subprocess.Popen([str(CONVERTER), "export", str(bdb), "-o", str(out), "--force", "--quiet"])
        time.sleep(delay)
        q.send_signal(signal.SIGKILL)
        q.wait()
        if q.returncode == -signal.SIGKILL and (tmp_path / f".o.h5ad.tmp-{q.pid}").exists():
            break
    else:
        pytest.skip("the export finished before every kill")
    export(db, out)
    assert not (tmp_path / f".o.h5ad.tmp-{q.pid}").exists()


def test_two_inputs_union_order(tmp_path):
    a = make_adata(n_cells=90, n_genes=20, seed=5, cell_prefix="a")
    b = make_adata(n_cells=70, n_genes=25, seed=6, cell_prefix="b")
    # b: half of a's genes (in another order) and genes of its own
    names = list(reversed(a.var_names[:10])) + [f"new{i}" for i in range(15)]
    b.var_names = names
    b.var["gene_ids"] = [f"X{i}" for i in range(25)]
    del b.obs["note"]  # a text column only a has: NULL for b's cells
    db = tmp_path / "ab.dcdb"
    dc("convert", write(a, tmp_path / "a.h5ad"), write(b, tmp_path / "b.h5ad"), "-o", db, "--quiet",
       "--tile-cells", "40")
    export(db, tmp_path / "o.h5ad")
    o = anndata.read_h5ad(tmp_path / "o.h5ad")
    union = list(a.var_names) + [n for n in b.var_names if n not in set(a.var_names)]
    assert list(o.var_names) == union
    exp = anndata.concat([a, b], join="outer")[:, union]
    assert (sp.csr_matrix(o.X, dtype=np.int64) - sp.csr_matrix(exp.X, dtype=np.int64)).count_nonzero() == 0
    assert list(o.obs_names) == list(a.obs_names) + list(b.obs_names)
    assert list(o.obs["source"].astype(str)) == ["a.h5ad" if n.startswith("a") else "b.h5ad" for n in o.obs_names] \
        or set(o.obs["source"].cat.categories) == {str(tmp_path / "a.h5ad"), str(tmp_path / "b.h5ad")}
    # the text column with NULLs comes back as a categorical with missing values (anndata 0.8 has
    # no nullable strings), never as '' for the missing ones
    note = o.obs["note"]
    assert isinstance(note.dtype, pd.CategoricalDtype)
    assert list(note[:90].astype(str)) == list(a.obs["note"])
    assert note[90:].isna().all()
    # var columns: a gene takes the values of the first input that has it
    assert list(o.var["gene_ids"][:20]) == list(a.var["gene_ids"])
    assert list(o.var["gene_ids"][20:]) == [f"X{i}" for i in range(10, 25)]


def test_old_dataset_without_original_order(tmp_path):
    # a dataset written before the original order was recorded: neither dc_meta gene_order
    # nor the genes column orig_index (the last column when the input has no var columns)
    a = make_adata()
    a.var = a.var[[]]
    old = tmp_path / "old.dcdb"
    dc("convert", write(a, tmp_path / "a.h5ad"), "-o", old, "--quiet", "--tile-cells", "64", "--chunks", "3")
    half = tmp_path / "half.dcdb"       # the column gone, dc_meta still saying it is there
    half.write_bytes(old.read_bytes())
    for path, keys in ((half, "'x_dtype'"), (old, "'gene_order', 'x_dtype'")):
        con = sqlite3.connect(path)
        (c,) = con.execute("SELECT col FROM genes_columns WHERE name = 'orig_index'").fetchone()
        assert c == con.execute("SELECT max(col) FROM genes_columns").fetchone()[0]
        con.execute(f"DELETE FROM dc_meta WHERE key IN ({keys})")
        con.execute(f"DELETE FROM genes_blocks WHERE col = {c}")
        con.execute(f"DELETE FROM genes_columns WHERE col = {c}")
        con.commit()
        con.close()
    assert dc("verify", old, check=False).returncode == 0
    for cmd in (("verify", half), ("export", half, "-o", tmp_path / "h.h5ad"), ("genes", half)):
        p = dc(*cmd, check=False)
        assert p.returncode != 0 and "the genes table has no orig_index column" in p.stderr, p.stderr
    p = dc("genes", old)
    assert "records no original gene order" in p.stdout
    rows = json.loads(dc("genes", old, "--json").stdout)["genes"]
    assert all(r["orig_index"] == r["gene_id"] for r in rows)
    export(old, tmp_path / "o.h5ad")
    b = anndata.read_h5ad(tmp_path / "o.h5ad")
    stored = [r["name"] for r in rows]
    assert list(b.var_names) == stored and b.X.dtype == np.int32
    assert (sp.csr_matrix(b.X) - sp.csr_matrix(a[:, stored].X)).count_nonzero() == 0


@pytest.mark.parametrize("damage,said", [
    ("DELETE FROM dc_meta WHERE key = 'gene_order'", "has an orig_index column, but dc_meta.gene_order is missing"),
    ("UPDATE dc_meta SET value = 'sorted' WHERE key = 'gene_order'", "gene_order is"),
])
def test_gene_order_record_damaged(synth, tmp_path, damage, said):
    """dc_meta.gene_order and genes.orig_index are written together: one without the other
    (or an order this version does not know) is an error naming it in export, genes,
    to_anndata(gene_order='original') and verify, never the stored order in silence (export
    wrote the stored order before); the stored order can still be asked for."""
    import deltacells
    d, a, db = synth
    bad = tmp_path / "bad.dcdb"
    bad.write_bytes(db.read_bytes())
    con = sqlite3.connect(bad)
    con.execute(damage)
    con.commit()
    con.close()
    for args in (("export", bad, "-o", tmp_path / "o.h5ad"), ("genes", bad)):
        p = dc(*args, check=False)
        assert p.returncode != 0 and said in p.stderr and "gene order is unknown" in p.stderr, p.stderr
    assert not (tmp_path / "o.h5ad").exists()
    p = dc("verify", bad, check=False)
    assert p.returncode != 0 and said in p.stderr, p.stderr
    with pytest.raises(ValueError, match="gene order is unknown"):
        deltacells.to_anndata(str(bad), gene_order="original")
    export(bad, tmp_path / "s.h5ad", "--order", "stored")
    s = anndata.read_h5ad(tmp_path / "s.h5ad")
    assert sorted(s.var_names) == sorted(a.var_names) and list(s.var_names) != list(a.var_names)
    assert list(deltacells.to_anndata(str(bad)).var_names) == list(s.var_names)


def test_to_anndata_gene_order(synth):
    import deltacells
    d, a, db = synth
    b = deltacells.to_anndata(str(db), gene_order="original")
    assert list(b.var_names) == list(a.var_names)
    assert (sp.csr_matrix(b.X, dtype=np.int64) - sp.csr_matrix(a.X, dtype=np.int64)).count_nonzero() == 0
    s = deltacells.to_anndata(str(db))  # default: stored (as before)
    assert list(s.var_names) != list(a.var_names)
    assert sorted(s.var_names) == sorted(a.var_names)
    assert (sp.csr_matrix(s.X, dtype=np.int64) - sp.csr_matrix(a[:, list(s.var_names)].X, dtype=np.int64)).count_nonzero() == 0
    w = deltacells.to_anndata(str(db), where="cell_type = 'B cell'", gene_order="original")
    m = (a.obs.cell_type == "B cell").values
    assert list(w.var_names) == list(a.var_names)
    assert (sp.csr_matrix(w.X, dtype=np.int64) - sp.csr_matrix(a[m].X, dtype=np.int64)).count_nonzero() == 0
    with pytest.raises(ValueError, match="gene_order"):
        deltacells.to_anndata(str(db), gene_order="sideways")


@pytest.mark.parametrize("name", REAL_FILES)
def test_round_trip_real(tmp_path, name):
    src = REAL / name
    if not src.exists():
        pytest.skip(f"real data not present: {src}")
    db = tmp_path / "r.dcdb"
    dc("convert", src, "-o", db, "--quiet")
    export(db, tmp_path / "r.h5ad")
    a = anndata.read_h5ad(src)
    b = anndata.read_h5ad(tmp_path / "r.h5ad")
    raw_names = list(a.var_names)
    stripped = [n.strip() if n.strip() else n for n in raw_names]
    # the converter strips surrounding whitespace of gene names by default (with a note): the
    # export has the stored names; --keep-gene-whitespace keeps them exact
    a.var_names = stripped
    assert_same(a, b)
    for c in a.var.columns:
        assert list(b.var[c].astype(str)) == list(a.var[c].astype(str)), c
    if stripped != raw_names:
        dc("convert", src, "-o", db, "--quiet", "--force", "--keep-gene-whitespace")
        export(db, tmp_path / "k.h5ad")
        a.var_names = raw_names
        assert_same(a, anndata.read_h5ad(tmp_path / "k.h5ad"))


def test_many_genes_per_cell(tmp_path):
    """Cells of hundreds of genes among thousands: the per-cell reordering's radix path (two
    passes over 12 column bits) against anndata, whole and through --genes."""
    rng = np.random.default_rng(9)
    n, g = 150, 3000
    X = sp.random(n, g, density=0.12, format="csr", random_state=1, data_rvs=lambda k: rng.integers(1, 50, k))
    X = sp.csr_matrix(X.astype(np.int32))
    a = anndata.AnnData(X=X, obs=pd.DataFrame(index=[f"c{i}" for i in range(n)]),
                        var=pd.DataFrame(index=[f"g{i}" for i in rng.permutation(g)]), dtype=np.int32)
    db = tmp_path / "m.dcdb"
    dc("convert", write(a, tmp_path / "m.h5ad"), "-o", db, "--quiet", "--tile-cells", "64")
    export(db, tmp_path / "o.h5ad")
    b = anndata.read_h5ad(tmp_path / "o.h5ad")
    assert_same(a, b)
    assert np.diff(b.X.indptr).max() > 48
    pick = list(a.var_names[::-7])
    (tmp_path / "g.txt").write_text("\n".join(pick) + "\n")
    export(db, tmp_path / "p.h5ad", "--genes", tmp_path / "g.txt")
    p = anndata.read_h5ad(tmp_path / "p.h5ad")
    assert list(p.var_names) == pick
    assert (sp.csr_matrix(p.X) - sp.csr_matrix(a[:, pick].X)).count_nonzero() == 0
    assert p.X.has_sorted_indices


def test_gene_key_round_trip(tmp_path):
    """--gene-key: genes are named by the key, but export gives back the input's var index
    (the var_index column) and keeps the key as the var column it was."""
    a = make_adata(n_cells=50, n_genes=20, seed=4)
    db = tmp_path / "k.dcdb"
    dc("convert", write(a, tmp_path / "k.h5ad"), "-o", db, "--quiet", "--gene-key", "gene_ids")
    con = connect(db)
    assert con.execute("SELECT name FROM genes WHERE orig_index = 0").fetchone()[0] == "ENSG00000000"
    con.close()
    export(db, tmp_path / "o.h5ad")
    b = anndata.read_h5ad(tmp_path / "o.h5ad")
    assert_same(a, b)
    assert list(b.var.columns) == ["gene_ids", "length", "gc", "feature_types"]
    assert list(b.var["gene_ids"]) == list(a.var["gene_ids"])


def test_export_after_append_equals_convert_together(tmp_path):
    """convert a + append b, exported, equals convert a b exported: the appended genes take
    their places in the original (union) order, and tiles written before the append (of fewer
    genes) export too"""
    rng = np.random.default_rng(5)
    def make(n, genes, name):
        X = sp.random(n, len(genes), density=0.2, format="csr", random_state=int(rng.integers(1 << 30)),
                      data_rvs=lambda k: rng.integers(1, 30, k)).astype(np.int32)
        obs = pd.DataFrame({"kind": pd.Categorical(rng.choice(["x", "y"], n))}, index=[f"{name}{i}" for i in range(n)])
        return write(anndata.AnnData(X=sp.csr_matrix(X), obs=obs, var=pd.DataFrame(index=genes), dtype=np.int32),
                     tmp_path / f"{name}.h5ad")
    a = make(300, [f"g{i}" for i in range(120)], "a")
    b = make(200, [f"g{i}" for i in range(60, 200)], "b")     # 60 shared, 80 new genes
    ap, ab = tmp_path / "ap.dcdb", tmp_path / "ab.dcdb"
    dc("convert", a, "-o", ap, "--quiet", "--tile-cells", "128")
    dc("append", ap, b, "--quiet")
    dc("convert", a, b, "-o", ab, "--quiet", "--tile-cells", "128")
    export(ap, tmp_path / "ap.h5ad")
    export(ab, tmp_path / "ab.h5ad")
    x, y = anndata.read_h5ad(tmp_path / "ap.h5ad"), anndata.read_h5ad(tmp_path / "ab.h5ad")
    assert list(x.var_names) == list(y.var_names) == [f"g{i}" for i in range(200)]
    assert_same(y, x)


def test_columns_stored_under_another_name_get_it_back(tmp_path):
    """obs columns named like the cells table's own (cell_id, name, tile) or like another column
    but for case (cellType / celltype), and var columns named like the genes table's own, are
    stored as NAME_1; export and to_anndata give them their names back (the dataset keeps them in
    dc_meta obs_names / var_names), also after append and merge, unless a column written has
    that name already (to_anndata's own var columns, cell_id=True)."""
    import deltacells
    a = make_adata(n_cells=40, n_genes=12)
    a.obs = pd.DataFrame({"cell_id": np.arange(40) + 100, "name": [f"n{i}" for i in range(40)],
                          "tile": np.arange(40) % 3, "cellType": pd.Categorical(["T", "B"] * 20),
                          "celltype": np.linspace(0, 1, 40)}, index=a.obs_names)
    a.var = pd.DataFrame({"gene_id": [f"E{i}" for i in range(12)], "n_cells": np.arange(12),
                          "total_counts": np.arange(12) * 0.5}, index=a.var_names)
    db = tmp_path / "r.dcdb"
    p = dc("convert", write(a, tmp_path / "r.h5ad"), "-o", db)
    assert "column 'cell_id' is stored as 'cell_id_1'" in p.stderr and "'celltype' is stored as 'celltype_1'" in p.stderr
    con = connect(str(db))
    cols = [r[0] for r in con.execute("SELECT name FROM cells_columns WHERE col > 0 ORDER BY col")]
    assert cols == ["cell_id_1", "name_1", "tile_1", "cellType", "celltype_1"]
    con.close()
    export(db, tmp_path / "out.h5ad")
    b = anndata.read_h5ad(tmp_path / "out.h5ad")
    assert_same(a, b)
    assert list(b.var.columns) == ["gene_id", "n_cells", "total_counts"]
    assert np.array_equal(b.var["n_cells"].values, a.var["n_cells"].values)
    export(db, tmp_path / "sub.h5ad", "--obs", "tile,cell_id_1")   # a stored name or the input's
    assert list(anndata.read_h5ad(tmp_path / "sub.h5ad").obs.columns) == ["tile", "cell_id"]
    t = deltacells.to_anndata(str(db), gene_order="original")
    assert list(t.obs.columns) == list(a.obs.columns)
    assert np.array_equal(t.obs["cell_id"].values, a.obs["cell_id"].values)
    assert list(t.var.columns) == ["gene_id", "total_counts", "n_cells", "orig_index", "gene_id_1",
                                   "n_cells_1", "total_counts_1"]   # the dataset's own come first
    t = deltacells.to_anndata(str(db), cell_id=True)
    assert list(t.obs.columns) == ["cell_id_1", "name", "tile", "cellType", "celltype", "cell_id"]
    # append and merge keep the names; the appended file's cells have the same columns
    dc("append", db, tmp_path / "r.h5ad")
    dc("merge", db, db, "-o", tmp_path / "m.dcdb")
    for d in (db, tmp_path / "m.dcdb"):
        export(d, tmp_path / "o2.h5ad")
        b = anndata.read_h5ad(tmp_path / "o2.h5ad")
        assert [c for c in b.obs.columns if c != "source"] == list(a.obs.columns)
        assert list(b.var.columns) == ["gene_id", "n_cells", "total_counts"]


def test_ordered_categoricals_stay_ordered(tmp_path):
    """An ordered categorical obs column is exported and read by to_anndata as ordered (dc_meta
    obs_ordered), after converting several inputs, append and merge too, as long as every input
    that has it has it ordered with the same categories in the same order; a column whose
    categories another input extends, or that annotate replaces, is not ordered."""
    stages = ["early", "mid", "late"]

    def adata(seed, cats=stages, ordered=True):
        a = make_adata(n_cells=30, n_genes=8, seed=seed, cell_prefix=f"s{seed}c")
        rng = np.random.default_rng(seed)
        a.obs["stage"] = pd.Categorical(rng.choice(stages, 30), categories=cats, ordered=ordered)
        a.obs["kind"] = pd.Categorical(rng.choice(["x", "y"], 30))
        return write(a, tmp_path / f"s{seed}.h5ad"), a

    def ordered_in(db):
        b, t = exported_and_loaded(db, tmp_path)
        assert t.obs["stage"].cat.ordered == b.obs["stage"].cat.ordered
        assert not b.obs["kind"].cat.ordered
        return bool(b.obs["stage"].cat.ordered), list(b.obs["stage"].cat.categories)

    (p1, a1), (p2, _), (p3, _) = adata(1), adata(2), adata(3, cats=stages + ["adult"])
    p4, _ = adata(4, ordered=False)
    one = tmp_path / "one.dcdb"
    dc("convert", p1, "-o", one, "--quiet")
    assert ordered_in(one) == (True, stages)
    assert_same(a1, anndata.read_h5ad(tmp_path / "o.h5ad"))
    dc("convert", p1, p2, "-o", tmp_path / "two.dcdb", "--quiet")
    assert ordered_in(tmp_path / "two.dcdb") == (True, stages)
    dc("convert", p1, p3, "-o", tmp_path / "ext.dcdb", "--quiet")
    assert ordered_in(tmp_path / "ext.dcdb") == (False, stages + ["adult"])
    dc("convert", p1, p4, "-o", tmp_path / "mix.dcdb", "--quiet")
    assert ordered_in(tmp_path / "mix.dcdb")[0] is False
    dc("append", one, p2)
    assert ordered_in(one) == (True, stages)
    dc("merge", one, tmp_path / "two.dcdb", "-o", tmp_path / "m.dcdb")
    assert ordered_in(tmp_path / "m.dcdb") == (True, stages)
    dc("merge", one, tmp_path / "ext.dcdb", "-o", tmp_path / "m2.dcdb")
    assert ordered_in(tmp_path / "m2.dcdb")[0] is False
    dc("append", one, p3)
    assert ordered_in(one)[0] is False
    # annotate replaces the column: the new one is neither ordered nor renamed
    dc("convert", p1, "-o", tmp_path / "ann.dcdb", "--quiet")
    (tmp_path / "t.csv").write_text("name,stage\n" + "".join(f"s1c{i:05d},late\n" for i in range(30)))
    dc("annotate", tmp_path / "ann.dcdb", tmp_path / "t.csv", "--key", "name")
    assert ordered_in(tmp_path / "ann.dcdb")[0] is False


def test_index_names_round_trip(tmp_path):
    """The obs and var index names (pandas' index.name: the h5ad `_index` attribute) come back
    from export and to_anndata (dc_meta obs_index_name / var_index_name), when every input names
    the index alike; an unnamed index stays unnamed."""
    import deltacells
    a = make_adata(n_cells=20, n_genes=6)
    a.obs.index.name, a.var.index.name = "barcode", "symbol"
    p1 = write(a, tmp_path / "a.h5ad")
    b = make_adata(n_cells=20, n_genes=6, cell_prefix="d")
    b.obs.index.name = "cell"
    p2 = write(b, tmp_path / "b.h5ad")
    for inputs, obs_name, var_name in (([p1], "barcode", "symbol"), ([p2], "cell", None), ([p1, p2], None, None)):
        db = tmp_path / "x.dcdb"
        dc("convert", *inputs, "-o", db, "--quiet", "--force")
        export(db, tmp_path / "x.h5ad")
        got = anndata.read_h5ad(tmp_path / "x.h5ad")
        t = deltacells.to_anndata(str(db))
        assert (got.obs.index.name, got.var.index.name) == (obs_name, var_name)
        assert (t.obs.index.name, t.var.index.name) == (obs_name, var_name)
    db = tmp_path / "one.dcdb"
    dc("convert", p1, "-o", db, "--quiet")
    export(db, tmp_path / "o.h5ad")
    assert_same(a, anndata.read_h5ad(tmp_path / "o.h5ad"))
    export(db, tmp_path / "s.h5ad", "--obs", "cell_type")
    assert anndata.read_h5ad(tmp_path / "s.h5ad").obs.index.name == "barcode"


def exported_and_loaded(db, tmp_path):
    """The dataset as `export` writes it (read back by anndata) and as to_anndata gives it."""
    import deltacells
    out = tmp_path / "o.h5ad"
    export(db, out)
    return anndata.read_h5ad(out), deltacells.to_anndata(str(db))


def verify_finds_bad_meta(h5ad, db, key, column, value):
    """`verify` of a dataset of h5ad whose dc_meta `key` says `column` has type `value` (a column
    of another kind) fails, naming the key and the column."""
    dc("convert", h5ad, "-o", db, "--quiet")
    con = sqlite3.connect(db)
    con.execute(f"UPDATE dc_meta SET value = json_set(value, '$.{column}', ?) WHERE key = ?", (value, key))
    con.commit()
    con.close()
    v = dc("verify", db, check=False)
    assert v.returncode != 0 and key in v.stdout + v.stderr and column in v.stdout + v.stderr


def test_narrow_obs_number_types_round_trip(tmp_path):
    """Number obs columns keep the type the input had (dc_meta obs_dtypes): float32, int32,
    int16, int8, uint8, uint16, uint32 and a nullable Int32 come back from export and to_anndata
    as they went in (they came back as float64 / int64, twice the memory for a float32 QC metric);
    int64 and float64 stay so.  With several inputs, append and merge, a column keeps its type
    only where every input that has it has that type; annotate's replacement is int64/float64.
    `verify` checks the key."""
    narrow = {"f32": np.float32, "i32": np.int32, "i16": np.int16, "i8": np.int8, "u8": np.uint8,
              "u16": np.uint16, "u32": np.uint32}

    def adata(seed, f32=np.float32):
        a = make_adata(n_cells=40, n_genes=8, seed=seed, cell_prefix=f"s{seed}c")
        rng = np.random.default_rng(seed)
        for k, t in narrow.items():
            if k == "f32":
                a.obs[k] = rng.uniform(0, 100, 40).astype(f32)
            else:
                info = np.iinfo(t)
                a.obs[k] = np.array([info.min, info.max] + list(rng.integers(0, 100, 38)), dtype=t)
        a.obs["ni32"] = pd.array([None if i % 5 == 0 else i - 20 for i in range(40)], dtype="Int32")
        return write(a, tmp_path / f"n{seed}.h5ad"), a

    def check(db, a=None, f32="float32"):
        b, t = exported_and_loaded(db, tmp_path)
        want = {k: np.dtype(v).name for k, v in narrow.items()}
        want["f32"] = f32
        for got in (b, t):
            assert {k: got.obs[k].dtype.name for k in narrow} == want
            assert got.obs["ni32"].dtype.name == "Int32"
            assert got.obs["n_counts"].dtype.name == "int64" and got.obs["frac"].dtype.name == "float64"
        if a is not None:
            for k in list(narrow) + ["ni32"]:
                assert b.obs[k].equals(a.obs[k]) and t.obs[k].equals(a.obs[k]), k
        v = dc("verify", db, check=False)
        assert v.returncode == 0, v.stdout + v.stderr

    (p1, a1), (p2, _), (p3, _) = adata(1), adata(2), adata(3, f32=np.float64)
    one = tmp_path / "one.dcdb"
    dc("convert", p1, "-o", one, "--quiet")
    check(one, a1)
    dc("convert", p1, p2, "-o", tmp_path / "two.dcdb", "--quiet")
    check(tmp_path / "two.dcdb")
    dc("convert", p1, p3, "-o", tmp_path / "mix.dcdb", "--quiet")
    check(tmp_path / "mix.dcdb", f32="float64")
    dc("append", one, p2)
    check(one)
    dc("merge", one, tmp_path / "mix.dcdb", "-o", tmp_path / "m.dcdb")
    check(tmp_path / "m.dcdb", f32="float64")
    # a column only one side has keeps its type; the other side's cells are missing values
    b = make_adata(n_cells=10, n_genes=8, seed=9, cell_prefix="z")
    dc("convert", write(b, tmp_path / "plain.h5ad"), "-o", tmp_path / "plain.dcdb", "--quiet")
    dc("merge", tmp_path / "plain.dcdb", tmp_path / "two.dcdb", "-o", tmp_path / "m3.dcdb")
    got = anndata.read_h5ad(export(tmp_path / "m3.dcdb", tmp_path / "m3.h5ad") and tmp_path / "m3.h5ad")
    assert got.obs["f32"].dtype.name == "float32" and np.isnan(got.obs["f32"].iloc[:10]).all()
    assert got.obs["i32"].dtype.name == "Int32" and got.obs["i32"].iloc[:10].isna().all()
    # annotate replaces a column: plain int64 again
    (tmp_path / "t.csv").write_text("name,i32\n" + "".join(f"s1c{i:05d},{i}\n" for i in range(40)))
    dc("annotate", tmp_path / "two.dcdb", tmp_path / "t.csv", "--key", "name")
    out = tmp_path / "ann.h5ad"
    export(tmp_path / "two.dcdb", out)
    assert anndata.read_h5ad(out).obs["i32"].dtype.name in ("int64", "Int64")
    # verify names a key that says a text column has a number type
    verify_finds_bad_meta(p1, tmp_path / "bad.dcdb", "obs_dtypes", "note", "int32")


def test_var_types_round_trip(tmp_path):
    """var columns keep the input's type (dc_meta var_dtypes): a boolean such as scanpy's
    highly_variable came back from export and to_anndata as int64 0/1, with which
    `a[:, a.var.highly_variable]` picks genes 0 and 1 over and over instead of masking; float32
    and int32 came back 64-bit, and to_anndata gave categoricals as text.  Two inputs where one
    lacks a column give nullable types; a type the inputs disagree on is int64 / float64;
    merge keeps the rule; verify checks the key."""

    def adata(seed, hv=True, m32=np.float32, n_genes=8):
        a = make_adata(n_cells=20, n_genes=n_genes, seed=seed, cell_prefix=f"v{seed}c")
        if hv:
            a.var["highly_variable"] = np.arange(n_genes) % 3 == 0
        if m32 is not None:
            a.var["means"] = np.linspace(0, 1, n_genes).astype(m32)
        a.var["n_cells_by"] = np.arange(n_genes, dtype=np.int32)
        return write(a, tmp_path / f"v{seed}_{hv}_{m32 and np.dtype(m32).name}.h5ad"), a

    def types(db):
        b, t = exported_and_loaded(db, tmp_path)
        cols = ["highly_variable", "means", "n_cells_by", "feature_types"]
        got = [b.var[cols].dtypes.astype(str).tolist(), t.var[cols].dtypes.astype(str).tolist()]
        assert got[0] == got[1], got
        v = dc("verify", db, check=False)
        assert v.returncode == 0, v.stdout + v.stderr
        return got[0], b, t

    p1, a1 = adata(1)
    db = tmp_path / "one.dcdb"
    dc("convert", p1, "-o", db, "--quiet")
    got, b, t = types(db)
    assert got == ["bool", "float32", "int32", "category"]
    for x in (b, t):
        v = x.var.loc[a1.var_names]
        for c in ("highly_variable", "means", "n_cells_by", "feature_types"):
            assert v[c].equals(a1.var[c]), c
        assert x[:, x.var.highly_variable].n_vars == int(a1.var.highly_variable.sum())
    p2, _ = adata(2, hv=False, n_genes=10)     # lacks highly_variable: missing for its 2 new genes
    p3, _ = adata(3, m32=np.float64)
    dc("convert", p1, p2, "-o", tmp_path / "two.dcdb", "--quiet")
    got, b, _ = types(tmp_path / "two.dcdb")
    assert got == ["boolean", "float32", "int32", "category"]
    assert b.var.highly_variable.isna().sum() == 2
    # an input without a float32 column: NaN for its new genes, float32 from both (to_anndata gave
    # pandas' Float32 where export writes float32)
    p4, _ = adata(4, m32=None, n_genes=11)
    dc("convert", p1, p4, "-o", tmp_path / "nomeans.dcdb", "--quiet")
    got, b, _ = types(tmp_path / "nomeans.dcdb")
    assert got == ["bool", "float32", "int32", "category"] and b.var.means.isna().sum() == 3
    dc("convert", p1, p3, "-o", tmp_path / "mix.dcdb", "--quiet")
    assert types(tmp_path / "mix.dcdb")[0] == ["bool", "float64", "int32", "category"]
    dc("merge", db, tmp_path / "mix.dcdb", "-o", tmp_path / "m.dcdb")
    assert types(tmp_path / "m.dcdb")[0] == ["bool", "float64", "int32", "category"]
    dc("append", db, p2)
    assert types(db)[0] == ["boolean", "float32", "int32", "category"]
    verify_finds_bad_meta(p1, tmp_path / "bad.dcdb", "var_dtypes", "gene_ids", "bool")


def test_categories_that_are_numbers_round_trip(tmp_path):
    """A categorical whose categories are numbers or booleans (clusters as ints, a dose as float)
    comes back from export and to_anndata with those categories (dc_meta obs_cat_dtypes): they
    came back as text, so `obs.cluster == 0` was False for every cell.  Several inputs, append and
    merge keep the type where every input that has the column has it; otherwise text."""

    def adata(seed, clusters, as_text=False):
        a = make_adata(n_cells=24, n_genes=6, seed=seed, cell_prefix=f"k{seed}c")
        vals = np.array(clusters)[np.arange(24) % len(clusters)]
        a.obs["cluster"] = pd.Categorical(vals.astype(str) if as_text else vals)
        a.obs["dose"] = pd.Categorical(np.array([0.5, 1.25, 1e-7])[np.arange(24) % 3])
        a.obs["treated"] = pd.Categorical(np.arange(24) % 2 == 0)
        # ids past 2^53: the labels were read through a double (2^60 + 1 became 2^60)
        a.obs["big"] = pd.Categorical(np.array([2**60 + 1, 2**60 + 3])[np.arange(24) % 2])
        return write(a, tmp_path / f"k{seed}{as_text}.h5ad"), a

    def got(db):
        b, t = exported_and_loaded(db, tmp_path)
        for x in (b, t):
            assert list(x.obs["dose"].cat.categories) == [1e-7, 0.5, 1.25]
            assert list(x.obs["treated"].cat.categories) == [False, True]
            assert list(x.obs["big"].cat.categories) == [2**60 + 1, 2**60 + 3]
        assert list(b.obs["cluster"].cat.categories) == list(t.obs["cluster"].cat.categories)
        v = dc("verify", db, check=False)
        assert v.returncode == 0, v.stdout + v.stderr
        return b, list(b.obs["cluster"].cat.categories)

    (p1, a1), (p2, _), (p3, _) = adata(1, [0, 1, 2]), adata(2, [2, 3]), adata(3, [0, 1], as_text=True)
    one = tmp_path / "one.dcdb"
    dc("convert", p1, "-o", one, "--quiet")
    b, cats = got(one)
    assert cats == [0, 1, 2] and (b.obs["cluster"] == 0).sum() == 8
    for c in ("cluster", "dose", "treated", "big"):
        assert b.obs[c].equals(a1.obs[c])
    dc("convert", p1, p2, "-o", tmp_path / "two.dcdb", "--quiet")
    assert got(tmp_path / "two.dcdb")[1] == [0, 1, 2, 3]
    dc("convert", p1, p3, "-o", tmp_path / "mix.dcdb", "--quiet")
    assert got(tmp_path / "mix.dcdb")[1] == ["0", "1", "2"]
    dc("append", one, p2)
    assert got(one)[1] == [0, 1, 2, 3]
    dc("merge", one, tmp_path / "mix.dcdb", "-o", tmp_path / "m.dcdb")
    assert got(tmp_path / "m.dcdb")[1] == ["0", "1", "2", "3"]
    (tmp_path / "t.csv").write_text("name,cluster\n" + "".join(f"k1c{i:05d},{i % 2}\n" for i in range(24)))
    dc("annotate", tmp_path / "two.dcdb", tmp_path / "t.csv", "--key", "name", "--type", "cluster=category")
    assert got(tmp_path / "two.dcdb")[1] == ["0", "1"]


def test_uint64_categories_round_trip(tmp_path):
    """A categorical whose categories are numpy uint64 (ids of 2^63 and up) came back from export
    as strings: convert recorded them as 'int64' in dc_meta obs_cat_dtypes and export's int64
    reading of '9223372036854775808' failed, so it wrote every label as text (to_anndata gave
    uint64, small uint64 categories int64).  They are recorded as 'uint64' and come back as uint64
    with the same values from export, to_anndata, append, merge and annotate; a dataset written
    before ('int64' for them) gives those of 2^63 and up as uint64 too.  A plain uint64 obs or var
    column with such values is refused by convert, naming the column (never wrapped to negative)."""
    import deltacells
    big = np.array([2**63, 2**63 + 5, 2**64 - 1], dtype=np.uint64)

    def adata(prefix):
        a = make_adata(n_cells=30, n_genes=6, cell_prefix=prefix)
        a.obs = pd.DataFrame({
            "uid": pd.Categorical.from_codes(np.arange(30) % 3, categories=big),
            "small": pd.Categorical.from_codes(np.arange(30) % 2, categories=np.array([7, 9], dtype=np.uint64)),
            "i64": pd.Categorical.from_codes(np.arange(30) % 2, categories=np.array([-3, 2**62], dtype=np.int64)),
        }, index=a.obs_names)
        return a

    def check(db, a, small="uint64"):
        v = dc("verify", db, check=False)
        assert v.returncode == 0, v.stdout + v.stderr
        for x in exported_and_loaded(db, tmp_path):
            g = x.obs.loc[a.obs_names]
            assert g["uid"].cat.categories.dtype == np.uint64, g["uid"].cat.categories
            assert list(g["uid"].cat.categories) == [int(v) for v in big]
            assert list(g["uid"].astype(object)) == [int(v) for v in a.obs["uid"].astype(object)]
            assert g["small"].cat.categories.dtype == small and list(g["small"].cat.categories) == [7, 9]
            assert g["i64"].cat.categories.dtype == np.int64 and list(g["i64"].cat.categories) == [-3, 2**62]
            assert np.array_equal(g["small"].cat.codes.values, a.obs["small"].cat.codes.values)

    a = adata("c")
    db = tmp_path / "u.dcdb"
    dc("convert", write(a, tmp_path / "u.h5ad"), "-o", db, "--quiet")
    con = sqlite3.connect(db)
    meta = json.loads(con.execute("SELECT value FROM dc_meta WHERE key = 'obs_cat_dtypes'").fetchone()[0])
    con.close()
    assert meta == {"uid": "uint64", "small": "uint64", "i64": "int64"}
    check(db, a)
    # append and merge keep it
    b = adata("d")
    dc("append", db, write(b, tmp_path / "d.h5ad"), "--quiet")
    check(db, b)
    e = adata("e")
    dc("convert", write(e, tmp_path / "e.h5ad"), "-o", tmp_path / "e.dcdb", "--quiet")
    dc("merge", db, tmp_path / "e.dcdb", "-o", tmp_path / "m.dcdb", "--quiet")
    check(tmp_path / "m.dcdb", a)
    check(tmp_path / "m.dcdb", e)
    # a dataset written before 'uint64' was recorded: 'int64' for both
    old = tmp_path / "old.dcdb"
    dc("convert", tmp_path / "u.h5ad", "-o", old, "--quiet")
    con = sqlite3.connect(old)
    con.execute("UPDATE dc_meta SET value = ? WHERE key = 'obs_cat_dtypes'",
                (json.dumps({"uid": "int64", "small": "int64", "i64": "int64"}),))
    con.commit()
    con.close()
    check(old, a, small="int64")
    # annotate from a DataFrame (its --schema categories_dtype) keeps them
    df = pd.DataFrame({"ann": pd.Categorical.from_codes(np.arange(30) % 3, categories=big)}, index=a.obs_names)
    deltacells.annotate(str(old), df)
    for x in exported_and_loaded(old, tmp_path):
        assert x.obs["ann"].cat.categories.dtype == np.uint64 and list(x.obs["ann"]) == list(df["ann"])
    s = tmp_path / "s.json"
    s.write_text('{"c": {"categories_dtype": "uint64"}}')
    (tmp_path / "t.csv").write_text("name,c\n" + "".join(f"c{i:05d},{-1 if i == 3 else 5}\n" for i in range(30)))
    p = dc("annotate", old, tmp_path / "t.csv", "--type", "c=category", "--schema", s, check=False)
    assert p.returncode == 1 and "category '-1' is not a uint64" in p.stderr, p.stderr
    s.write_text('{"c": {"categories_dtype": "uint128"}}')
    p = dc("annotate", old, tmp_path / "t.csv", "--type", "c=category", "--schema", s, check=False)
    assert p.returncode == 1 and "categories_dtype is one of int8, " in p.stderr and "uint64, float32, float64, bool" in p.stderr, p.stderr
    verify_finds_bad_meta(tmp_path / "u.h5ad", tmp_path / "bad.dcdb", "obs_cat_dtypes", "uid", "uint128")
    # plain uint64 columns: stored faithfully or refused, naming the column
    for frame in ("obs", "var"):
        c = make_adata(n_cells=10, n_genes=4)
        getattr(c, frame)["big"] = np.array([1, 2**63 + 1] + [3] * (len(getattr(c, frame)) - 2), dtype=np.uint64)
        out = tmp_path / f"{frame}.dcdb"
        p = dc("convert", write(c, tmp_path / f"{frame}.h5ad"), "-o", out, "--quiet", check=False)
        assert p.returncode == 1 and not out.exists(), p.stderr
        assert f"{frame} column 'big'" in p.stderr and "9223372036854775809" in p.stderr, p.stderr
        assert "does not fit a signed 64-bit integer" in p.stderr, p.stderr


def unsealed(db, *sql):
    """db as format version 2 wrote it (no seals, which cover the column names), then sql run on
    it: a dataset whose columns are renamed by hand."""
    con = sqlite3.connect(db)
    for q in ["DROP INDEX tiles_data_meta",
              *[f"ALTER TABLE {t} DROP COLUMN checksum" for t in ("tiles_data", "cells_blocks", "genes_blocks", "cells_columns")],
              "DELETE FROM dc_meta WHERE key = 'dataset_id'", "UPDATE dc_meta SET value = 2 WHERE key = 'format_version'", *sql]:
        con.execute(q)
    con.commit()
    con.close()
    return db


@pytest.mark.parametrize("taken", [False, True])
def test_column_without_a_name(tmp_path, taken):
    """An obs (or var) column whose name is empty (renamed by hand: no h5ad can hold one) made
    export fail with "OUT: writing obs column ''", naming the output and no reason, and
    to_anndata's AnnData failed in write_h5ad ("expected bytes, str found").  Both name it
    'Unnamed: I', I its place among the obs (var) columns from 0, as pandas names a column
    without a name ('Unnamed: I_1' if another column has that name), and say so, naming the
    dataset.  A name with a '/' (annotate takes one) is refused before anything is written,
    naming the dataset, the column and why; --obs leaves it out."""
    import deltacells
    a = make_adata(n_cells=20, n_genes=6)
    a.obs = pd.DataFrame({"a": np.arange(20), "score": np.linspace(0, 1, 20, dtype=np.float32),
                          "k": pd.Categorical(["x", "y"] * 10)}, index=a.obs_names)
    db = tmp_path / "u.dcdb"
    dc("convert", write(a, tmp_path / "u.h5ad"), "-o", db, "--quiet")
    unsealed(db, "UPDATE cells_columns SET name = '' WHERE name = 'score'",
             """UPDATE dc_meta SET value = json_set(json_remove(value, '$.score'), '$.""', 'float32') WHERE key = 'obs_dtypes'""",
             "UPDATE genes_columns SET name = '' WHERE name = 'gc'",
             *(["UPDATE cells_columns SET name = 'Unnamed: 1' WHERE name = 'k'"] if taken else []))
    v = dc("verify", db, check=False)
    assert v.returncode == 0, v.stdout + v.stderr
    name = "Unnamed: 1_1" if taken else "Unnamed: 1"
    want = ["a", name, "Unnamed: 1" if taken else "k"]
    out = tmp_path / "o.h5ad"
    p = dc("export", db, "-o", out, "--force")
    assert f"{db}: an obs column has an empty name" in p.stderr and f"written as '{name}'" in p.stderr, p.stderr
    assert f"{db}: a var column has an empty name" in p.stderr and "written as 'Unnamed: 2'" in p.stderr, p.stderr
    b = anndata.read_h5ad(out)
    with pytest.warns(UserWarning, match="an obs column has an empty name"):
        t = deltacells.to_anndata(str(db), gene_order="original")
    t.write_h5ad(tmp_path / "t.h5ad")                  # it failed here
    for x in (b, anndata.read_h5ad(tmp_path / "t.h5ad")):
        assert list(x.obs.columns) == want
        assert x.obs[name].dtype == np.float32 and np.array_equal(x.obs[name].values, a.obs["score"].values)
        assert np.array_equal(x.obs["a"].values, a.obs["a"].values)
        assert np.allclose(x.var["Unnamed: 2"].values, a.var["gc"].values)
    assert list(b.var.columns) == ["gene_ids", "length", "Unnamed: 2", "feature_types"]
    assert "Unnamed: 2" in t.var.columns
    if taken:
        return
    # a name with a '/': refused, naming the dataset and the column, before anything is written
    db2 = tmp_path / "s.dcdb"
    dc("convert", tmp_path / "u.h5ad", "-o", db2, "--quiet")
    (tmp_path / "t.csv").write_text("name,a/b\n" + "".join(f"c{i:05d},{i}\n" for i in range(20)))
    dc("annotate", db2, tmp_path / "t.csv", "--quiet")
    before = set(os.listdir(tmp_path))
    p = dc("export", db2, "-o", tmp_path / "s.h5ad", check=False)
    assert p.returncode == 1 and set(os.listdir(tmp_path)) == before, p.stderr
    assert f"{db2}: obs column 'a/b' has a '/'" in p.stderr and "--obs can leave it out" in p.stderr, p.stderr
    export(db2, tmp_path / "s.h5ad", "--obs", "a,k")
    assert list(anndata.read_h5ad(tmp_path / "s.h5ad").obs.columns) == ["a", "k"]


def test_category_dtypes_round_trip_exactly(tmp_path):
    """A categorical whose categories are int8, int16, int32, uint8, uint16, uint32 or float32
    numbers (as pandas 2 writes them; h5py here) came back from export with int64 / float64
    categories, and to_anndata likewise, and a var categorical with number categories with string
    categories: convert recorded only 'int64' / 'float64' (dc_meta obs_cat_dtypes) and nothing for
    var.  The exact type is recorded (obs_cat_dtypes, var_cat_dtypes) and given back, obs and var
    (pandas then holds them as it holds such an index: pandas 1 as int64 / float64); verify takes
    the names and refuses others.  Two inputs, append and merge of columns whose types differ keep
    the type that holds both (int16 and int32: int32; int8 and uint8: int16), else strings (int and
    float: '3' and '3.0' would name one number twice), never a wrapped value.  A dataset written
    before (with 'int64' / 'float64', or no var_cat_dtypes) reads as it did."""
    import h5py

    import deltacells
    types = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "u8": np.uint8, "u16": np.uint16,
             "u32": np.uint32, "f32": np.float32, "i64": np.int64, "f64": np.float64}

    def cats_of(t):   # each type's extremes, so that a narrower reading would have wrapped them
        if np.dtype(t).kind == "f":
            return np.array([-1.5, 0.1, 3e38 if t == np.float32 else 1e300], dtype=t)
        info = np.iinfo(t)
        return np.array([info.min, 7, info.max], dtype=t)

    def adata(prefix, over=None):
        """An AnnData and its h5ad whose categoricals' categories are of the types given."""
        want = {**types, "vc": np.uint16, "vf": np.float32, **(over or {})}
        a = make_adata(n_cells=30, n_genes=6, cell_prefix=prefix)
        a.obs = pd.DataFrame({c: pd.Categorical.from_codes(np.arange(30) % 3, categories=cats_of(want[c]))
                              for c in types}, index=a.obs_names)
        for c in ("vc", "vf"):
            a.var[c] = pd.Categorical.from_codes(np.arange(6) % 3, categories=cats_of(want[c]))
        path = write(a, tmp_path / f"{prefix}.h5ad")
        with h5py.File(path, "r+") as f:   # the categories in their own type (pandas 1 widens them)
            for c, t in want.items():
                g = f[("var/" if c.startswith("v") else "obs/") + c]
                attrs = dict(g["categories"].attrs)
                del g["categories"]
                d = g.create_dataset("categories", data=cats_of(t))
                d.attrs.update(attrs)
        return a, path, want

    def pandas_dtype(t):   # how pandas holds categories of type t
        return np.dtype(object) if t is str else pd.Index(np.zeros(1, dtype=t)).dtype

    def check(db, want, src=None):
        v = dc("verify", db, check=False)
        assert v.returncode == 0, v.stdout + v.stderr
        b, t = exported_and_loaded(db, tmp_path)
        with h5py.File(tmp_path / "o.h5ad") as f:   # export's file: the type itself
            for c, w in want.items():
                d = f[("var/" if c.startswith("v") else "obs/") + c + "/categories"]
                assert (d.dtype.kind in "OS") if w is str else d.dtype == np.dtype(w), (c, d.dtype)
        for x in (b, t):
            for c, w in want.items():
                frame = x.var if c.startswith("v") else x.obs
                assert frame[c].cat.categories.dtype == pandas_dtype(w), (c, frame[c].cat.categories)
                if src is not None:   # the values: the categories and each row's
                    a, sw = src
                    cats = cats_of(sw[c])
                    assert np.array_equal(np.asarray(frame[c].cat.categories), cats.astype(pandas_dtype(w))), c
                    codes = np.arange(30 if frame is x.obs else 6) % 3
                    names = a.var_names if frame is x.var else a.obs_names
                    assert np.array_equal(np.asarray(frame[c].loc[names], dtype=cats.dtype), cats[codes]), c

    a = adata("c")
    db = tmp_path / "a.dcdb"
    dc("convert", a[1], "-o", db, "--quiet")
    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM dc_meta WHERE key IN ('obs_cat_dtypes', 'var_cat_dtypes')").fetchall())
    con.close()
    assert json.loads(meta["obs_cat_dtypes"]) == {c: np.dtype(t).name for c, t in types.items()}
    assert json.loads(meta["var_cat_dtypes"]) == {"vc": "uint16", "vf": "float32"}
    check(db, a[2], (a[0], a[2]))

    # append and merge of the same types keep them; of different ones, the type that holds both
    b = adata("d")
    dc("append", db, b[1], "--quiet")
    check(db, a[2], (b[0], b[2]))
    m = adata("e", {"i8": np.uint8, "i16": np.int32, "u8": np.uint16, "f32": np.float64, "i32": np.float32,
                    "u32": np.int8, "vc": np.int16})
    dc("convert", m[1], "-o", tmp_path / "m.dcdb", "--quiet")
    united = {**a[2], "i8": np.int16, "i16": np.int32, "u8": np.uint16, "f32": np.float64, "i32": str,
              "u32": np.int64, "vc": np.int32}
    for how in ("merge", "append", "convert"):
        out = tmp_path / f"{how}.dcdb"
        if how == "merge":
            dc("merge", db, tmp_path / "m.dcdb", "-o", out, "--quiet")
        elif how == "append":
            dc("convert", a[1], "-o", out, "--quiet")
            dc("append", out, m[1], "--quiet")
        else:
            dc("convert", a[1], m[1], "-o", out, "--quiet")
        check(out, united)
        x = deltacells.to_anndata(str(out))
        for c in ("i8", "i16", "u32", "vc", "f32"):   # both inputs' extremes, none wrapped
            frame = x.var if c == "vc" else x.obs
            want = {float(v) for v in cats_of(a[2][c])} | {float(v) for v in cats_of(m[2][c])}
            assert {float(v) for v in frame[c].cat.categories} == want, c
            assert len(frame[c].cat.categories) == len(want), c
        assert set(x.obs["i32"].cat.categories) >= {"-2147483648", "7", "2147483647", "-1.5"}, x.obs["i32"]

    # a dataset written before: 'int64' / 'float64' for them, no var_cat_dtypes
    old = tmp_path / "old.dcdb"
    dc("convert", a[1], "-o", old, "--quiet")
    con = sqlite3.connect(old)
    con.execute("UPDATE dc_meta SET value = ? WHERE key = 'obs_cat_dtypes'",
                (json.dumps({c: "float64" if np.dtype(t).kind == "f" else "int64" for c, t in types.items()}),))
    con.execute("DELETE FROM dc_meta WHERE key = 'var_cat_dtypes'")
    con.commit()
    con.close()
    check(old, {**{c: np.float64 if np.dtype(t).kind == "f" else np.int64 for c, t in types.items()}, "vc": str, "vf": str})

    # annotate from a DataFrame records the type pandas has (int64 in pandas 1), int16 by --schema
    df = pd.DataFrame({"ann": pd.Categorical.from_codes(np.arange(30) % 3, categories=cats_of(np.int16))}, index=a[0].obs_names)
    deltacells.annotate(str(old), df)
    s = tmp_path / "s.json"
    (tmp_path / "t.csv").write_text("name,c\n" + "".join(f"c{i:05d},{-300 if i == 3 else 5}\n" for i in range(30)))
    s.write_text('{"c": {"categories_dtype": "int16"}}')
    dc("annotate", old, tmp_path / "t.csv", "--type", "c=category", "--schema", s, "--quiet")
    check(old, {"ann": df["ann"].cat.categories.dtype.type, "c": np.int16})
    s.write_text('{"c": {"categories_dtype": "int8"}}')
    p = dc("annotate", old, tmp_path / "t.csv", "--type", "c=category", "--schema", s, check=False)
    assert p.returncode == 1 and "category '-300' is not a int8" in p.stderr, p.stderr
    s.write_text('{"c": {"categories_dtype": "float16"}}')
    p = dc("annotate", old, tmp_path / "t.csv", "--type", "c=category", "--schema", s, check=False)
    assert p.returncode == 1 and "categories_dtype is one of int8, int16, int32, int64, uint8" in p.stderr, p.stderr

    # verify takes the names and refuses others, obs and var
    for key, col in (("obs_cat_dtypes", "i8"), ("var_cat_dtypes", "vc")):
        for bad in ("int128", "float16", "category"):
            verify_finds_bad_meta(a[1], tmp_path / "bad.dcdb", key, col, bad)
            os.unlink(tmp_path / "bad.dcdb")
    verify_finds_bad_meta(a[1], tmp_path / "bad.dcdb", "var_cat_dtypes", "gene_ids", "int8")


def test_merge_and_append_of_columns_that_differ_only_in_case(tmp_path):
    """Datasets whose obs or var columns differ only in case ('Score' and 'score': SQLite does not
    tell them apart): merge and append refused a var pair ('cannot declare the columns (duplicate
    column name: Length)') and left dc_meta naming an obs column that did not exist (verify
    failed). The second is stored as NAME_1, its dc_meta entries (type, ordered) follow it, and
    export and to_anndata give it its name back."""

    def adata(prefix, score, stage, length):
        a = make_adata(n_cells=20, n_genes=6, cell_prefix=prefix)
        a.obs[score] = np.arange(20, dtype=np.float32)
        a.obs[stage] = pd.Categorical(np.array(["x", "y"])[np.arange(20) % 2], categories=["x", "y"], ordered=True)
        a.var = a.var.rename(columns={"length": length})
        return write(a, tmp_path / f"{prefix}.h5ad")

    p1, p2 = adata("a", "Score", "Stage", "length"), adata("b", "score", "stage", "Length")
    for x in (p1, p2):
        dc("convert", x, "-o", x.with_suffix(".dcdb"), "--quiet")
    merged = tmp_path / "m.dcdb"
    r = dc("merge", p1.with_suffix(".dcdb"), p2.with_suffix(".dcdb"), "-o", merged)
    assert "'score' is stored as 'score_1'" in r.stderr and "'Length' is stored as 'Length_1'" in r.stderr
    dc("append", p1.with_suffix(".dcdb"), p2)
    for db in (merged, p1.with_suffix(".dcdb")):
        v = dc("verify", db, check=False)
        assert v.returncode == 0, v.stdout + v.stderr
        for x in exported_and_loaded(db, tmp_path):
            for c in ("Score", "score"):
                assert x.obs[c].dtype.name == "float32" and x.obs[c].isna().sum() == 20
            for c in ("Stage", "stage"):
                assert x.obs[c].cat.ordered and x.obs[c].isna().sum() == 20
            assert {"length", "Length"} <= set(x.var.columns)


def test_genes_lines_escape_tabs_and_newlines(tmp_path):
    """A gene name with a tab or newline split its line of `deltacells genes` into extra columns
    or lines; it is written escaped (\\t, \\n, \\r, \\\\), and --json gives it as it is."""
    a = make_adata(n_cells=12, n_genes=5, seed=3, cell_prefix="t")
    odd = ["A\tB", "C\nD", "E\\F", "G\rH", "plain"]
    a.var_names = odd
    db = tmp_path / "odd.dcdb"
    dc("convert", write(a, tmp_path / "odd.h5ad"), "-o", db, "--quiet", "--keep-gene-whitespace")
    lines = dc("genes", db, "--order", "original").stdout.split("\n")[1:-1]
    assert len(lines) == 5 and all(len(x.split("\t")) == 5 for x in lines), lines
    assert [x.split("\t")[2] for x in lines] == ["A\\tB", "C\\nD", "E\\\\F", "G\\rH", "plain"]
    rows = json.loads(dc("genes", db, "--json", "--order", "original").stdout)["genes"]
    assert [r["name"] for r in rows] == odd


def test_repeated_var_category_is_refused_without_a_leak(synth, tmp_path):
    """dc_meta.var_categories naming one category twice: export refuses, naming the column and the
    category (before: 'writing var column', with codes that could not tell the two apart), and
    frees the categories it had read (run with the ASan converter, which make test also does,
    LeakSanitizer reports them otherwise; with the plain one only the message is checked)."""
    d, a, db = synth
    bad = tmp_path / "bad.dcdb"
    bad.write_bytes(db.read_bytes())
    unsealed(bad, """UPDATE dc_meta SET value = '{"feature_types": ["Gene Expression", "CRISPR", "Gene Expression"]}'
                     WHERE key = 'var_categories'""")
    out = tmp_path / "bad.h5ad"
    need_converter()
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
    p = subprocess.run([CONVERTER, "export", bad, "-o", out, "--quiet"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 1, p.stderr
    assert ("dc_meta.var_categories: column 'feature_types': category 'Gene Expression' is listed twice (as 0 and 2)"
            in p.stderr), p.stderr
    assert "LeakSanitizer" not in p.stderr, p.stderr
    assert not out.exists()
