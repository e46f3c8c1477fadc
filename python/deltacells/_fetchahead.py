"""Fetch-ahead for remote datasets: the tile blobs the loader needs next are read ahead of it.

Over an object store a batch's time is the store's (requests, bytes) plus the decoder's; the
loader makes its batches one after another, so the two add up.  A FetchAhead reads the tiles of
the coming batches, in the order the epoch needs them and at most `ahead` tiles beyond the ones
the loader is working on, on reader threads with connections of their own (two, each with half
of the store's requests in flight: one tile's first request, its row's leaf page, overlaps the
other's transfer; more for tiles of few blocks: plan()).  What it reads lands in the
dchttp VFS's caches (the process's shared block cache, DC_HTTP_SHARED_MB, and the disk cache
when there is one), where the loader's own connection then finds it: fetching overlaps decoding.
Where the file has a page map (page_map(): the converter's tiles_data_pages), a reader asks for a
tile's leaf page and its overflow pages in one round trip (dc_vfs_fetch) and reads nothing through
SQLite; else it reads the tile's pages through SQLite, which costs a round trip for the leaf page
before the one for the blob.
It decodes nothing (the loader's decoded-chunk cache is for that) and holds no result.
The loader waits for the tiles of its batch to have been read (at()), rather than requesting
the same blocks a second time on its own connection while the fetcher has them in flight: all
of the epoch's store traffic then goes through the fetcher, which keeps the store busy.

Local files need none of this (the OS reads ahead): it is used for remote datasets only, and
not where the file's blocks stay out of the shared block cache (dc_vfs_file's "shared"), where
nothing read here would reach the loader's connection.
Each reader does its SQLite work holding a fork Gate of its own (see _forksafe), and a forked
child never uses or closes the parent's threads or connections.
"""
import bisect
import math
import os
import sqlite3
import threading

import numpy as np

from . import _forksafe


def page_map(con):
    """{tile: (leaf offset, page size, first overflow page's offset, bytes to the last)}: where
    each tile's pages lie in the file, from the page map the converter writes (tiles_data_pages,
    ext/dc_format.h), for the tiles whose overflow pages lie together (all of them in a file
    written in one go).  None when the file has no map, or one that may not fit it: its row of
    tile -1 holds the schema_version it was written under, which a VACUUM (it moves pages) or
    any schema change since makes differ from the file's; or it names pages past the file's
    end.  With it a tile costs one round trip to the store, not two (the leaf page, then the
    overflow pages it names): FetchAhead."""
    try:
        if not con.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'tiles_data_pages'").fetchone():
            return None
        ps = con.execute("PRAGMA page_size").fetchone()[0]
        n_pages = con.execute("PRAGMA page_count").fetchone()[0]
        version = con.execute("PRAGMA schema_version").fetchone()[0]
        held = con.execute("SELECT leaf FROM tiles_data_pages WHERE tile = -1").fetchone()
        if held is None or held[0] != version:
            return None
        rows = con.execute("SELECT tile, leaf, first, last, pages FROM tiles_data_pages WHERE tile >= 0").fetchall()
    except sqlite3.Error:
        return None
    out = {}
    for tile, leaf, first, last, pages in rows:
        if max(leaf, last) > n_pages or leaf < 1:
            return None
        if pages and last - first + 1 != pages:
            continue                # pages apart: read as without a map
        out[int(tile)] = ((leaf - 1) * ps, ps, (first - 1) * ps if pages else 0, pages * ps)
    return out


def tile_order(batches, tile_of):
    """The tiles in the order batches first need them: [(batch index, tile)], each tile once."""
    seen = set()
    out = []
    for i, b in enumerate(batches):
        for t in np.unique(tile_of(np.asarray(b))).tolist():
            if t not in seen:
                seen.add(t)
                out.append((i, int(t)))
    return out


