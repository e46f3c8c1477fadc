"""deltacells.CellDataset: shuffled CSR batches of selected cells for PyTorch.

    ds = deltacells.CellDataset("pbmc.dcdb", where="cell_type != 'doublet'",
                                obs=["cell_type"], batch_size=5000, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0, pin_memory=True)
    for epoch in range(E):
        ds.set_epoch(epoch)
        for batch in loader:          # {'X': ..., 'cell_id': int64 tensor, 'cell_type': int64 codes}
            ...

Reading ahead: unless prefetch_tiles=0, each iterator runs one background thread
with its own connection to the dataset, started by the iterator's first next().
It calls dc_batch (the extension decodes in its own threads; Python releases the GIL
while SQLite works) and builds the next batches while the training step runs, at
most about prefetch_tiles tiles' worth of cells ahead.  For a remote dataset (a URL)
reader threads fetch the coming tiles' blobs ahead of it into the VFS's shared block
cache (_fetchahead.py), so that the store's latency overlaps decoding.

Fork safety (DataLoader workers are forked on Linux): the dataset holds no connection;
a prefetch thread is parked outside SQLite whenever the process forks, and an iterator
used in a forked child opens its own connection (see _forksafe.py).
"""
import json
import os
import queue
import sqlite3
import time
import threading
import warnings

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from . import _fetchahead, _forksafe, _place, _xfer, transforms
from ._connect import connect, is_remote
from ._core import (OUTPUTS, Catalogue, Categories, ObsCodes, ObsReader, check_float16, counts_as,
                    new_pool, read_batch, read_batch_into, release_pool, with_connection, take_connection,
                    give_connection)
from ._convert import install_csr_reduction, make_x, obs_out, take_dtype, torch_dtype
from ._plan import EpochPlan, interleave, worker_range

_END = object()
install_csr_reduction()   # output='csr' through DataLoader workers (torch 1.13 cannot)


class _Failure:
    def __init__(self, exc):
        self.exc = exc


class _SharedInts:
    """Ints that DataLoader workers see change, also persistent ones (which iterate their own
    copy of the dataset): shared memory (multiprocessing.RawArray) inherited by forked
    workers and handed to spawned ones; pickled at any other time they travel as plain ints."""

    def __init__(self, n):
        self._plain = [0] * n
        try:
            import multiprocessing
            self._raw = multiprocessing.RawArray("q", n)
        except (OSError, ImportError):       # no shared memory here: plain ints
            self._raw = None

    def __getitem__(self, i):
        return (self._raw if self._raw is not None else self._plain)[i]

    def __setitem__(self, i, v):
        if self._raw is not None:
            self._raw[i] = int(v)
        self._plain[i] = int(v)

    def __len__(self):
        return len(self._plain)

    def __getstate__(self):
        from multiprocessing import context
        plain = [self[i] for i in range(len(self))]
        if self._raw is not None and context.get_spawning_popen() is not None:
            return {"raw": self._raw, "plain": plain}
        return {"raw": None, "plain": plain}

    def __setstate__(self, s):
        self._raw, self._plain = s["raw"], s["plain"]


_RESUME_WORKERS = 1024     # DataLoader workers a resume can be shared with


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# How long a DataLoader worker waits for worker 0's first batch before making its own
# (_BatchIterator._first_turn); worker 0 failing or slow costs its siblings at most this.
FIRST_WAIT_S = 2.0


