"""The real 10x files in ../shared/data/real ($DC_REAL_DATA) convert exactly.
Each test is skipped (with the reason) when a file it needs is absent."""
import os

import anndata as ad
import pytest

from _converter_util import REAL_FILES, Dataset, check_matrix, check_obs, convert, real_file, run


@pytest.mark.parametrize("name", REAL_FILES, ids=REAL_FILES)
def test_real_file_roundtrip(name, tmp_path):
    path = str(real_file(name))
    out = tmp_path / "one.dcdb"
    convert(path, out, "--tile-cells", "1000")
    a = ad.read_h5ad(path)
    ds = Dataset(out)
    try:
        assert ds.n_cells == a.n_obs and ds.n_genes == a.n_vars
        check_matrix(ds, [a])
        check_obs(ds, [a])
        # a single input has no `source` column
        assert "source" not in ds.columns
    finally:
        ds.close()
    v = run("verify", out)
    assert "ok" in v.stdout


def test_all_real_files_into_one(tmp_path):
    files = [str(real_file(n)) for n in REAL_FILES]
    out = tmp_path / "all.dcdb"
    convert(files, out)
    adatas = [ad.read_h5ad(f) for f in files]
    ds = Dataset(out)
    try:
        union = set()
        for a in adatas:
            union |= set(a.var_names.str.strip())
        assert set(ds.gene_names) == union and ds.n_genes == len(union)
        check_matrix(ds, adatas)
        check_obs(ds, adatas)
        src = ds.obs("source")
        exp = []
        for f, a in zip(files, adatas):
            exp += [os.path.basename(f)] * a.n_obs
        assert src == exp
    finally:
        ds.close()
    run("verify", out)
