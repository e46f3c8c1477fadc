"""deltacells.to_anndata: a selection of a dataset as an AnnData, for analysis and checks."""
import numpy as np

from ._core import Catalogue, read_csr


def to_anndata(path, where=None, obs=None, genes=None, chunk_cells=20000, cell_id=False):
    """Return an AnnData of the cells matching `where` (SQL over `cells`), in cell_id order.

    X:    scipy CSR of the stored int32 counts; columns in the dataset's gene order
          (gene_id: decreasing total counts), or in the order of the `genes` panel.
    obs:  the columns listed (default all), indexed by the cell names; categoricals keep
          their category lists; with cell_id=True also a 'cell_id' column.
    var:  the genes table (total_counts, n_cells and the var columns), indexed by name.
    """
    import anndata
    import pandas as pd
    import scipy.sparse

    from ._core import with_connection
    con = with_connection(path)
    try:
        cat = Catalogue(con, path)
        cols = list(cat.columns) if obs is None else cat.resolve_obs(obs)
        gids = cat.resolve_genes(genes)
        ids = cat.select(con, where)
        if ids is None:
            ids = np.arange(cat.n_cells, dtype=np.int64)
        blob = None if gids is None else gids.astype("<i4").tobytes()
        n_genes = cat.n_genes if gids is None else len(gids)
        hint = 0
        if gids is None and len(ids) == cat.n_cells:   # every cell: the stored total, exactly
            hint = int(con.execute("SELECT coalesce(sum(nnz), 0) FROM tiles").fetchone()[0])
        indptr, indices, data, _ = read_csr(con, ids, blob, chunk_cells, hint)
        X = scipy.sparse.csr_matrix((data, indices, indptr), shape=(len(ids), n_genes))

        # obs: one query, rows matched to ids
        qcols = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
        sql = f"SELECT cell_id, name{', ' + qcols if cols else ''} FROM cells"
        if where is not None and str(where).strip():
            sql += f" WHERE ({where})"
        rows = con.execute(sql + " ORDER BY cell_id").fetchall()
        if len(rows) != len(ids) or any(r[0] != i for r, i in zip(rows, ids.tolist())):
            raise RuntimeError("the cells table and the selection disagree")
        data = {}
        for j, c in enumerate(cols, start=2):
            vals = [r[j] for r in rows]
            kind = cat.kind(c)
            if kind == "category":
                data[c] = pd.Categorical(vals, categories=cat.categories(c, con))
            elif kind == "bool":
                data[c] = (pd.array([None if v is None else bool(v) for v in vals], dtype="boolean")
                           if any(v is None for v in vals) else np.array(vals, dtype=bool))
            elif kind == "int":
                data[c] = (pd.array(vals, dtype="Int64") if any(v is None for v in vals)
                           else np.array(vals, dtype=np.int64))
            elif kind == "real":
                data[c] = np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
            else:
                data[c] = pd.array(vals, dtype=object)
        index = pd.Index([str(r[1]) for r in rows])
        obs_df = pd.DataFrame(data, index=index, columns=cols)
        if cell_id:
            obs_df["cell_id"] = ids
        var = pd.read_sql_query("SELECT * FROM genes ORDER BY gene_id", con)
        var.index = pd.Index(var.pop("name").astype(str).tolist())
        if gids is not None:
            var = var.iloc[gids]
    finally:
        con.close()
    ad = anndata.AnnData(X=X, obs=obs_df, var=var, dtype=X.dtype)
    ad.uns["deltacells"] = {"path": str(path), "where": "" if where is None else str(where)}
    return ad
