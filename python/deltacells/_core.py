"""What the datasets share: the dataset's catalogue (tiles, genes, obs columns),
selecting cells with SQL, reading a batch through dc_batch, and turning the
blobs into numpy / torch / scipy objects with as few copies as possible."""
import atexit
import collections
import collections.abc
import json
import os
import sqlite3
import sys
import time

import numpy as np

from . import _forksafe
from ._connect import RemoteConnection, connect, find_extension

OUTPUTS = ("csr", "csr_parts", "dense", "scipy")
_RESERVED = ("X", "cell_id")
# columns of the cells table that are not obs columns of the source, and may be asked for
_BUILTIN = {"name": "text", "tile": "int"}
MISSING_GENES = ("error", "zeros")


class Categories(collections.abc.Sequence):
    """The label encoder of a categorical obs column: code -> value, in code order.

    The one place the codes of a categorical column are defined (``ds.categories[column]``
    of both datasets).  ``cats[code]`` is the value, ``len(cats)`` the number of classes,
    ``list(cats)`` the values; ``cats.encode(values)`` and ``cats.decode(codes)`` convert;
    cells whose value is NULL get ``cats.missing_code`` (default -100, the ignore_index
    of torch.nn.CrossEntropyLoss), which decodes to None.
    """

    def __init__(self, column, values, missing_code=-100):
        self.column = column
        self.values = list(values)
        self.missing_code = int(missing_code)
        self._index = {v: i for i, v in enumerate(self.values)}

    def __getitem__(self, code):
        return self.values[code]

    def __len__(self):
        return len(self.values)

    def __eq__(self, other):
        if isinstance(other, Categories):
            return self.values == other.values and self.missing_code == other.missing_code
        if isinstance(other, (list, tuple)):
            return self.values == list(other)
        return NotImplemented

    def __hash__(self):
        return hash((self.column, tuple(self.values), self.missing_code))

    def index(self, value, *args):
        """The code of a value (ValueError if it is not a category)."""
        try:
            return self._index[value]
        except KeyError:
            raise ValueError(f"{value!r} is not a category of {self.column!r}") from None

    def encode(self, values):
        """Values (None: missing) -> int64 numpy array of codes."""
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            out[i] = self.missing_code if v is None else self.index(v)
        return out

    def decode(self, codes):
        """Codes (tensor, array or list) -> list of values, None for the missing code."""
        if hasattr(codes, "tolist"):
            codes = codes.tolist()
        return [None if c == self.missing_code else self.values[c] for c in codes]

    def __repr__(self):
        shown = ", ".join(map(repr, self.values[:6])) + (", ..." if len(self.values) > 6 else "")
        return (f"Categories({self.column!r}: {len(self.values)} classes [{shown}], "
                f"missing_code={self.missing_code})")


class Panel:
    """A gene panel resolved against a dataset: X's columns in panel order.

    ids:    int32 gene ids of the panel genes the dataset has (panel order)
    pos:    int32 panel positions of those genes (None when every panel gene is present)
    names:  the panel, as gene names
    filled: names of panel genes the dataset lacks (zero columns; missing_genes='zeros')
    """

    def __init__(self, ids, pos, names, filled):
        self.ids, self.pos, self.names, self.filled = ids, pos, names, filled
        self.blob = ids.astype("<i4").tobytes()

    def __len__(self):
        return len(self.names)


