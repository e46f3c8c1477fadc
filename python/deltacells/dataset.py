"""deltacells.CellDataset: shuffled CSR batches of selected cells for PyTorch.

    ds = deltacells.CellDataset("pbmc.dcdb", where="cell_type != 'doublet'",
                                obs=["cell_type"], batch_size=5000, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0, pin_memory=True)
    for epoch in range(E):
        ds.set_epoch(epoch)
        for batch in loader:          # {'X': ..., 'cell_id': int64 tensor, 'cell_type': int64 codes}
            ...

Reading ahead: unless prefetch_tiles=0, each iterator runs one background thread
with its own connection to the dataset.  It calls dc_batch (the extension decodes
in its own threads; Python releases the GIL while SQLite works) and builds the
next batches while the training step runs, at most about prefetch_tiles tiles'
worth of cells ahead.
"""
import os
import queue
import threading

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ._core import OUTPUTS, Catalogue, ObsReader, read_batch, with_connection
from ._convert import install_csr_reduction, make_x, obs_out, torch_dtype
from ._plan import EpochPlan, interleave

_END = object()
install_csr_reduction()   # output='csr' through DataLoader workers (torch 1.13 cannot)


class _Failure:
    def __init__(self, exc):
        self.exc = exc


def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {type(v).__name__}")
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    return int(v)


class _Base:
    """Argument checking and batch building shared by the iterable and map datasets."""

    def _setup(self, path, where, obs, genes, output, dtype, threads, cache_mb):
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
        con = with_connection(self.path)
        try:
            cat = Catalogue(con, self.path)
            try:
                self.obs = cat.resolve_obs(obs)
                self._gene_ids = cat.resolve_genes(genes)
                self.categories = {c: list(cat.categories(c)) for c in self.obs
                                   if cat.kind(c) == "category"}
                if self._gene_ids is None:
                    self.n_genes = cat.n_genes
                else:
                    self.n_genes = len(self._gene_ids)
                    self._panel_names = list(cat.gene_names()[self._gene_ids])
                self.where = where
                self._selected = cat.select(con, where)
            finally:
                cat._con = None
        finally:
            con.close()
        self._cat = cat

    @property
    def gene_names(self):
        """Names of X's columns, in order (the panel, or the dataset's gene order)."""
        if self._gene_ids is not None:
            return list(self._panel_names)
        con = with_connection(self.path)
        try:
            return list(self._cat.gene_names(con))
        finally:
            con.close()

    @property
    def cell_ids(self):
        """The selected cell ids, sorted (int64 numpy array)."""
        if self._selected is not None:
            return self._selected
        return np.arange(self._cat.n_cells, dtype=np.int64)

    def _open(self, threads=None):
        t = self.threads if self.threads is not None else threads
        cache = self.cache_mb if self.cache_mb is not None else self._default_cache_mb()
        return with_connection(self.path, threads=t, cache_mb=cache)

    def _default_cache_mb(self):
        return None

    def _obs_reader(self):
        return ObsReader(self._cat, self.obs)

    def _make_batch(self, con, obs_reader, cells):
        blob = None if self._gene_ids is None else self._gene_ids.astype("<i4").tobytes()
        ids, indptr, indices, data, g = read_batch(con, cells, blob)
        if g != self.n_genes:
            raise RuntimeError(f"dc_batch returned {g} genes, expected {self.n_genes}")
        as_torch = self.output != "scipy"
        out = {"X": make_x(indptr, indices, data, len(ids), g, self.output, self.dtype),
               "cell_id": torch.from_numpy(ids) if as_torch else ids}
        for c, v in obs_reader.gather(con, ids).items():
            out[c] = obs_out(v, as_torch)
        return out


