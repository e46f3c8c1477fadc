"""What the datasets share: the dataset's catalogue (tiles, genes, obs columns),
selecting cells with SQL, reading a batch through dc_batch, and turning the
blobs into numpy / torch / scipy objects with as few copies as possible."""
import collections
import json
import sqlite3
import warnings

import numpy as np

from ._connect import connect

OUTPUTS = ("csr", "csr_parts", "dense", "scipy")
_RESERVED = ("X", "cell_id")


class Catalogue:
    """Everything about a dataset that is small: read once per process."""

    def __init__(self, con, path):
        self.path = str(path)
        meta = dict(con.execute("SELECT key, value FROM dc_meta").fetchall())
        self.n_cells = int(meta["n_cells"])
        self.n_genes = int(meta["n_genes"])
        rows = con.execute(
            "SELECT tile, first_cell, n_cells, nnz FROM tiles ORDER BY tile").fetchall()
        t = np.array(rows, dtype=np.int64).reshape(-1, 4)
        self.tile_id, self.tile_first, self.tile_n, self.tile_nnz = (t[:, i].copy() for i in range(4))
        if len(t) and not np.array_equal(self.tile_id, np.arange(len(t))):
            raise ValueError(f"{self.path}: tiles are not numbered 0..{len(t) - 1}")
        self.columns = collections.OrderedDict()   # name -> (col, kind)
        for col, name, kind in con.execute(
                "SELECT col, name, kind FROM cells_columns WHERE col > 0 ORDER BY col"):
            self.columns[name] = (col, kind)
        self._categories = {}
        self._con = con
        self._gene_names = None

    # --- genes -------------------------------------------------------------
    def gene_names(self, con=None):
        if self._gene_names is None:
            con = con or self._con
            names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
            self._gene_names = np.array(names, dtype=object)
        return self._gene_names

    def resolve_genes(self, genes):
        """A panel of gene names (or int gene ids) -> int32 array of gene ids, panel order."""
        if genes is None:
            return None
        if isinstance(genes, str):
            raise TypeError("genes must be a list of gene names, not one string")
        genes = list(genes)
        if not genes:
            raise ValueError("the gene panel is empty")
        if all(isinstance(g, (int, np.integer)) and not isinstance(g, bool) for g in genes):
            ids = np.asarray(genes, dtype=np.int64)
            bad = ids[(ids < 0) | (ids >= self.n_genes)]
            if len(bad):
                raise ValueError(f"gene ids out of range 0..{self.n_genes - 1}: {bad[:5].tolist()}")
        else:
            if not all(isinstance(g, str) for g in genes):
                raise TypeError("genes must be all names (str) or all gene ids (int)")
            index = {n: i for i, n in enumerate(self.gene_names())}
            missing = [g for g in genes if g not in index]
            if missing:
                more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
                raise ValueError(
                    f"unknown gene{'s' if len(missing) > 1 else ''} in the panel: "
                    f"{', '.join(map(repr, missing[:5]))}{more}; "
                    f"the dataset {self.path} has {self.n_genes} genes (see its genes table)")
            ids = np.array([index[g] for g in genes], dtype=np.int64)
        if len(np.unique(ids)) != len(ids):
            dup = [g for g, c in collections.Counter(genes).items() if c > 1]
            raise ValueError(f"the gene panel repeats genes: {dup[:5]}")
        return ids.astype(np.int32)

    # --- obs ---------------------------------------------------------------
    def resolve_obs(self, obs):
        if obs is None:
            return []
        if isinstance(obs, str):
            obs = [obs]
        obs = list(obs)
        for name in obs:
            if name in _RESERVED:
                raise ValueError(f"obs column {name!r} clashes with the batch key {name!r}")
            if name not in self.columns:
                raise ValueError(
                    f"unknown obs column {name!r}; the cells table of {self.path} has: "
                    + ", ".join(["name", "tile"] + list(self.columns)))
        if len(set(obs)) != len(obs):
            raise ValueError(f"obs lists a column twice: {obs}")
        return obs

    def kind(self, name):
        return self.columns[name][1]

    def categories(self, name, con=None):
        """The category list of a categorical obs column (code -> value)."""
        if name not in self._categories:
            col, kind = self.columns[name]
            if kind != "category":
                raise ValueError(f"obs column {name!r} is {kind}, not categorical")
            con = con or self._con
            self._categories[name] = [r[0] for r in con.execute(
                "SELECT value FROM cells_dict WHERE col = ? ORDER BY code", (col,))]
        return self._categories[name]

    # --- selection ---------------------------------------------------------
    def select(self, con, where):
        """Sorted int64 cell ids of the cells matching the SQL predicate `where`."""
        if where is None or (isinstance(where, str) and not where.strip()):
            return None
        if not isinstance(where, str):
            raise TypeError(f"where must be an SQL expression (str), not {type(where).__name__}")
        sql = f"SELECT cell_id FROM cells WHERE ({where})"
        try:
            rows = con.execute(sql).fetchall()
        except sqlite3.Error as e:
            raise ValueError(f"bad where clause {where!r}: {e}") from None
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        ids.sort()
        return ids

    def tile_of(self, cell_ids):
        return np.searchsorted(self.tile_first, cell_ids, side="right") - 1

    def per_tile(self, selected):
        """-> list of (tile, sorted int64 cell ids) for tiles with selected cells."""
        out = []
        if selected is None:
            for t, f, n in zip(self.tile_id, self.tile_first, self.tile_n):
                if n:
                    out.append((int(t), np.arange(f, f + n, dtype=np.int64)))
            return out
        if len(selected) == 0:
            return out
        tiles = self.tile_of(selected)
        cuts = np.flatnonzero(np.diff(tiles)) + 1
        for part in np.split(selected, cuts):
            out.append((int(tiles[np.searchsorted(selected, part[0])]), part))
        return out