class Catalogue:
    """Everything about a dataset that is small: read once per process."""

    def __init__(self, con, path):
        self.path = str(path)
        self.meta = dict(con.execute("SELECT key, value FROM dc_meta").fetchall())
        self.n_cells = self.meta_int("n_cells")
        self.n_genes = self.meta_int("n_genes")
        # the genes table compares dc_meta.n_genes with its blocks when it loads (a damaged
        # n_genes would otherwise widen or narrow every row the loaders make, silently)
        con.execute("SELECT count(*) FROM genes WHERE gene_id = 0").fetchone()
        # The tile boundaries come from the extension, not a load of our own: the `tiles` table
        # is a view of the connection's one tile index (ext/reader.c: loaded and validated once
        # per data version for every table). The arrays kept here are a numpy copy of it
        # because the loaders map cells to tiles per batch (searchsorted, per-tile plans,
        # sizes) without an SQL round trip; they are read once per process, like the rest of
        # the catalogue. The tiles table checks each tile's header and seal, which reads every
        # tile; over a remote connection read its shadow table instead (dc_batch checks each
        # tile it reads anyway).
        src = "tiles_data" if isinstance(con, RemoteConnection) else "tiles"
        rows = con.execute(
            f"SELECT tile, first_cell, n_cells, nnz FROM {src} ORDER BY tile").fetchall()
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
        self._gene_index = None
        self._count_bound = None

    # what tells one version of a dataset from another: a new conversion draws a new
    # dataset_id, and append seals the dataset again under a new one (older formats: sizes)
    _IDENTITY = ("dataset_id", "n_cells", "n_genes", "nnz", "n_tiles")

    def check_same(self, con):
        """Raise if the dataset `con` reads is not the version this catalogue was made from:
        a file replaced (converted again, a new version on the server) or appended to since.
        A plan made from one version and batches read from another would mix them (cells
        and tiles that are not what the plan says)."""
        now = dict(con.execute("SELECT key, value FROM dc_meta WHERE key IN (%s)"
                               % ",".join("?" * len(self._IDENTITY)), self._IDENTITY).fetchall())
        then = {k: self.meta.get(k) for k in self._IDENTITY}
        diff = [k for k in self._IDENTITY if str(now.get(k)) != str(then.get(k))]
        if diff:
            k = diff[0]
            raise RuntimeError(f"{self.path}: the dataset changed since this dataset object was made "
                               f"(dc_meta.{k} {then.get(k)} -> {now.get(k)}: converted again, appended to, "
                               f"or a new version on the server); make the dataset object again")

    def meta_int(self, key):
        """dc_meta `key`, a required integer: missing or not an integer is an error naming
        the file and the key (as the extension's "dc_meta.n_cells is missing")."""
        v = self.meta.get(key)
        try:
            return int(v)
        except (TypeError, ValueError):
            what = "is missing" if v is None else f"is not an integer ({v!r})"
            raise ValueError(f"{self.path}: dc_meta.{key} {what}: the dataset is damaged "
                             f"(`deltacells verify {self.path}` checks it)") from None

    # --- genes -------------------------------------------------------------
    def count_bound(self, con=None):
        """A bound on every stored count: the largest gene total (no count exceeds its gene's
        total), or None when not known (no connection given, none kept)."""
        if self._count_bound is None:
            con = con or self._con
            if con is None:
                return None
            self._count_bound = int(con.execute(
                "SELECT coalesce(max(total_counts), 0) FROM genes").fetchone()[0])
        return self._count_bound

    def counts_fit_int32(self, con=None):
        """Whether every stored count is below 2^31 for sure: no gene's total is larger.
        Counts are stored as uint32 (up to 2^32-1); where one may not fit, int32 values are
        read with a check (no placing) and to_anndata returns int64 (unless dc_meta x_dtype
        says otherwise: x_dtype())."""
        bound = self.count_bound(con)
        return bound is not None and bound <= INT32_MAX   # not known: read int32 with the check

    def gene_names(self, con=None):
        if self._gene_names is None:
            con = con or self._con
            names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
            self._gene_names = np.array(names, dtype=object)
        return self._gene_names

    def gene_ids_of(self, names):
        """The gene id of each gene name, -1 where the dataset lacks it.  A name that the
        dataset repeats (10x feature lists do) is an error, as in dc_batch: which gene is
        meant only its gene id says."""
        if self._gene_index is None:
            index = {}
            for i, n in enumerate(self.gene_names()):
                index[n] = -2 if n in index else i
            self._gene_index = index
        ids = [self._gene_index.get(g, -1) for g in names]
        dup = list(dict.fromkeys(g for g, i in zip(names, ids) if i == -2))
        if dup:
            which = "; ".join(f"gene name {g!r} is not unique in this dataset (gene ids "
                              f"{', '.join(map(str, np.flatnonzero(self.gene_names() == g)))})"
                              for g in dup[:5])
            raise ValueError(f"{which}; pass gene ids (int) instead of names")
        return ids

    def resolve_panel(self, genes, missing="error"):
        """A panel of gene names (or int gene ids) -> Panel, or None for all genes.
        missing='zeros': names the dataset lacks become zero columns (Panel.filled)."""
        if genes is None:
            return None
        if missing not in MISSING_GENES:
            raise ValueError(f"missing_genes must be one of {MISSING_GENES}, got {missing!r}")
        if missing == "zeros" and not isinstance(genes, str):
            genes = list(genes)
            if genes and all(isinstance(g, str) for g in genes):
                dup = [g for g, c in collections.Counter(genes).items() if c > 1]
                if dup:
                    raise ValueError(f"the gene panel repeats genes: {dup[:5]}")
                gids = self.gene_ids_of(genes)
                have = [i for i, g in enumerate(gids) if g >= 0]
                filled = [g for g, i in zip(genes, gids) if i < 0]
                ids = np.array([gids[i] for i in have], dtype=np.int32)
                pos = np.array(have, dtype=np.int32) if filled else None
                return Panel(ids, pos, list(genes), filled)
        ids = self.resolve_genes(genes)
        return Panel(ids, None, [str(n) for n in self.gene_names()[ids]], [])

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
            gids = self.gene_ids_of(genes)
            missing = [g for g, i in zip(genes, gids) if i < 0]
            if missing:
                more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
                raise ValueError(
                    f"unknown gene{'s' if len(missing) > 1 else ''} in the panel: "
                    f"{', '.join(map(repr, missing[:5]))}{more}; "
                    f"the dataset {self.path} has {self.n_genes} genes (see its genes table; "
                    f"missing_genes='zeros' fills unknown genes with zeros)")
            ids = np.array(gids, dtype=np.int64)
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
            if name not in self.columns and name not in _BUILTIN:
                raise ValueError(
                    f"unknown obs column {name!r}; the cells table of {self.path} has: "
                    + ", ".join(["name", "tile"] + list(self.columns)))
        if len(set(obs)) != len(obs):
            raise ValueError(f"obs lists a column twice: {obs}")
        return obs

    def kind(self, name):
        if name not in self.columns and name in _BUILTIN:
            return _BUILTIN[name]
        return self.columns[name][1]

    def gene_column(self, name, con=None):
        """A numeric column of the genes table (total_counts, n_cells, ...), gene_id order."""
        con = con or self._con
        cols = [r[1] for r in con.execute("PRAGMA table_info(genes)")]
        if name not in cols or name in ("name",):
            raise ValueError(f"the genes table of {self.path} has no numeric column {name!r}; "
                             f"it has {', '.join(cols)}")
        q = '"' + name.replace('"', '""') + '"'
        vals = [r[0] for r in con.execute(f"SELECT {q} FROM genes ORDER BY gene_id")]
        try:
            return np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"genes column {name!r} of {self.path} is not numeric") from None

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
    def select(self, con, where, cells=None):
        """Sorted int64 cell ids of the cells matching the SQL predicate `where` and in
        `cells` (cell ids; None: all), or None for all cells."""
        if cells is not None:
            cells = self.check_cells(cells)
            sel = self.select(con, where)
            return cells if sel is None else np.intersect1d(cells, sel, assume_unique=True)
        if where is None or (isinstance(where, str) and not where.strip()):
            return None
        if not isinstance(where, str):
            raise TypeError(f"where must be an SQL expression (str), not {type(where).__name__}")
        sql = f"SELECT cell_id FROM cells WHERE ({where})"
        try:
            rows = con.execute(sql).fetchall()
        except sqlite3.Error as e:
            if getattr(e, "sqlite_errorcode", 0) & 0xff == 11:   # SQLITE_CORRUPT: the dataset is damaged,
                raise                                             # not the clause: its error as it is
            raise ValueError(f"bad where clause {where!r}: {e}") from None
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        ids.sort()
        return ids

    def check_cells(self, cells):
        """A list of cell ids -> sorted unique int64 array; out-of-range ids are an error."""
        if isinstance(cells, (str, bytes)):
            raise TypeError("cells must be a sequence of cell ids (ints)")
        arr = np.asarray(cells)
        if arr.ndim != 1:
            raise ValueError(f"cells must be one-dimensional, got shape {arr.shape}")
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"cells must be integer cell ids, not {arr.dtype}")
        arr = np.unique(arr.astype(np.int64))
        bad = arr[(arr < 0) | (arr >= self.n_cells)]
        if len(bad):
            raise ValueError(f"cell ids out of range 0..{self.n_cells - 1} of {self.path}: "
                             f"{bad[:5].tolist()}")
        return arr

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

    def __init__(self, cat, columns, max_tiles=64, missing_code=-100):
        self.cat = cat
        self.columns = list(columns)
        self.max_tiles = max_tiles
        self.missing_code = int(missing_code)
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
            miss = self.missing_code
            return np.array([miss if v is None else code[v] for v in vals], dtype=np.int64)
        if kind == "int":
            if any(v is None for v in vals):
                return np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
            return np.array(vals, dtype=np.int64)
        if kind == "real":
            return np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
        if kind == "bool":
            if any(v is None for v in vals):
                miss = self.missing_code
                dt = np.int8 if -128 <= miss <= 127 else np.int64
                return np.array([miss if v is None else int(v) for v in vals], dtype=dt)
            return np.array(vals, dtype=bool)
        return np.array(vals, dtype=object)   # text

    def gather(self, con, cell_ids):
        """-> {column: numpy array} for cell_ids (any order)."""
        if not self.columns:
            return {}
        if not len(cell_ids):     # an empty batch: empty columns of their dtypes
            return {c: self._convert(c, []) for c in self.columns}
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


