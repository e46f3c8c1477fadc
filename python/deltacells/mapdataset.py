"""deltacells.CellMapDataset (map-style) and GroupBatchSampler.

A map-style dataset over the selected cells (index i = i-th selected cell, in
cell_id order).  A whole batch is one dc_batch call: each needed chunk is
decoded once per batch, and the extension's decoded-chunk cache serves
neighbouring batches and later epochs.

    ds = deltacells.CellMapDataset("perturb.dcdb", obs=["perturbation"])
    sampler = deltacells.GroupBatchSampler(ds, "perturbation", batch_size=256, seed=0)
    # either: the batch sampler as a sampler, no collation (any torch version)
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
    # or: torch's batch_sampler path, through __getitems__, with the identity collate
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=deltacells.collate)
"""
import threading

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from ._core import ObsReader
from .dataset import _Base, _check_int


def collate(batch):
    """collate_fn for CellMapDataset: its __getitems__ already returns a whole batch."""
    return batch


class CellMapDataset(_Base, Dataset):
    """Map-style dataset; ds[i] is a batch of one cell, ds[[i, j, ...]] and
    ds.__getitems__([...]) a batch of those cells in that order (repeats allowed).
    Arguments as CellDataset's (path, where, obs, genes, output, dtype, threads, cache_mb)."""

    def __init__(self, path, where=None, obs=None, genes=None, output="csr",
                 dtype=torch.float32, threads=None, cache_mb=None):
        super().__init__()
        self._setup(path, where, obs, genes, output, dtype, threads, cache_mb)
        self._ids = self.cell_ids
        self._local = threading.local()

    def __len__(self):
        return len(self._ids)

    def _conn(self):
        loc = self._local
        if getattr(loc, "con", None) is None:
            loc.con = self._open()
            loc.reader = self._obs_reader()
        return loc.con, loc.reader

    def __getitems__(self, indices):
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self._ids)
        if len(idx) == 0:
            raise ValueError("an empty batch of indices")
        bad = idx[(idx < -n) | (idx >= n)]
        if len(bad):
            raise IndexError(f"index {int(bad[0])} out of range for {n} cells")
        idx = np.where(idx < 0, idx + n, idx)
        con, reader = self._conn()
        return self._make_batch(con, reader, self._ids[idx])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.__getitems__(np.arange(len(self._ids))[index])
        if isinstance(index, (int, np.integer)):
            return self.__getitems__([index])
        return self.__getitems__(index)

    def obs_values(self, column):
        """One obs column for every selected cell, in dataset order (codes for categoricals)."""
        if column not in self._cat.columns:
            self._cat.resolve_obs([column])   # raises the clear error
        con, _ = self._conn()
        if column not in self._cat._categories and self._cat.kind(column) == "category":
            self._cat.categories(column, con)
        reader = ObsReader(self._cat, [column], max_tiles=1 << 30)
        return reader.gather(con, self._ids)[column]

    def __getstate__(self):
        s = self.__dict__.copy()
        del s["_local"]
        return s

    def __setstate__(self, s):
        self.__dict__.update(s)
        self._local = threading.local()


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
        if num_replicas is None:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                num_replicas = torch.distributed.get_world_size()
                rank = torch.distributed.get_rank() if rank is None else rank
            else:
                num_replicas, rank = 1, 0 if rank is None else rank
        self.num_replicas = _check_int("num_replicas", num_replicas, 1)
        self.rank = _check_int("rank", 0 if rank is None else rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank {self.rank} is not below num_replicas {self.num_replicas}")
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