class CellDataset(_Base, IterableDataset):
    """Whole batches of selected cells, for DataLoader(ds, batch_size=None).

    path:           the dataset (.dcdb)
    where:          SQL predicate over the `cells` table ("cell_type IN ('B','NK') AND percent_mt < 5")
    obs:            obs columns to return with each batch (categoricals as int64 codes,
                    see .categories; NULL code -1; ints/reals/bools as tensors; text as arrays)
    batch_size:     cells per batch (default 5000)
    shuffle:        shuffle tile order and cells within windows of tiles (default True)
    seed:           the order is a function of (seed, epoch) only
    genes:          a gene panel (names, or gene ids): X's columns in panel order, others dropped
    output:         'csr' (torch sparse CSR), 'csr_parts' (CSRBatch: three dense tensors, pins),
                    'dense' (torch dense), 'scipy' (scipy.sparse.csr_matrix; ids as numpy)
    dtype:          value dtype (default torch.float32; int32 returns the stored counts uncopied)
    prefetch_tiles: read/decode about this many tiles ahead in a background thread (0: no thread)
    threads:        decoder threads of the extension (default: the extension's, or cores/workers)
    drop_last:      drop each worker's short last batch
    shuffle_window: tiles whose cells are shuffled together (default 2; larger mixes more,
                    costs more decoded-chunk cache)
    cache_mb:       the extension's decoded-chunk cache (default: enough for the window)
    rank, world_size: override torch.distributed's (default: the process group's, else 0 / 1)
    equal_batches:  False; True or 'pad' (ranks with fewer batches repeat some of their cells);
                    'drop' (ranks drop batches down to the smallest count). For DDP.
    """

    def __init__(self, path, where=None, obs=None, batch_size=5000, shuffle=True, seed=0,
                 genes=None, output="csr", dtype=torch.float32, prefetch_tiles=2, threads=None,
                 drop_last=False, shuffle_window=2, cache_mb=None, rank=None, world_size=None,
                 equal_batches=False):
        super().__init__()
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.prefetch_tiles = _check_int("prefetch_tiles", prefetch_tiles, 0)
        self.shuffle_window = _check_int("shuffle_window", shuffle_window, 1)
        self.seed = _check_int("seed", seed, 0)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if equal_batches is True:
            equal_batches = "pad"
        if equal_batches not in (False, None, "pad", "drop"):
            raise ValueError(f"equal_batches must be False, True, 'pad' or 'drop', got {equal_batches!r}")
        self.equal_batches = equal_batches or None
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if world_size is not None:
            _check_int("world_size", world_size, 1)
            _check_int("rank", rank, 0)
            if rank >= world_size:
                raise ValueError(f"rank {rank} is not below world_size {world_size}")
        self._rank_arg = (rank, world_size)
        self._setup(path, where, obs, genes, output, dtype, threads, cache_mb)
        self._tiles = self._cat.per_tile(self._selected)
        self.n_cells = int(sum(len(c) for _, c in self._tiles))
        self._epoch = 0
        self._resume = None       # {'epoch', 'batches_done'} for the next iteration
        self._progress = None     # in-process iteration: {'epoch', 'done'}

    # --- epochs and splitting ------------------------------------------------
    def set_epoch(self, epoch):
        """Choose the epoch whose order the next iteration follows."""
        epoch = _check_int("epoch", epoch, 0)
        if self._resume is not None and self._resume["epoch"] != epoch:
            self._resume = None
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

    def _plan(self, num_workers, world):
        return EpochPlan(self._tiles, seed=self.seed, epoch=self._epoch, shuffle=self.shuffle,
                         window=self.shuffle_window, batch_size=self.batch_size,
                         drop_last=self.drop_last, world_size=world, num_workers=num_workers,
                         equal_batches=self.equal_batches)

    def n_batches(self, num_workers=0):
        """Batches this rank's DataLoader with num_workers workers delivers in an epoch."""
        rank, world = self._rank_world()
        return self._plan(max(1, num_workers), world).n_batches(rank)

    def _default_cache_mb(self):
        if not len(self._cat.tile_nnz):
            return None
        per_tile = float(self._cat.tile_nnz.max()) * 8 / 2**20
        return int(per_tile * (self.shuffle_window + 1)) + 16

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
        for k in ("seed", "batch_size", "shuffle", "shuffle_window", "n_cells"):
            mine = getattr(self, k) if k != "n_cells" else self.n_cells
            if state.get(k) != mine:
                raise ValueError(f"state_dict was saved with {k}={state.get(k)!r}, "
                                 f"this dataset has {k}={mine!r}")
        self._epoch = _check_int("epoch", state["epoch"], 0)
        self._resume = {"epoch": self._epoch,
                        "batches_done": _check_int("batches_done", state["batches_done"], 0)}

    # --- iteration -------------------------------------------------------------
    def __iter__(self):
        wi = get_worker_info()
        worker, nw = (wi.id, wi.num_workers) if wi is not None else (0, 1)
        rank, world = self._rank_world()
        plan = self._plan(nw, world)
        skip_total = 0
        if self._resume is not None and self._resume["epoch"] == self._epoch:
            skip_total = self._resume["batches_done"]
        if skip_total and nw > 1:
            # The rest of the epoch in the order the DataLoader delivered it (round robin
            # over workers), dealt again round robin, so this loader delivers the same.
            rest = interleave([plan.batches(rank, w) for w in range(nw)])[skip_total:]
            batches = rest[worker::nw]
        else:
            batches = plan.batches(rank, worker)[skip_total:]
        threads = None
        if wi is not None:
            threads = max(1, (os.cpu_count() or 1) // nw)
        progress = None
        if wi is None:
            self._resume = None
            progress = {"epoch": self._epoch, "done": skip_total}
            self._progress = progress
        return _BatchIterator(self, batches, threads, progress)

    def __getstate__(self):
        s = self.__dict__.copy()
        s["_progress"] = None
        return s


class _BatchIterator:
    """Yields the batches of one worker; reads ahead in a background thread."""

    def __init__(self, ds, batches, threads, progress):
        self.ds = ds
        self.batches = batches
        self.progress = progress
        self.threads = threads
        self._i = 0
        self._finished = False
        self._thread = None
        self._con = None
        if ds.prefetch_tiles > 0 and batches:
            tiles = ds._cat.tile_n
            per_tile = float(np.mean(tiles)) if len(tiles) else ds.batch_size
            # finished batches waiting: about half of prefetch_tiles tiles of cells (at
            # least 2); the decoded tiles themselves wait in the extension's cache
            depth = max(2, int(round(ds.prefetch_tiles * per_tile / ds.batch_size / 2)))
            self._q = queue.Queue(maxsize=depth)
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=_BatchIterator._produce, name="deltacells-prefetch", daemon=True,
                args=(ds, batches, threads, self._q, self._stop))
            self._thread.start()

    @staticmethod
    def _produce(ds, batches, threads, q, stop):
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
        try:
            con = ds._open(threads)
            reader = ds._obs_reader()
            for cells in batches:
                if stop.is_set() or not put(ds._make_batch(con, reader, cells)):
                    return
            put(_END)
        except BaseException as e:  # handed to the consumer
            put(_Failure(e))
        finally:
            if con is not None:
                con.close()

    def __iter__(self):
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        if self._thread is not None:
            item = self._q.get()
            if item is _END:
                self.close()
                raise StopIteration
            if isinstance(item, _Failure):
                self.close()
                raise item.exc
        else:
            if self._i >= len(self.batches):
                self.close()
                raise StopIteration
            if self._con is None:
                self._con = self.ds._open(self.threads)
                self._reader = self.ds._obs_reader()
            item = self.ds._make_batch(self._con, self._reader, self.batches[self._i])
            self._i += 1
        if self.progress is not None:
            self.progress["done"] += 1
        return item

    def close(self):
        self._finished = True
        if self._thread is not None:
            self._stop.set()
            try:   # unblock a producer waiting on a full queue
                while True:
                    self._q.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=30)
            self._thread = None
            self._q = None
        if self._con is not None:
            self._con.close()
            self._con = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
