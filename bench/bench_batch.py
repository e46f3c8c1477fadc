#!/usr/bin/python3
"""dc_batch throughput, from the dataset file into CSR blobs.

    /usr/bin/python3 bench/bench_batch.py [--threads N] [--runs 7] [--cells 30000] [--work build/bench]
                                          [--skip-throughput] [--points 200] [--json] [--before DIR]

1. Whole tiles, against the codec's own decoder in the same run.  A reference-like tile
   (scripts/gen_h5ad.py --tile-like: 10,000 cells x 61,497 genes) is converted into a dataset
   (build/deltacells convert --tile-cells 10000).  The dataset's tile, exactly as stored, is
   written in bench/dump_csr.py's layout (indptr.u64, indices.u32, data.u32) and
   build/bench_decode --csr DIR encodes it with the dataset's codec and chunk count and times the
   decode of the tile from memory into warm buffers.  dc_batch times the whole path: blob reads
   from the file, decoding of every chunk on the pool, result blobs handed to SQLite
   (`SELECT length(indptr), length(indices), length(data) FROM dc_batch(?)`, cache off).
   Reported: both times per thread count and their ratio (target <= 1.10x).  The dc_batch runs
   are taken before and after bench_decode, so a load change of the shared machine shows up
   in both.
2. Throughput on a dataset of --cells cells (tiles of 10,000, same generator): cells/s for
   batches of 5,000 random cells (cache off, and a second epoch with the cache on), and for
   batches of 5,000 consecutive cells taken from tiles in shuffled order (cache off).
3. Point queries on the same dataset, as an SQL user makes them (`SELECT genes, counts FROM
   expression WHERE cell_id = ?`, a plain connection): --points random cells, the median ms
   per query with the cache off, and with the cache on (a new connection, its cache empty)
   the mean ms per query over three passes of the same cells (a chunk not cached is decoded
   for the cells a query wants while few are wanted, and whole when asked for again: the
   first pass shows the partial decodes, the second the chunks made whole, the third the
   cache).

With --before DIR, every dc_batch measurement is taken with another checkout's extension
too (DIR/build/deltacells.so, e.g. a `git worktree add DIR REV` built with `make -j2
build/deltacells.so`), loaded in the same process on the same dataset and the same batches,
run after run beside this checkout's: `before_over_now` ratios (> 1: this build is faster).

Generated files are kept in --work (default build/bench) and reused.
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"
CONVERTER = ROOT / "build" / "deltacells"
EXTENSION = ROOT / "build" / "deltacells.so"
BENCH_DECODE = ROOT / "build" / "bench_decode"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def connect(db, ext=None):
    """ext: another build's deltacells.so (--before), else this checkout's"""
    con = sqlite3.connect(str(db))
    con.enable_load_extension(True)
    con.execute("SELECT load_extension(?, 'sqlite3_deltacells_init')", (str(ext or EXTENSION),))
    return con


def make_dataset(work, name, gen_args, tile_cells=10000):
    h5 = work / f"{name}.h5ad"
    db = work / f"{name}.dcdb"
    if not h5.exists():
        log(f"generating {h5} ...")
        subprocess.run([PY, str(ROOT / "scripts" / "gen_h5ad.py"), *gen_args, "-o", str(h5)], check=True,
                       stdout=subprocess.DEVNULL)
    if not db.exists() or db.stat().st_mtime < max(h5.stat().st_mtime, CONVERTER.stat().st_mtime):
        log(f"converting {db} ...")
        subprocess.run([str(CONVERTER), "convert", str(h5), "-o", str(db), "--tile-cells", str(tile_cells),
                        "--quiet", "--force"], check=True)
    return h5, db


def meta(con, key):
    r = con.execute("SELECT value FROM dc_meta WHERE key = ?", (key,)).fetchone()
    return r[0] if r else None


def ids_blob(ids):
    return np.asarray(ids, dtype="<i8").tobytes()


def time_batch(con, blob, runs):
    q = "SELECT length(indptr), length(indices), length(data) FROM dc_batch(?)"
    con.execute(q, (blob,)).fetchone()          # warm: file pages, buffers, pool threads
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        con.execute(q, (blob,)).fetchone()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


def dump_tile(con, first, n, out_dir):
    """The dataset's tile as stored, in dump_csr.py's layout."""
    out_dir.mkdir(parents=True, exist_ok=True)
    con.execute("SELECT dc_config('cache_mb', 0)")
    ip, ix, dv = con.execute("SELECT indptr, indices, data FROM dc_batch(?)",
                             (ids_blob(np.arange(first, first + n)),)).fetchone()
    np.frombuffer(ip, "<i8").astype("<u8").tofile(out_dir / "indptr.u64")
    np.frombuffer(ix, "<i4").astype("<u4").tofile(out_dir / "indices.u32")
    np.frombuffer(dv, "<i4").astype("<u4").tofile(out_dir / "data.u32")
    return len(ix) // 4


def bench_tile(work, threads, runs, before=None):
    h5, db = make_dataset(work, "tile", ["--tile-like", "--seed", "3"])
    con = connect(db)
    codec, chunks, level = meta(con, "codec"), meta(con, "chunks"), meta(con, "level")
    n_cells = meta(con, "n_cells")
    n = min(10000, n_cells)
    nnz = dump_tile(con, 0, n, work / "tile_csr")
    # cross-check against anndata's X as bench/dump_csr.py reads it
    import h5py
    with h5py.File(h5, "r") as f:
        src_nnz = int(f["X"]["indptr"][n])
    if src_nnz != nnz:
        log(f"WARNING: the dataset's tile holds {nnz} nonzeros but the h5ad's first {n} cells hold "
            f"{src_nnz}: the converter changed the matrix (not the extension; see tests)")
    blob = ids_blob(np.arange(n))
    con.execute("SELECT dc_config('cache_mb', 0)")
    tcounts = sorted({1, threads})
    dc = {t: [] for t in tcounts}
    for t in tcounts:
        con.execute("SELECT dc_config('threads', ?)", (t,))
        dc[t] += time_batch(con, blob, runs)
    cmd = [str(BENCH_DECODE), "--csr", str(work / "tile_csr"), "--codec", codec, "--chunks", str(chunks),
           "--threads", ",".join(map(str, tcounts)), "--runs", str(runs), "--no-zstd", "--json"]
    if level:
        cmd += ["--level", str(level)]
    log("running " + " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    bd = json.loads(out.strip().splitlines()[-1])
    for t in tcounts:
        con.execute("SELECT dc_config('threads', ?)", (t,))
        dc[t] += time_batch(con, blob, runs)
    res = {"tile_cells": n, "tile_nnz": nnz, "codec": codec, "chunks": chunks, "tile_bytes":
           con.execute("SELECT bytes FROM tiles WHERE tile = 0").fetchone()[0]}
    for t in tcounts:
        d = statistics.median(dc[t])
        b = bd[f"decode_{t}t_ms"]
        res[f"dc_batch_tile_{t}t_ms"] = round(d, 2)
        res[f"bench_decode_{t}t_ms"] = round(b, 2)
        res[f"ratio_{t}t"] = round(d / b, 3)
        log(f"whole tile, {t} thread(s): dc_batch file->CSR {d:.1f} ms (min {min(dc[t]):.1f}), "
            f"bench_decode {b:.1f} ms -> {d / b:.2f}x (target <= 1.10x)")
    res["memset_ms"] = bd.get("memset_ms")
    if before:   # the other build: the same tile, run after run beside this one
        cb = connect(db, before)
        cb.execute("SELECT dc_config('cache_mb', 0)")
        for t in tcounts:
            con.execute("SELECT dc_config('threads', ?)", (t,))
            cb.execute("SELECT dc_config('threads', ?)", (t,))
            now, bef = [], []
            for _ in range(runs):
                bef += time_batch(cb, blob, 1)
                now += time_batch(con, blob, 1)
            n_ms, b_ms = statistics.median(now), statistics.median(bef)
            res[f"before_tile_{t}t_ms"] = round(b_ms, 2)
            res[f"now_tile_{t}t_ms"] = round(n_ms, 2)
            res[f"before_over_now_tile_{t}t"] = round(b_ms / n_ms, 3)
            log(f"whole tile, {t} thread(s): --before {b_ms:.1f} ms, this build {n_ms:.1f} ms -> "
                f"before/now {b_ms / n_ms:.2f}x")
    return res


def bench_throughput(work, n_cells, threads, runs, before=None):
    """every phase on this build's connection and (--before) on the other build's, with the
    same batches, one after the other"""
    _, db = make_dataset(work, f"multi{n_cells}", ["--cells", str(n_cells), "--genes", "61497", "--seed", "4"])
    cons = {"": connect(db)}
    if before:
        cons["before_"] = connect(db, before)
    for c in cons.values():
        c.execute("SELECT dc_config('threads', ?)", (threads,))
    con = cons[""]
    n = meta(con, "n_cells")
    tiles = con.execute("SELECT first_cell, n_cells FROM tiles ORDER BY tile").fetchall()
    rng = np.random.default_rng(0)
    B = 5000
    res = {"dataset_cells": n, "dataset_tiles": len(tiles), "batch": B}

    def epoch(batches, warm=True, con=con):
        if warm:                                  # untimed: maps the buffers, starts the threads
            con.execute("SELECT n_cells FROM dc_batch(?)", (ids_blob(batches[0]),)).fetchone()
        t = time.perf_counter()
        cells = 0
        for b in batches:
            r = con.execute("SELECT n_cells, length(indices) FROM dc_batch(?)", (ids_blob(b),)).fetchone()
            cells += r[0]
        return cells / (time.perf_counter() - t)

    # with --before, each phase runs in ABBA order (this build, the other, the other, this
    # build) and each side reports the mean of its two passes, so the order does not bias
    # the ratio; alone, one pass
    def sides():
        order = list(cons.items())
        return order + order[::-1] if len(order) > 1 else order

    def record(key, p, v):
        acc.setdefault(p + key, []).append(v)

    acc = {}
    # random cells, cache off: every batch decodes what it touches
    rand = [rng.permutation(n)[:B] for _ in range(max(3, runs))]
    for p, c in sides():
        c.execute("SELECT dc_config('cache_mb', 0)")
        record("random_cold_cells_per_s", p, epoch(rand, con=c))
    # random cells, one epoch to fill the cache, the next from it
    perm = rng.permutation(n)
    ep1 = [perm[i:i + B] for i in range(0, n, B)]
    perm = rng.permutation(n)
    ep2 = [perm[i:i + B] for i in range(0, n, B)]
    for p, c in sides():
        c.execute("SELECT dc_config('cache_mb', 4096)")
        record("random_epoch1_cells_per_s", p, epoch(ep1, warm=False, con=c))
        record("random_epoch2_cached_cells_per_s", p, epoch(ep2, warm=False, con=c))
        c.execute("SELECT dc_config('cache_mb', 0)")   # empties the cache (the next pass starts cold)
    # consecutive cells from shuffled tiles, cache off
    order = rng.permutation(len(tiles))
    sb = []
    for t in order:
        first, cnt = tiles[t]
        for s in range(0, cnt, B):
            sb.append(np.arange(first + s, first + min(cnt, s + B)))
    for p, c in sides():
        c.execute("SELECT dc_config('cache_mb', 0)")
        record("shuffled_tiles_cells_per_s", p, epoch(sb, con=c))
    for k, v in acc.items():
        res[k] = round(statistics.mean(v))
    for p in cons:
        log(f"{p}random {B}-cell batches, cache off: {res[p + 'random_cold_cells_per_s']:,.0f} cells/s")
        log(f"{p}random {B}-cell batches, cache 4 GiB: epoch 1 {res[p + 'random_epoch1_cells_per_s']:,.0f} cells/s, "
            f"epoch 2 {res[p + 'random_epoch2_cached_cells_per_s']:,.0f} cells/s")
        log(f"{p}{B} consecutive cells from shuffled tiles, cache off: {res[p + 'shuffled_tiles_cells_per_s']:,.0f} cells/s")
    if before:   # cells/s: now / before = time before / time now
        for k in ("random_cold_cells_per_s", "random_epoch1_cells_per_s", "random_epoch2_cached_cells_per_s",
                  "shuffled_tiles_cells_per_s"):
            res["before_over_now_" + k.replace("_cells_per_s", "")] = round(res[k] / res["before_" + k], 3)
    return res


def bench_points(work, n_cells, n_points, before=None):
    """point queries through expression: this build and (--before) the other, ABBA"""
    _, db = make_dataset(work, f"multi{n_cells}", ["--cells", str(n_cells), "--genes", "61497", "--seed", "4"])
    exts = {"": None}
    if before:
        exts["before_"] = before
    n = meta(connect(db), "n_cells")
    cells = [int(c) for c in np.random.default_rng(1).choice(n, n_points, replace=False)]
    q = "SELECT genes, counts FROM expression WHERE cell_id = ?"
    acc = {}

    def one(con, c):
        t = time.perf_counter()
        con.execute(q, (c,)).fetchone()
        return (time.perf_counter() - t) * 1e3

    order = list(exts.items())
    for p, ext in (order + order[::-1] if len(order) > 1 else order):
        con = connect(db, ext)
        con.execute("SELECT dc_config('cache_mb', 0)")
        one(con, cells[-1])                          # warm: file pages, pool threads
        acc.setdefault(p + "point_cold_ms", []).append(statistics.median(one(con, c) for c in cells))
        con.close()
        con = connect(db, ext)                       # the default cache, empty
        for k, name in enumerate(("first", "second", "third")):
            acc.setdefault(f"{p}point_cached_{name}_pass_ms", []).append(statistics.mean(one(con, c) for c in cells))
        acc.setdefault(p + "point_cache_entries", []).append(con.execute("SELECT dc_config('cache_entries')").fetchone()[0])
        con.close()
    res = {"points": n_points}
    for k, v in acc.items():
        res[k] = round(statistics.mean(v), 3)
    for p in exts:
        log(f"{p}point queries, {n_points} random cells: cache off {res[p + 'point_cold_ms']:.2f} ms (median); "
            f"cache on, new connection, mean of each pass: {res[p + 'point_cached_first_pass_ms']:.2f}, "
            f"{res[p + 'point_cached_second_pass_ms']:.2f}, {res[p + 'point_cached_third_pass_ms']:.3f} ms "
            f"({res[p + 'point_cache_entries']:.0f} chunks cached)")
    if before:   # time before / time now
        for k in ("point_cold_ms", "point_cached_first_pass_ms", "point_cached_second_pass_ms",
                  "point_cached_third_pass_ms"):
            res["before_over_now_" + k.replace("_ms", "")] = round(res["before_" + k] / res[k], 3)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--cells", type=int, default=30000)
    ap.add_argument("--work", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--points", type=int, default=200, help="random cells for the point queries (0: none)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    ap.add_argument("--before", metavar="DIR",
                    help="another checkout whose build/deltacells.so is timed too (same run, same data)")
    a = ap.parse_args()
    before = None
    if a.before:
        before = Path(a.before).resolve() / "build" / "deltacells.so"
        if not before.exists():
            sys.exit(f"bench_batch: {before} is missing (build it: make -C {a.before} -j2 build/deltacells.so)")
    for p in (CONVERTER, EXTENSION, BENCH_DECODE):
        if not p.exists():
            sys.exit(f"bench_batch: {p} is missing (run make)")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    res = {"threads": a.threads}
    res.update(bench_tile(work, a.threads, a.runs, before))
    if not a.skip_throughput:
        res.update(bench_throughput(work, a.cells, a.threads, a.runs, before))
    if a.points:
        res.update(bench_points(work, a.cells, a.points, before))
    print(json.dumps(res) if a.json else "\n".join(f"{k}: {v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
