"""deltacells.CellMapDataset (map-style), CellBatch, collate, GroupBatchSampler and
WindowBatchSampler.

A map-style dataset over the selected cells (index i = i-th selected cell, in
cell_id order).  ds[i] is one cell, so torch's samplers and default collate work:

    ds = deltacells.CellMapDataset("pbmc.dcdb", obs=["cell_type"])
    ds[0]            # {'X': 1-D float32 tensor (n_genes,), 'cell_id': 0, 'cell_type': 3}
    loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=2)
    # batches: {'X': (64, n_genes) dense, 'cell_id': int64 (64,), 'cell_type': int64 (64,)}

Fast path: the DataLoader fetches a batch through ds.__getitems__(indices), which is one
dc_batch call (each needed chunk decoded once per batch; the extension's decoded-chunk
cache serves neighbouring batches and later epochs) and returns a CellBatch: the cells
as a sequence (what torch's default collate needs) and the whole batch as one dict in
the `output` form (sparse CSR by default), which collate_fn=deltacells.collate returns
without building single cells:

    loader = DataLoader(ds, batch_size=256, shuffle=True, collate_fn=deltacells.collate)
    sampler = deltacells.GroupBatchSampler(ds, "cell_type", batch_size=256, seed=0)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=deltacells.collate)
    loader = DataLoader(ds, sampler=sampler, batch_size=None)   # ds[list]: a batch dict

Shuffled batches over all cells (shuffle=True) decode a chunk for nearly every cell (a chunk is
decoded whole); WindowBatchSampler gives CellDataset's order (cells shuffled within windows of
tiles), whose batches share their window's chunks: 129x the cells/s at batch 256, 9.5x at
5,000 (bench_pipeline.py --map).

Fork safety: the dataset keeps one connection per process and thread, opened on first
use; a DataLoader worker forked after the parent used the dataset opens its own.
"""
import collections.abc
import warnings

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info
from torch.utils.data._utils.collate import default_collate

from ._core import ObsReader, new_pool
DEFAULT_CACHE_MB = 512      # the extension's default decoded-chunk cache (one process)
from ._forksafe import ConnSlot
from ._convert import CSRBatch
from ._plan import EpochPlan, interleave
from .dataset import _Base, _check_equal_batches, _check_int, resolve_window, window_cache_mb, worker_threads

ROWS = ("dense", "sparse")


