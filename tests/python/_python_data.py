"""Datasets for the Python package tests: small generated ones (scripts/gen_h5ad.py +
the converter, into a pytest tmp dir) and the real PBMC files when present."""
import numpy as np

# paths, the build check, generated datasets, conversion and real files are the
# dc_batch tests' helpers; the package tests add what they compare against
from _batch_util import (CONVERTER, EXTENSION, PY, REAL, ROOT, convert, need_build,  # noqa: F401
                         real_file)
from _batch_util import generated as gen  # noqa: F401

REAL_WITH_CELL_TYPE = ["fhil_pbmc3k.h5ad", "soupx_pbmc4k_subset.h5ad",
                       "mudan_sorted_pbmc_reference.h5ad"]


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


def stored_gene_names(db):
    """The dataset's gene names in its stored order (gene_id), read through the extension."""
    import deltacells
    con = deltacells.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    finally:
        con.close()
