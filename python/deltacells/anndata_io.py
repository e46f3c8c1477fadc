"""deltacells.to_anndata: a selection of a dataset as an AnnData, for analysis and checks."""
import json
import math

import numpy as np

from ._core import X_DTYPES, Catalogue, read_x, x_dtype


def original_gene_order(con):
    """gene_ids in the input's original order: by genes.orig_index (the place of each gene in the
    union of the inputs' var, first input first), or None when the dataset does not record it
    (written before it was stored: then the stored order is all there is)."""
    row = con.execute("SELECT value FROM dc_meta WHERE key = 'gene_order'").fetchone()
    cols = [r[1] for r in con.execute("PRAGMA table_info(genes)").fetchall()]
    # written together (an older dataset has neither): one without the other is damage, and
    # the stored order in its place would be a silent swap of the user's genes
    problem = None
    if row is not None and row[0] != "union":
        problem = f"dc_meta.gene_order is {row[0]!r}, not 'union', the only order this version knows"
    elif row is not None and "orig_index" not in cols:
        problem = ("dc_meta.gene_order says the original gene order is recorded, but the genes table "
                   "has no orig_index column")
    elif row is None and "orig_index" in cols:
        problem = "the genes table has an orig_index column, but dc_meta.gene_order is missing"
    if problem:
        raise ValueError(f"{problem}, so the input's gene order is unknown (`deltacells verify` checks "
                         "the dataset; gene_order='stored' reads the stored order)")
    if row is None:
        return None
    vals = [r[0] for r in con.execute("SELECT orig_index FROM genes ORDER BY gene_id")]
    orig = np.array([-1 if v is None else v for v in vals], dtype=np.int64)
    order = np.argsort(orig, kind="stable").astype(np.int64)
    if not np.array_equal(orig[order], np.arange(len(orig))):
        raise ValueError(f"genes.orig_index is not a permutation of 0..{len(orig) - 1}, so the input's gene order "
                         "is unknown (`deltacells verify` checks the dataset)")
    return order


def _meta_json(meta, key, kind):
    """dc_meta `key` (from Catalogue.meta) as JSON of type `kind` (dict or list; absent:
    empty); anything else is an error naming the key."""
    if meta.get(key) is None:
        return kind()
    try:
        v = json.loads(meta[key])
    except (TypeError, ValueError) as e:
        raise ValueError(f"dc_meta.{key} is not JSON ({e}); `deltacells verify` checks a dataset") from None
    if not isinstance(v, kind):
        raise ValueError(f"dc_meta.{key} is not a JSON {'object' if kind is dict else 'array'}; "
                         "`deltacells verify` checks a dataset")
    return v


def file_names(meta, key, columns, places=None, where=None):
    """The names `columns` (stored names) get in an AnnData: a column the converter stored under
    another name because its own was taken (dc_meta `key`: obs_names, var_names) gets its name in
    the input files back, unless another of the columns has that name (as export).  A column
    whose name is empty (no h5ad can hold it: write_h5ad would fail) is 'Unnamed: I', I its
    place (places[name], else its index in columns), as pandas names a column without a name and
    export writes it, with a warning naming `where`."""
    renamed = _meta_json(meta, key, dict)
    out = []

    def taken(i, o):
        return any(o == d for j, d in enumerate(columns) if j != i) or o in out

    for i, c in enumerate(columns):
        o = renamed.get(c)
        if not isinstance(o, str) or taken(i, o):
            o = c
        if o == "":
            place = i if places is None else places.get(c, i)
            o = f"Unnamed: {place}"
            for k in range(1, len(columns) + 1):
                if not taken(i, o):
                    break
                o = f"Unnamed: {place}_{k}"
            import warnings
            frame = "an obs" if key == "obs_names" else "a var"
            warnings.warn(f"{where}: {frame} column has an empty name, which no h5ad can hold; it is named "
                          f"{o!r} (as pandas names a column without a name, and export writes it)", stacklevel=3)
        out.append(o)
    return out


# obs_dtypes' names (dc_meta; docs/format.md) and the column kind each is for
_NARROW = {"int8": "int", "int16": "int", "int32": "int", "uint8": "int", "uint16": "int",
           "uint32": "int", "float16": "real", "float32": "real"}


def _nullable(d):
    """pandas' nullable dtype of numpy integer (or bool) type name d: Int32, UInt8, boolean."""
    return "boolean" if d == "bool" else d.capitalize().replace("Uint", "UInt")


