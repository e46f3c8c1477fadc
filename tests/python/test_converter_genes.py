"""Genes across inputs: surrounding whitespace of gene names removed (with a note; an
opt-out), the overlap report and its warning, --genes intersect|union."""
import os
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _converter_util import Dataset, check_matrix, convert, real_file, run

warnings.filterwarnings("ignore")


def write(tmp_path, name, genes, n=30, seed=0, obs_prefix=None):
    rng = np.random.default_rng(seed)
    g = len(genes)
    m = (rng.integers(1, 20, (n, g)) * (rng.random((n, g)) < 0.5)).astype(np.int32)
    m[0, :] = 1  # every gene has counts
    a = ad.AnnData(X=sp.csr_matrix(m), obs=pd.DataFrame(index=[f"{obs_prefix or name}_{i}" for i in range(n)]),
                   var=pd.DataFrame(index=genes), dtype=np.int32)
    p = tmp_path / f"{name}.h5ad"
    a.write_h5ad(p)
    return p, a


def renamed(a, names):
    b = a.copy()
    b.var_names = names
    return b


def test_whitespace_stripped_by_default(tmp_path):
    pa, a = write(tmp_path, "a", [" TAZ", "B\t", "C", "  D  "])
    pb, b = write(tmp_path, "b", ["TAZ", "B", "C", "D"], seed=1)
    out = tmp_path / "w.dcdb"
    r = convert([pa, pb], out)
    assert "3 gene names had surrounding whitespace, removed" in r.stderr and str(pa) in r.stderr
    assert str(pb) not in r.stderr.split("removed")[0].split("note:")[-1]
    ds = Dataset(out)
    assert sorted(ds.gene_names) == ["B", "C", "D", "TAZ"]
    check_matrix(ds, [renamed(a, ["TAZ", "B", "C", "D"]), b])
    ds.close()
    # the opt-out keeps names as they are: 3 more genes
    out2 = tmp_path / "k.dcdb"
    r = convert([pa, pb], out2, "--keep-gene-whitespace")
    assert "surrounding whitespace" not in r.stderr
    ds = Dataset(out2)
    assert sorted(ds.gene_names) == sorted([" TAZ", "B\t", "C", "  D  ", "TAZ", "B", "D"])
    check_matrix(ds, [a, b], strip=False)
    ds.close()


def test_whitespace_repeat_within_a_file(tmp_path):
    """'TAZ' and ' TAZ' in one file: both stored (two genes named TAZ, as any repeat), said in the note."""
    pa, a = write(tmp_path, "a", ["TAZ", " TAZ", "C"])
    out = tmp_path / "r.dcdb"
    r = convert(pa, out)
    assert "1 gene names had surrounding whitespace" in r.stderr and "1 of them now repeat another name" in r.stderr
    ds = Dataset(out)
    assert sorted(ds.gene_names) == ["C", "TAZ", "TAZ"]
    X = ds.X().toarray()
    cols = [i for i, n in enumerate(ds.gene_names) if n == "TAZ"]
    got = sorted(tuple(X[:, c]) for c in cols)
    want = sorted(tuple(a.X.toarray()[:, c]) for c in (0, 1))
    assert got == want
    ds.close()
    assert run("verify", out).returncode == 0