class ObsCodes:
    """Obs columns that dc_batch returns with the counts (its obs argument): stored
    columns that are not text.  Categories come as int64 codes (NULL: missing_code),
    ints as int64 (float64 with NaN when the batch holds a NULL), reals as float64,
    bools as bool (with NULLs: int8 or int64 holding missing_code), like ObsReader."""

    def __init__(self, cat, columns, missing_code=-100):
        self.cat = cat
        self.columns = [c for c in columns if c in cat.columns and cat.kind(c) != "text"]
        self.kinds = [cat.kind(c) for c in self.columns]
        self.missing_code = int(missing_code)
        self.arg = json.dumps(self.columns)

    def decode(self, blob, n):
        return self.decode_parts(blob, n, [(0, n)])[0]

    def decode_parts(self, blob, n, bounds):
        """The values of one dc_batch call split into the cell ranges [a, b) of bounds, each
        as decode would give it for a call asking for those cells alone (the extension
        sends ints as float64 when any cell of the call is NULL; a range without NULL gets
        int64 back).  None for a range where that cannot be exact (an int beyond 2^53 sent
        as float64): the caller asks for those cells alone then."""
        m = len(self.columns)
        if not m:
            return [{} for _ in bounds]
        if blob is None or len(blob) != 8 * m * (n + 1):
            raise RuntimeError(f"dc_batch returned {0 if blob is None else len(blob)} bytes of obs "
                               f"values for {m} columns of {n} cells")
        fmt = np.frombuffer(blob, dtype="<i8", count=m)
        cols = [np.frombuffer(blob, dtype="<i8", count=n, offset=8 * (m + j * n)) for j in range(m)]
        return [self._decode(fmt, [c[a:b] for c in cols]) for a, b in bounds]

    def _decode(self, fmt, raws):
        out = {}
        miss = self.missing_code
        for j, (c, kind) in enumerate(zip(self.columns, self.kinds)):
            raw = raws[j]
            if kind == "int" and fmt[j] == 1:
                f = raw.view("<f8")
                if np.isnan(f).any():
                    out[c] = f.astype(np.float64)
                elif len(f) and np.abs(f).max() > 2.0 ** 53:
                    return None
                else:
                    out[c] = f.astype(np.int64)
                continue
            if kind == "real" or fmt[j] == 1:
                out[c] = raw.view("<f8").astype(np.float64)
            elif kind == "category":
                v = raw.astype(np.int64)
                v[v < 0] = miss
                out[c] = v
            elif kind == "bool":
                nul = raw < 0
                if nul.any():
                    dt = np.int8 if -128 <= miss <= 127 else np.int64
                    out[c] = np.where(nul, miss, raw).astype(dt)
                else:
                    out[c] = raw.astype(bool)
            else:
                out[c] = raw.astype(np.int64)
        return out


def read_batch(con, cell_ids, genes_blob=None, panel=None):
    """dc_batch for int64 cell ids -> (cell_ids, indptr, indices, data, n_genes),
    numpy arrays viewing the returned blobs (read-only; data: the stored counts, uint32);
    cell_ids is the request itself (the extension is not asked to echo it).  With a Panel that has
    zero-filled genes, the column indices are mapped to panel positions (a copy)."""
    if panel is not None:
        out = read_batch(con, cell_ids, panel.blob)
        if panel.pos is None:
            return out
        ids, indptr, indices, data, _ = out
        return ids, indptr, panel.pos[indices], data, len(panel)
    ids = np.ascontiguousarray(cell_ids, dtype="<i8")
    if genes_blob is None:
        row = con.execute("SELECT n_cells, n_genes, indptr, indices, data FROM dc_batch(?)",
                          (ids.tobytes(),)).fetchone()
    else:
        row = con.execute("SELECT n_cells, n_genes, indptr, indices, data FROM dc_batch(?, ?)",
                          (ids.tobytes(), genes_blob)).fetchone()
    if row is None:
        raise RuntimeError("dc_batch returned no row")
    n, g, b_ptr, b_idx, b_dat = row
    if n != len(ids):
        raise RuntimeError(f"dc_batch returned {n} cells for {len(ids)} requested")
    empty = b""
    indptr = np.frombuffer(b_ptr or empty, dtype="<i8")
    indices = np.frombuffer(b_idx or empty, dtype="<i4")
    data = np.frombuffer(b_dat or empty, dtype="<u4")
    if len(indptr) != n + 1 or len(indices) != len(data) or int(indptr[-1]) != len(data):
        raise RuntimeError(
            f"dc_batch returned inconsistent blobs: n_cells={n}, indptr {len(indptr)}, "
            f"indices {len(indices)}, data {len(data)}")
    return ids, indptr, indices, data, int(g)


