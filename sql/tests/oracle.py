#!/usr/bin/env python3
"""The oracle of the SQL-file tests: a plain SQLite database made from the fixture's h5ad with
anndata and numpy alone (no extension, nothing the converter wrote), holding native tables with
the names and columns of the dataset's tables, filled by the rules of docs/format.md:

  cells(cell_id, name, tile, <obs columns>)   cell i in tile i // TILE_CELLS; obs columns in h5ad
                                              order, declared TEXT (categorical, text), INTEGER
                                              (int, bool as 0/1) or REAL; NaN / missing -> NULL
  tiles(tile, first_cell, n_cells, nnz)       the derivable columns of `tiles`
  genes(gene_id, name, total_counts, n_cells) gene 0 has the most counts, ties in var order
  expression(cell_id, genes, counts)          int32 LE blobs, gene ids ascending
  expression_long(cell_id, gene_id, count)    rowid = cell_id * n_genes + gene_id
  dc_meta(key, value)                         n_cells, n_genes, nnz, n_tiles, tile_cells

sql/tests/run.sh runs the files marked `-- oracle: same output` against this database too (without
the extension) and against the dataset (with it); both outputs must equal NAME.expected. Other
files ATTACH it as `o` to compare what the extension returns with it.

usage: oracle.py FIXTURE.h5ad TILE_CELLS OUT.db
"""
import os
import sqlite3
import sys

import anndata
import numpy as np
import pandas as pd
import scipy.sparse as sp


def kind_of(s):
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return "TEXT"
    if pd.api.types.is_bool_dtype(dt) or pd.api.types.is_integer_dtype(dt):
        return "INTEGER"
    if pd.api.types.is_float_dtype(dt):
        return "REAL"
    return "TEXT"


def value(sql_type, v):
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    if sql_type == "INTEGER":
        return int(v)
    if sql_type == "REAL":
        return float(v)
    return str(v)


def main(h5, tile_cells, out):
    tile_cells = int(tile_cells)
    ad = anndata.read_h5ad(h5)
    X = sp.csr_matrix(ad.X)
    assert np.all(X.data == np.round(X.data)) and (X.data >= 0).all(), "counts must be whole numbers"
    X = X.astype(np.int64)
    X.eliminate_zeros()
    X.sort_indices()
    n_cells, n_var = X.shape

    # gene numbering: decreasing total counts, ties in var order (a stable sort)
    total = np.asarray(X.sum(axis=0)).ravel()
    ncell = np.diff(X.tocsc().indptr)
    order = np.argsort(-total, kind="stable")          # order[new id] = var position
    new_id = np.empty(n_var, dtype=np.int64)
    new_id[order] = np.arange(n_var)

    tmp = out + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")

    obs = ad.obs
    types = {c: kind_of(obs[c]) for c in obs.columns}
    cols = "".join(f', "{c}" {types[c]}' for c in obs.columns)
    con.execute(f"CREATE TABLE cells(cell_id INTEGER PRIMARY KEY, name TEXT, tile INTEGER{cols})")
    values = [obs[c].astype(object).tolist() for c in obs.columns]
    rows = [[i, str(obs.index[i]), i // tile_cells] + [value(types[c], values[j][i]) for j, c in enumerate(obs.columns)]
            for i in range(n_cells)]
    con.executemany(f"INSERT INTO cells VALUES({','.join('?' * (3 + len(obs.columns)))})", rows)

    con.execute("CREATE TABLE tiles(tile INTEGER PRIMARY KEY, first_cell INTEGER, n_cells INTEGER, nnz INTEGER)")
    n_tiles = (n_cells + tile_cells - 1) // tile_cells
    for t in range(n_tiles):
        a, b = t * tile_cells, min(n_cells, (t + 1) * tile_cells)
        con.execute("INSERT INTO tiles VALUES(?, ?, ?, ?)", (t, a, b - a, int(X.indptr[b] - X.indptr[a])))

    con.execute("CREATE TABLE genes(gene_id INTEGER PRIMARY KEY, name TEXT, total_counts INTEGER, n_cells INTEGER)")
    con.executemany("INSERT INTO genes VALUES(?, ?, ?, ?)",
                    [(g, str(ad.var_names[v]), int(total[v]), int(ncell[v])) for g, v in enumerate(order)])

    # the matrix in the new gene numbering, gene ids ascending within a cell
    Xn = sp.csr_matrix((X.data, new_id[X.indices], X.indptr), shape=X.shape)
    Xn.sort_indices()
    con.execute("CREATE TABLE expression(cell_id INTEGER PRIMARY KEY, genes BLOB, counts BLOB)")
    con.executemany("INSERT INTO expression VALUES(?, ?, ?)",
                    [(i, Xn.indices[Xn.indptr[i]:Xn.indptr[i + 1]].astype("<i4").tobytes(),
                      Xn.data[Xn.indptr[i]:Xn.indptr[i + 1]].astype("<i4").tobytes()) for i in range(n_cells)])
    con.execute("CREATE TABLE expression_long(cell_id INTEGER, gene_id INTEGER, count INTEGER)")
    cell = np.repeat(np.arange(n_cells, dtype=np.int64), np.diff(Xn.indptr))
    gene = Xn.indices.astype(np.int64)
    con.executemany("INSERT INTO expression_long(rowid, cell_id, gene_id, count) VALUES(?, ?, ?, ?)",
                    zip((cell * n_var + gene).tolist(), cell.tolist(), gene.tolist(), Xn.data.tolist()))
    con.execute("CREATE INDEX expression_long_gene ON expression_long(gene_id)")

    con.execute("CREATE TABLE dc_meta(key TEXT PRIMARY KEY, value)")
    con.executemany("INSERT INTO dc_meta VALUES(?, ?)",
                    [("n_cells", n_cells), ("n_genes", n_var), ("nnz", int(X.nnz)), ("n_tiles", n_tiles),
                     ("tile_cells", tile_cells)])
    con.commit()
    con.close()
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__.rsplit("usage: ", 1)[1].strip())
    main(*sys.argv[1:])