def worker_threads(num_workers):
    """Decoder threads of one of num_workers DataLoader workers: the cores this process may
    run on (its affinity mask, else the machine's), shared out, at least one."""
    return max(1, _cores() // max(1, num_workers))


def worker_thread_schedule(lens, worker, cores=None):
    """[(first batch, threads)] for worker `worker`, whose DataLoader siblings deliver
    lens[w] batches each: while k workers still have batches, each gets cores // k decoder
    threads (at least one), so that a worker left alone at the end of an epoch (workers
    own whole windows, their runs differ by up to a window) uses every core, and the
    total stays at about the core count."""
    cores = _cores() if cores is None else cores
    out = []
    for i in sorted({0} | {int(n) for n in lens if 0 < n < lens[worker]}):
        busy = sum(1 for n in lens if n > i)
        t = max(1, cores // max(1, busy))
        if not out or out[-1][1] != t:
            out.append((i, t))
    return out


def _vfs_file(con):
    """The connection's dataset file as the dchttp VFS opened it (the extension's dc_vfs_file:
    'shared' 1 when its blocks go through the process-wide block cache, so that what another
    connection of this process reads reaches it; 'max_inflight'), or None when it is not read
    through dchttp."""
    try:
        v = con.execute("SELECT dc_vfs_file('main')").fetchone()[0]
    except sqlite3.Error:
        return None
    return json.loads(v) if v else None


def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {type(v).__name__}")
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return int(v)


def _check_equal_batches(v):
    """equal_batches -> None, 'pad' or 'drop' (True is 'pad')."""
    if v is True:
        v = "pad"
    if v not in (False, None, "pad", "drop"):
        raise ValueError(f"equal_batches must be False, True, 'pad' or 'drop', got {v!r}")
    return v or None


# A shuffle window's cells by default (shuffle_window=None): 2 tiles of the converter's default
# 10,000 cells.  A dataset of smaller tiles (its inputs' own tiles: a merged atlas of samples
# of a few thousand cells each) gets more tiles per window, so that its batches mix as many
# cells, and a window holds a few batches: with 2 tiles of 2,000 cells against batches of
# 5,000 nearly every batch spanned two windows (its head carried and copied) and mixed the
# cells of 3 tiles only (100,000 cells of the reference data in 2,000-cell tiles, 0 workers,
# later epochs: 0.28-0.30 s with 10 tiles a window against 0.36-0.43 s with 2; 10,000-cell
# tiles 0.24-0.26 s; peak RSS 0.83 against 0.67 GB).
WINDOW_CELLS = 20000


def resolve_window(shuffle_window, cat):
    """shuffle_window as given (an int >= 1), or for None the tiles of about WINDOW_CELLS
    cells (at least 2): WINDOW_CELLS over the median cells of the dataset's tiles, rounded."""
    if shuffle_window is not None:
        return _check_int("shuffle_window", shuffle_window, 1)
    n = cat.tile_n[cat.tile_n > 0]
    if not len(n):
        return 2
    return max(2, int(WINDOW_CELLS / float(np.median(n)) + 0.5))


def window_cache_mb(cat, window, n_tiles, spare=0):
    """MB of decoded-chunk cache that a shuffle window of `window` tiles (of n_tiles) and
    `spare` tiles more hold: the dataset's largest tiles, as many as that (a window of
    many small tiles beside one large one, as a merged atlas has, is not counted as
    that many large ones).  The cache counts the memory its buffers hold: a decoded
    chunk's size rounded up to its size class (at most 1/8 more) and, when mapped, to
    2 MiB.  A window past the last tile holds no more tiles."""
    if not len(cat.tile_nnz):
        return 0.0
    k = min(window, n_tiles) + spare
    sizes = np.sort(np.asarray(cat.tile_nnz, dtype=np.float64))[::-1]
    top = float(sizes[:k].sum()) + float(sizes[0]) * max(0, k - len(sizes))
    return top * 8 * 1.25 / 2**20


class _Base:
    """Argument checking and batch building shared by the iterable and map datasets."""

    def _setup(self, path, where, obs, genes, output, dtype, threads, cache_mb, cells=None,
               transform=None, missing_code=-100, missing_genes="error", mmap=True):
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        self.path = os.fspath(path)
        self.output = output
        self.dtype = torch_dtype(dtype)
        if output == "scipy":
            from ._convert import numpy_dtype
            numpy_dtype(self.dtype)
        self.threads = None if threads is None else _check_int("threads", threads, 1)
        self.cache_mb = None if cache_mb is None else _check_int("cache_mb", cache_mb, 0)
        if not isinstance(mmap, (bool, np.bool_)):
            raise TypeError(f"mmap must be True or False, not {type(mmap).__name__}")
        self.mmap = bool(mmap)
        if isinstance(missing_code, bool) or not isinstance(missing_code, (int, np.integer)):
            raise TypeError(f"missing_code must be an integer, not {type(missing_code).__name__}")
        self.missing_code = int(missing_code)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, not {type(transform).__name__}")
        con = with_connection(self.path)
        try:
            # the fetch-ahead's condition, asked of a connection like those that read later
            self._vfs = _vfs_file(con)
            # where each tile's pages lie, for the fetch-ahead of a remote dataset
            self._pages = _fetchahead.page_map(con) if self._vfs else None
            cat = Catalogue(con, self.path)
            try:
                self.obs = cat.resolve_obs(obs)
                self._panel = cat.resolve_panel(genes, missing_genes)
                self.categories = {}
                for c in self.obs:
                    if cat.kind(c) == "category":
                        cats = Categories(c, cat.categories(c), self.missing_code)
                        if 0 <= self.missing_code < len(cats):
                            raise ValueError(
                                f"missing_code {self.missing_code} is a code of obs column {c!r} "
                                f"(0..{len(cats) - 1}, {cats[self.missing_code]!r}); use a "
                                "negative code (default -100) or one >= the number of categories")
                        self.categories[c] = cats
                self.where = where
                self._selected = cat.select(con, where, cells)
                self._gene_stats = {}
                if take_dtype(self.dtype) == "int32":
                    cat.counts_fit_int32(con)      # placing int32 only where every count fits
            finally:
                cat._con = None
        finally:
            con.close()
        self._cat = cat
        self.filled_genes = list(self._panel.filled) if self._panel is not None else []
        if self.filled_genes:
            more = f" (and {len(self.filled_genes) - 10} more)" if len(self.filled_genes) > 10 else ""
            warnings.warn(
                f"{len(self.filled_genes)} of the {len(self._panel)} panel genes are not in "
                f"{self.path} and are zero columns of X: "
                f"{', '.join(self.filled_genes[:10])}{more} (the list: .filled_genes)",
                UserWarning, stacklevel=3)
        self.transform = transform
        self._columns = None        # X's columns after the transform (None: unchanged)
        if transform is not None and hasattr(transform, "bind"):
            cols = transform.bind(self, np.arange(self._n_genes_in(), dtype=np.int64))
            if cols is not None:
                cols = np.asarray(cols, dtype=np.int64)
                if not np.array_equal(cols, np.arange(self._n_genes_in())):
                    self._columns = cols
        # memory that DataLoader workers forked from this process hand batches over in (_xfer)
        self._arena = _xfer.arena() if get_worker_info() is None else None

    def __getstate__(self):
        s = self.__dict__.copy()
        s["_arena"] = None        # a mapping of this process: spawned workers copy (_xfer)
        return s

    # --- genes ---------------------------------------------------------------
    def _n_genes_in(self):
        return self._cat.n_genes if self._panel is None else len(self._panel)

    def _input_gene_names(self):
        if self._panel is not None:
            return list(self._panel.names)
        con = with_connection(self.path)
        try:
            return [str(n) for n in self._cat.gene_names(con)]
        finally:
            con.close()

    @property
    def n_genes(self):
        """The number of X's columns (after the transform, if it selects genes)."""
        return self._n_genes_in() if self._columns is None else len(self._columns)

    @property
    def gene_names(self):
        """Names of X's columns, in order: the panel or the dataset's gene order, after the
        transform (if it selects genes, e.g. transforms.TopGenes)."""
        names = self._input_gene_names()
        if self._columns is None:
            return names
        return [names[c] for c in self._columns]

    def gene_column(self, name, transformed=True):
        """A numeric column of the genes table (e.g. 'total_counts', 'n_cells', over the
        whole dataset) for X's columns, in X's order; 0 for zero-filled panel genes."""
        vals = self._gene_stats.get(name)
        if vals is None:
            con = with_connection(self.path)
            try:
                vals = self._cat.gene_column(name, con)
            finally:
                con.close()
            self._gene_stats[name] = vals
        if self._panel is not None:
            out = np.zeros(len(self._panel), dtype=np.float64)
            pos = self._panel.pos if self._panel.pos is not None else np.arange(len(self._panel))
            out[pos] = vals[self._panel.ids]
            vals = out
        if transformed and self._columns is not None:
            vals = vals[self._columns]
        return vals

    # --- cells ---------------------------------------------------------------
    @property
    def cell_ids(self):
        """The selected cell ids, sorted (int64 numpy array)."""
        if self._selected is not None:
            return self._selected
        return np.arange(self._cat.n_cells, dtype=np.int64)

    @property
    def n_cells(self):
        """The number of selected cells."""
        return self._cat.n_cells if self._selected is None else len(self._selected)

    # --- reading -------------------------------------------------------------
    def _settings(self, threads=None):
        t = self.threads if self.threads is not None else threads
        cache = self.cache_mb if self.cache_mb is not None else self._default_cache_mb()
        return t, cache

    def _open(self, threads=None):
        t, cache = self._settings(threads)
        return self._same(with_connection(self.path, threads=t, cache_mb=cache, mmap=self._mmap()))

    def _take_connection(self, threads=None):
        """A reader's connection: the last reader's, where it left one (_core.take_connection)."""
        t, cache = self._settings(threads)
        return self._same(take_connection(self.path, t, cache, self._mmap()))

    def _mmap(self):
        """Whether this process's readers map the file (mmap=True): not in a DataLoader worker.
        Measured with 2 workers on 100,000 cells of the reference data (bench_pipeline.py
        --before, medians of 3-5): persistent workers 1.01-1.21x the cells/s for 1.16-1.19x
        the process tree's RSS (each worker's map counts the file's pages again); workers that
        live one epoch 0.89x (a new process faults the map in afresh every epoch)."""
        if not getattr(self, "mmap", False):      # (a dataset pickled before the argument)
            return False
        return get_worker_info() is None

    def _same(self, con):
        """con, if it reads the version of the dataset this object was made from (else closed,
        and an error: the plan would index another version's cells)."""
        try:
            self._cat.check_same(con)
        except BaseException:
            con.close()
            raise
        return con

    def _give_connection(self, con, threads=None, wait=True):
        t, cache = self._settings(threads)
        give_connection(con, self.path, t, cache, wait, self._mmap())

    def _default_cache_mb(self):
        return None

    def _fetch_ahead(self, batches):
        """A FetchAhead over these batches for a remote dataset read with prefetch_tiles > 0
        (tiles fetched ahead of the loader, overlapping the store with decoding), else None."""
        if getattr(self, "prefetch_tiles", 0) <= 0 or not is_remote(self.path) or not len(batches):
            return None
        if not self._vfs or not self._vfs["shared"]:
            return None           # nothing it reads would reach the loader's connection
        path = self.path
        # readers, each with its share of the store's requests in flight, and tiles ahead, by
        # the tiles' size in blocks (_fetchahead.plan: 2 readers for tiles of many blocks)
        n_tiles = len(self._cat.tile_id)
        size = self._vfs.get("size")
        order = _fetchahead.tile_order(batches, self._cat.tile_of)
        readers, per_reader, ahead = _fetchahead.plan(
            int(self._vfs["max_inflight"]), self.prefetch_tiles, size / n_tiles if size and n_tiles else None,
            int(self._vfs["block_kb"]) << 10, tiles=len(order))
        # at least a window's tiles ahead: a window is placed at once, once all its tiles are in
        # (windows of 10 small tiles against 2 to 6 tiles ahead: the next window was not read
        # while the last one's batches were made)
        ahead = max(ahead, int(getattr(self, "shuffle_window", 1)))
        remote = {"max_inflight": per_reader} if readers > 1 else None
        return _fetchahead.FetchAhead(lambda: connect(path, check_same_thread=False, remote=remote),
                                      order, ahead, readers=readers, pages=self._pages)

    def _obs_reader(self):
        """(ObsCodes of the columns dc_batch returns with the counts, ObsReader of the
        others: text columns, 'name', 'tile')."""
        codes = ObsCodes(self._cat, self.obs, self.missing_code)
        rest = [c for c in self.obs if c not in codes.columns]
        return codes, ObsReader(self._cat, rest, missing_code=self.missing_code)

    def _make_batch(self, con, obs_reader, cells, pool=None, timings=None):
        """One batch for int64 cell ids.  With a BufferPool, the extension's result is
        copied once, straight into reused buffers (converted to the value dtype on the
        way); without one (or where that path is unavailable), through sqlite3's blobs.
        timings: a dict that accumulates seconds per stage (see bench_pipeline.py)."""
        t0 = time.perf_counter()
        got = None
        codes, obs_reader = obs_reader
        obs = {}
        if pool is not None:
            got = read_batch_into(con, cells, pool, take_dtype(self.dtype), panel=self._panel,
                                  timings=timings, obs=codes,
                                  int32_fits=self._cat.counts_fit_int32())
        if got is not None:
            indptr, indices, data, g, obs = got
            ids = np.ascontiguousarray(cells, dtype=np.int64)
        else:
            ids, indptr, indices, data, g = read_batch(con, cells, panel=self._panel)
            data = counts_as(data, take_dtype(self.dtype), ids, indptr)
            if codes.columns:
                obs = ObsReader(self._cat, codes.columns, missing_code=self.missing_code) \
                    .gather(con, ids)
        t1 = time.perf_counter()
        if timings is not None:
            if got is None:
                timings["sql_call"] = timings.get("sql_call", 0.0) + (t1 - t0)
            ext = json.loads(con.execute("SELECT dc_config('last_batch')").fetchone()[0])
            for k in ("plan_s", "fetch_s", "direct_s", "copy_s"):
                timings["ext_" + k[:-2]] = timings.get("ext_" + k[:-2], 0.0) + ext[k]
        return self._finish_batch(con, obs_reader, ids, indptr, indices, data, g, obs, timings)

    def _finish_batch(self, con, obs_reader, ids, indptr, indices, data, g, obs, timings):
        """A batch's dict from its arrays (and the obs columns that came with the counts):
        X in the output format, cell ids, the other obs columns, the transform."""
        t1 = time.perf_counter()
        if g != self._n_genes_in():
            raise RuntimeError(f"dc_batch returned {g} genes, expected {self._n_genes_in()}")
        as_torch = self.output != "scipy"
        if self.dtype == torch.float16:
            check_float16(con, ids, indptr, data, self._panel)
        out = {"X": make_x(indptr, indices, data, len(ids), g, self.output, self.dtype),
               "cell_id": torch.from_numpy(ids) if as_torch else ids}
        t2 = time.perf_counter()
        if obs_reader.columns:
            obs.update(obs_reader.gather(con, ids))
        for c in self.obs:
            out[c] = obs_out(obs[c], as_torch)
        t3 = time.perf_counter()
        if self.transform is not None:
            out = transforms.apply(self.transform, out)
        if timings is not None:
            t4 = time.perf_counter()
            for k, v in (("tensor", t2 - t1), ("obs", t3 - t2), ("transform", t4 - t3)):
                timings[k] = timings.get(k, 0.0) + v
            timings["batches"] = timings.get("batches", 0) + 1
        return out


def _next_batch(ds, con, reader, batches, i, pool, timings, placer):
    """Batch i of a reader: from its window's placing (_place.py) when it can, else read alone."""
    if placer is not None:
        item = placer.get(con, reader, i, pool, timings)
        if item is not None:
            return item
    return ds._make_batch(con, reader, batches[i], pool, timings)


def _fetch_past(fa, placer, first):
    """After a batch: the fetch-ahead (if any) may read past the tiles of every batch the placer
    has made (a window at once), not only past the batch handed out.  A DataLoader worker hands
    out its window's batches only as the loader asks for them; until its next window the
    fetch-ahead stood still, and the store idled while the main process took the batches
    (2 workers over an emulated store: 0.38 s of a 1.49 s epoch without a request)."""
    if fa is not None and placer is not None:
        k = placer.unplaced()
        if k is not None:
            fa.advance(k - first)


def _placer(ds, batches, cuts, start, pool):
    """The Placer of a reader whose batches are a contiguous run of the plan (cuts not None)."""
    if cuts is None or not _place.enabled(ds, pool):
        return None
    # a group's cells within the cache's budget (what the window's decoded chunks took)
    budget = ds.cache_mb if ds.cache_mb is not None else ds._default_cache_mb()
    max_cells = None
    cat = ds._cat
    if budget is not None and len(cat.tile_n) and cat.tile_n.sum():
        per_cell = 8.0 * float(cat.tile_nnz.sum()) / float(cat.tile_n.sum())     # bytes placed per cell
        max_cells = int(budget * 2**20 // max(1.0, per_cell))
    return _place.Placer(ds, batches, cuts[0], cuts[1], start, max_cells, _place.first_alone(pool))


class CellDataset(_Base, IterableDataset):
    """Whole batches of selected cells, for DataLoader(ds, batch_size=None).

    path:           the dataset (.dcdb)
    where:          SQL predicate over the `cells` table ("cell_type IN ('B','NK') AND percent_mt < 5")
    obs:            obs columns to return with each batch (categoricals as int64 codes, see
                    .categories; ints/reals/bools as tensors; text as arrays); 'name' gives
                    the cell names (barcodes), 'tile' the tile
    batch_size:     cells per batch (default 5000)
    shuffle:        shuffle tile order and cells within windows of tiles (default True)
    seed:           the order is a function of (seed, epoch) only
    genes:          a gene panel (names, or gene ids): X's columns in panel order, others dropped
    output:         'csr' (torch sparse CSR), 'csr_parts' (CSRBatch: three dense tensors, pins),
                    'dense' (torch dense), 'scipy' (scipy.sparse.csr_matrix; ids as numpy)
    dtype:          value dtype (default torch.float32; int32 returns the stored counts uncopied)
    prefetch_tiles: read/decode about this many tiles ahead in a background thread (0: no
                    thread); the thread starts with the iteration, never before
    threads:        decoder threads of the extension (default: the extension's, or cores/workers)
    drop_last:      drop the rank's short last batch
    shuffle_window: tiles whose cells are shuffled together (default None: tiles of about
                    20,000 cells, at least 2: 2 of the converter's 10,000-cell tiles, more
                    where a dataset's tiles are smaller; larger mixes more, costs more
                    memory); ds.shuffle_window is the number in use
    cache_mb:       the extension's decoded-chunk cache (default: enough for the window)
    rank, world_size: override torch.distributed's (default: the process group's, else 0 / 1)
    equal_batches:  False; True or 'pad' (ranks with fewer batches repeat some of their cells);
                    'drop' (ranks drop batches down to the smallest count). For DDP.
    cells:          cell ids to select (e.g. a part of train_val_split); with where, both apply
    transform:      a callable applied to every batch dict (see deltacells.transforms)
    missing_code:   the code of a NULL categorical (or bool) obs value (default -100, the
                    ignore_index of torch.nn.CrossEntropyLoss)
    missing_genes:  'error' (default): an unknown panel gene is an error; 'zeros': it is a
                    zero column of X, listed in .filled_genes (and a warning says which)
    timings:        True: each iterator accumulates seconds per stage of making a batch in
                    its .timings dict (also ds.last_timings): sql_call, ext_plan, ext_fetch
                    (blob reads + decoding), ext_direct (decoding into the output), ext_copy
                    (gather), copy_out (into the batch's buffers), tensor, obs (text obs
                    columns; the others come with dc_batch, in sql_call), transform,
                    wait (the consumer blocked on the prefetch queue), first_wait (a
                    DataLoader worker waiting for worker 0's first batch: _first_turn)
    mmap:           True (default): readers in this process (not in DataLoader workers)
                    map a local file into memory (deltacells.connect(mmap=True)): tile
                    blobs read about 8x faster, 0 workers 1.1-1.2x the cells/s; a file cut
                    short by another program in the middle of a read then ends the process
                    with SIGBUS instead of an error. False: read calls.

    Iterators are context managers (`with iter(ds) as it: ...`) and have close(); an
    iterator also closes itself at the end of the epoch.  X's buffers are reused once the
    tensors of an earlier batch are dropped, so a loop that keeps no batch alive touches
    no fresh memory in steady state.  dtype may be narrower than int32 (torch.int16,
    int8, uint8): a count that does not fit is an error naming the cell.

    len(ds) and ds.n_batches are the number of batches this rank delivers in an epoch;
    together the DataLoader's workers deliver exactly these batches, whatever their number.
    """

    def __init__(self, path, where=None, obs=None, batch_size=5000, shuffle=True, seed=0,
                 genes=None, output="csr", dtype=torch.float32, prefetch_tiles=2, threads=None,
                 drop_last=False, shuffle_window=None, cache_mb=None, rank=None, world_size=None,
                 equal_batches=False, *, cells=None, transform=None, missing_code=-100,
                 missing_genes="error", timings=False, mmap=True):
        super().__init__()
        self.timings = bool(timings)
        self.last_timings = None
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.prefetch_tiles = _check_int("prefetch_tiles", prefetch_tiles, 0)
        if shuffle_window is not None:
            _check_int("shuffle_window", shuffle_window, 1)
        self.seed = _check_int("seed", seed, 0)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.equal_batches = _check_equal_batches(equal_batches)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None:
            _check_int("world_size", world_size, 1)
            _check_int("rank", rank, 0)
            if rank >= world_size:
                raise ValueError(f"rank {rank} is not below world_size {world_size}")
        self._rank_arg = (rank, world_size)
        self._setup(path, where, obs, genes, output, dtype, threads, cache_mb, cells=cells,
                    transform=transform, missing_code=missing_code, missing_genes=missing_genes,
                    mmap=mmap)
        self._tiles = self._cat.per_tile(self._selected)
        self.shuffle_window = resolve_window(shuffle_window, self._cat)
        self._epoch_box = _SharedInts(1)
        # the resume of load_state_dict, shared with the DataLoader workers (see _take_resume):
        # [load count, epoch (-1: none), batches_done, one slot per worker]
        self._resume_box = _SharedInts(3 + _RESUME_WORKERS)
        self._resume_box[1] = -1
        self._progress = None     # in-process iteration: {'epoch', 'done'}

    # --- epochs and splitting ------------------------------------------------
    @property
    def _epoch(self):
        return self._epoch_box[0]

    @_epoch.setter
    def _epoch(self, v):
        self._epoch_box[0] = v

    def set_epoch(self, epoch):
        """Choose the epoch whose order the next iteration follows (DataLoader workers,
        persistent ones too, follow)."""
        epoch = _check_int("epoch", epoch, 0)
        if self._resume_box[1] != epoch:
            self._resume_box[1] = -1
        self._epoch = epoch

    @property
    def epoch(self):
        return self._epoch

    def _rank_world(self):
        rank, world = self._rank_arg
        if world is not None:
            return rank, world
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def _plan(self, world):
        return EpochPlan(self._tiles, seed=self.seed, epoch=self._epoch, shuffle=self.shuffle,
                         window=self.shuffle_window, batch_size=self.batch_size,
                         drop_last=self.drop_last, world_size=world,
                         equal_batches=self.equal_batches)

    @property
    def n_batches(self):
        """Batches this rank delivers in an epoch (all DataLoader workers together; the
        number does not depend on how many workers there are)."""
        rank, world = self._rank_world()
        return self._plan(world).n_batches(rank)

    def __len__(self):
        """The number of batches of an epoch on this rank (= n_batches), so that
        len(DataLoader(ds, batch_size=None, num_workers=N)) is exact for every N."""
        return self.n_batches

    def _default_cache_mb(self):
        if not len(self._cat.tile_nnz):
            return None
        # In the main process one tile more than a window, for the batch that spans two
        # windows while the prefetch thread reads ahead; a DataLoader worker reads its own
        # whole windows, one batch at a time (see _plan): its window is enough, and N workers'
        # caches together stay near N windows, not N (window + 1) tiles
        spare = 0 if get_worker_info() is not None else 1
        return int(window_cache_mb(self._cat, self.shuffle_window, len(self._tiles), spare)) + 16

    # --- resuming ------------------------------------------------------------
    def state_dict(self, batches_done=None):
        """Where this rank is in the epoch.  After iterating in this process (num_workers=0)
        the dataset counts the batches it handed out; with DataLoader workers pass
        batches_done, the number of batches this rank's loop took from the DataLoader
        in this epoch."""
        if batches_done is None:
            if self._progress is None or self._progress["epoch"] != self._epoch:
                raise RuntimeError(
                    "the dataset was not iterated in this process in this epoch (DataLoader "
                    "workers iterate copies of it): call state_dict(batches_done=N) with the "
                    "number of batches taken from the DataLoader in this epoch")
            batches_done = self._progress["done"]
        batches_done = _check_int("batches_done", batches_done, 0)
        return {"format": 1, "epoch": self._epoch, "batches_done": batches_done,
                "seed": self.seed, "batch_size": self.batch_size, "shuffle": self.shuffle,
                "shuffle_window": self.shuffle_window, "n_cells": self.n_cells}

    def load_state_dict(self, state):
        """Resume: the next iteration continues epoch state['epoch'] after its first
        state['batches_done'] batches (same dataset, selection, seed and batch settings,
        and the same number of DataLoader workers and ranks)."""
        keys = ("format", "epoch", "batches_done", "seed", "batch_size", "shuffle", "shuffle_window", "n_cells")
        missing = [k for k in keys if not isinstance(state, dict) or k not in state]
        if missing:
            raise ValueError(f"not a CellDataset state_dict (it lacks {', '.join(missing)})")
        if state["format"] != 1:
            raise ValueError(f"state_dict format {state['format']!r}: this deltacells reads format 1")
        for k in ("seed", "batch_size", "shuffle", "shuffle_window", "n_cells"):
            mine = getattr(self, k)
            if state.get(k) != mine:
                raise ValueError(f"state_dict was saved with {k}={state.get(k)!r}, "
                                 f"this dataset has {k}={mine!r}")
        self._epoch = _check_int("epoch", state["epoch"], 0)
        r = self._resume_box
        r[2] = _check_int("batches_done", state["batches_done"], 0)
        r[1] = self._epoch
        r[0] = r[0] + 1

    def _take_resume(self, worker, nw):
        """The batches this iteration skips: batches_done of load_state_dict for the one
        iteration after it, 0 for later ones.  The main process does not see an iteration
        whose DataLoader workers iterate (their copies of the dataset), so each worker takes
        it in shared memory: worker w marks the slots w, w + nw, ... as taken (by this
        load), and a later iteration finds its slot taken whatever its number of workers."""
        r = self._resume_box
        if r[1] != self._epoch:
            return 0
        if nw > len(r) - 3:
            raise ValueError(f"resuming (load_state_dict) works with at most {len(r) - 3} "
                             f"DataLoader workers, not {nw}")
        load = r[0]
        if r[3 + worker] == load:
            return 0
        for s in range(3 + worker, len(r), nw):
            r[s] = load
        return r[2]

    # --- iteration -------------------------------------------------------------
    def __iter__(self):
        wi = get_worker_info()
        worker, nw = (wi.id, wi.num_workers) if wi is not None else (0, 1)
        rank, world = self._rank_world()
        plan = self._plan(world)
        skip_total = self._take_resume(worker, nw)
        cuts = None               # (window starts, real batches): the batches can be placed
        if skip_total and nw > 1:
            # The rest of the epoch in the order the DataLoader delivered it (round robin
            # over workers), dealt again round robin, so this loader delivers the same.
            rest = interleave([plan.batches(rank, w, nw) for w in range(nw)])[skip_total:]
            batches = rest[worker::nw]
            lens = [len(rest[w::nw]) for w in range(nw)]
        else:
            batches = plan.batches(rank, worker, nw)[skip_total:]
            cuts = plan.window_cuts(rank, worker, nw, skip_total)
            lens = [len(batches)]
            if nw > 1:
                n, starts = plan.n_batches(rank), plan.worker_starts(rank)
                lens = [hi - lo for lo, hi in
                        (worker_range(n, w, nw, starts) for w in range(nw))]
        threads = None
        first = None
        if wi is not None:
            threads = worker_thread_schedule(lens, worker)
            # a worker's first iterator of this dataset takes turns (_first_turn): every epoch
            # of workers that live one, the first of persistent ones (in their later epochs each
            # placing its first window on its share of the cores was faster: 0.89-0.97x)
            self._iters = getattr(self, "_iters", 0) + 1
            if nw > 1 and len(batches) and lens[0] > 0 and self._iters == 1:
                # the workers of one DataLoader iteration share seed - id (torch: base_seed + id)
                key = ((int(wi.seed) - int(wi.id)) & ((1 << 63) - 1)) or 1
                first = ("lead" if worker == 0 else "follow", key, nw)
        progress = None
        if wi is None:
            progress = {"epoch": self._epoch, "done": skip_total}
            self._progress = progress
        return _BatchIterator(self, batches, threads, progress, cuts, first)

    def __getstate__(self):
        s = super().__getstate__()
        s["_progress"] = None
        return s


class _Producer:
    """The prefetch thread of one iterator and the queue it fills, from batch `start` on.
    All its SQLite work happens holding a fork gate (see _forksafe)."""

    def __init__(self, ds, batches, start, threads, depth, timings=None, shared=False, cuts=None):
        self.q = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.gate = _forksafe.Gate()
        self.thread = threading.Thread(
            target=_Producer._run, name="deltacells-prefetch", daemon=True,
            args=(ds, batches, start, threads, self.q, self.stop, self.gate, timings, shared, cuts))
        self.thread.start()

    @staticmethod
    def _run(ds, batches, start, threads, q, stop, gate, timings, shared, cuts):
        # No reference to the iterator: dropping the iterator stops this thread (__del__).
        def put(item):
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False
        con = None
        clean = True              # no error inside SQLite: the connection can serve the next reader
        pool = None
        fa = ds._fetch_ahead(batches[start:])
        try:
            if fa is not None:
                fa.start()        # the first tiles come while this thread opens its connection
            with gate:
                con = ds._take_connection(threads)
            reader = ds._obs_reader()
            pool = new_pool(shared)
            placer = _placer(ds, batches, cuts, start, pool)
            for i in range(start, len(batches)):
                if stop.is_set():
                    return
                if fa is not None:
                    fa.at(i - start)
                with gate:
                    item = _next_batch(ds, con, reader, batches, i, pool, timings, placer)
                _fetch_past(fa, placer, start)
                if not put(item):
                    return
            put(_END)
        except BaseException as e:  # handed to the consumer
            clean = False
            put(_Failure(e))
        finally:
            if fa is not None:
                fa.close()
            if con is not None:
                with gate:
                    if clean:
                        ds._give_connection(con, threads)
                    else:
                        con.close()
            if pool is not None:
                release_pool(pool)

    def get(self):
        return self.q.get()

    def close(self, wait=True):
        """Stop the thread.  wait: join it (it finishes the batch in progress, if any, and
        closes its connection); otherwise it does so on its own, shortly."""
        self.stop.set()
        try:   # unblock a producer waiting on a full queue
            while True:
                self.q.get_nowait()
        except queue.Empty:
            pass
        if wait and self.thread is not threading.current_thread():
            self.thread.join()


class _BatchIterator:
    """Yields the batches of one worker.  Reads ahead in a background thread, started by
    the first next() (never by the dataset or by iter()).  Used in a forked child (an
    iterator inherited from the parent), it leaves the parent's thread and connection
    alone and reads with a new connection (and thread) of its own from where it was."""

    def __init__(self, ds, batches, threads, progress, cuts=None, first=None):
        self.ds = ds
        self._first = first       # ("lead" | "follow", key, workers): a DataLoader worker's first turn
        self.first_turn_at = None  # time.monotonic() when that turn came (for tests)
        self.batches = batches
        self.progress = progress
        self.cuts = cuts          # (window starts, real batches) when batches run contiguously
        self._placer = None
        # threads: None, a count, or [(first batch, count)] (a DataLoader worker's, see
        # worker_thread_schedule), applied before the batch it names
        self._schedule = None
        if isinstance(threads, list):
            self._schedule = dict(threads) if ds.threads is None else None
            threads = threads[0][1] if threads else None
        self.threads = threads
        self._pid = os.getpid()
        # A DataLoader worker reads ahead already (the loader's prefetch_factor batches
        # per worker): no prefetch thread there, whose queue would only hold more batches
        # (more memory to fault in, shared slots busy) without adding a core.
        self._in_worker = get_worker_info() is not None
        self._i = 0
        self._finished = False
        self._prod = None
        self._con = None
        self._reader = None
        self._pool = None
        self._fa = None           # fetch-ahead of the direct path (remote datasets)
        self._fa0 = 0             # the batch it began at (its numbering starts there)
        self._dirty = False
        self.timings = {} if ds.timings else None
        if ds.timings:
            ds.last_timings = self.timings

    def _depth(self):
        ds = self.ds
        tiles = ds._cat.tile_n
        per_tile = float(np.mean(tiles)) if len(tiles) else ds.batch_size
        # finished batches waiting: about half of prefetch_tiles tiles of cells (at
        # least 2); the decoded tiles themselves wait in the extension's cache
        return max(2, int(round(ds.prefetch_tiles * per_tile / ds.batch_size / 2)))

    def _shared(self):
        """In a DataLoader worker, batches go to the main process copied once, from reused slots (_xfer)."""
        return get_worker_info() is not None and self.ds.output in ("csr", "csr_parts")

    def _forked(self):
        """In a child of the process that made this iterator: drop the parent's thread
        and queue (untouched), abandon its connection, continue from batch self._i."""
        self._prod = None
        self._fa = None           # the parent's thread: left alone
        if self._con is not None:
            _forksafe.abandon(self._con)
            self._con = None
        self._pool = None
        self._placer = None
        self._pid = os.getpid()

    def __iter__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __next__(self):
        if self._pid != os.getpid():
            self._forked()
        if self._finished:
            raise StopIteration
        if self._i >= len(self.batches):
            self.close()
            raise StopIteration
        if self.ds.prefetch_tiles > 0 and not self._in_worker:
            if self._prod is None:
                self._prod = _Producer(self.ds, self.batches, self._i, self.threads,
                                       self._depth(), self.timings, self._shared(), self.cuts)
            if self.timings is not None:
                t0 = time.perf_counter()
                item = self._prod.get()
                self.timings["wait"] = self.timings.get("wait", 0.0) + time.perf_counter() - t0
            else:
                item = self._prod.get()
            if item is _END:
                self.close()
                raise StopIteration
            if isinstance(item, _Failure):
                self.close()
                raise item.exc
        else:
            if self._con is None:
                self._fa = self.ds._fetch_ahead(self.batches[self._i:])
                self._fa0 = self._i
                if self._fa is not None:
                    self._fa.start()
                # the last reader's connection where it left one (its cache's and decoder
                # threads' memory warm: a DataLoader worker that outlives its epoch, the next
                # epoch of a loop without prefetch)
                self._con = self.ds._take_connection(self.threads)
                self._reader = self.ds._obs_reader()
                self._pool = new_pool(self._shared())
                self._placer = _placer(self.ds, self.batches, self.cuts, self._i, self._pool)
                self._set_threads(self._scheduled(self._i))
                if self._fa is not None and self._placer is not None:
                    self._placer.warm(self._pool)      # while the first tiles come
            elif self._schedule is not None and self._i in self._schedule:
                self._set_threads(self._schedule[self._i])
            if self._fa is not None:
                self._fa.at(self._i - self._fa0)
            turn = self._first_turn()
            try:
                item = _next_batch(self.ds, self._con, self._reader, self.batches, self._i,
                                   self._pool, self.timings, self._placer)
            except BaseException:
                self._dirty = True    # an error inside SQLite: the connection serves no other reader
                raise
            finally:
                if turn is not None and turn[0] is not None:
                    self.first_turn_at = time.monotonic()
                    _xfer.first_batch_mark(turn[0])     # (also after a failure: nobody waits on it)
            if turn is not None and turn[1]:
                self._set_threads(self._scheduled(self._i))   # its share of the cores again
            _fetch_past(self._fa, self._placer, self._fa0)
        self._i += 1
        if self.progress is not None:
            self.progress["done"] += 1
        return item

    def __len__(self):
        return len(self.batches) - self._i

    def _first_turn(self):
        """Before a DataLoader worker's first call that places batches (its first window, or its
        first batch alone where its lane is cold: _place.first_alone), in the worker's first
        iterator of the dataset (CellDataset.__iter__: every epoch of workers that live one).
        The loader's first batch is worker 0's, and every worker would place its first window at
        the same time, each on its share of the cores.  So worker 0 places first, on every core,
        while the others wait for it (_xfer.first_batch_wait, at most FIRST_WAIT_S); then they
        place theirs.  Where worker 0 placed a whole window it hands its batches out and waits to
        be asked for more, so the others share every core for their own first window; where it
        placed one batch alone it goes on at once, and each keeps its share.  Returns None or
        (the key worker 0 marks when its call is done, or None; whether the threads go back to
        the worker's share after it)."""
        f, self._first = self._first, None
        if f is None or self._placer is None:
            return None
        role, key, nw = f
        auto = self._schedule is not None         # the decoder threads are the loader's to set
        if role == "lead":
            if auto:
                self._set_threads(_cores())
            return key, auto
        alone = self._placer.first_alone
        waited = _xfer.first_batch_wait(key, FIRST_WAIT_S)
        if waited is None:
            return None
        self.first_turn_at = time.monotonic()
        if self.timings is not None:
            self.timings["first_wait"] = self.timings.get("first_wait", 0.0) + waited
        if alone or not auto:
            return None
        self._set_threads(max(1, _cores() // max(1, nw - 1)))
        return None, True

    def _scheduled(self, i):
        if not self._schedule:
            return None
        return self._schedule[max(k for k in self._schedule if k <= i)]

    def _set_threads(self, t):
        if t is not None and t != self.threads:
            self._con.execute("SELECT dc_config('threads', ?)", (int(t),)).fetchall()
            self.threads = t

    def close(self, wait=True):
        """Stop reading ahead and close the connection (idempotent).  wait=False: do not
        wait for the prefetch thread, which finishes its batch and closes on its own."""
        self._finished = True
        if self._pid != os.getpid():
            self._forked()
            return
        if self._prod is not None:
            self._prod.close(wait)
            self._prod = None
        if self._fa is not None:
            self._fa.close(wait)
            self._fa = None
        if self._con is not None:
            if self._dirty:
                self._con.close()
            else:
                self.ds._give_connection(self._con, self.threads, wait)
            self._con = None
        if self._pool is not None:
            release_pool(self._pool)
        self._pool = None
        self._placer = None

    def __del__(self):
        # never blocks: the prefetch thread is told to stop and closes its own connection
        try:
            self.close(wait=False)
        except Exception:
            pass