def _alloc(nbytes):
    """A pool buffer: from _xfer.HUGE_MIN up whole, aligned 2 MiB huge pages where the machine
    gives them (_xfer._private_alloc), as numpy gives them only from 4 MiB and then not all of
    the buffer.  Placing writes each cell to a random place in a window's batches, so small
    pages cost TLB misses as well as faults.  0 workers, the batches read, alternating runs
    (2026-12-03): batch 128 first batch 0.94-1.03 s -> 0.66-0.82 s, epochs 48-147k -> 79-211k
    cells/s; batches 512 and 5,000 the same within noise.  (An earlier loader, which copied
    batches out of a chunk cache, measured advised mappings slower to first touch: 51 ms
    against 9-22 ms per 5,000-cell batch.)"""
    from . import _xfer
    if nbytes >= _xfer.HUGE_MIN:
        return _xfer._private_alloc(nbytes)
    return np.empty(nbytes, dtype=np.uint8)


def new_pool(shared=False):
    """The buffers of one reader: in a DataLoader worker (shared=True) reused slots that
    the main process maps or copies from once (_xfer.py), else a BufferPool."""
    if shared:
        from . import _xfer
        slots = _xfer.worker_slots(BufferPool())
        if slots is not None:
            return slots
    with _spare_lock:
        if _spare["pid"] == os.getpid() and _spare["pools"]:
            return _spare["pools"].pop()
    return BufferPool()


# Pools of finished iterators, kept for the next (the next epoch's): a new pool would fault
# in every buffer's pages afresh, 500 MB per epoch of the reference data at batch 5,000
# (kernel page zeroing was 18% of a steady epoch's profile).  A forked child never takes
# its parent's (writing them would copy every page).
SPARE_POOLS = 2
_spare = {"pid": None, "pools": []}
_spare_lock = _forksafe.Lock()


def release_pool(pool):
    """An iterator is done with its BufferPool: keep it for the next one (buffers still viewed
    by the user's tensors stay theirs until dropped)."""
    if type(pool) is not BufferPool:
        return
    with _spare_lock:
        if _spare["pid"] != os.getpid():
            _spare["pid"], _spare["pools"] = os.getpid(), []
        if len(_spare["pools"]) < SPARE_POOLS and all(p is not pool for p in _spare["pools"]):
            _spare["pools"].append(pool)


