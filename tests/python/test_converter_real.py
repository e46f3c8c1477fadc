"""The real 10x files in ../shared/data/real convert exactly (skipped when absent)."""
import glob
import os

import anndata as ad
import pytest

from _converter_util import REAL, Dataset, check_matrix, check_obs, convert, run

FILES = sorted(glob.glob(os.path.join(REAL, "*.h5ad")))
pytestmark = pytest.mark.skipif(not FILES, reason="real data not present (../shared/data/real)")


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f) for f in FILES])
def test_real_file_roundtrip(path, tmp_path):
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
    out = tmp_path / "all.dcdb"
    convert(FILES, out)
    adatas = [ad.read_h5ad(f) for f in FILES]
    ds = Dataset(out)
    try:
        union = set()
        for a in adatas:
            union |= set(a.var_names)
        assert set(ds.gene_names) == union and ds.n_genes == len(union)
        check_matrix(ds, adatas)
        check_obs(ds, adatas)
        src = ds.obs("source")
        exp = []
        for f, a in zip(FILES, adatas):
            exp += [f] * a.n_obs
        assert src == exp
    finally:
        ds.close()
    run("verify", out)
