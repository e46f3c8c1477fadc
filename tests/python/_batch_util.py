"""Helpers of the dc_batch / expression / tiles tests: datasets made by the converter
(scripts/gen_h5ad.py + build/deltacells convert), connections with the extension loaded,
and the reference matrix (anndata's X in the dataset's gene numbering)."""
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[2]


def _real_dir():
    """Where the real PBMC files are: $DC_REAL_DATA if set (empty: hidden, every real-data
    test skips, as on a fresh clone), else ../shared/data/real next to the repository."""
    v = os.environ.get("DC_REAL_DATA")
    if v is None:
        return ROOT.parent / "shared" / "data" / "real", ""
    if v == "":
        # a path that cannot exist (/dev/null is not a directory)
        return Path(os.devnull) / "real-data-hidden", " (hidden: DC_REAL_DATA is empty)"
    return Path(v).resolve(), " (from DC_REAL_DATA)"


REAL, _REAL_HOW = _real_dir()
# DC_BUILD: another build (make test uses build/asan, the ASan+UBSan build, for a subset)
BUILD = Path(os.environ.get("DC_BUILD", ROOT / "build"))
CONVERTER = BUILD / "deltacells"
EXTENSION = BUILD / "deltacells.so"
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
REAL_FILES = ["fhil_pbmc3k.h5ad", "mudan_sorted_pbmc_reference.h5ad", "pisces_pbmc1k.h5ad",
              "scanpy_10x10k_subset.h5ad", "soupx_pbmc4k_subset.h5ad"]


def need_build():
    missing = [str(p) for p in (CONVERTER, EXTENSION) if not p.exists()]
    if missing:
        pytest.fail("not built: " + ", ".join(missing) + " (run make)")


def replace_rows(path, src):
    """every stored row of path replaced by src's, by a plain connection (another process's
    writer, as SQLite sees it): new data, same schema, a new data version"""
    w = sqlite3.connect(str(path), isolation_level=None)
    w.execute("ATTACH ? AS src", (str(src),))
    tables = [r[0] for r in w.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'")]
    w.execute("BEGIN IMMEDIATE")
    for t in tables:
        w.execute(f'DELETE FROM main."{t}"')
        w.execute(f'INSERT INTO main."{t}" SELECT * FROM src."{t}"')
    w.execute("COMMIT")
    w.close()


def connect(db, **kw):
    con = sqlite3.connect(str(db), **kw)
    con.enable_load_extension(True)
    con.execute("SELECT load_extension(?, 'sqlite3_deltacells_init')", (str(EXTENSION),))
    con.enable_load_extension(False)
    return con


def convert(h5, db, tile_cells=None, extra=()):
    need_build()
    cmd = [str(CONVERTER), "convert", str(h5), "-o", str(db), "--quiet", "--force"]
    if tile_cells:
        cmd += ["--tile-cells", str(tile_cells)]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"convert {h5} failed: {r.stderr}")
    return Path(db)


def generated(out_dir, cells, genes, seed, tile_cells, extra=()):
    """A generated h5ad and its dataset (cached in out_dir; extra: more convert options)."""
    need_build()
    out_dir = Path(out_dir)
    h5 = out_dir / f"gen_{cells}_{genes}_{seed}.h5ad"
    db = out_dir / f"gen_{cells}_{genes}_{seed}_{tile_cells}{''.join(extra)}.dcdb"
    if not h5.exists():
        subprocess.run([PY, str(ROOT / "scripts" / "gen_h5ad.py"), "--cells", str(cells), "--genes",
                        str(genes), "--seed", str(seed), "-o", str(h5)], check=True, timeout=600,
                       capture_output=True)
    if not db.exists():
        convert(h5, db, tile_cells, extra)
    return h5, db


def real_file(name):
    """The real file `name`, or a skip (with the reason) when it is absent."""
    if not REAL.is_dir():
        pytest.skip(f"real data not present: no directory {REAL}{_REAL_HOW}")
    p = REAL / name
    if not p.is_file():
        pytest.skip(f"real data not present: no file {p}{_REAL_HOW}")
    return p


def reference_matrix(h5, db):
    """anndata's X of h5 as int64 CSR with columns in the dataset's gene numbering."""
    import anndata
    con = connect(db)   # the genes table is a virtual table (format version 2)
    sources = json.loads(con.execute("SELECT value FROM dc_meta WHERE key = 'sources'").fetchone()[0])
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    con.close()
    ad = anndata.read_h5ad(str(h5))
    matrix = sources[0].get("matrix", "X")
    if matrix == "X":
        X, var_names = ad.X, ad.var_names
    elif matrix == "raw/X":
        X, var_names = ad.raw.X, ad.raw.var_names
    else:
        X, var_names = ad.layers[matrix.split("/", 1)[1]], ad.var_names
    X = sp.csr_matrix(X)
    assert np.all(X.data == np.round(X.data)), "reference counts are not whole numbers"
    X = X.astype(np.int64)
    pos = {}
    for i, n in enumerate(var_names):
        pos.setdefault(n.strip(), []).append(i)  # the converter removes surrounding whitespace
    # duplicated var names keep their relative order in the dataset's numbering
    used = {}
    perm = np.empty(len(names), dtype=np.int64)
    for g, n in enumerate(names):
        k = used.get(n, 0)
        perm[g] = pos[n][k]
        used[n] = k + 1
    Xd = X[:, perm].tocsr()
    Xd.sort_indices()
    Xd.eliminate_zeros()
    return Xd


def ids_blob(ids):
    return np.asarray(ids, dtype="<i8").tobytes()


def batch(con, cells, genes=None, schema=None):
    """dc_batch(cells[, genes]) -> (cell_ids, csr, n_genes)."""
    fn = f"{schema}.dc_batch" if schema else "dc_batch"
    if genes is None:
        row = con.execute(f"SELECT n_cells, n_genes, cell_ids, indptr, indices, data FROM {fn}(?)",
                          (cells,)).fetchone()
    else:
        row = con.execute(f"SELECT n_cells, n_genes, cell_ids, indptr, indices, data FROM {fn}(?, ?)",
                          (cells, genes)).fetchone()
    n, g, cid, ip, ix, dv = row
    ip = np.frombuffer(ip, "<i8")
    ix = np.frombuffer(ix, "<i4")
    dv = np.frombuffer(dv, "<i4")
    assert len(ip) == n + 1 and ip[0] == 0 and ip[-1] == len(ix) == len(dv)
    assert np.all(np.diff(ip) >= 0)
    m = sp.csr_matrix((dv.astype(np.int64), ix, ip), shape=(n, g))
    return np.frombuffer(cid, "<i8"), m, g


def assert_csr_equal(got, ref):
    ref = sp.csr_matrix(ref)
    ref.sort_indices()
    assert got.shape == ref.shape
    assert np.array_equal(got.indptr, ref.indptr)
    assert np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data)
    # indices strictly increasing within every row
    if got.nnz > 1:
        step = np.diff(got.indices.astype(np.int64))
        first = np.zeros(got.nnz, dtype=bool)
        first[got.indptr[:-1][got.indptr[:-1] < got.nnz]] = True
        assert np.all(step[~first[1:]] > 0)