class BufferPool:
    """Reused output buffers of one reader (an iterator, a thread's connection).

    A batch's arrays are views of pooled numpy buffers; a buffer is reused once nothing
    but the pool refers to it (the user dropped every tensor viewing it), so steady-state
    batches touch no fresh pages (on some machines first-touching a page costs more than
    decoding it).  At most `keep` idle buffers are kept.  Nothing process-wide changes."""

    def __init__(self, keep=8, alloc=None):
        self.keep = keep
        self._alloc = alloc or _alloc       # nbytes -> a uint8 numpy buffer
        self._bufs = []
        self._forked = set()                # ids of buffers a forked child may share (at_fork)
        self._side = None                   # side(), made when first asked for

    def cold(self):
        """No buffer yet: whatever is taken first is fresh memory."""
        return not self._bufs

    def take(self, n, dtype):
        dtype = np.dtype(dtype)
        nbytes = max(dtype.itemsize, int(n) * dtype.itemsize)
        bufs = self._bufs
        best = -1
        idle = []
        for i in range(len(bufs)):
            if sys.getrefcount(bufs[i]) == 2:       # the list's reference + the argument
                idle.append(i)
                if bufs[i].nbytes >= nbytes and (best < 0 or bufs[i].nbytes < bufs[best].nbytes) \
                        and id(bufs[i]) not in self._forked:
                    best = i
        if best < 0:
            if len(idle) >= self.keep:              # drop the smallest idle buffer
                small = min(idle, key=lambda i: bufs[i].nbytes)
                self._forked.discard(id(bufs.pop(small)))
            cap = (nbytes + nbytes // 4 + (1 << 16) - 1) & ~((1 << 16) - 1)
            bufs.append(self._alloc(cap))
            best = len(bufs) - 1
        return bufs[best][:nbytes].view(dtype)[:n]

    def at_fork(self):
        """Called just before a fork; returns the idle buffers.  The others (viewed by the
        user's arrays) go to the child with the rest of memory, so their pages are the child's
        too until it exits: take() passes them over until the next fork finds them idle (a
        write would copy every page).  The caller keeps the idle ones out of the child."""
        bufs, idle = self._bufs, []
        self._forked = set()
        for i in range(len(bufs)):
            if sys.getrefcount(bufs[i]) == 2:
                idle.append(bufs[i])
            else:
                self._forked.add(id(bufs[i]))
        return idle

    def drop(self, buf):
        """Forget one buffer (it is freed once nothing views it)."""
        self._bufs = [b for b in self._bufs if b is not buf]
        self._forked.discard(id(buf))

    def take_batch(self, n, nnz, dtype):
        """A batch's (indptr int32 [n+1], indices int32 [nnz], data dtype [nnz])."""
        return self.take(n + 1, np.int32), self.take(nnz, np.int32), self.take(nnz, dtype)

    def side(self):
        """A second pool that goes with this one (from epoch to epoch), for arrays a reader
        holds only for a while (placing's carried parts of a batch): taken from this pool,
        their sizes would crowd out the batches' buffers and make it allocate again."""
        if self._side is None:
            self._side = BufferPool(keep=4, alloc=self._alloc)
        return self._side


# data kinds of deltacells_ticket_take
_KINDS = {"int32": 0, "float32": 1, "int16": 2, "int8": 3, "uint8": 4, "float64": 5, "int64": 6,
          "uint32": 7}
_RANGE = {"int32": (-2**31, 2**31 - 1), "int16": (-2**15, 2**15 - 1), "int8": (-128, 127),
          "uint8": (0, 255), "float16": (-65504, 65504)}
INT32_MAX = 2**31 - 1


def _take_kind(name, int32_fits):
    """The take's data kind for numpy dtype `name`: int32 counts known to fit are copied as
    uint32 (the same bits, no check)."""
    return _KINDS["uint32" if name == "int32" and int32_fits else name]


def overflow(cell_id, count, name):
    """The error for a stored count (uint32: 0 .. 2^32-1) that numpy dtype `name` cannot hold."""
    lo, hi = _RANGE[name]
    wider = ("torch.int64 or torch.float64, which hold every count exactly" if name == "int32"
             else "torch.int32 or torch.float32")
    return DtypeOverflow(f"cell {cell_id} has a count of {count}, which does not fit {name} "
                         f"({lo}..{hi}); use a wider dtype ({wider})")


def counts_as(data, name, ids, indptr):
    """The stored counts as read_batch returns them (uint32) -> numpy dtype `name`; a count
    that does not fit an integer dtype is a DtypeOverflow naming its cell."""
    if name in _RANGE and len(data):
        hi = _RANGE[name][1]
        big = np.flatnonzero(data > hi)
        if len(big):
            row = int(np.searchsorted(indptr, big[0], side="right")) - 1
            raise overflow(int(ids[row]), int(data[big[0]]), name)
    return data.astype(name)


def check_float16(con, ids, indptr, data, panel=None):
    """float16 values come as float32 (exact only up to 2^24): a count above float16's
    largest finite value is a DtypeOverflow naming its cell, with the count read again
    from the dataset (exact)."""
    if not len(data) or data.max() <= _RANGE["float16"][1]:
        return
    at = int(np.flatnonzero(data > _RANGE["float16"][1])[0])
    row = int(np.searchsorted(indptr, at, side="right")) - 1
    _, _, _, counts, _ = read_batch(con, ids[row:row + 1], panel=panel)
    raise overflow(int(ids[row]), int(counts[at - int(indptr[row])]), "float16")


# dc_meta x_dtype's names: the rows of the converter's dtype table (converter/cv_dtype.c);
# what each holds is numpy's (np.iinfo, np.finfo), as the table's numbers are IEEE's and C's
X_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64")


def x_dtype(meta, count_bound):
    """The numpy dtype name of X as `deltacells export` writes it (converter/export.c): dc_meta
    x_dtype (the inputs' X dtype) where recorded; where absent (a dataset written before it was
    recorded) or not a name of X_DTYPES, int32, or int64 when count_bound (Catalogue.count_bound:
    the largest gene total) exceeds 2^31-1 or is not known, so that a count might not fit int32."""
    name = meta.get("x_dtype")
    if isinstance(name, str) and name in X_DTYPES:
        return name
    got = "int32" if count_bound is not None and count_bound <= INT32_MAX else "int64"
    if name is not None:      # a later version's name, or damage (verify reports it): said, as export says it
        import warnings
        warnings.warn(f"dc_meta.x_dtype {name!r} is not a dtype this version knows; X is given as {got}",
                      stacklevel=3)
    return got


def _exact_up_to(name):
    """The largest n such that numpy dtype `name` holds every count 0..n exactly (a float above
    it holds only some: those its mantissa has room for)."""
    d = np.dtype(name)
    return 2 ** (np.finfo(d).nmant + 1) if d.kind == "f" else int(np.iinfo(d).max)


def x_convert(path, name, ids, indptr, data):
    """data (the stored counts of the cells `ids`, CSR rows by indptr) in numpy dtype `name`,
    exactly: a count it does not hold exactly (an integer beyond its range, a float whose
    mantissa has no room for it or beyond its largest value: export's rule, cv_dtype_holds) is a
    DtypeOverflow naming the dataset, the cell, the count and the dtype, as export refuses it.
    Never wrapped or rounded."""
    with np.errstate(over="ignore", invalid="ignore"):
        conv = data.astype(name)
        bad = np.flatnonzero(conv != data)       # compared in a type that holds both exactly
    if not len(bad):
        return conv
    at = int(bad[0])
    row = int(np.searchsorted(indptr, at, side="right")) - 1
    why = ""
    if np.dtype(name).kind == "f":
        why = (f" exactly (it holds every count up to {_exact_up_to(name)}, above that only some, "
               f"none above {np.finfo(name).max:g})")
    raise DtypeOverflow(f"{path}: cell {int(ids[row])} has a count of {int(data[at])}, which X's dtype {name} "
                        f"(dc_meta.x_dtype) does not hold{why}; dc_meta.x_dtype is wrong (export refuses it too; "
                        f"`deltacells verify {path}` checks the dataset)")


def read_x(con, path, cell_ids, genes_blob, chunk_cells, nnz_hint, name, count_bound):
    """X of the cells (read_csr's indptr, indices, data, n_genes) with data in numpy dtype
    `name` (x_dtype()), exactly as export writes it: where count_bound (Catalogue.count_bound)
    shows that `name` holds every count, read straight into it (or into the extension's nearest
    kind: int32 for uint16, float32 for float16, int64 for uint64); else read as the stored
    uint32 and converted with the check of x_convert."""
    ids = np.asarray(cell_ids)
    if name in ("int64", "uint32", "uint64", "float64"):          # hold every uint32 count
        take = "int64" if name == "uint64" else name
        indptr, indices, data, g = read_csr(con, ids, genes_blob, chunk_cells, nnz_hint, take)
        return indptr, indices, (data.view(np.uint64) if name == "uint64" else data), g
    if count_bound is not None and count_bound <= _exact_up_to(name):
        take = {"uint16": "int32", "float16": "float32"}.get(name, name)
        indptr, indices, data, g = read_csr(con, ids, genes_blob, chunk_cells, nnz_hint, take,
                                            int32_fits=True)
        if take != name:      # checked all the same: the bound is the genes table's word
            data = x_convert(path, name, ids, indptr, data)
        return indptr, indices, data, g
    indptr, indices, data, g = read_csr(con, ids, genes_blob, chunk_cells, nnz_hint, "uint32")
    return indptr, indices, x_convert(path, name, ids, indptr, data), g


_ext_fns = {}          # pid -> {name: ctypes function or None}


def _ext_function(name, argtypes):
    """Function `name` of the loaded extension through ctypes (restype int), or None when it
    cannot be had (an older extension, no ctypes).  Looked up once per process (a forked
    child looks again)."""
    pid = os.getpid()
    fns = _ext_fns.get(pid)
    if fns is None:
        _ext_fns.clear()
        fns = _ext_fns[pid] = {}
    if name not in fns:
        fn = None
        try:
            import ctypes
            fn = getattr(ctypes.CDLL(find_extension()), name)
            fn.restype = ctypes.c_int
            fn.argtypes = argtypes()
        except (OSError, AttributeError, Exception):
            fn = None
        fns[name] = fn
    return fns[name]


def _ticket_take_fn():
    """deltacells_ticket_take of the loaded extension, through ctypes (None when it
    cannot be had: then batches come through Python's sqlite3 blobs)."""
    import ctypes
    return _ext_function("deltacells_ticket_take", lambda: [
        ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)])


