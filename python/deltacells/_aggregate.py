"""deltacells.aggregate: pseudobulk statistics per (group of cells, gene), computed by the
extension's dc_aggregate_wide in one pass over the tiles (decoded and summed in C on all
cores), returned as a pandas DataFrame in long form or as an AnnData in the style of
scanpy's sc.get.aggregate."""
import json
import os
import sqlite3
import threading

import numpy as np

from . import _forksafe
from ._connect import is_remote as _is_remote
from ._core import Catalogue, with_connection

# One connection per (process, thread, dataset file), kept between calls: dc_aggregate keeps its
# accumulators and the connection its decoder pool and buffers, so a repeated call does not pay
# the first touch of fresh memory again (10-25 us per 4 KiB page on the development VM).  A
# rewritten file (another inode, size or mtime) gets a new connection; a forked child never uses
# its parent's (they are abandoned untouched, see _forksafe).
_cache = {}
_cache_lock = threading.Lock()
_PER_THREAD = 4


def _stamp(path):
    if _is_remote(path):
        return None          # the dchttp VFS refuses a changed remote file itself
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _connection(path):
    """(connection, Catalogue, gene names) for path, cached per process and thread."""
    real = path if _is_remote(path) else os.path.realpath(os.fspath(path))
    key = (_forksafe.pid(), threading.get_ident(), real)
    stamp = _stamp(real)
    with _cache_lock:
        for k in [k for k in _cache if k[0] != key[0]]:      # a parent's, after a fork
            _forksafe.abandon(_cache.pop(k)[0])
        hit = _cache.get(key)
    if hit is not None and hit[3] == stamp:
        return hit[0], hit[1], hit[2]
    if hit is not None:
        hit[0].close()
    con = with_connection(path)
    try:
        cat = Catalogue(con, path)
        names = np.array(json.loads(con.execute(
            "SELECT json_group_array(name) FROM (SELECT name FROM genes ORDER BY gene_id)").fetchone()[0]),
            dtype=object)
    except BaseException:
        con.close()
        raise
    with _cache_lock:
        mine = [k for k in _cache if k[:2] == key[:2] and k != key]
        for k in mine[: max(0, len(mine) - _PER_THREAD + 1)]:  # this thread's oldest
            _cache.pop(k)[0].close()
        _cache[key] = (con, cat, names, stamp)
    return con, cat, names


def close_connections():
    """Close the connections aggregate() keeps for this thread."""
    me = (_forksafe.pid(), threading.get_ident())
    with _cache_lock:
        for k in [k for k in _cache if k[:2] == me]:
            _cache.pop(k)[0].close()


