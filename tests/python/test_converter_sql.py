"""The converter's dataset seen through the extension: dc_batch and cells against anndata."""
import json
import os
import sqlite3
import subprocess
import warnings

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp

from _converter_util import EXTENSION, GEN, PY, convert, expected_values

warnings.filterwarnings("ignore")


def connect(path):
    if not os.path.exists(EXTENSION):
        pytest.skip("build/deltacells.so is not built")
    con = sqlite3.connect(path)
    con.enable_load_extension(True)
    con.execute("SELECT load_extension(?, 'sqlite3_deltacells_init')", (EXTENSION,))
    return con


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("sql")
    h = d / "g.h5ad"
    subprocess.run([PY, GEN, "--cells", "2500", "--genes", "900", "--seed", "11", "-o", h], check=True,
                   capture_output=True)
    out = d / "g.dcdb"
    convert(h, out, "--tile-cells", "600")
    return ad.read_h5ad(h), out


def test_schema_declares_the_virtual_tables(made):
    _, out = made
    con = sqlite3.connect(out)
    sql = " ".join(r[0] for r in con.execute("SELECT sql FROM sqlite_schema WHERE sql LIKE 'CREATE VIRTUAL%'"))
    for m in ("deltacells_genes", "deltacells_cells", "deltacells_tiles", "deltacells_expression",
              "deltacells_expression_long", "deltacells_batch"):
        assert f"USING {m}" in sql
    # dc_page_size_for (ext/dc_format.h): 16 KiB pages below 4,000,000 nonzeros, 32 KiB from there
    nnz = con.execute("SELECT value FROM dc_meta WHERE key = 'nnz'").fetchone()[0]
    assert 0 < nnz < 4_000_000
    assert con.execute("PRAGMA page_size").fetchone()[0] == 16384
    assert con.execute("PRAGMA application_id").fetchone()[0] == 0x44435442
    con.close()


def test_dc_batch_equals_anndata(made):
    a, out = made
    con = connect(out)
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    col_of = {n: i for i, n in enumerate(a.var_names)}
    perm = np.array([col_of[n] for n in names])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, a.n_obs, 700)
    n, ip, ix, dx = con.execute("SELECT n_cells, indptr, indices, data FROM dc_batch(?)",
                                (json.dumps(ids.tolist()),)).fetchone()
    assert n == len(ids)
    m = sp.csr_matrix((np.frombuffer(dx, np.int32), np.frombuffer(ix, np.int32), np.frombuffer(ip, np.int64)),
                      shape=(n, len(names)))
    exp = sp.csr_matrix(a.X)[ids][:, perm]
    assert (m != exp).nnz == 0
    con.close()


def test_cells_table_equals_obs(made):
    a, out = made
    con = connect(out)
    rows = con.execute("SELECT cell_id, name, cell_type, batch, age, percent_mt, is_doublet, barcode "
                       "FROM cells ORDER BY cell_id").fetchall()
    assert [r[0] for r in rows] == list(range(a.n_obs))
    assert [r[1] for r in rows] == list(a.obs_names)
    for j, col in enumerate(["cell_type", "batch", "age", "percent_mt", "is_doublet", "barcode"], start=2):
        assert [r[j] for r in rows] == expected_values(a.obs[col]), col
    n = con.execute("SELECT count(*) FROM cells WHERE cell_type = 'NK' AND percent_mt < 5").fetchone()[0]
    pm = a.obs["percent_mt"]
    assert n == int(((a.obs["cell_type"] == "NK") & (pm < 5)).sum())
    con.close()
