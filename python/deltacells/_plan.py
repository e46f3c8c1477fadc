"""The order of an epoch: which cells, in which batches, on which rank and worker.

Deterministic from (seed, epoch) and the selection alone, so every rank and
every DataLoader worker computes the same plan independently and takes its part.

1. Tile order: the tiles holding selected cells, permuted with
   default_rng([seed, epoch]) when shuffling, else in stored order.
2. Ranks: tiles are dealt in that order, each to the rank holding the fewest
   selected cells so far (ties: lowest rank); tiles are never split, so ranks
   read disjoint tiles.  Workers of a rank: the same, inside the rank's tiles.
3. Windows: a worker's tiles, in order, are grouped `window` at a time; the cells
   of a window are permuted together (default_rng([seed, epoch, 1, first tile])).
4. Batches: the worker's cell sequence is cut every batch_size cells (a batch may
   span two windows); a short last batch is dropped with drop_last.
5. equal_batches: 'pad' repeats a rank's own cells (from the start of its
   sequence) in extra batches until it has as many batches as the largest rank;
   'drop' removes batches from the end until all have as many as the smallest.
"""
import numpy as np


def _deal(loads, n):
    """Greedy: index list per bin, each item to the least loaded bin."""
    bins = [[] for _ in range(n)]
    tot = [0] * n
    for i, w in enumerate(loads):
        b = min(range(n), key=lambda k: (tot[k], k))
        bins[b].append(i)
        tot[b] += int(w)
    return bins


def _nbatches(n, bs, drop_last):
    return n // bs if drop_last else -(-n // bs)


class EpochPlan:
    def __init__(self, tiles, *, seed, epoch, shuffle, window, batch_size, drop_last,
                 world_size=1, num_workers=1, equal_batches=None):
        """tiles: list of (tile id, sorted int64 cell ids)."""
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed, self.epoch, self.shuffle, self.window = seed, epoch, shuffle, window
        order = np.arange(len(tiles))
        if shuffle and len(tiles):
            order = np.random.default_rng([seed, epoch]).permutation(len(tiles))
        tiles = [tiles[i] for i in order]
        loads = [len(c) for _, c in tiles]
        self.shards = []     # [rank][worker] -> list of (tile, cells)
        for rank_idx in _deal(loads, world_size):
            rt = [tiles[i] for i in rank_idx]
            ws = _deal([len(c) for _, c in rt], num_workers)
            self.shards.append([[rt[i] for i in w] for w in ws])
        counts = [[_nbatches(sum(len(c) for _, c in w), batch_size, drop_last) for w in r]
                  for r in self.shards]
        self.extra = [[0] * num_workers for _ in range(world_size)]   # + pad / - drop per worker
        if equal_batches and world_size > 1:
            totals = [sum(r) for r in counts]
            target = max(totals) if equal_batches == "pad" else min(totals)
            for r in range(world_size):
                d = target - totals[r]
                c = list(counts[r])
                while d != 0:
                    if d > 0:   # pad the worker with fewest batches
                        w = min(range(num_workers), key=lambda k: (c[k] + self.extra[r][k], k))
                        self.extra[r][w] += 1
                        d -= 1
                    else:       # drop from the worker with most batches
                        w = max(range(num_workers), key=lambda k: (c[k] + self.extra[r][k], -k))
                        self.extra[r][w] -= 1
                        d += 1
        self.counts = [[c + e for c, e in zip(cr, er)] for cr, er in zip(counts, self.extra)]
        self._all = tiles

    def n_batches(self, rank=0):
        return sum(self.counts[rank])

    def sequence(self, rank, worker):
        """The worker's cells in epoch order, and the tiles that hold them."""
        shard = self.shards[rank][worker]
        parts = []
        for s in range(0, len(shard), self.window):
            win = shard[s:s + self.window]
            cells = np.concatenate([c for _, c in win])
            if self.shuffle:
                rng = np.random.default_rng([self.seed, self.epoch, 1, int(win[0][0])])
                cells = cells[rng.permutation(len(cells))]
            parts.append(cells)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def batches(self, rank, worker):
        """List of int64 arrays: the worker's batches in order."""
        seq = self.sequence(rank, worker)
        bs = self.batch_size
        n = _nbatches(len(seq), bs, self.drop_last)
        out = [seq[i * bs:(i + 1) * bs] for i in range(n)]
        extra = self.extra[rank][worker]
        if extra < 0:
            out = out[:len(out) + extra]
        elif extra > 0:
            src = seq
            if len(src) == 0:   # this worker has no cells: repeat the rank's, else anyone's
                src = np.concatenate([self.sequence(rank, w) for w in range(len(self.shards[rank]))])
                if len(src) == 0:
                    src = np.concatenate([c for _, c in self._all])
            for j in range(extra):
                out.append(src[np.arange(j * bs, (j + 1) * bs) % len(src)])
        return out


def interleave(lists):
    """The order a DataLoader delivers its workers' batches: round robin over the
    workers, skipping those that are exhausted."""
    out = []
    pos = [0] * len(lists)
    while True:
        took = False
        for w, lst in enumerate(lists):
            if pos[w] < len(lst):
                out.append(lst[pos[w]])
                pos[w] += 1
                took = True
        if not took:
            return out
