"""The order of an epoch: which cells, in which batches, on which rank and worker.

Deterministic from (seed, epoch) and the selection alone, so every rank and every
DataLoader worker computes the same plan independently and takes its part.

1. Tile order: the tiles holding selected cells, permuted with
   default_rng([seed, epoch]) when shuffling, else in stored order.
2. Ranks: tiles are dealt in that order, each to the rank holding the fewest
   selected cells so far (ties: lowest rank); tiles are never split, so ranks
   read disjoint tiles.
3. Windows: a rank's tiles, in order, are grouped `window` at a time; the cells
   of a window are permuted together (default_rng([seed, epoch, 1, first tile])).
4. Batches: the rank's cell sequence is cut every batch_size cells (a batch may
   span two windows); a short last batch is dropped with drop_last.
5. equal_batches: 'pad' repeats a rank's own cells (from the start of its
   sequence) in extra batches until it has as many batches as the largest rank;
   'drop' removes batches from the end until all have as many as the smallest.
6. Workers: a rank's batches are cut into num_workers contiguous runs, worker w taking
   the w-th run.  Each cut, ideally at n_batches * w / num_workers, moves to the
   nearest batch that starts a window (ties: the earlier one), so a worker decodes
   whole windows of its own and no window is decoded by two workers (every batch of a
   window needs nearly every chunk of its tiles: a window cut between two workers was
   decoded twice, and both held it in their caches).  A batch that spans two windows
   belongs to the window of its first cell.  Runs differ by at most about one window's
   batches; a worker may get none (fewer windows than workers).  The batches of an
   epoch, and their number, do not depend on the number of workers; only the order in
   which a DataLoader delivers them does (round robin over its workers, see interleave).
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


def worker_range(n_batches, worker, num_workers, starts=None):
    """The batches [lo, hi) of a rank that worker `worker` of `num_workers` delivers.
    starts: the batches where a cut may fall (sorted; 0 and n_batches are always
    allowed); each ideal cut n_batches * k // num_workers moves to the nearest of them,
    ties to the earlier.  None: cut anywhere (nearly equal runs)."""
    def cut(k):
        ideal = n_batches * k // num_workers
        if starts is None or k == 0 or k == num_workers:
            return ideal
        i = int(np.searchsorted(starts, ideal))
        cands = [starts[j] for j in (i - 1, i) if 0 <= j < len(starts)]
        return min(cands, key=lambda b: (abs(b - ideal), b)) if cands else ideal
    return cut(worker), cut(worker + 1)


class EpochPlan:
    def __init__(self, tiles, *, seed, epoch, shuffle, window, batch_size, drop_last,
                 world_size=1, equal_batches=None):
        """tiles: list of (tile id, sorted int64 cell ids)."""
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.seed, self.epoch, self.shuffle, self.window = seed, epoch, shuffle, window
        order = np.arange(len(tiles))
        if shuffle and len(tiles):
            order = np.random.default_rng([seed, epoch]).permutation(len(tiles))
        tiles = [tiles[i] for i in order]
        self._all = tiles
        self.rank_tiles = [[tiles[i] for i in idx]
                           for idx in _deal([len(c) for _, c in tiles], world_size)]
        self.rank_cells = [sum(len(c) for _, c in rt) for rt in self.rank_tiles]
        self.base = [_nbatches(n, batch_size, drop_last) for n in self.rank_cells]
        self.extra = [0] * world_size        # + pad / - drop
        if equal_batches and world_size > 1:
            target = max(self.base) if equal_batches == "pad" else min(self.base)
            self.extra = [target - b for b in self.base]
        self._windows = {}

    def worker_starts(self, rank=0):
        """Sorted batch indices where a worker's run may start: 0, each window's first
        batch (the first whose first cell is in the window: a batch spanning two windows
        belongs to the earlier), the first 'pad' batch, and n_batches."""
        bs, n, base = self.batch_size, self.n_batches(rank), self.base[rank]
        cuts = {0, n, min(base, n)}
        for pos, _ in self._rank_windows(rank):
            cuts.add(min(-(-pos // bs), n))      # the first batch whose first cell is in it
        return np.array(sorted(cuts), dtype=np.int64)

    def n_batches(self, rank=0):
        return self.base[rank] + self.extra[rank]

    def _rank_windows(self, rank):
        """[(first position in the rank's sequence, tiles of the window)]."""
        w = self._windows.get(rank)
        if w is None:
            shard, pos, w = self.rank_tiles[rank], 0, []
            for s in range(0, len(shard), self.window):
                win = shard[s:s + self.window]
                w.append((pos, win))
                pos += sum(len(c) for _, c in win)
            self._windows[rank] = w
        return w

    def _window_cells(self, win):
        cells = np.concatenate([c for _, c in win])
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, 1, int(win[0][0])])
            cells = cells[rng.permutation(len(cells))]
        return cells

    def cells(self, rank, lo, hi):
        """Positions [lo, hi) of the rank's cell sequence (only the windows needed)."""
        hi = min(hi, self.rank_cells[rank])
        if hi <= lo:
            return np.zeros(0, dtype=np.int64)
        wins = self._rank_windows(rank)
        starts = [p for p, _ in wins]
        a = int(np.searchsorted(starts, lo, side="right")) - 1
        parts, first = [], wins[a][0]
        for p, win in wins[a:]:
            if p >= hi:
                break
            parts.append(self._window_cells(win))
        seq = np.concatenate(parts)
        return seq[lo - first:hi - first]

    def sequence(self, rank):
        """The rank's cells in epoch order."""
        return self.cells(rank, 0, self.rank_cells[rank])

    def batches(self, rank=0, worker=0, num_workers=1):
        """List of int64 arrays: the batches worker `worker` (of num_workers) delivers, in order."""
        bs, base = self.batch_size, self.base[rank]
        starts = self.worker_starts(rank) if num_workers > 1 else None
        lo, hi = worker_range(self.n_batches(rank), worker, num_workers, starts)
        out = []
        real_hi = min(hi, base)
        if real_hi > lo:
            seq = self.cells(rank, lo * bs, real_hi * bs)
            out = [seq[(k - lo) * bs:(k - lo + 1) * bs] for k in range(lo, real_hi)]
        if hi > base:               # 'pad' batches: the rank's cells again from the start
            src = self.sequence(rank)
            if len(src) == 0:       # a rank without cells repeats anyone's
                src = np.concatenate([c for _, c in self._all])
            for j in range(max(lo, base) - base, hi - base):
                out.append(src[np.arange(j * bs, (j + 1) * bs) % len(src)])
        return out


    def window_cuts(self, rank=0, worker=0, num_workers=1, skip=0):
        """For batches(rank, worker, num_workers)[skip:]: (the positions in the concatenation
        of its real batches where a new window starts, how many of its batches are real:
        the rest are 'pad' batches).  The real batches run contiguously through the rank's
        sequence, batch_size cells each (the last may be shorter)."""
        bs, base = self.batch_size, self.base[rank]
        starts = self.worker_starts(rank) if num_workers > 1 else None
        lo, hi = worker_range(self.n_batches(rank), worker, num_workers, starts)
        real_hi = min(hi, base)
        n_real = max(0, real_hi - lo - skip)
        first = (lo + skip) * bs
        end = min(real_hi * bs, self.rank_cells[rank])
        cuts = [p - first for p, _ in self._rank_windows(rank) if first < p < end]
        return cuts, n_real


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