# the types dc_meta obs_cat_dtypes / var_cat_dtypes name for a categorical's categories
# (docs/format.md; the converter's cv_cat_dtype_known): the dtype table's (X_DTYPES), but
# float16 (no pandas index holds it), and bool
_CAT_DTYPES = tuple(d for d in X_DTYPES if d != "float16") + ("bool",)


def _typed_labels(labels, dtype):
    """A categorical's labels (text) as the numbers or booleans dc_meta obs_cat_dtypes
    (var_cat_dtypes) says the input had (a numpy array of that type: int16, uint64, float32,
    ...; a list of booleans), or None (strings, or a label that is not one: as export does).
    A label out of the type's range reads in the 64-bit type of its kind (int64, then uint64;
    float64), as export reads it, never wrapped; so a dataset written before the exact type (or
    'uint64') was recorded, which says 'int64' for every integer type, gives int64 categories,
    uint64 for those of 2^63 and up."""
    if dtype == "bool":
        b = {"True": True, "False": False}
        return [b[str(x)] for x in labels] if all(str(x) in b for x in labels) else None
    if dtype not in _CAT_DTYPES:
        return None
    real = np.dtype(dtype).kind == "f"
    try:
        vals = [float(str(x)) if real else int(str(x)) for x in labels]
    except ValueError:
        return None
    for d in dict.fromkeys((dtype, "float64") if real else (dtype, "int64", "uint64")):
        if real:
            top = np.finfo(d).max
            if all(not math.isfinite(v) or abs(v) <= top for v in vals):
                return np.array(vals, dtype=d)
        else:
            info = np.iinfo(d)
            if all(info.min <= v <= info.max for v in vals):
                return np.array(vals, dtype=d)
    return None


def _categorical(vals, cats, dtype, ordered=False):
    """pd.Categorical of values `vals` (labels, None for missing) with categories `cats` (the
    labels in order), the categories in type `dtype` (_typed_labels) where it gives them."""
    import pandas as pd
    typed = _typed_labels(cats, dtype)
    if typed is None:
        return pd.Categorical(vals, categories=cats, ordered=ordered)
    code = {v: k for k, v in enumerate(cats)}
    codes = np.array([-1 if v is None else code.get(v, -1) for v in vals], dtype=np.int64)
    return pd.Categorical.from_codes(codes, categories=pd.Index(typed), ordered=ordered)


def _var_types(var, meta):
    """The var columns in the input's types, as export writes them: dc_meta var_dtypes (bool,
    float32, int32, uint8, ...: the genes table stores booleans as 0/1 and numbers as int64 /
    float64) and var_categories (categoricals, stored as text)."""
    import pandas as pd
    for c, d in _meta_json(meta, "var_dtypes", dict).items():
        d = str(d)
        if c not in var.columns or not (d == "bool" or d in _NARROW):
            continue
        col = var[c]
        if col.isna().any() and _NARROW.get(d) != "real":  # nullable types keep the missing values
            var[c] = col.astype(_nullable(d))            # (a float keeps them as NaN, as export does)
        else:
            var[c] = col.astype(bool if d == "bool" else d)
    cat_dtypes = {str(k): str(v) for k, v in _meta_json(meta, "var_cat_dtypes", dict).items()}
    for c, cats in _meta_json(meta, "var_categories", dict).items():
        if c in var.columns and isinstance(cats, list):
            vals = [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in var[c]]
            var[c] = _categorical(vals, [str(x) for x in cats], cat_dtypes.get(c))