def plan(max_inflight, prefetch_tiles, tile_bytes, block_bytes, tiles=None):
    """(readers, requests in flight per reader, tiles ahead) of a dataset's fetch-ahead, from
    the store's requests in flight (max_inflight), the loader's prefetch_tiles, a tile's mean
    bytes (None: unknown), the VFS's block size and the tiles the epoch reads (None: unknown;
    no more readers than tiles, so that an epoch of few tiles keeps all of its requests).

    A tile costs a round trip for its row's leaf page (before it the VFS does not know where
    the blob lies), then one for its blocks, all requested at once.  A tile of many blocks
    keeps its reader's requests busy for many requests' time: two readers, each with half
    of max_inflight, overlap one's leaf page with the other's transfer.  A tile of few blocks
    does not: its requests end after about one round trip, and two readers leave the store
    idle most of the time.  So readers = 2 x max_inflight / blocks per tile, between 2 and
    min(max_inflight, 4), each with max_inflight / readers requests (so that the requests in
    flight stay as many), and, with more than 2 readers, readers + 2 tiles ahead (at least
    prefetch_tiles), else the readers past prefetch_tiles would wait.  The default 10,000-cell
    tiles of the reference data (12 blocks of 1 MiB) get 2 readers up to max_inflight 8.
    Measured (2 workers new every epoch, 50 ms and 150 MB/s per request, max_inflight 4,
    100,000 cells in tiles of 2,000, 1 MiB blocks; bench_remote.py, later epochs): 2 readers, 2
    tiles ahead: 44-47% of the store's raw-read ceiling in six runs; 4 readers, 6 ahead: 53% in
    two runs alternating with them (1.17-1.24x the cells/s), 59-73% in three earlier ones.  Most
    of what is left is each epoch's start (new workers open the store and wait for their first
    tiles: first batch about 0.6 s against 0.33 s from the local file), not the store's rate:
    past the first batch the loader no longer waits for the fetch-ahead.  With 10,000-cell
    tiles, 4 readers made it 80% against 98% for 2."""
    mi = max(0, int(max_inflight))
    ahead = max(1, int(prefetch_tiles))
    if mi < 2:
        return 1, mi, ahead
    top = min(mi, 4)
    readers = 2
    if tile_bytes and block_bytes:
        blocks = max(1.0, float(tile_bytes) / float(block_bytes))
        readers = max(2, min(top, math.ceil(2 * mi / blocks)))
    if readers > 2:
        ahead = max(ahead, readers + 2)
    if tiles is not None and 0 < tiles < readers:
        readers = int(tiles)
    return readers, mi // readers, ahead