class DtypeOverflow(ValueError):
    pass


def read_batch_into(con, cell_ids, pool, value_dtype, genes_blob=None, panel=None,
                    timings=None, obs=None, int32_fits=False):
    """dc_batch -> (indptr int32, indices int32, data, n_genes) in buffers of `pool`,
    each copied once from the extension's result (values converted to value_dtype,
    a numpy dtype among _KINDS, on the way).  None when the ticket path is not
    available (the caller then uses read_batch).  obs: an ObsCodes; its columns come
    from the same dc_batch call and are returned as a 5th item, {column: array}.
    int32_fits: every stored count is known to fit int32 (Catalogue.counts_fit_int32), so
    int32 values are copied as they are (else each row is checked in the same pass)."""
    import ctypes
    fn = _ticket_take_fn()
    if fn is None:
        return None
    ids = np.ascontiguousarray(cell_ids, dtype="<i8")
    blob = panel.blob if panel is not None else genes_blob
    t0 = time.perf_counter()
    if obs is not None and obs.columns:
        cur = con.execute("SELECT n_cells, n_genes, nnz, ticket, obs_values "
                          "FROM dc_batch(?, ?, ?)", (ids.tobytes(), blob, obs.arg))
    elif blob is None:
        cur = con.execute("SELECT n_cells, n_genes, nnz, ticket, NULL FROM dc_batch(?)",
                          (ids.tobytes(),))
    else:
        cur = con.execute("SELECT n_cells, n_genes, nnz, ticket, NULL "
                          "FROM dc_batch(?, ?)", (ids.tobytes(), blob))
    row = cur.fetchone()
    cur.close()
    t1 = time.perf_counter()
    if row is None:
        raise RuntimeError("dc_batch returned no row")
    n, g, nnz, ticket, obs_blob = row
    if n != len(ids):
        fn(ticket or 0, 0, 0, None, None, None, 0, None, None)
        raise RuntimeError(f"dc_batch returned {n} cells for {len(ids)} requested")
    name = np.dtype(value_dtype).name
    indptr, indices, data = pool.take_batch(n, nnz, name)
    bad, bad_at = ctypes.c_int64(0), ctypes.c_int64(0)
    kind = _take_kind(name, int32_fits)
    rc = fn(ticket or 0, n, nnz, indptr.ctypes.data, indices.ctypes.data, data.ctypes.data,
            kind, ctypes.byref(bad), ctypes.byref(bad_at))
    t2 = time.perf_counter()
    if rc == -2:
        row_i = int(np.searchsorted(indptr, bad_at.value, side="right")) - 1
        raise overflow(int(ids[row_i]), bad.value, name)
    if rc == -3:
        raise ValueError("a batch with 2^31 or more nonzeros does not fit int32 indices; "
                         "use a smaller batch_size")
    if rc != 0:
        raise RuntimeError(f"dc_batch: the result could not be taken (ticket {ticket}, code {rc})")
    if panel is not None and panel.pos is not None:
        indices = panel.pos[indices]
        g = len(panel)
    if timings is not None:
        timings["sql_call"] = timings.get("sql_call", 0.0) + (t1 - t0)
        timings["copy_out"] = timings.get("copy_out", 0.0) + (t2 - t1)
    if obs is not None:
        return indptr, indices, data, int(g), obs.decode(obs_blob, n)
    return indptr, indices, data, int(g)


def _ticket_place_fn():
    """deltacells_ticket_place of the loaded extension, through ctypes (None when it cannot
    be had: an older extension; then batches are read one by one)."""
    import ctypes
    return _ext_function("deltacells_ticket_place", lambda: [
        ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int])


