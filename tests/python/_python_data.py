"""Datasets for the Python package tests: small generated ones (scripts/gen_h5ad.py +
the converter, into a pytest tmp dir) and the real PBMC files when present."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "data" / "real"
CONVERTER = ROOT / "build" / "deltacells"
EXTENSION = ROOT / "build" / "deltacells.so"
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
REAL_WITH_CELL_TYPE = ["fhil_pbmc3k.h5ad", "soupx_pbmc4k_subset.h5ad",
                       "mudan_sorted_pbmc_reference.h5ad"]


def need_build():
    missing = [str(p) for p in (CONVERTER, EXTENSION) if not p.exists()]
    if missing:
        pytest.fail("not built: " + ", ".join(missing) + " (run make)")


def gen(out_dir, cells, genes, seed, tile_cells):
    need_build()
    out_dir = Path(out_dir)
    h5 = out_dir / f"gen_{cells}_{genes}_{seed}.h5ad"
    db = out_dir / f"gen_{cells}_{genes}_{seed}_{tile_cells}.dcdb"
    if not h5.exists():
        subprocess.run([PY, str(ROOT / "scripts" / "gen_h5ad.py"), "--cells", str(cells),
                        "--genes", str(genes), "--seed", str(seed), "-o", str(h5)],
                       check=True, timeout=300)
    if not db.exists():
        convert(h5, db, tile_cells)
    return h5, db


def convert(h5, db, tile_cells=None):
    cmd = [str(CONVERTER), "convert", str(h5), "-o", str(db)]
    if tile_cells:
        cmd += ["--tile-cells", str(tile_cells)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"convert {h5} failed: {r.stderr}")
    return db


def real_file(name):
    p = REAL / name
    if not p.exists():
        pytest.skip(f"real data not present: {p}")
    return p


def read_h5ad(path):
    import anndata
    return anndata.read_h5ad(path)


def reindexed_X(adata, gene_names):
    """adata.X (CSR) with columns in the order of gene_names -> scipy CSR int64."""
    import scipy.sparse
    pos = adata.var_names.get_indexer(list(gene_names))
    assert (pos >= 0).all(), "gene names missing from the h5ad"
    X = adata.X
    X = scipy.sparse.csr_matrix((np.asarray(X.data, dtype=np.int64), X.indices.astype(np.int64),
                                 X.indptr.astype(np.int64)), shape=X.shape)
    return X[:, pos]