def aggregate(path, by="cell_type", where=None, genes=None, *, cells=None, log1p_cpm=False,
              as_anndata=False, threads=None):
    """Statistics of the counts per group of cells and gene.

    path:   the dataset (.dcdb).
    by:     an obs column (a column of the ``cells`` table) whose values form the groups, or
            None for one group of all the selected cells.  Cells whose value is missing
            (NULL) form their own group, with ``group`` None (last).
    where:  an SQL predicate over ``cells`` selecting the cells (default: all).
    genes:  a gene panel (gene names or int gene ids), in the order wanted (default: all
            genes, in gene_id order).
    cells:  cell ids to restrict to (combined with ``where``).
    threads: decoder threads (default: one per core).
    log1p_cpm: also compute ``mean_log1p_cpm``, the mean over the group's cells of
            log1p(count / the cell's total count * 10,000) (the cell total counts every
            gene, not only the panel).

    Groups come in the column's category order (a categorical column) or ascending, the
    missing-label group last; only groups with at least one selected cell appear.

    Returns a pandas DataFrame with one row per (group, gene) and the columns
    ``group``, ``gene`` (the name), ``n_cells`` (cells of the group), ``sum``,
    ``mean`` (sum / n_cells: the mean INCLUDING the cells without the gene),
    ``n_expressing`` (cells with a count > 0), ``frac_expressing`` (n_expressing /
    n_cells) [, ``mean_log1p_cpm``].

    as_anndata=True returns groups x genes instead (like scanpy's sc.get.aggregate):
    ``obs`` indexed by the group labels (``"NA"`` for the missing-label group, ``"<NA>"`` if a
    label is spelled "NA") with the
    columns ``by`` and ``n_cells``; ``var`` indexed by gene name with ``gene_id``; one layer
    per statistic: ``sum``, ``mean``, ``count_nonzero`` (scanpy's name for n_expressing),
    ``frac_expressing`` [, ``mean_log1p_cpm``]; X is None.

    The connection is kept for the next call from the same thread on the same (unchanged)
    file; ``deltacells._aggregate.close_connections()`` closes this thread's.
    """
    import pandas as pd

    if by is not None and not isinstance(by, str):
        raise TypeError(f"by must be an obs column name (str) or None, not {type(by).__name__}")
    con, cat, names = _connection(path)
    con.execute("SELECT dc_config('threads', ?)", (0 if threads is None else int(threads),)).fetchall()
    if by is not None and by not in cat.columns and by not in ("name", "tile", "cell_id"):
        raise ValueError(f"unknown obs column {by!r}; the cells table of {path} has: "
                         + ", ".join(["cell_id", "name", "tile"] + list(cat.columns)))
    ids = cat.select(con, where, cells)
    cells_blob = None if ids is None else np.ascontiguousarray(ids, dtype="<i8").tobytes()
    gids = cat.resolve_genes(genes)
    genes_blob = None if gids is None else np.asarray(gids, dtype="<i4").tobytes()
    table = _wide_table(con)
    cols = "label, n_cells, n_genes, gene_ids, sum, n_expressing" + (", mean_log1p_cpm" if log1p_cpm else "")
    try:
        rows = con.execute(f"SELECT {cols} FROM {table}(?, ?, ?)", (by, cells_blob, genes_blob)).fetchall()
    except sqlite3.Error as e:
        raise ValueError(str(e)) from None
    kind = cat.kind(by) if by in cat.columns else None

    n_out = cat.n_genes if gids is None else len(gids)
    gene_ids = np.arange(n_out, dtype=np.int64) if gids is None else np.asarray(gids, dtype=np.int64)
    G = len(rows)
    labels = [r[0] for r in rows]
    if kind == "bool":
        labels = [None if v is None else bool(v) for v in labels]
    n_cells = np.array([r[1] for r in rows], dtype=np.int64)
    sums = np.empty((G, n_out), dtype=np.int64)
    nexpr = np.empty((G, n_out), dtype=np.int64)
    lg = np.empty((G, n_out), dtype=np.float64) if log1p_cpm else None
    for i, r in enumerate(rows):
        if r[2] != n_out:
            raise RuntimeError(f"dc_aggregate_wide returned {r[2]} genes, expected {n_out}")
        sums[i] = np.frombuffer(r[4], "<i8")
        nexpr[i] = np.frombuffer(r[5], "<i8")
        if log1p_cpm:
            lg[i] = np.frombuffer(r[6], "<f8")
    denom = n_cells.astype(np.float64)[:, None]
    mean = sums / denom if G else np.empty((0, n_out))
    frac = nexpr / denom if G else np.empty((0, n_out))
    gene_names = names[gene_ids]

    if as_anndata:
        import anndata
        named = {str(g) for g in labels if g is not None}
        # the missing-label group: "NA", unless a real label is spelled so (then "<NA>", ...)
        na = next(c for c in ("NA", "<NA>") + tuple(f"NA_{k}" for k in range(1, len(named) + 2))
                  if c not in named)
        obs = pd.DataFrame({"n_cells": n_cells},
                           index=pd.Index([na if g is None else str(g) for g in labels]))
        if by is not None:
            obs.insert(0, by, pd.Categorical([g for g in labels], categories=[g for g in labels if g is not None]))
        var = pd.DataFrame({"gene_id": gene_ids}, index=pd.Index([str(n) for n in gene_names]))
        layers = {"sum": sums, "mean": mean, "count_nonzero": nexpr, "frac_expressing": frac}
        if log1p_cpm:
            layers["mean_log1p_cpm"] = lg
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # duplicated gene names are kept as they are
            ad = anndata.AnnData(X=None, obs=obs, var=var, layers=layers)
        ad.uns["deltacells"] = {"path": str(path), "by": by, "where": "" if where is None else str(where)}
        return ad

    lab = np.empty(G, dtype=object)
    lab[:] = labels
    group = np.repeat(lab, n_out)
    data = {"group": group, "gene": np.tile(gene_names, G), "n_cells": np.repeat(n_cells, n_out),
            "sum": sums.ravel(), "mean": mean.ravel(), "n_expressing": nexpr.ravel(),
            "frac_expressing": frac.ravel()}
    if log1p_cpm:
        data["mean_log1p_cpm"] = lg.ravel()
    return pd.DataFrame(data, copy=False)      # no consolidation copy: the arrays are ours


def _wide_table(con):
    """dc_aggregate_wide of the dataset, or one declared in temp for a dataset made before it
    existed."""
    if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'dc_aggregate_wide'").fetchone():
        return "main.dc_aggregate_wide"
    if not con.execute("SELECT 1 FROM sqlite_temp_master WHERE name = 'dc_aggregate_wide'").fetchone():
        con.execute("CREATE VIRTUAL TABLE temp.dc_aggregate_wide USING deltacells_aggregate_wide(main)")
    return "temp.dc_aggregate_wide"
