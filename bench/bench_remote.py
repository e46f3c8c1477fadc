#!/usr/bin/python3
"""A remote dataset behind an emulated object store: deltacells.CellDataset over HTTP range reads
(nginx on 127.0.0.1) through the dchttp VFS's throttle (a fixed latency per request, a bandwidth
per connection), against the raw-read ceiling measured in the same run.

    PYTHONPATH=python /usr/bin/python3 bench/bench_remote.py --bandwidth-mbps 150 --latency-ms 50 \\
        --prefetch-tiles 0,2 --max-inflight 0,1,2,4,8 [--workers 2] [--epochs 2] [--batch-size 5000] [--cells 100000]
        [--genes 61497] [--block-kb 1024] [--dataset FILE.dcdb] [--json]

Data: as bench_pipeline.py (scripts/gen_h5ad.py + build/deltacells, cached in build/bench-data/),
or --dataset. nginx serves a copy from a temporary directory; it is stopped at the end.

Per --prefetch-tiles value (the loader's tiles read and decoded ahead) and --max-inflight value
(the VFS's prefetch: background requests in flight per open file, DC_HTTP_MAX_INFLIGHT; 0: one
request at a time on the reading thread), --epochs epochs (shuffled, batch_size) through one
DataLoader with --workers workers (0: the main process; workers new every epoch, DataLoader's
default), each reader with its own connection, so there are max(workers, 1) connections, each
throttled (each request in flight is throttled as one connection: latency + bytes / bandwidth).
The first epoch is a new process's (`cold`: its imports, and every buffer's pages touched for the
first time); the later ones (`warm`, the median by wall time) are what the rest of a training run
gets.  nginx's access log gives the bytes the store served per epoch (`store_MB`; the first epoch's
from constructing the dataset on, as its time): workers new every
epoch read every tile from the store again (the blocks their parent read they inherit, and the
version it confirmed they take without asking: docs/guide.md), while one process (--workers 0) keeps the blocks it
read in the VFS's memory cache, so its later epochs are not a measure of the store (they are shown,
marked, and not set against the ceiling):
  cells/s      cells delivered / wall time of the epoch (the first: from constructing the loader)
  MB/s         tile bytes of the dataset / wall time (what the loader pulled through the store)
  first_s      time to first batch
  of_ceiling   MB/s / the ceiling's MB/s at the same max_inflight (same concurrency)
  of_ceiling0  MB/s / the ceiling at max_inflight=0 (the one-request-at-a-time store)
Each configuration also runs on the local file (no VFS, no throttle): the loader's CPU-bound
rate in the same run; where it is below the store's ceiling, decoding, not the store, limits.
  of_local     MB/s / the local file's MB/s (same prefetch_tiles): 1.0 when the store costs nothing
  store traffic  with --workers 0: the VFS's requests, bytes and cache hits in the loader's
               process (bytes over the tiles' bytes: what was fetched twice or not needed)
The ceiling (same run, same throttle, same concurrency): max(workers, 1) processes, each with
its own connection, read their share of the tiles' blobs (contiguous tiles, as the loader's
workers split them) through the same VFS and throttle, no decoding; measured per max_inflight
value.  Its time is the longest reader's own, from its first read (after its connect) to its
last byte: the readers are spawned interpreters, whose imports and open the loader's epochs do
not pay (the wall time from starting them, printed too, was the ceiling until 2026-12-07: 0.13-0.15
s more of about 0.7 s, a ceiling 1.2x too low).  Target: >= 85%.
mbps is MB/s (10^6 bytes/s) per connection.
"""
import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def _ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def _raw_reader(url, tiles, remote, out):
    import deltacells
    con = deltacells.connect(url, remote=remote)
    t = time.perf_counter()
    n = 0
    for lo, hi in tiles:
        for (b,) in con.execute("SELECT data FROM tiles_data WHERE rowid BETWEEN ? AND ? ORDER BY rowid",
                                (lo, hi)):
            n += len(b)
    out.put((time.perf_counter() - t, n))
    con.close()