def test_overlap_report_and_intersect(tmp_path):
    pa, a = write(tmp_path, "a", [f"G{i}" for i in range(10)])          # G0..G9
    pb, b = write(tmp_path, "b", [f"G{i}" for i in range(5, 15)], seed=1)  # G5..G14
    out = tmp_path / "u.dcdb"
    r = run("convert", pa, pb, "-o", out)
    assert "genes: 15 in the union of 2 inputs, 5 in every one of them" in r.stdout
    assert f"{pa}: 10 genes; 50.0% in every input, 50.0% in at least one other" in r.stdout
    assert "warning" not in r.stderr  # 50% is not below the threshold
    ds = Dataset(out)
    assert ds.n_genes == 15
    check_matrix(ds, [a, b])
    ds.close()
    # intersect: only G5..G9, X equal to the inputs' columns of those genes
    out2 = tmp_path / "i.dcdb"
    r = run("convert", pa, pb, "-o", out2, "--genes", "intersect")
    assert "--genes intersect: only those are stored" in r.stdout
    ds = Dataset(out2)
    keep = [f"G{i}" for i in range(5, 10)]
    assert sorted(ds.gene_names) == sorted(keep)
    check_matrix(ds, [a[:, keep], b[:, keep]])
    assert int(ds.meta["nnz"]) == a[:, keep].X.nnz + b[:, keep].X.nnz
    ds.close()
    assert run("verify", out2).returncode == 0
    # a third input sharing 2 of its 10 genes: a warning naming it
    pc, c = write(tmp_path, "c", ["G5", "G6"] + [f"M{i}" for i in range(8)], seed=2)
    out3 = tmp_path / "c.dcdb"
    r = run("convert", pa, pb, pc, "-o", out3, "--genes", "intersect")
    assert "warning: the inputs share few genes: 2 genes are in all 3 inputs" in r.stderr
    assert f"the most apart: {pc}, with 20.0% of its genes in any other input" in r.stderr
    ds = Dataset(out3)
    assert sorted(ds.gene_names) == ["G5", "G6"]
    check_matrix(ds, [a[:, ["G5", "G6"]], b[:, ["G5", "G6"]], c[:, ["G5", "G6"]]])
    ds.close()
    # nothing in common
    pd_, _ = write(tmp_path, "d", ["X1", "X2"], seed=3)
    r = run("convert", pa, pd_, "-o", tmp_path / "n.dcdb", "--genes", "intersect", check=False)
    assert r.returncode == 1 and "no gene is in every input" in r.stderr
    assert not (tmp_path / "n.dcdb").exists()
    # --quiet keeps the warning, not the report
    r = run("convert", pa, pd_, "-o", tmp_path / "q.dcdb", "--quiet")
    assert "genes:" not in r.stdout and "share few genes" in r.stderr
    r = run("convert", pa, "-o", tmp_path / "x.dcdb", "--genes", "both", check=False)
    assert r.returncode == 2 and "--genes" in r.stderr


REAL_NAMES = ["fhil_pbmc3k.h5ad", "mudan_sorted_pbmc_reference.h5ad", "pisces_pbmc1k.h5ad",
              "scanpy_10x10k_subset.h5ad", "soupx_pbmc4k_subset.h5ad"]


def test_real_files_overlap_and_whitespace(tmp_path):
    paths = [real_file(n) for n in REAL_NAMES]  # skips when ../shared is absent
    out = tmp_path / "all.dcdb"
    r = run("convert", *paths, "-o", out)
    assert "pisces_pbmc1k.h5ad: 4341 gene names had surrounding whitespace, removed" in r.stderr
    assert "0 in every one of them" in r.stdout
    assert "share few genes" in r.stderr and "the most apart: " in r.stderr
    assert "scanpy_10x10k_subset.h5ad, with 0.1% of its genes in any other input" in r.stderr  # the mouse file
    ds = Dataset(out)
    names = ds.gene_names
    assert not [n for n in names if n != n.strip()]
    # the names that were ' TAZ' joined 'TAZ' of the other files: fewer genes than without stripping
    ds.close()
    out2 = tmp_path / "keep.dcdb"
    run("convert", *paths, "-o", out2, "--keep-gene-whitespace", "--quiet")
    keep = Dataset(out2)
    assert keep.n_genes - len(names) > 4000
    assert any(n != n.strip() for n in keep.gene_names)
    keep.close()
    # the four human files, intersected: the shared genes only, every cell kept
    human = [p for p in paths if "scanpy_10x10k" not in str(p)]
    out3 = tmp_path / "h.dcdb"
    r = run("convert", *human, "-o", out3, "--genes", "intersect")
    n_shared = int(r.stdout.split(" in every one of them")[0].rsplit(",", 1)[1])
    ds = Dataset(out3)
    assert ds.n_genes == n_shared > 5000
    assert run("verify", out3).returncode == 0
    ds.close()