def _worker_cache_mb(num_workers):
    """CellMapDataset's decoded-chunk cache in each of num_workers DataLoader workers: the
    extension's default shared among them; None (the extension's own) for 0 or 1."""
    return max(16, DEFAULT_CACHE_MB // num_workers) if num_workers > 1 else None


def _row_parts(X, i):
    """Row i of a batch's X -> (cols int64 tensor, values tensor, n_cols), or (None, row, n)."""
    if isinstance(X, torch.Tensor):
        if X.layout == torch.sparse_csr:
            crow = X.crow_indices()
            a, b = int(crow[i]), int(crow[i + 1])
            return X.col_indices()[a:b].long(), X.values()[a:b], X.shape[1]
        if X.layout == torch.strided:
            return None, X[i], X.shape[1]
    elif isinstance(X, CSRBatch):
        a, b = int(X.crow_indices[i]), int(X.crow_indices[i + 1])
        return X.col_indices[a:b].long(), X.values[a:b], X.shape[1]
    elif hasattr(X, "indptr") and hasattr(X, "indices"):      # scipy CSR
        a, b = int(X.indptr[i]), int(X.indptr[i + 1])
        return (torch.from_numpy(np.asarray(X.indices[a:b], dtype=np.int64)),
                torch.from_numpy(np.array(X.data[a:b])), X.shape[1])
    raise TypeError(f"cannot take rows of X of type {type(X).__name__}")


def _dense_rows(X):
    """X of a batch -> dense 2-D tensor."""
    if isinstance(X, torch.Tensor):
        return X if X.layout == torch.strided else X.to_dense()
    if isinstance(X, CSRBatch):
        return X.to_dense()
    if hasattr(X, "toarray"):
        return torch.from_numpy(np.asarray(X.toarray()))
    raise TypeError(f"cannot take rows of X of type {type(X).__name__}")


def _value(v, i, n):
    """Cell i's entry of a per-cell batch value (tensor/array/list of length n); other
    values (not per cell) as they are."""
    if isinstance(v, torch.Tensor):
        if v.dim() >= 1 and v.shape[0] == n:
            x = v[i]
            return x.item() if x.dim() == 0 else x
        return v
    if isinstance(v, np.ndarray):
        if v.ndim >= 1 and v.shape[0] == n:
            x = v[i]
            return x.item() if isinstance(x, np.generic) else x
        return v
    if isinstance(v, (list, tuple)) and len(v) == n:
        return v[i]
    return v


class CellBatch(collections.abc.Sequence):
    """What CellMapDataset.__getitems__ returns: the cells of one dc_batch call.

    As a sequence, its items are single cells like ds[i] (built on first access), so
    torch's default collate makes a batch of them; `.batch` is the same cells as one
    batch dict in the dataset's output form (what deltacells.collate returns)."""

    def __init__(self, batch, row="dense"):
        self.batch = batch
        self.row = row
        self._cells = None

    def __len__(self):
        return len(self.batch["cell_id"])

    def _build(self):
        b, n = self.batch, len(self)
        X = b["X"]
        dense = _dense_rows(X) if self.row == "dense" else None
        cells = []
        for i in range(n):
            if dense is not None:
                x = dense[i]
            else:
                cols, vals, g = _row_parts(X, i)
                if cols is None:
                    nz = torch.nonzero(vals).reshape(-1)
                    cols, vals = nz, vals[nz]
                x = torch.sparse_coo_tensor(cols.reshape(1, -1), vals, (g,)).coalesce()
            cell = {"X": x}
            for k, v in b.items():
                if k != "X":
                    cell[k] = _value(v, i, n)
            cells.append(cell)
        self._cells = cells

    def __getitem__(self, i):
        if self._cells is None:
            self._build()
        return self._cells[i]

    def __repr__(self):
        return f"CellBatch({len(self)} cells, keys={list(self.batch)})"


def collate(batch):
    """collate_fn for CellMapDataset.  A CellBatch (from __getitems__) -> its batch dict,
    uncopied; a batch dict -> itself; a list of single cells (ds[i] dicts) -> one batch
    dict (sparse rows become a torch sparse CSR X, dense rows a stacked tensor); anything
    else -> torch's default_collate."""
    if isinstance(batch, CellBatch):
        return batch.batch
    if isinstance(batch, collections.abc.Mapping):
        return batch
    if (isinstance(batch, (list, tuple)) and batch
            and all(isinstance(c, collections.abc.Mapping) and "X" in c for c in batch)):
        xs = [c["X"] for c in batch]
        out = {}
        if all(isinstance(x, torch.Tensor) and x.layout == torch.sparse_coo for x in xs):
            xs = [x.coalesce() for x in xs]
            lens = torch.tensor([x._nnz() for x in xs], dtype=torch.int64)
            crow = torch.zeros(len(xs) + 1, dtype=torch.int64)
            crow[1:] = torch.cumsum(lens, 0)
            col = torch.cat([x.indices().reshape(-1) for x in xs])
            val = torch.cat([x.values() for x in xs])
            out["X"] = torch.sparse_csr_tensor(crow, col, val, size=(len(xs), xs[0].shape[0]))
        else:
            out["X"] = default_collate(xs)
        for k in batch[0]:
            if k != "X":
                out[k] = default_collate([c[k] for c in batch])
        return out
    return default_collate(batch)


class CellMapDataset(_Base, Dataset):
    """Map-style dataset of the selected cells (position i = i-th selected cell, cell_id order).

    ds[i]:   one cell: {'X': 1-D tensor of n_genes values (row='dense', the default) or a
             1-D sparse COO tensor (row='sparse'), 'cell_id': int, and each obs column:
             a Python int (category code, or int), float, bool or str}
    ds[[i, j, ...]], ds[a:b], ds.batch(indices): one batch dict of those cells in that
             order (repeats allowed), X in the `output` form, like CellDataset's batches
    ds.__getitems__(indices): a CellBatch (both of the above), used by DataLoader
    len(ds) == ds.n_cells

    Arguments as CellDataset's (path, where, obs, genes, output, dtype, threads, cache_mb,
    cells, transform, missing_code, missing_genes, mmap), and:
    row:     'dense' (default) or 'sparse': the form of X of a single cell.  torch's
             default collate stacks dense rows; it cannot stack sparse rows in DataLoader
             workers: with row='sparse' use collate_fn=deltacells.collate.
    The transform is applied to each batch dict; single cells are rows of the transformed
    batch (ds[i] reads a batch of one cell).
    """

    def __init__(self, path, where=None, obs=None, genes=None, output="csr",
                 dtype=torch.float32, threads=None, cache_mb=None, *, cells=None, row="dense",
                 transform=None, missing_code=-100, missing_genes="error", mmap=True):
        super().__init__()
        if row not in ROWS:
            raise ValueError(f"row must be one of {ROWS}, got {row!r}")
        self.row = row
        self._setup(path, where, obs, genes, output, dtype, threads, cache_mb, cells=cells,
                    transform=transform, missing_code=missing_code, missing_genes=missing_genes,
                    mmap=mmap)
        self._ids = self.cell_ids
        self._slot = ConnSlot(self._open_slot)

    def __len__(self):
        return len(self._ids)

    def _open_slot(self):
        threads = None
        wi = get_worker_info()
        if wi is not None:     # N workers share the cores and the memory budget
            threads = worker_threads(wi.num_workers)
        shared = wi is not None and self.output in ("csr", "csr_parts")
        return self._open(threads), (self._obs_reader(), new_pool(shared))

    def _default_cache_mb(self):
        wi = get_worker_info()
        return _worker_cache_mb(wi.num_workers if wi is not None else 0)

    def close(self):
        """Close this thread's connection now (others close when their thread ends or the
        dataset is dropped); the dataset stays usable and reopens on the next read."""
        self._slot.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _conn(self):
        return self._slot.get()

    def _positions(self, indices):
        idx = np.asarray(indices)
        if idx.size and idx.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers, not {idx.dtype}")
        idx = idx.astype(np.int64).reshape(-1)
        n = len(self._ids)
        bad = idx[(idx < -n) | (idx >= n)]
        if len(bad):
            raise IndexError(f"index {int(bad[0])} out of range for {n} cells")
        return np.where(idx < 0, idx + n, idx)

    def batch(self, indices):
        """The cells at these positions as one batch dict (one dc_batch call)."""
        idx = self._positions(indices)
        con, (reader, pool) = self._conn()
        return self._make_batch(con, reader, self._ids[idx], pool)

    def __getitems__(self, indices):
        return CellBatch(self.batch(indices), self.row)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return CellBatch(self.batch([index]), self.row)[0]
        if isinstance(index, torch.Tensor) and index.dim() == 0:
            return self[int(index)]
        if isinstance(index, slice):
            return self.batch(np.arange(len(self._ids))[index])
        return self.batch(index)

    def obs_values(self, column):
        """One obs column for every selected cell, in dataset order (codes for categoricals)."""
        if column not in self._cat.columns and column not in ("name", "tile"):
            self._cat.resolve_obs([column])   # raises the clear error
        con, _ = self._conn()
        if column not in self._cat._categories and self._cat.kind(column) == "category":
            self._cat.categories(column, con)
        reader = ObsReader(self._cat, [column], max_tiles=1 << 30, missing_code=self.missing_code)
        return reader.gather(con, self._ids)[column]

    def __getstate__(self):
        s = super().__getstate__()
        del s["_slot"]
        return s

    def __setstate__(self, s):
        self.__dict__.update(s)
        self._slot = ConnSlot(self._open_slot)


def _replicas(num_replicas, rank):
    """A sampler's DDP (num_replicas, rank): as given, else the process group's, else (1, 0)."""
    if num_replicas is None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            num_replicas = torch.distributed.get_world_size()
            rank = torch.distributed.get_rank() if rank is None else rank
        else:
            num_replicas, rank = 1, 0 if rank is None else rank
    num_replicas = _check_int("num_replicas", num_replicas, 1)
    rank = _check_int("rank", 0 if rank is None else rank, 0)
    if rank >= num_replicas:
        raise ValueError(f"rank {rank} is not below num_replicas {num_replicas}")
    return num_replicas, rank


class GroupBatchSampler(Sampler):
    """Batches of dataset positions, each drawn from one group of an obs column
    (one cell type, one perturbation ...).

    data:          a CellMapDataset (with `column`), or an array of group labels per position
    batch_size:    cells per batch; a group's last batch is shorter unless drop_last
    shuffle, seed: shuffle cells within groups and the order of batches; set_epoch(n) varies it
    num_replicas, rank: give each DDP rank every num_replicas-th batch (default: the
                   process group's); ranks get equal batch counts (the last batches repeat)
    """

    def __init__(self, data, column=None, batch_size=256, shuffle=True, seed=0, drop_last=False,
                 num_replicas=None, rank=None):
        self.batch_size = _check_int("batch_size", batch_size, 1)
        if isinstance(data, CellMapDataset):
            if column is None:
                raise ValueError("GroupBatchSampler over a CellMapDataset needs the obs column")
            labels = data.obs_values(column)
        else:
            labels = np.asarray(data)
        if labels.ndim != 1:
            raise ValueError("group labels must be one-dimensional")
        self.labels = labels
        self.shuffle = bool(shuffle)
        self.seed = _check_int("seed", seed, 0)
        self.drop_last = bool(drop_last)
        self.num_replicas, self.rank = _replicas(num_replicas, rank)
        keys = labels.astype(str) if labels.dtype == object else labels
        self.groups, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        cuts = np.flatnonzero(np.diff(inverse[order])) + 1
        self._members = np.split(order, cuts) if len(order) else []
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = _check_int("epoch", epoch, 0)

    def _all_batches(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        out = []
        for m in self._members:
            m = rng.permutation(m) if self.shuffle else m
            for s in range(0, len(m), self.batch_size):
                b = m[s:s + self.batch_size]
                if len(b) < self.batch_size and self.drop_last:
                    continue
                out.append(b)
        if self.shuffle:
            out = [out[i] for i in rng.permutation(len(out))]
        return out

    def __iter__(self):
        batches = self._all_batches()
        if self.num_replicas > 1 and batches:
            per = -(-len(batches) // self.num_replicas)
            batches = batches + batches[:per * self.num_replicas - len(batches)]
            batches = batches[self.rank::self.num_replicas]
        for b in batches:
            yield b.tolist()

    def __len__(self):
        n = sum((len(m) // self.batch_size) if self.drop_last else -(-len(m) // self.batch_size)
                for m in self._members)
        return -(-n // self.num_replicas) if self.num_replicas > 1 else n


class WindowBatchSampler(Sampler):
    """Shuffled batches of a CellMapDataset's positions that a decoder can serve: CellDataset's
    order (deltacells._plan): the tiles shuffled, the cells shuffled within windows of
    `shuffle_window` tiles, cut every batch_size cells.  With the same seed, epoch, batch_size,
    shuffle_window, drop_last and selection, the batches are CellDataset's.

    Why: a batch drawn from every cell of the dataset (DataLoader(shuffle=True)) needs a chunk
    of its own for nearly every cell, and a chunk is decoded whole (1,250 cells of a 10,000-cell
    tile); the batches of one window need the same chunks, which the dataset's decoded-chunk
    cache keeps while the window lasts.

    data:           a CellMapDataset
    batch_size, shuffle, seed, shuffle_window, drop_last: as CellDataset's
    num_replicas, rank: DDP (default: the process group's); ranks read disjoint tiles
    equal_batches:  as CellDataset's (False, True/'pad', 'drop')
    num_workers:    the DataLoader's num_workers: the batches come in the order its workers
                    take them (round robin), so that each worker reads a contiguous run of
                    whole windows and no window is decoded by two workers
    set_epoch(n) chooses the epoch's order.  cache_mb: the decoded-chunk cache a window needs
    (a window's tiles decoded, and one tile more); set ds.cache_mb = sampler.cache_mb before
    the DataLoader starts where the dataset's is smaller (its default: 512 MB, shared among
    DataLoader workers).  The first epoch warns when the dataset's cache cannot hold a window.

        m = deltacells.CellMapDataset("atlas.dcdb", obs=["cell_type"])
        sampler = deltacells.WindowBatchSampler(m, batch_size=256, num_workers=2)
        m.cache_mb = sampler.cache_mb
        loader = DataLoader(m, batch_sampler=sampler, collate_fn=deltacells.collate,
                            num_workers=2, persistent_workers=True)
    """

    def __init__(self, data, batch_size=256, shuffle=True, seed=0, shuffle_window=None, drop_last=False,
                 num_replicas=None, rank=None, equal_batches=False, num_workers=0):
        if not isinstance(data, CellMapDataset):
            raise TypeError(f"WindowBatchSampler needs a CellMapDataset, not {type(data).__name__}")
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.shuffle_window = resolve_window(shuffle_window, data._cat)
        self.seed = _check_int("seed", seed, 0)
        self.num_workers = _check_int("num_workers", num_workers, 0)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.equal_batches = _check_equal_batches(equal_batches)
        self.num_replicas, self.rank = _replicas(num_replicas, rank)
        self._ids = data.cell_ids
        self._tiles = data._cat.per_tile(data._selected)
        # a window's decoded chunks and one tile more, for the batch that spans two windows
        n_tiles = max(1, len(self._tiles))
        self.cache_mb = int(window_cache_mb(data._cat, self.shuffle_window, n_tiles, 1)) + 16
        self._window_mb = window_cache_mb(data._cat, self.shuffle_window, n_tiles)
        self._data = data
        self._checked = False
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = _check_int("epoch", epoch, 0)

    def _plan(self):
        return EpochPlan(self._tiles, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle,
                         window=self.shuffle_window, batch_size=self.batch_size,
                         drop_last=self.drop_last, world_size=self.num_replicas,
                         equal_batches=self.equal_batches)

    def _check_cache(self):
        """Once, when the first epoch begins: warn if the dataset's decoded-chunk cache (per
        process: CellMapDataset's own default with workers) cannot hold a window."""
        self._checked = True
        have = self._data.cache_mb
        if have is None:
            have = _worker_cache_mb(self.num_workers) or DEFAULT_CACHE_MB
        if have < self._window_mb:
            warnings.warn(
                f"WindowBatchSampler: the dataset's decoded-chunk cache ({have} MB per process) holds "
                f"less than a window of {self.shuffle_window} tiles ({self._window_mb:.0f} MB decoded): "
                "its batches would decode chunks again; set ds.cache_mb = sampler.cache_mb "
                f"({self.cache_mb}) before the DataLoader starts", UserWarning, stacklevel=3)

    def __iter__(self):
        if not self._checked:
            self._check_cache()
        plan = self._plan()
        nw = max(1, self.num_workers)
        batches = interleave([plan.batches(self.rank, w, nw) for w in range(nw)])
        for b in batches:
            yield np.searchsorted(self._ids, b).tolist()     # cell ids -> positions

    def __len__(self):
        return self._plan().n_batches(self.rank)
