"""Batches of a shuffle window decoded straight into their buffers (the extension's place
argument of dc_batch and deltacells_ticket_place).

A shuffled batch takes cells from nearly every chunk of its window of tiles, and every
batch of the window from the same chunks.  Read one batch at a time, a window's chunks are
decoded into the extension's chunk cache and each batch's rows copied out of it: every value
is written twice (the copy was about a third of a batch's time).  Here a window is one
call: its cells' sizes come first (from the chunks' per-cell counts, nothing decoded), the
batches' buffers are laid out from them, then each chunk is decoded once, every cell
straight to its place in its batch.  Nothing is cached and nothing is copied.

Groups.  The batches cut the epoch's cell sequence every batch_size cells, so a batch may
span two windows (the plan: _plan.py).  A group is one window's cells: the batches wholly
inside it are finished by its call; the part of a batch that reaches into the next window
waits in a carry (its own small arrays) and is copied into the head of that batch when the
next window's call finishes it.  So each window's chunks are decoded once, and the only
copy left is the carried part of at most one batch per window.  The carry's arrays come from
the pool's side pool (BufferPool.side), which goes from epoch to epoch with the pool: where
windows hold fewer cells than a batch (a where= selection: 12% of the 100,000 benchmark cells
leave about 2,400 per window against batches of 5,000) nearly every batch is carried, and
fresh arrays for it faulted in 2,000-5,000 pages per epoch; reused, 1.2x the cells/s (0
workers, three alternating runs against fresh arrays, 2026-12-06).

Memory: a group's batches exist at once, as the window's decoded chunks did in the cache
before; a window of more cells than the cache budget (cache_mb) holds is cut at batch
boundaries into groups that fit it, each decoding the window's chunks again, as the cache
then did.  A window within the budget is one group, however many batches it touches (the
budget was once counted in batches: windows of fewer cells than two batches were cut at every
batch end, and their chunks decoded 1.6 times an epoch).  A reader
whose pool has no buffers yet makes its first batch alone, the window's chunks decoded again
for the rest (first_alone()).

With a gene panel, the batches are laid out for their cells' sizes before the panel; the
extension filters each placed cell to the panel where it lies (on the thread that decoded it,
while it is in that core's cache) and says its size after the panel, and each batch is then
packed (by the extension, batches in parallel: a move of its panel genes towards the front).  Read batch by batch, a
panel costs a decode into the cache, a count of each row's panel genes and a copy of them.

Used when the batches are a contiguous run of the plan's sequence (cuts known) and values are
int32 or float32; otherwise, and for cells that cannot be placed (a tile of another codec, a
repeated cell), batches are read one by one as before.
DELTACELLS_PLACE=0 turns placing off (to compare).
"""
import bisect
import os
import sqlite3
import time

import numpy as np

from ._core import ObsReader, _ticket_place_fn, place_into, place_plan, release_place


def enabled(ds, pool):
    """Whether ds's batches can be placed with this buffer pool."""
    if os.environ.get("DELTACELLS_PLACE", "1") == "0" or pool is None:
        return False
    from ._convert import take_dtype
    kind = np.dtype(take_dtype(ds.dtype)).name
    if kind not in ("int32", "float32"):
        return False
    if kind == "int32" and not ds._cat.counts_fit_int32():
        return False          # placing writes the stored uint32 counts unchecked
    return _ticket_place_fn() is not None