def ceiling(url, n_tiles, conns, remote):
    """max(workers,1) processes, contiguous tile ranges, raw blob reads: (seconds from starting
    the processes to the last one's result, bytes, the longest reader's own read time: from its
    first read, after its connect, to its last byte)."""
    per = -(-n_tiles // conns)
    ctx = mp.get_context("spawn")     # fresh processes: nothing cached in memory
    q = ctx.Queue()
    ps = [ctx.Process(target=_raw_reader, args=(url, [(i * per, min(n_tiles, (i + 1) * per) - 1)], remote, q))
          for i in range(conns) if i * per < n_tiles]
    t = time.perf_counter()
    for p in ps:
        p.start()
    res = [q.get(timeout=1800) for _ in ps]
    wall = time.perf_counter() - t
    for p in ps:
        p.join(timeout=60)
    return wall, sum(r[1] for r in res), max(r[0] for r in res)


def _epoch_child(args, q):
    q.put(_epoch(*args))


def epoch(*args):
    """One epoch in a fresh (spawned) process: no block is in memory from an earlier run."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_epoch_child, args=(args, q))
    p.start()
    r = q.get(timeout=1800)
    p.join(timeout=60)
    return r


def _served(access_log):
    """Bytes nginx has sent so far (its access log: $connection $status $body_bytes_sent ...)."""
    if not access_log:
        return None
    n = 0
    with open(access_log) as f:
        for line in f:
            p = line.split()
            if len(p) > 2 and p[2].isdigit():
                n += int(p[2])
    return n


def _epoch(url, workers, prefetch, batch_size, n_epochs=1, access_log=None):
    """[(wall s, cells, first batch s, store bytes or None)] per epoch, and the VFS's counters
    (workers=0, remote) after the last."""
    import torch
    import deltacells
    from torch.utils.data import DataLoader
    # the first epoch counts from constructing the dataset: its time, and the bytes its open and
    # catalogue fetched (a small dataset's tiles come in with them, through read-ahead)
    b0 = _served(access_log)
    t = time.perf_counter()
    ds = deltacells.CellDataset(url, batch_size=batch_size, shuffle=True, seed=0, prefetch_tiles=prefetch)
    # workers started as a user's DataLoader starts them (fork, on Linux): this process was
    # spawned, and a spawned process's default start method is spawn (a fresh interpreter
    # that imports torch per worker: seconds before the first batch, and no shared lanes)
    ctx = "fork" if workers and sys.platform.startswith("linux") else None
    loader = DataLoader(ds, batch_size=None, num_workers=workers, timeout=1800 if workers else 0,
                        multiprocessing_context=ctx)
    out = []
    for ep in range(n_epochs):
        if ep:
            ds.set_epoch(ep)
            t = time.perf_counter()
            b0 = _served(access_log)
        first = None
        cells = 0
        for b in loader:
            if first is None:
                first = time.perf_counter() - t
            cells += len(b["cell_id"])
            x = b["X"]
            x.values().numel() if x.layout != torch.strided else x.numel()
        dt = time.perf_counter() - t
        b1 = _served(access_log)
        out.append((dt, cells, first, None if b0 is None else b1 - b0))
    vfs = None
    if workers == 0 and "://" in str(url):   # this process's store traffic (the VFS's counters)
        con = deltacells.connect(url)
        vfs = json.loads(con.execute("SELECT dc_vfs_stats()").fetchone()[0])
        con.close()
    return out, vfs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bandwidth-mbps", type=float, default=150)
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--prefetch-tiles", default="0,2")
    ap.add_argument("--max-inflight", default="0,1,2,4,8",
                    help="the VFS's prefetch requests in flight per connection, comma-separated")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2,
                    help="epochs per configuration in one process: the first cold, the others warm (>= 1)")
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--cells", type=int, default=100000)
    ap.add_argument("--genes", type=int, default=61497)
    ap.add_argument("--block-kb", type=int, default=1024)
    ap.add_argument("--dataset")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.epochs < 1:
        ap.error("--epochs must be at least 1")
    if a.dataset:
        db = a.dataset
    else:
        from bench_pipeline import ensure_data
        db = ensure_data(a.cells, a.genes)[1]
    from _remote_util import Nginx
    import sqlite3
    loc = sqlite3.connect(db)
    n_tiles = loc.execute("SELECT count(*) FROM tiles_data").fetchone()[0]
    tile_bytes = loc.execute("SELECT sum(length(data)) FROM tiles_data").fetchone()[0]
    n_cells = None
    loc.close()
    tmp = tempfile.mkdtemp(prefix="bench_remote_")
    try:
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        os.link(db, os.path.join(www, "d.dcdb")) if os.stat(db).st_dev == os.stat(tmp).st_dev \
            else shutil.copy(db, os.path.join(www, "d.dcdb"))
        ng = Nginx(www, os.path.join(tmp, "nginx"))
        try:
            url = ng.url("d.dcdb")
            ng_log = os.path.join(ng.work, "access.log")
            # the throttle and block size reach every connection (forked workers too) through the
            # environment the VFS reads at open
            os.environ["DC_THROTTLE_LATENCY_MS"] = str(a.latency_ms)
            os.environ["DC_THROTTLE_MBPS"] = str(a.bandwidth_mbps)
            os.environ["DC_HTTP_BLOCK_KB"] = str(a.block_kb)
            conns = max(a.workers, 1)
            mis = _ints(a.max_inflight)
            ceil = {}
            for mi in sorted(set(mis) | {0}):
                os.environ["DC_HTTP_MAX_INFLIGHT"] = str(mi)
                wall, nbytes, reads = ceiling(url, n_tiles, conns, None)
                assert nbytes == tile_bytes, (nbytes, tile_bytes)
                # the store's rate: the readers' own read time, not their processes' start (a
                # fresh interpreter's imports and its connect: 0.13-0.15 s of a 0.7 s wall here,
                # which the loader's epochs do not pay; until 2026-12-07 the wall was the ceiling)
                ceil[mi] = {"MB_per_s": nbytes / reads / 1e6, "s": reads, "s_with_start": wall}
            rows = []
            local_mbs = {}
            for pf in _ints(a.prefetch_tiles):
                for where, src, mi in [("local", db, None)] + [("remote", url, m) for m in mis]:
                    if mi is not None:
                        os.environ["DC_HTTP_MAX_INFLIGHT"] = str(mi)
                    eps, vfs = epoch(src, a.workers, pf, a.batch_size, a.epochs,
                                     ng_log if mi is not None else None)
                    epochs = [{"epoch_s": dt, "cells": cells, "first_s": first,
                               "store_MB": None if served is None else served / 1e6}
                              for dt, cells, first, served in eps]
                    dt, cells, first = eps[0][:3]
                    n_cells = cells
                    mbs = tile_bytes / dt / 1e6
                    r = {"source": where, "prefetch_tiles": pf, "max_inflight": mi, "workers": a.workers,
                         "cells_per_s": cells / dt, "MB_per_s": mbs, "first_s": first, "epoch_s": dt,
                         "epochs": epochs}
                    if len(epochs) > 1:   # the warm epochs: the median by wall time
                        w = sorted(epochs[1:], key=lambda e: e["epoch_s"])[(len(epochs) - 2) // 2]
                        r["warm"] = dict(w, cells_per_s=w["cells"] / w["epoch_s"],
                                         MB_per_s=tile_bytes / w["epoch_s"] / 1e6)
                    if vfs:
                        r["vfs"] = vfs
                    if mi is None:
                        local_mbs[pf] = (mbs, r.get("warm", {}).get("MB_per_s"))
                    else:
                        r["of_ceiling"] = mbs / ceil[mi]["MB_per_s"]
                        r["of_ceiling0"] = mbs / ceil[0]["MB_per_s"]
                        r["of_local"] = mbs / local_mbs[pf][0]
                        w = r.get("warm")
                        if w:   # an epoch the store served less than 90% of the tiles for came from a cache
                            w["from_cache"] = w["store_MB"] is not None and w["store_MB"] * 1e6 < 0.9 * tile_bytes
                            if not w["from_cache"]:
                                w["of_ceiling"] = w["MB_per_s"] / ceil[mi]["MB_per_s"]
                                w["of_local"] = w["MB_per_s"] / local_mbs[pf][1]
                    rows.append(r)
        finally:
            ng.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res = {"dataset": db, "cells": n_cells, "tiles": n_tiles, "tile_MB": tile_bytes / 1e6,
           "latency_ms": a.latency_ms, "bandwidth_MBps_per_connection": a.bandwidth_mbps,
           "block_kb": a.block_kb, "connections": max(a.workers, 1), "epochs": a.epochs,
           "ceiling": {str(mi): dict(c, cells_per_s_equiv=(n_cells or 0) * c["MB_per_s"] * 1e6 / tile_bytes)
                       for mi, c in ceil.items()},
           "runs": rows}
    if a.json:
        print(json.dumps(res, indent=1))
        return res
    print(f"dataset {db}: {n_cells} cells, {n_tiles} tiles, {tile_bytes / 1e6:.1f} MB of tiles")
    print(f"store: {a.latency_ms:g} ms per request, {a.bandwidth_mbps:g} MB/s per connection, "
          f"{max(a.workers, 1)} connections, {a.block_kb} KiB blocks")
    for mi, c in sorted(ceil.items()):
        print(f"raw-read ceiling, max_inflight={mi}: {c['MB_per_s']:.1f} MB/s ({c['s']:.2f} s for the tiles; "
              f"{c['s_with_start']:.2f} s with the readers' process start)")
    for r in rows:
        w = r.get("warm")
        if r["source"] == "local":
            print(f"local  prefetch_tiles={r['prefetch_tiles']}: cold {r['cells_per_s']:.0f} cells/s, "
                  f"{r['MB_per_s']:.1f} MB/s, first batch {r['first_s']:.2f} s, epoch {r['epoch_s']:.2f} s"
                  + (f"; warm {w['cells_per_s']:.0f} cells/s, {w['MB_per_s']:.1f} MB/s, first batch "
                     f"{w['first_s']:.2f} s, epoch {w['epoch_s']:.2f} s" if w else ""))
            continue
        print(f"remote prefetch_tiles={r['prefetch_tiles']} max_inflight={r['max_inflight']}:\n"
              f"  cold (the process's first epoch): {r['cells_per_s']:.0f} cells/s, {r['MB_per_s']:.1f} MB/s = "
              f"{100 * r['of_ceiling']:.0f}% of the ceiling at the same max_inflight, {100 * r['of_ceiling0']:.0f}% "
              f"of the max_inflight=0 ceiling, {100 * r['of_local']:.0f}% of the local file's, "
              f"first batch {r['first_s']:.2f} s, epoch {r['epoch_s']:.2f} s; "
              f"the store served {r['epochs'][0]['store_MB'] * 1e6 / tile_bytes:.2f}x the tiles' bytes")
        if w:
            served = f"the store served {w['store_MB'] * 1e6 / tile_bytes:.2f}x the tiles' bytes"
            head = (f"  warm (median of epochs 2-{len(r['epochs'])}): {w['cells_per_s']:.0f} cells/s, "
                    f"{w['MB_per_s']:.1f} MB/s")
            if w["from_cache"]:
                print(f"{head}, not a measure of the store: {served} (the rest from the process's block cache)")
            else:
                print(f"{head} = {100 * w['of_ceiling']:.0f}% of the ceiling, {100 * w['of_local']:.0f}% of the "
                      f"local file's, first batch {w['first_s']:.2f} s, epoch {w['epoch_s']:.2f} s; {served}")
        if r.get("vfs"):
            v = r["vfs"]
            print(f"    store traffic (workers=0, the {len(r['epochs'])} epochs together): " + ", ".join(
                f"{k} {v[k]}" for k in ("requests", "bytes", "shared_hits", "mem_hits", "prefetch_requests")
                if k in v) + f" ({v.get('bytes', 0) / tile_bytes:.2f}x the tiles' bytes)")
    print("(local: the same loader on the local file, no store: the CPU's own limit in this run)")
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