def to_anndata(path, where=None, obs=None, genes=None, chunk_cells=20000, cell_id=False,
               gene_order="stored"):
    """Return an AnnData of the cells matching `where` (SQL over `cells`), in cell_id order.

    X:    scipy CSR of the stored counts in the input's X dtype (dc_meta x_dtype: int32,
          float32, uint16, float16, ...; several inputs: their common type), as `deltacells
          export` writes it; a dataset that does not record it (written before it was recorded)
          gives int32, or int64 where a gene's total counts exceed 2^31-1, so that a count might
          not fit int32.  A count the dtype does not hold exactly (x_dtype is then wrong: the
          converter records the type that held the input's counts) is a ValueError naming the
          cell, the count and the dtype, never a wrapped or rounded value, as export refuses
          it.  Columns in the order of the `genes` panel if
          given, else by `gene_order`: 'stored' (gene_id: decreasing total counts, the default)
          or 'original' (the input's var order; with several inputs the union of their var,
          first input first; the stored order for a dataset that does not record it).
    obs:  the columns listed (default all), indexed by the cell names; categoricals keep
          their category lists; with cell_id=True also a 'cell_id' column.  A column with an
          empty name (which no h5ad can hold) is named 'Unnamed: I' as export writes it, with
          a warning.
    var:  the genes table (total_counts, n_cells and the var columns), indexed by name.
    """
    import anndata
    import pandas as pd
    import scipy.sparse

    from ._core import with_connection
    if gene_order not in ("stored", "original"):
        raise ValueError(f"gene_order must be 'stored' or 'original', not {gene_order!r}")
    con = with_connection(path)
    try:
        cat = Catalogue(con, path)
        cols = list(cat.columns) if obs is None else cat.resolve_obs(obs)
        gids = cat.resolve_genes(genes)
        if gids is None and gene_order == "original":
            gids = original_gene_order(con)
        ids = cat.select(con, where)
        if ids is None:
            ids = np.arange(cat.n_cells, dtype=np.int64)
        blob = None if gids is None else gids.astype("<i4").tobytes()
        n_genes = cat.n_genes if gids is None else len(gids)
        hint = 0
        if gids is None and len(ids) == cat.n_cells:   # every cell: the stored total, exactly
            hint = int(con.execute("SELECT coalesce(sum(nnz), 0) FROM tiles").fetchone()[0])
        bound = cat.count_bound(con)
        indptr, indices, data, _ = read_x(con, path, ids, blob, chunk_cells, hint,
                                          x_dtype(cat.meta, bound), bound)
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
        ordered = set(map(str, _meta_json(cat.meta, "obs_ordered", list)))
        # the files' narrower number types (float16, float32, int32, uint8, ...): as the input had them
        dtypes = {str(k): str(v) for k, v in _meta_json(cat.meta, "obs_dtypes", dict).items()
                  if str(v) in _NARROW}
        cat_dtypes = {str(k): str(v) for k, v in _meta_json(cat.meta, "obs_cat_dtypes", dict).items()}
        for j, c in enumerate(cols, start=2):
            vals = [r[j] for r in rows]
            kind = cat.kind(c)
            if kind == "category":
                # numbers (or booleans) as the input had them, in its type (int16 stays int16)
                data[c] = _categorical(vals, cat.categories(c, con), cat_dtypes.get(c), c in ordered)
            elif kind == "bool":
                data[c] = (pd.array([None if v is None else bool(v) for v in vals], dtype="boolean")
                           if any(v is None for v in vals) else np.array(vals, dtype=bool))
            elif kind == "int":
                d = dtypes[c] if _NARROW.get(dtypes.get(c)) == "int" else "int64"
                data[c] = (pd.array(vals, dtype=_nullable(d)) if any(v is None for v in vals)
                           else np.array(vals, dtype=d))
            elif kind == "real":
                d = dtypes[c] if _NARROW.get(dtypes.get(c)) == "real" else "float64"
                data[c] = np.array([np.nan if v is None else v for v in vals], dtype=d)
            else:
                data[c] = pd.array(vals, dtype=object)
        index = pd.Index([str(r[1]) for r in rows])
        obs_df = pd.DataFrame(data, index=index, columns=cols)
        if cell_id:
            obs_df["cell_id"] = ids
        obs_df.columns = file_names(cat.meta, "obs_names", list(obs_df.columns),
                                    {c: i for i, c in enumerate(cat.columns)}, path)
        var = pd.read_sql_query("SELECT * FROM genes ORDER BY gene_id", con)
        var.index = pd.Index(var.pop("name").astype(str).tolist())
        _var_types(var, cat.meta)
        own = {"gene_id", "total_counts", "n_cells", "orig_index", cat.meta.get("var_index_column")}
        var.columns = file_names(cat.meta, "var_names", list(var.columns),   # places as export's
                                 {c: i for i, c in enumerate(c for c in var.columns if c not in own)}, path)
        for df, key in ((obs_df, "obs_index_name"), (var, "var_index_name")):   # pandas' index.name
            name = cat.meta.get(key)
            if isinstance(name, str) and name not in df.columns:
                df.index.name = name
        if gids is not None:
            var = var.iloc[gids]
    finally:
        con.close()
    ad = anndata.AnnData(X=X, obs=obs_df, var=var, dtype=X.dtype)
    ad.uns["deltacells"] = {"path": str(path), "where": "" if where is None else str(where)}
    return ad