def first_alone(pool):
    """Whether a reader's first batch should be made alone: its buffers (a BufferPool, or a
    DataLoader worker's lane) were never filled, so every batch of its first
    window would be fresh memory, whose pages the kernel zeroes before the first batch can go
    (batch 512 of the reference data: a window of 39 batches; about half of the samples before
    the first batch were the kernel zeroing pages).  Measured on 100,000 cells of the reference
    data, 0 workers, alternating with the package before (2026-12-03): the first batch 0.084-0.091 s
    against 0.11-0.41 s at batch 512, 0.08-0.10 s against 0.10-0.22 s at 5,000; the first epoch
    230-251k against 142-284k cells/s (one window of five decoded twice; a larger dataset pays
    less), later epochs the same (the pool is warm: whole windows).  In a DataLoader worker only
    while its lane (_xfer) was never filled, i.e. in a persistent worker's first epoch: a worker
    that lives an epoch starts cold every epoch, and there the window decoded twice cost more
    than the wait it saved (2 workers: epochs 2-3 128k against 145k cells/s).  2 persistent
    workers, batch 5,000, the same data, alternating with the package before (2026-12-03): the
    first batch 0.39-0.49 s against 0.71-0.93 s, the first epoch 1.42-1.55 s against
    1.21-1.57 s."""
    cold = getattr(pool, "cold", None)
    return bool(cold()) if callable(cold) else False