def place_plan(con, cell_ids, obs=None, panel=None):
    """dc_batch(cells, genes, obs, 1): where the cells are and their sizes, nothing decoded
    -> (cell_nnz int64 [n], ticket, nnz, n_genes, obs blob or None), or None when these cells
    cannot be placed (a repeated cell, a tile of another codec: read them with read_batch_into).
    With a gene panel (a Panel) the sizes are before it (the room each cell's place needs)
    and n_genes is the panel's width before Panel.pos.  The ticket goes to place_into (or
    release_place)."""
    ids = np.ascontiguousarray(cell_ids, dtype="<i8")
    blob = panel.blob if panel is not None else None
    # (NULL arguments bound, not written: SQLite takes a literal "= NULL" as always false)
    try:
        if obs is not None and obs.columns:
            cur = con.execute("SELECT n_cells, n_genes, nnz, ticket, cell_nnz, obs_values "
                              "FROM dc_batch(?, ?, ?, 1)", (ids.tobytes(), blob, obs.arg))
        else:
            cur = con.execute("SELECT n_cells, n_genes, nnz, ticket, cell_nnz, NULL "
                              "FROM dc_batch(?, ?, ?, 1)", (ids.tobytes(), blob, None))
    except sqlite3.OperationalError as e:
        if blob is not None and "takes no gene panel" in str(e):
            return None           # an extension older than panel placing: read one by one
        raise
    row = cur.fetchone()
    cur.close()
    if row is None:
        raise RuntimeError("dc_batch returned no row")
    n, g, nnz, ticket, cnz, ob = row
    if cnz is None:
        return None
    if n != len(ids) or len(cnz) != 4 * n:
        release_place(ticket)
        raise RuntimeError(f"dc_batch returned {n} cells ({len(cnz)} bytes of sizes) for {len(ids)} requested")
    return np.frombuffer(cnz, dtype="<i4").astype(np.int64), ticket, int(nnz), int(g), ob


def place_into(ticket, n, nnz, ix_addr, val_addr, value_dtype, row_nnz=None, seg=None):
    """Decodes the cells of a place_plan ticket, cell i straight to the addresses ix_addr[i]
    (int32 gene indices) and val_addr[i] (values of value_dtype: int32 or float32), each with
    room for cell_nnz[i] values (uint64 arrays of n addresses).  row_nnz (int64 [n], needed
    with a gene panel): each cell's size as written; with a panel, its panel genes only
    (positions, in order).  seg (with a panel): the runs of cells laid out one after the other
    (a batch's part: cells seg[s] .. seg[s+1]-1, int64, seg[0] = 0, seg[-1] = n); each run is
    packed after the panel, from its first cell's address on."""
    import ctypes
    fn = _ticket_place_fn()
    ix_addr = np.ascontiguousarray(ix_addr, dtype=np.uint64)
    val_addr = np.ascontiguousarray(val_addr, dtype=np.uint64)
    if len(ix_addr) != n or len(val_addr) != n:
        raise ValueError(f"place_into: {len(ix_addr)} and {len(val_addr)} addresses for {n} cells")
    if row_nnz is not None and (row_nnz.dtype != np.int64 or len(row_nnz) != n or not row_nnz.flags.c_contiguous):
        raise ValueError(f"place_into: row_nnz must be a contiguous int64 array of {n} entries")
    if seg is not None:
        seg = np.ascontiguousarray(seg, dtype=np.int64)
    msg = ctypes.create_string_buffer(512)
    rc = fn(ticket or 0, n, nnz, ix_addr.ctypes.data, val_addr.ctypes.data, _KINDS[np.dtype(value_dtype).name],
            None if row_nnz is None else row_nnz.ctypes.data, 0 if seg is None else len(seg) - 1,
            None if seg is None else seg.ctypes.data, msg, len(msg))
    if rc == -5:
        raise RuntimeError(f"dc_batch: {msg.value.decode('utf-8', 'replace')}")
    if rc == -6:
        raise MemoryError("dc_batch: out of memory while placing a batch's cells")
    if rc != 0:
        raise RuntimeError(f"dc_batch: the cells could not be placed (ticket {ticket}, code {rc})")


def release_place(ticket):
    fn = _ticket_place_fn()
    if fn is not None and ticket:
        fn(ticket, 0, 0, None, None, 0, None, 0, None, None, 0)


def read_csr(con, cell_ids, genes_blob=None, chunk_cells=20000, nnz_hint=0, dtype="int32",
             int32_fits=False):
    """dc_batch over `cell_ids` in chunks of `chunk_cells` -> (indptr int64, indices int32,
    data of numpy dtype `dtype`, n_genes): one CSR for the whole selection, each chunk's
    result copied once, straight into the final arrays (the ticket path; through read_batch
    when the ticket path is not available).  `nnz_hint`: the expected total, to allocate
    once.  A count that `dtype` cannot hold is a DtypeOverflow naming its cell (int32_fits:
    as for read_batch_into)."""
    import ctypes
    ids = np.ascontiguousarray(cell_ids, dtype="<i8")
    n = len(ids)
    fn = _ticket_take_fn()
    indptr = np.zeros(n + 1, dtype=np.int64)
    cap = max(0, int(nnz_hint))
    indices = np.empty(cap, dtype=np.int32)
    data = np.empty(cap, dtype=dtype)
    name = np.dtype(dtype).name
    kind = _take_kind(name, int32_fits)
    o, g = 0, None
    ptr32 = np.empty(min(n, chunk_cells) + 1, dtype=np.int32)
    bad, bad_at = ctypes.c_int64(0), ctypes.c_int64(0)
    for s in range(0, n, chunk_cells):
        part = ids[s:s + chunk_cells]
        k = len(part)
        if fn is None:
            _, ip, ix, dt, g = read_batch(con, part, genes_blob)
            nz, rel = len(dt), ip
        else:
            args = (part.tobytes(),) if genes_blob is None else (part.tobytes(), genes_blob)
            sql = ("SELECT n_cells, n_genes, nnz, ticket FROM dc_batch("
                   + ", ".join("?" * len(args)) + ")")
            cur = con.execute(sql, args)
            row = cur.fetchone()
            cur.close()
            if row is None:
                raise RuntimeError("dc_batch returned no row")
            kk, g, nz, ticket = row
            if kk != k:
                fn(ticket or 0, 0, 0, None, None, None, 0, None, None)
                raise RuntimeError(f"dc_batch returned {kk} cells for {k} requested")
        if o + nz > cap:
            cap = max(o + nz, 2 * cap)
            indices = np.concatenate([indices[:o], np.empty(cap - o, dtype=np.int32)])
            data = np.concatenate([data[:o], np.empty(cap - o, dtype=dtype)])
        if fn is None:
            indices[o:o + nz] = ix
            data[o:o + nz] = counts_as(dt, name, part, ip)
        else:
            rc = fn(ticket or 0, k, nz, ptr32.ctypes.data, indices[o:].ctypes.data,
                    data[o:].ctypes.data, kind, ctypes.byref(bad), ctypes.byref(bad_at))
            if rc == -2:
                row_i = int(np.searchsorted(ptr32[:k + 1], bad_at.value, side="right")) - 1
                raise overflow(int(part[row_i]), bad.value, name)
            if rc != 0:
                raise RuntimeError(f"dc_batch: the result could not be taken (ticket {ticket}, code {rc})")
            rel = ptr32[:k + 1]
        indptr[s + 1:s + k + 1] = rel[1:k + 1] + o
        o += nz
    if g is None:
        g = int(con.execute("SELECT count(*) FROM genes").fetchone()[0]) if genes_blob is None \
            else len(genes_blob) // 4
    return indptr, indices[:o], data[:o], int(g)


