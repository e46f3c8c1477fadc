"""Reference statistics for dc_aggregate, computed with numpy/scipy from a CSR matrix (the
h5ad's X in the dataset's gene numbering) and per-cell labels taken from the h5ad's obs, and
the comparison with what the extension returns."""
import math

import numpy as np
import pandas as pd
import scipy.sparse as sp


def group_order(labels):
    """Groups as scanpy orders them: a categorical's categories (those present), other
    values ascending; cells with a missing label form the last group (None)."""
    s = pd.Series(labels)
    present = s[s.notna()]
    if isinstance(s.dtype, pd.CategoricalDtype):
        used = set(present.astype(object))
        order = [c for c in s.cat.categories if c in used]
    else:
        order = sorted(set(present.tolist()))
    if s.isna().any():
        order.append(None)
    return order


def reference(X, labels=None, cells=None, panel=None, log1p=True):
    """{label: dict(n_cells, sum, n_expr, mean, frac, mean_log1p)} and the group order.
    X: scipy CSR (cells x genes, int64); labels: per cell (pandas Series/array) or None for
    one group; cells: the selected cell ids or None; panel: gene ids in output order."""
    X = sp.csr_matrix(X)
    n = X.shape[0]
    sel = np.arange(n) if cells is None else np.sort(np.asarray(cells, dtype=np.int64))
    if labels is None:
        lab = pd.Series([None] * n, dtype=object)
        order = [None] if len(sel) else []
        key = np.zeros(n, dtype=np.int64)
    else:
        lab = pd.Series(labels).reset_index(drop=True)
        order = group_order(lab.iloc[sel])
        pos = {g: i for i, g in enumerate(order) if g is not None}
        key = np.array([len(order) - 1 if (v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v))
                        else pos.get(v, -1) for v in lab.astype(object)], dtype=np.int64)
    Xs = X[sel]
    ks = key[sel]
    G = len(order)
    ind = sp.csr_matrix((np.ones(len(sel), dtype=np.int64), (ks, np.arange(len(sel)))), shape=(G, len(sel)))
    totals = np.asarray(Xs.sum(axis=1)).ravel().astype(np.float64)
    sums = (ind @ Xs).toarray()
    nexpr = (ind @ (Xs > 0).astype(np.int64)).toarray()
    out = {}
    if log1p:
        Ln = Xs.astype(np.float64).tocsr()
        rows = np.repeat(np.arange(Ln.shape[0]), np.diff(Ln.indptr))
        Ln.data = np.log1p(Ln.data / totals[rows] * 1e4)
        lsum = (ind @ Ln).toarray()
    ncells = np.bincount(ks, minlength=G)
    cols = np.arange(X.shape[1]) if panel is None else np.asarray(panel, dtype=np.int64)
    for i, g in enumerate(order):
        nc = int(ncells[i])
        out[g] = dict(n_cells=nc, sum=sums[i, cols], n_expr=nexpr[i, cols], mean=sums[i, cols] / nc,
                      frac=nexpr[i, cols] / nc, mean_log1p=(lsum[i, cols] / nc) if log1p else None)
    return out, order


def close(a, b, rel=1e-12):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return np.all(np.abs(a - b) <= rel * np.maximum(np.abs(a), np.abs(b)))


def wide(con, group_by=None, cells=None, genes=None, log1p=True, table="dc_aggregate_wide"):
    """dc_aggregate_wide -> ([labels], {label: dict}) with gene_ids."""
    cols = "label, n_cells, n_genes, gene_ids, sum, n_expressing" + (", mean_log1p_cpm" if log1p else "")
    rows = con.execute(f"SELECT {cols} FROM {table}(?, ?, ?)", (group_by, cells, genes)).fetchall()
    order, got = [], {}
    for r in rows:
        order.append(r[0])
        d = dict(n_cells=r[1], n_genes=r[2], gene_ids=np.frombuffer(r[3], "<i4"),
                 sum=np.frombuffer(r[4], "<i8"), n_expr=np.frombuffer(r[5], "<i8"))
        if log1p:
            d["mean_log1p"] = np.frombuffer(r[6], "<f8")
        got[r[0]] = d
    return order, got


def long(con, group_by=None, cells=None, genes=None, table="dc_aggregate"):
    """dc_aggregate (long form) -> ([labels], {label: dict of arrays}, gene ids, gene names)."""
    rows = con.execute(f"SELECT label, gene_id, gene, n_cells, sum, mean, n_expressing, frac_expressing,"
                       f" mean_log1p_cpm FROM {table}(?, ?, ?)", (group_by, cells, genes)).fetchall()
    order, got = [], {}
    for r in rows:
        if not order or order[-1] != r[0] or r[0] not in got:
            if r[0] in got:
                raise AssertionError(f"group {r[0]!r} appears in two runs of rows")
            order.append(r[0])
            got[r[0]] = dict(gene_id=[], gene=[], n_cells=[], sum=[], mean=[], n_expr=[], frac=[], mean_log1p=[])
        d = got[r[0]]
        for k, v in zip(("gene_id", "gene", "n_cells", "sum", "mean", "n_expr", "frac", "mean_log1p"), r[1:]):
            d[k].append(v)
    for d in got.values():
        for k in d:
            if k != "gene":
                d[k] = np.asarray(d[k])
    return order, got


def assert_matches(got_order, got, ref_order, ref, gene_ids=None, log1p=True, long_form=False):
    assert got_order == ref_order, (got_order, ref_order)
    for g in ref_order:
        r, d = ref[g], got[g]
        if long_form:
            assert np.all(d["n_cells"] == r["n_cells"]), g
            assert np.array_equal(d["sum"], r["sum"]), g
            assert np.array_equal(d["n_expr"], r["n_expr"]), g
            assert close(d["mean"], r["mean"]), g
            assert close(d["frac"], r["frac"]), g
            if gene_ids is not None:
                assert np.array_equal(d["gene_id"], gene_ids)
        else:
            assert d["n_cells"] == r["n_cells"], g
            assert np.array_equal(d["sum"], r["sum"]), g
            assert np.array_equal(d["n_expr"], r["n_expr"]), g
            if gene_ids is not None:
                assert np.array_equal(d["gene_ids"], gene_ids)
        if log1p:
            assert close(d["mean_log1p"], r["mean_log1p"]), (g, np.max(np.abs(d["mean_log1p"] - r["mean_log1p"])))