class Placer:
    """Makes the batches of one reader (an iterator's, or its prefetch thread's) a window at a
    time.  batches: the reader's list of int64 id arrays; cuts: the positions in the
    concatenation of batches[:n_real] where a new window starts; first: the first batch this
    reader makes.  get(i) is called for i = first, first + 1, ... in order and returns the
    batch, or None when the caller must read it the usual way (and every later one)."""

    def __init__(self, ds, batches, cuts, n_real, first, max_cells=None, first_alone=False):
        self.ds = ds
        # a group places at most this many cells (memory), cut at a batch's end, or None
        self.max_cells = max_cells
        # the first call makes the first batch alone (its window's chunks are decoded again for
        # the others): a reader whose buffers are all fresh memory, whose first batch would
        # otherwise wait for the pages of every batch of its window (see first_alone())
        self.first_alone = first_alone
        self.batches = batches
        self.n_real = min(n_real, len(batches))
        self.starts = np.zeros(self.n_real + 1, dtype=np.int64)
        if self.n_real:
            np.cumsum([len(b) for b in batches[:self.n_real]], out=self.starts[1:])
        self.cuts = sorted(int(c) for c in cuts if 0 < c < self.starts[-1])
        self.pos = int(self.starts[min(first, self.n_real)])   # the first position not placed
        self.ready = {}             # finished batches not asked for yet
        self.carry = None           # (batch, [(nnz, ix, val, obs dict or None)]): a batch begun
        self.off = False

    def get(self, con, reader, i, pool, timings):
        if i in self.ready:
            return self.ready.pop(i)
        if self.off or i >= self.n_real:
            return None
        while i not in self.ready:
            if self.pos >= self.starts[-1] or not self._window(con, reader, pool, timings):
                self.off = True           # the rest the usual way (the carried part is dropped)
                self.carry = None
                self.ready.clear()
                return None
        return self.ready.pop(i)

    def unplaced(self):
        """The first batch not wholly made yet (n_real once all are), or None once placing is off."""
        return None if self.off else self._batch_at(self.pos)

    def _batch_at(self, pos):
        """The batch holding position pos (n_real at the end)."""
        return int(np.searchsorted(self.starts, pos, side="right")) - 1

    def _group(self):
        """(g0, g1, b0, b1): the next call's positions [g0, g1) and the batches b0 .. b1-1
        that overlap them."""
        g0 = self.pos
        k = bisect.bisect_right(self.cuts, g0)
        g1 = self.cuts[k] if k < len(self.cuts) else int(self.starts[-1])
        b0 = self._batch_at(g0)
        if self.max_cells is not None and g1 - g0 > self.max_cells:
            # within the memory budget: cut at the last batch end it reaches (at least the
            # first batch's), and the window's chunks are decoded again for the rest.  A
            # window of fewer cells than that is never cut, whatever its batches: where
            # windows hold less than two batches (small tiles), cutting at every batch end
            # decoded most chunks twice (2,000-cell tiles, batch 5,000: 1.6 decodes a chunk)
            k = int(np.searchsorted(self.starts, g0 + self.max_cells, side="right")) - 1
            g1 = min(g1, int(self.starts[max(k, min(b0 + 1, self.n_real))]))
        if self.first_alone:
            g1 = min(g1, int(self.starts[min(b0 + 1, self.n_real)]))
        b1 = int(np.searchsorted(self.starts, g1, side="left"))
        return g0, g1, b0, b1

    def warm(self, pool):
        """Gives the pool's slots for the batches that the next call finishes their pages
        before it (see WorkerSlots.warm): nonzeros estimated from their tiles' mean per cell
        (2% over).  For a reader that waits for the tiles first (a remote dataset)."""
        warm = getattr(pool, "warm", None)
        if warm is None or self.off or self.pos >= self.starts[-1]:
            return
        _, g1, b0, b1 = self._group()
        cat = self.ds._cat
        per_cell = cat.tile_nnz / np.maximum(cat.tile_n, 1)
        name = np.dtype(self._dtype()).name
        warm([(len(self.batches[b]), int(per_cell[cat.tile_of(self.batches[b])].sum() * 1.02) + 1, name)
              for b in range(b0, b1) if self.starts[b + 1] <= g1])

    def _window(self, con, reader, pool, timings):
        ds = self.ds
        codes, obs_reader = reader
        g0, g1, b0, b1 = self._group()
        self.first_alone = False
        segs = []                 # (batch, a, b): positions [a, b) of the batch in this window
        for b in range(b0, b1):
            a, e = max(int(self.starts[b]), g0), min(int(self.starts[b + 1]), g1)
            if e > a:
                segs.append((b, a, e))
        cells = np.concatenate([self.batches[b][a - self.starts[b]:e - self.starts[b]] for b, a, e in segs])
        panel = ds._panel
        t0 = time.perf_counter()
        try:
            got = place_plan(con, cells, codes, panel)
        except sqlite3.Error as e:      # the window's tiles hold more than batch_mb: one by one
            if "batch_mb" in str(e):
                return False
            raise
        t1 = time.perf_counter()
        if got is None:
            return False
        cell_nnz, ticket, total, g, obs_blob = got
        if timings is not None:
            import json
            ext = json.loads(con.execute("SELECT dc_config('last_batch')").fetchone()[0])
            for key in ("plan_s", "fetch_s"):
                timings["ext_" + key[:-2]] = timings.get("ext_" + key[:-2], 0.0) + ext[key]
        try:
            obs_parts = codes.decode_parts(obs_blob, len(cells), [(a - g0, e - g0) for _, a, e in segs]) \
                if codes.columns else [{} for _ in segs]
            name = np.dtype(self._dtype()).name
            ix_addr = np.empty(len(cells), dtype=np.int64)     # addresses (below 2^63)
            val_addr = np.empty(len(cells), dtype=np.int64)
            done = []             # [batch, indptr, indices, data, parts] finished by this window
            laid = []             # per segment: (its done entry or None, ix, val, its first offset)
            for (b, a, e), obs in zip(segs, obs_parts):
                nz = cell_nnz[a - g0:e - g0]
                before = self.carry[1] if self.carry is not None and self.carry[0] == b else []
                head = int(sum(int(p[0].sum()) for p in before))
                if e == self.starts[b + 1]:                     # the batch ends here
                    n = int(self.starts[b + 1] - self.starts[b])
                    tot = head + int(nz.sum())
                    if tot >= 2 ** 31:
                        raise ValueError("a batch with 2^31 or more nonzeros does not fit int32 indices; "
                                         "use a smaller batch_size")
                    indptr, indices, data = pool.take_batch(n, tot, name)
                    o = 0
                    for pnz, pix, pval, _ in before:           # the carried part, copied once
                        m = len(pix)
                        indices[o:o + m] = pix
                        data[o:o + m] = pval
                        o += m
                    ix_base, val_base = indices.ctypes.data, data.ctypes.data
                    done.append([b, indptr, indices, data, before + [(nz, None, None, obs)]])
                    self.carry = None
                    seg_ix, seg_val, seg_done = indices, data, done[-1]
                else:                                           # it goes on in the next window
                    m = int(nz.sum())
                    # reused (the pool's side pool), free again once copied: where windows
                    # hold fewer cells than a batch (a where= selection) most of every batch
                    # is carried, and fresh arrays faulted in 2,000-5,000 pages an epoch
                    side = pool.side()
                    ix_buf = side.take(max(1, m), np.int32)
                    val_buf = side.take(max(1, m), name)
                    head = 0
                    ix_base, val_base = ix_buf.ctypes.data, val_buf.ctypes.data
                    self.carry = (b, before + [(nz, ix_buf[:m], val_buf[:m], obs)])
                    seg_ix, seg_val, seg_done = ix_buf, val_buf, None
                off = np.zeros(len(nz), dtype=np.int64)       # each cell's first value
                np.cumsum(nz[:-1], out=off[1:])
                off += head
                ix_addr[a - g0:e - g0] = ix_base + 4 * off
                val_addr[a - g0:e - g0] = val_base + np.dtype(name).itemsize * off
                laid.append((seg_done, seg_ix, seg_val, head))
            row_nnz = seg = None
            if panel is not None:     # each segment (a batch's part) packed after the panel, on the pool
                row_nnz = np.empty(len(cells), dtype=np.int64)
                seg = np.array([a - g0 for _, a, _ in segs] + [len(cells)], dtype=np.int64)
            place_into(ticket, len(cells), total, ix_addr, val_addr, name, row_nnz, seg)
            ticket = None
            if panel is not None:
                for (b, a, e), (entry, ix, val, head) in zip(segs, laid):
                    pnz = row_nnz[a - g0:e - g0]
                    end = head + int(pnz.sum())
                    if entry is not None:
                        parts = entry[4]
                        parts[-1] = (pnz,) + parts[-1][1:]
                        entry[2], entry[3] = ix[:end], val[:end]
                    else:
                        before = self.carry[1][:-1]
                        self.carry = (b, before + [(pnz, ix[:end], val[:end], self.carry[1][-1][3])])
        finally:
            if ticket is not None:
                release_place(ticket)
        t2 = time.perf_counter()
        if timings is not None:
            timings["sql_call"] = timings.get("sql_call", 0.0) + (t1 - t0)
            timings["place"] = timings.get("place", 0.0) + (t2 - t1)
        for b, indptr, indices, data, parts in done:
            ids = np.ascontiguousarray(self.batches[b], dtype=np.int64)
            sizes = np.concatenate([p[0] for p in parts])
            indptr[0] = 0
            np.cumsum(sizes, out=indptr[1:])
            if panel is not None and panel.pos is not None:    # panel genes the dataset lacks: zero columns
                indices = panel.pos[indices]
                g = len(panel)
            obs = {}
            if codes.columns:
                dicts = [p[3] for p in parts]
                if any(d is None for d in dicts):        # an int beyond 2^53 sent as float64
                    obs = self._obs_alone(con, codes, ids)
                else:
                    obs = {c: np.concatenate([d[c] for d in dicts]) for c in codes.columns}
            self.ready[b] = ds._finish_batch(con, obs_reader, ids, indptr, indices, data, g, obs, timings)
        self.pos = g1
        return True

    @staticmethod
    def _obs_alone(con, codes, ids):
        """The obs columns of these cells as a call for them alone gives them (nothing decoded)."""
        got = place_plan(con, ids, codes)
        if got is None:
            return ObsReader(codes.cat, codes.columns, missing_code=codes.missing_code).gather(con, ids)
        release_place(got[1])
        return codes.decode(got[4], len(ids))

    def _dtype(self):
        from ._convert import take_dtype
        return take_dtype(self.ds.dtype)