def with_connection(path, threads=None, cache_mb=None, check_same_thread=True, mmap=False):
    con = connect(path, check_same_thread=check_same_thread, mmap=mmap)
    if threads is not None:
        con.execute("SELECT dc_config('threads', ?)", (int(threads),)).fetchall()
    if cache_mb is not None:
        con.execute("SELECT dc_config('cache_mb', ?)", (int(cache_mb),)).fetchall()
        # The chunks one dc_batch call holds at once (decode_mb) stay in the cache anyway:
        # a budget below the cache's only splits a new window's chunks into groups, whose
        # rows are then staged (copied twice more) instead of copied once at the take.
        dec = con.execute("SELECT dc_config('decode_mb')").fetchone()[0]
        if int(cache_mb) > int(dec):
            con.execute("SELECT dc_config('decode_mb', ?)", (int(cache_mb),)).fetchall()
    return con


# Connections of finished readers, kept for the next reader of the same file (the next epoch's):
# a new connection starts the extension's decoder threads and buffers afresh, and faulting in
# their pages (the tiles' blobs, 14 MB each for the reference data; the threads' malloc arenas)
# took ~4,500 page faults per epoch of 100,000 cells, most of what glibc's malloc tuning saved.
# Kept per process: a forked child never uses (nor closes) its parent's.
SPARE_CONNECTIONS = 2
_spare_cons = {"pid": None, "cons": []}        # [((path, cache_mb, mmap, threads), (st_dev, st_ino), con)]
_spare_cons_lock = _forksafe.Lock()


def _file_id(path):
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _spare_list():
    """This process's spare connections (the lock held); a parent's are abandoned untouched."""
    if _spare_cons["pid"] != os.getpid():
        for _, _, c in _spare_cons["cons"]:
            _forksafe.abandon(c)
        _spare_cons["pid"], _spare_cons["cons"] = os.getpid(), []
    return _spare_cons["cons"]


def take_connection(path, threads=None, cache_mb=None, mmap=False):
    """A connection for one reader (usable from any thread, one at a time): a spare one of an
    earlier reader of the same file, cache size and mmap (its decoder threads set to
    `threads`: None, one per core), else a new one.  A spare whose path now names another
    file (converted again and renamed over it) is closed, not used."""
    fid, stale = _file_id(path), []
    con = had = None
    with _spare_cons_lock:
        cons = _spare_list()
        for i in range(len(cons) - 1, -1, -1):
            k, f, c = cons[i]
            if k[0] == str(path) and f != fid:
                stale.append(c)
                del cons[i]
            elif con is None and k[:3] == (str(path), cache_mb, bool(mmap)) and fid is not None:
                con, had = c, k[3]
                del cons[i]
    for c in stale:
        c.close()
    if con is None:
        return with_connection(path, threads, cache_mb, check_same_thread=False, mmap=mmap)
    if had != threads:
        con.execute("SELECT dc_config('threads', ?)", (int(threads or 0),)).fetchall()
    return con


def give_connection(con, path, threads=None, cache_mb=None, wait=True, mmap=False):
    """A reader is done with a connection from take_connection (no statement left running):
    keep it for the next reader, or close it when SPARE_CONNECTIONS are kept already.
    wait=False (an iterator's __del__, which may run wherever the collector does): close it
    instead of waiting for the spares' lock."""
    old = []
    if not _spare_cons_lock.acquire(timeout=-1 if wait else 0):
        con.close()
        return
    try:
        cons = _spare_list()
        fid = _file_id(path)
        if fid is None:
            old.append(con)
        else:
            cons.append(((str(path), cache_mb, bool(mmap), threads), fid, con))
        while len(cons) > SPARE_CONNECTIONS:
            old.append(cons.pop(0)[2])
    finally:
        _spare_cons_lock.release()
    for c in old:
        c.close()


def _close_spares():
    """At exit: this process's spare connections closed while the interpreter still runs (a
    forked child's copies of its parent's are left alone)."""
    with _spare_cons_lock:
        cons = _spare_cons["cons"] if _spare_cons["pid"] == os.getpid() else []
        _spare_cons["cons"] = []
    for _, _, c in cons:
        try:
            c.close()
        except Exception:
            pass


atexit.register(_close_spares)


def genes_json(names):
    return json.dumps(list(names))