class FetchAhead:
    """See the module doc.  at(i): the loader starts batch i: reads may run up to `ahead`
    tiles past the tiles of batches <= i, and at() returns once those of batch i have been
    read (or the fetcher stopped or failed: the loader then reads them itself).  advance(i):
    the loader has made every batch before i (a window placed at once: its tiles are done
    with, though the loader still hands out its batches), so reads may run as at(i) lets
    them, without waiting.  close(): stop (the reads in progress finish).

    readers: threads, each with its own connection (connect() is called once per thread),
    taking the tiles of the order in turn (reader j the tiles k with k % readers == j).  Two
    readers overlap one tile's first request (its row's leaf page, before the VFS knows where
    the blob lies) with the other's transfer; the dataset gives each half of the store's
    max_inflight, so the requests in flight stay as many as with one."""

    def __init__(self, connect, order, ahead, readers=1, pages=None):
        self._connect = connect
        self._pages = pages or {}   # page_map(): a tile's pages asked for in one round trip
        self._order = order
        self._first_batch = [b for b, _ in order]    # sorted: the order is by first need
        self._ahead = max(1, int(ahead))
        self._readers = max(1, min(int(readers), len(order) or 1))
        self._batch = -1
        self._got = [False] * len(order)
        self._done = 0              # tiles of the order read so far, as a prefix of it
        self._running = 0           # reader threads still running
        self._cv = threading.Condition()
        self._stop = False
        self._pid = os.getpid()
        self.error = None           # the first failure (the loader then reads by itself)
        self._threads = []

    @property
    def fetched(self):
        """Tiles read so far (for tests and benchmarks)."""
        return self._done

    def _tiles_upto(self, i):
        """How many tiles of the order batches <= i need."""
        return bisect.bisect_right(self._first_batch, i)

    def start(self):
        """Start reading (the tiles of the first batch and `ahead` more), e.g. while the
        loader opens its own connection."""
        if os.getpid() != self._pid:
            return
        with self._cv:
            self._start_locked()

    def _start_locked(self):
        if not self._threads and self._order:
            self._running = self._readers
            for j in range(self._readers):
                t = threading.Thread(target=self._run, args=(j, _forksafe.Gate()),
                                     name="deltacells-fetchahead", daemon=True)
                self._threads.append(t)
                t.start()

    def at(self, i):
        if os.getpid() != self._pid:
            return
        with self._cv:
            self._move_locked(i)
            self._start_locked()
            need = self._tiles_upto(i)
            while self._running and self.error is None and self._done < need:
                self._cv.wait(0.5)

    def advance(self, i):
        if os.getpid() != self._pid:
            return
        with self._cv:
            self._move_locked(i)

    def _move_locked(self, i):
        """The readers' bound moves on to batch i (never back)."""
        if i > self._batch:
            self._batch = i
            self._cv.notify_all()

    _walk = None      # the statement that reads a tile's pages (set on the first tile)

    def _fetch(self, con, tile):
        """The tile's pages into the shared block cache.  With the page map: its leaf page and
        its overflow pages, requested at once (dc_vfs_fetch); a map that does not fit the file
        costs requests, never data (the loader reads what is missing itself).  Else through the
        VFS, announced first (dc_vfs_expect: its length,
        from the row's leaf page, so that the VFS requests all its blocks at once instead of
        one block first and then a stream that grows).  Where tiles are sealed the pages are
        walked by reading the checksum that follows the blob (no copy of the blob into Python:
        a fresh 12 MB object per tile costs more than the walk); else the blob is read and
        dropped."""
        where = self._pages.get(tile)
        if where is not None:
            # the leaf page and the overflow pages at once, into the shared block cache, where the
            # loader's read finds them; nothing to walk
            con.execute("SELECT dc_vfs_fetch('main', ?, ?, ?, ?)", where).fetchone()
            return
        if self._walk is None:
            cols = {r[1] for r in con.execute("PRAGMA table_info(tiles_data)")}
            # NOT INDEXED: the covering index has the checksum too; the table's is after the blob
            self._walk = ("SELECT checksum FROM tiles_data NOT INDEXED WHERE tile = ?" if "checksum" in cols
                          else "SELECT data FROM tiles_data WHERE tile = ?")
        (n,) = con.execute("SELECT length(data) FROM tiles_data WHERE tile = ?", (tile,)).fetchone()
        con.execute("SELECT dc_vfs_expect('main', ?)", (n,)).fetchone()
        try:
            con.execute(self._walk, (tile,)).fetchone()
        finally:
            # an announcement no miss used (every block already here) must not reach the next read
            con.execute("SELECT dc_vfs_expect('main', 0)").fetchone()

    def _run(self, j, gate):
        """Reader j (its own fork Gate: the readers' SQLite work runs side by side)."""
        con = None
        try:
            with gate:
                con = self._connect()
            for k in range(j, len(self._order), self._readers):
                tile = self._order[k][1]
                with self._cv:
                    # the tiles of batches <= the current one (the first batch before at()),
                    # plus `ahead`
                    while not self._stop and k >= self._tiles_upto(max(self._batch, 0)) + self._ahead:
                        self._cv.wait(0.5)
                    if self._stop:
                        return
                with gate:
                    if self._stop:
                        return
                    self._fetch(con, tile)
                with self._cv:
                    self._got[k] = True
                    while self._done < len(self._got) and self._got[self._done]:
                        self._done += 1
                    self._cv.notify_all()
        except Exception as e:      # the loader reads what it needs itself, and reports errors
            with self._cv:
                if self.error is None:
                    self.error = e
                self._stop = True   # the other readers too: the loader reads the rest itself
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify_all()
            if con is not None:
                with gate:
                    con.close()

    def close(self, wait=True):
        if os.getpid() != self._pid:      # a forked child: the parent's, left alone
            return
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if wait:
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join()
