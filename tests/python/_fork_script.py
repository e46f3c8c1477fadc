"""The DataLoader sequences of issue 8, run `loops` times in one process; the caller runs
this file in a subprocess with a timeout, so that a hang fails instead of blocking.

    python _fork_script.py SEQUENCE START WORKERS PERSISTENT LOOPS DB

SEQUENCE  map:  m = CellMapDataset(db); m[0]; then DataLoaders over m (deltacells.collate,
                torch's default collate with shuffle, GroupBatchSampler)
          iter: next(iter(ds)); then DataLoader(ds, batch_size=None, ...)
          held: it = iter(ds); next(it) (its prefetch thread running); then the DataLoader;
                then the rest of `it` in the parent
START     fork | spawn (the DataLoader's multiprocessing context)
WORKERS   0, 1, 2 ...
PERSISTENT 0 | 1 (persistent_workers; two epochs through the same workers)
Prints one line "ok <loops> <seconds>" and exits 0 when every check held.
"""
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

import deltacells


def check_cover(ids, expect, what):
    ids = np.sort(np.concatenate(ids))
    if not np.array_equal(ids, expect):
        raise AssertionError(f"{what}: {len(ids)} cells delivered, {len(expect)} expected, "
                             f"{len(np.unique(ids))} distinct")


def loader_kw(start, workers, persistent):
    kw = {"num_workers": workers}
    if workers:
        kw["multiprocessing_context"] = start
        kw["persistent_workers"] = persistent
    return kw


def run_map(db, kw, epochs, light):
    m = deltacells.CellMapDataset(db, obs=["cell_type"])
    every = np.arange(len(m))
    first = m[0]                                      # the parent opens its connection
    assert first["X"].shape == (m.n_genes,) and first["cell_id"] == 0
    # the sequence: the fast path
    dl = DataLoader(m, batch_size=64, shuffle=True, collate_fn=deltacells.collate, **kw)
    b = next(iter(dl))
    assert len(b["cell_id"]) == 64 and b["X"].shape == (64, m.n_genes)
    # torch's default collate: every cell exactly once per epoch
    dl = DataLoader(m, batch_size=64, shuffle=True, **kw)
    for e in range(epochs):
        ids = []
        for b in dl:
            assert b["X"].layout == torch.strided and b["X"].shape[1] == m.n_genes
            ids.append(b["cell_id"].numpy())
        check_cover(ids, every, f"map epoch {e}")
    if light:
        return
    # GroupBatchSampler
    s = deltacells.GroupBatchSampler(m, "cell_type", batch_size=64, seed=1)
    dl = DataLoader(m, batch_sampler=s, collate_fn=deltacells.collate, **kw)
    for e in range(epochs):
        ids = []
        for b in dl:
            assert len(np.unique(b["cell_type"].numpy())) == 1
            ids.append(b["cell_id"].numpy())
        check_cover(ids, every, f"group epoch {e}")


def run_iter(db, kw, epochs, held):
    ds = deltacells.CellDataset(db, batch_size=200, seed=2, prefetch_tiles=4)
    every = np.arange(ds.n_cells)
    if held:
        it = iter(ds)
        first = [next(it)["cell_id"].numpy()]       # its prefetch thread keeps reading
    else:
        next(iter(ds))
    dl = DataLoader(ds, batch_size=None, **kw)
    assert len(dl) == ds.n_batches
    for e in range(epochs):
        ids = [b["cell_id"].numpy() for b in dl]
        assert len(ids) == len(dl), (len(ids), len(dl))
        check_cover(ids, every, f"iter epoch {e}")
    if held:                                         # the parent's iterator still works
        check_cover(first + [b["cell_id"].numpy() for b in it], every, "held iterator")


def main():
    seq, start, workers, persistent, loops, db = sys.argv[1:7]
    workers, persistent, loops = int(workers), bool(int(persistent)), int(loops)
    kw = loader_kw(start, workers, persistent)
    epochs = 2 if persistent else 1
    t0 = time.time()
    for _ in range(loops):
        if seq == "map":
            run_map(db, kw, epochs, light=(start == "spawn" and workers > 0))
        elif seq in ("iter", "held"):
            run_iter(db, kw, epochs, seq == "held")
        else:
            raise SystemExit(f"unknown sequence {seq!r}")
    print(f"ok {loops} {time.time() - t0:.1f}", flush=True)


if __name__ == "__main__":
    main()