class ObsReader:
    """Obs values of requested columns, read one tile at a time through the
    cells table (`WHERE tile = ?` is pushed down) and kept in a small LRU."""

    def __init__(self, cat, columns, max_tiles=64):
        self.cat = cat
        self.columns = list(columns)
        self.max_tiles = max_tiles
        self._lru = collections.OrderedDict()
        self._code = {c: {v: i for i, v in enumerate(cat.categories(c))}
                      for c in self.columns if cat.kind(c) == "category"}

    def tile(self, con, t):
        arrs = self._lru.get(t)
        if arrs is not None:
            self._lru.move_to_end(t)
            return arrs
        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in self.columns)
        rows = con.execute(f"SELECT cell_id, {cols} FROM cells WHERE tile = ? ORDER BY cell_id",
                           (int(t),)).fetchall()
        first, n = int(self.cat.tile_first[t]), int(self.cat.tile_n[t])
        if len(rows) != n or (n and (rows[0][0] != first or rows[-1][0] != first + n - 1)):
            raise ValueError(f"{self.cat.path}: cells of tile {t} do not match the tiles table")
        arrs = {}
        for j, c in enumerate(self.columns, start=1):
            vals = [r[j] for r in rows]
            arrs[c] = self._convert(c, vals)
        self._lru[t] = arrs
        if len(self._lru) > self.max_tiles:
            self._lru.popitem(last=False)
        return arrs

    def _convert(self, c, vals):
        kind = self.cat.kind(c)
        if kind == "category":
            code = self._code[c]
            return np.array([-1 if v is None else code[v] for v in vals], dtype=np.int64)
        if kind == "int":
            if any(v is None for v in vals):
                return np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
            return np.array(vals, dtype=np.int64)
        if kind == "real":
            return np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
        if kind == "bool":
            if any(v is None for v in vals):
                return np.array([-1 if v is None else int(v) for v in vals], dtype=np.int8)
            return np.array(vals, dtype=bool)
        return np.array(vals, dtype=object)   # text

    def gather(self, con, cell_ids):
        """-> {column: numpy array} for cell_ids (any order)."""
        if not self.columns:
            return {}
        tiles = self.cat.tile_of(cell_ids)
        out = {}
        uniq = np.unique(tiles)
        if len(uniq) == 1:
            t = int(uniq[0])
            a = self.tile(con, t)
            pos = cell_ids - self.cat.tile_first[t]
            return {c: a[c][pos] for c in self.columns}
        parts = {t: self.tile(con, int(t)) for t in uniq}
        for c in self.columns:
            first = parts[uniq[0]][c]
            res = np.empty(len(cell_ids), dtype=first.dtype)
            for t in uniq:
                m = tiles == t
                res[m] = parts[t][c][cell_ids[m] - self.cat.tile_first[t]]
            out[c] = res
        return out


def read_batch(con, cell_ids, genes_blob=None):
    """dc_batch for int64 cell ids -> (cell_ids, indptr, indices, data, n_genes),
    numpy arrays viewing the returned blobs (read-only)."""
    ids = np.ascontiguousarray(cell_ids, dtype="<i8")
    if genes_blob is None:
        row = con.execute(
            "SELECT n_cells, n_genes, cell_ids, indptr, indices, data FROM dc_batch(?)",
            (ids.tobytes(),)).fetchone()
    else:
        row = con.execute(
            "SELECT n_cells, n_genes, cell_ids, indptr, indices, data FROM dc_batch(?, ?)",
            (ids.tobytes(), genes_blob)).fetchone()
    if row is None:
        raise RuntimeError("dc_batch returned no row")
    n, g, b_ids, b_ptr, b_idx, b_dat = row
    if n != len(ids):
        raise RuntimeError(f"dc_batch returned {n} cells for {len(ids)} requested")
    empty = b""
    out_ids = np.frombuffer(b_ids or empty, dtype="<i8")
    indptr = np.frombuffer(b_ptr or empty, dtype="<i8")
    indices = np.frombuffer(b_idx or empty, dtype="<i4")
    data = np.frombuffer(b_dat or empty, dtype="<i4")
    if len(indptr) != n + 1 or len(indices) != len(data) or int(indptr[-1]) != len(data):
        raise RuntimeError(
            f"dc_batch returned inconsistent blobs: n_cells={n}, indptr {len(indptr)}, "
            f"indices {len(indices)}, data {len(data)}")
    return out_ids, indptr, indices, data, int(g)


def with_connection(path, threads=None, cache_mb=None, check_same_thread=True):
    con = connect(path, check_same_thread=check_same_thread)
    if threads is not None:
        con.execute("SELECT dc_config('threads', ?)", (int(threads),)).fetchall()
    if cache_mb is not None:
        con.execute("SELECT dc_config('cache_mb', ?)", (int(cache_mb),)).fetchall()
    return con


def genes_json(names):
    return json.dumps(list(names))
