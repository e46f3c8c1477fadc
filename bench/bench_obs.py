#!/usr/bin/python3
"""bench_obs: the `cells` virtual table against a native SQLite table holding the same obs.

A dataset of 1,000,000 cells with realistic obs columns (30 cell types with skewed frequencies,
178 donors whose cells are contiguous as in concatenated samples, batches, clusters, counts,
float32 and float64 QC metrics with NaN, a bool, a unique string barcode) and 8 genes, written
with anndata and converted with build/deltacells.  The native table (same declared types) gets
the indexes a competent user would create for these queries: one per filtered column, and a
composite index where a query filters on two columns ((cell_type, donor), (cell_type,
percent_mt)); then ANALYZE, so that SQLite's planner picks among them.

Equal memory budgets: the cells side gets dc_config('cache_mb', B) (its decoded-block cache;
the cells table uses a quarter of it) on top of SQLite's default page cache (2,000 KiB); the
native side gets a page cache of B MiB plus the same 2,000 KiB (PRAGMA cache_size).  So the
native side never has less memory than the cells side.

Each query is timed both ways, in the same run, on both sides:
  cold  the database file evicted from the OS page cache (posix_fadvise DONTNEED) and a fresh
        connection (empty page cache and decoded-block cache), first run: median of --cold-reps;
  warm  the same connection after one warm-up run: median of --reps.
The stored bytes are compared too.

Target (issue 4): the cells table takes at most 1.0x the native table's time, with at most
0.10x its bytes.

With --before DIR, the cells side is also timed with another checkout's extension
(DIR/build/deltacells.so, e.g. a `git worktree add DIR REV` built with `make -j2
build/deltacells.so`), loaded in the same process on the same dataset, cold and warm, query
by query beside the current one, in ABBA order (each side the mean of its two medians): the
"before / now" columns are same-run ratios (> 1: the current build is faster).  Both builds must read the dataset's format version.

    /usr/bin/python3 bench/bench_obs.py [--cells 1000000] [--reps 7] [--cold-reps 5]
                                        [--cache-mb 128] [--json out.json] [--before DIR]
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
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("DC_BUILD", ROOT / "build"))

SQL_TYPE = {"category": "TEXT", "int": "INTEGER", "real": "REAL", "bool": "INTEGER", "text": "TEXT"}


def make_obs(n, seed=1):
    rng = np.random.default_rng(seed)
    # donors: contiguous runs of varying size (178 samples concatenated)
    sizes = rng.gamma(2.0, 1.0, 178)
    sizes = np.maximum(1, np.round(sizes / sizes.sum() * n)).astype(np.int64)
    sizes[-1] += n - sizes.sum()
    while sizes[-1] < 1:   # keep every donor non-empty
        i = int(np.argmax(sizes[:-1]))
        sizes[i] -= 1
        sizes[-1] += 1
    donor = np.repeat(np.arange(178), sizes)
    # 30 cell types, Zipf-like frequencies that differ by donor
    base = 1.0 / np.arange(1, 31) ** 1.1
    ct = np.empty(n, dtype=np.int64)
    start = 0
    for d, s in enumerate(sizes):
        p = base * rng.gamma(5.0, 0.2, 30)
        ct[start:start + s] = rng.choice(30, s, p=p / p.sum())
        start += s
    ct_names = ["CD4 T", "CD14 Mono", "B cell", "NK", "CD8 T", "FCGR3A Mono", "DC", "pDC", "Platelet",
                "HSC", "Treg", "MAIT", "gdT", "Plasma", "ILC", "Eryth", "CD4 TEM", "CD8 TEM", "NK CD56bright",
                "B memory", "B naive", "cDC1", "cDC2", "ASDC", "Doublet", "dnT", "CD4 CTL", "CD8 TCM",
                "CD4 TCM", "CD4 Proliferating"]
    batch = donor // 23                               # 8 batches of donors
    clusters = (ct * 7 + rng.integers(0, 3, n)) % 40  # leiden-like, tied to the cell type
    n_counts = np.round(rng.lognormal(8.3, 0.5, n)).astype(np.int64)
    n_genes = np.minimum(n_counts, np.round(n_counts ** 0.8 * rng.uniform(0.8, 1.2, n))).astype(np.int64)
    pct_mt = rng.gamma(2.0, 1.5, n).astype(np.float32)
    pct_mt[rng.random(n) < 0.002] = np.nan
    doublet = rng.beta(1.2, 12, n)                     # float64
    # 16-base barcodes, unique within each sample (as 10x writes them), "-1", and the sample
    # number: unique strings, so anndata keeps them a string column
    acgt = np.frombuffer(b"ACGT", dtype=np.uint8)
    bc = acgt[rng.integers(0, 4, (n, 16))]
    key = bc.view("S16").ravel()
    _, first = np.unique(np.stack([key.astype(object), donor.astype(object)]).T.astype(str), axis=0,
                         return_index=True)
    dup = np.ones(n, bool)
    dup[first] = False
    bc[dup, :8] = acgt[(np.arange(dup.sum())[:, None] >> (2 * np.arange(8))) & 3]   # rare: make unique
    barcode = np.char.add(bc.view("S16").ravel().astype(str), np.char.mod("-1-%d", donor))
    return pd.DataFrame({
        "cell_type": pd.Categorical.from_codes(ct, ct_names),
        "donor": pd.Categorical.from_codes(donor, [f"D{i:03d}" for i in range(178)]),
        "batch": pd.Categorical.from_codes(batch, [f"batch{i}" for i in range(8)]),
        "leiden": pd.Categorical.from_codes(clusters, [str(i) for i in range(40)]),
        "sex": pd.Categorical.from_codes((donor * 7919) % 2, ["female", "male"]),
        "n_counts": n_counts,
        "n_genes": n_genes,
        "percent_mt": pct_mt,
        "doublet_score": doublet,
        "is_doublet": doublet > 0.25,
        "barcode": barcode.astype(object),
    }, index=[f"cell{i}" for i in range(n)])


def kind_of(s):
    if isinstance(s.dtype, pd.CategoricalDtype):
        return "category"
    if pd.api.types.is_bool_dtype(s.dtype):
        return "bool"
    if pd.api.types.is_integer_dtype(s.dtype):
        return "int"
    if pd.api.types.is_float_dtype(s.dtype):
        return "real"
    return "text"


def build(work, n):
    import anndata
    import scipy.sparse as sp
    work.mkdir(parents=True, exist_ok=True)
    h5, dc, nat = work / f"obs_{n}.h5ad", work / f"obs_{n}.dcdb", work / f"obs_{n}_native.db"
    if not h5.exists():
        t = time.time()
        X = sp.random(n, 8, density=0.1, format="csr", random_state=2, dtype=np.float32)
        X.data[:] = np.ceil(X.data * 20)
        anndata.AnnData(X=X, obs=make_obs(n)).write_h5ad(h5)
        print(f"# wrote {h5.name} in {time.time() - t:.1f} s", file=sys.stderr)
        dc.unlink(missing_ok=True)
        nat.unlink(missing_ok=True)
    if not dc.exists() or dc.stat().st_mtime < (BUILD / "deltacells").stat().st_mtime:
        t = time.time()
        subprocess.run([str(BUILD / "deltacells"), "convert", str(h5), "-o", str(dc), "--quiet", "--force"],
                       check=True)
        print(f"# converted in {time.time() - t:.1f} s", file=sys.stderr)
    if not nat.exists():
        obs = anndata.read_h5ad(h5, backed="r").obs
        con = sqlite3.connect(nat)
        kinds = {c: kind_of(obs[c]) for c in obs.columns}
        cols = ", ".join(f'"{c}" {SQL_TYPE[kinds[c]]}' for c in obs.columns)
        con.execute(f"CREATE TABLE obs(cell_id INTEGER PRIMARY KEY, name TEXT, {cols})")
        data = [obs[c].astype(object).where(obs[c].notna(), None).tolist() for c in obs.columns]
        for c, k in kinds.items():
            j = list(obs.columns).index(c)
            if k == "bool":
                data[j] = [None if v is None else int(v) for v in data[j]]
            elif k == "real":
                data[j] = [None if v is None or v != v else float(v) for v in data[j]]
            elif k == "int":
                data[j] = [None if v is None else int(v) for v in data[j]]
        rows = zip(range(n), obs.index.tolist(), *data)
        con.executemany(f"INSERT INTO obs VALUES({','.join('?' * (2 + len(obs.columns)))})", rows)
        con.commit()
        con.close()
    # the indexes a competent user makes for the queries below (also on a table made by an
    # earlier version of this script, which had the single-column ones only), then ANALYZE
    con = sqlite3.connect(nat)
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    if not set(NATIVE_INDEXES) <= have or not con.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone()[0]:
        for name, cols in NATIVE_INDEXES.items():
            con.execute(f"CREATE INDEX IF NOT EXISTS {name} ON obs({cols})")
        con.execute("ANALYZE")
        con.commit()
        con.execute("VACUUM")
    con.close()
    return dc, nat


NATIVE_INDEXES = {
    "obs_cell_type": "cell_type", "obs_donor": "donor", "obs_percent_mt": "percent_mt",
    "obs_n_counts": "n_counts",
    "obs_cell_type_donor": "cell_type, donor",            # cell_type = ? AND donor = ?
    "obs_cell_type_percent_mt": "cell_type, percent_mt",  # cell_type IN (...) AND percent_mt < ?
}
DEFAULT_PAGE_CACHE_KIB = 2000      # SQLite's default cache_size (-2000)


def connect(path, ext, cache_mb):
    """A fresh connection with the budget: cells: dc_config('cache_mb', B) + the default page
    cache; native: a page cache of B MiB + the default.  ext: False (native), True (this
    checkout's extension) or the path of another build's deltacells.so (--before)."""
    con = sqlite3.connect(str(path))
    if ext:
        con.enable_load_extension(True)
        con.load_extension(str(BUILD / "deltacells") if ext is True else str(ext))
        con.enable_load_extension(False)
        con.execute("SELECT dc_config('cache_mb', ?)", (cache_mb,)).fetchall()
        con.execute(f"PRAGMA cache_size = -{DEFAULT_PAGE_CACHE_KIB}")
    else:
        con.execute(f"PRAGMA cache_size = -{cache_mb * 1024 + DEFAULT_PAGE_CACHE_KIB}")
    return con


def evict(path):
    """Drops the file's pages from the OS page cache (clean pages: no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed_cold(path, ext, cache_mb, sql, params, reps):
    ts, r = [], None
    for _ in range(reps):
        evict(path)
        con = connect(path, ext, cache_mb)
        t = time.perf_counter()
        r = con.execute(sql, params).fetchall()
        ts.append(time.perf_counter() - t)
        con.close()
    return statistics.median(ts), r


def timed(con, sql, params, reps):
    con.execute(sql, params).fetchall()   # warm-up (page cache, decoded blocks)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        r = con.execute(sql, params).fetchall()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), r


def geomean(xs):
    return float(np.exp(np.mean(np.log(xs))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=7, help="warm runs per query (median)")
    ap.add_argument("--cold-reps", type=int, default=5, help="cold runs per query (median)")
    ap.add_argument("--cache-mb", type=int, default=128,
                    help="memory budget of each side in MiB (see above; default 128)")
    ap.add_argument("--work", default=str(ROOT / "build" / "bench_obs"))
    ap.add_argument("--json")
    ap.add_argument("--before", metavar="DIR",
                    help="another checkout whose build/deltacells.so is timed too (same run, same data)")
    a = ap.parse_args()
    before = None
    if a.before:
        before = Path(a.before).resolve() / "build" / "deltacells.so"
        if not before.exists():
            raise SystemExit(f"bench_obs: {before} is missing (build it: make -C {a.before} -j2 build/deltacells.so)")
    dc, nat = build(Path(a.work), a.cells)
    c1, c2 = connect(dc, True, a.cache_mb), connect(nat, False, a.cache_mb)
    cb = connect(dc, before, a.cache_mb) if before else None

    obs_bytes = c1.execute("SELECT sum(bytes) FROM cells_columns").fetchone()[0]
    blocks_bytes = c1.execute("SELECT sum(length(data)) + sum(coalesce(length(present),0)) FROM cells_blocks").fetchone()[0]
    dict_bytes = c1.execute("SELECT coalesce(sum(length(value)),0) FROM cells_dict").fetchone()[0]
    try:
        pages = c1.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'cells%'").fetchone()[0]
    except sqlite3.OperationalError:
        pages = None
    nat_pages = c2.execute("PRAGMA page_count").fetchone()[0] * c2.execute("PRAGMA page_size").fetchone()[0]
    try:
        nat_table = c2.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'obs'").fetchone()[0]
    except sqlite3.OperationalError:
        nat_table = None

    queries = [
        ("cell_type = ?", "SELECT count(*) FROM {T} WHERE cell_type = ?", ("NK",)),
        ("cell_type IN (3)", "SELECT count(*) FROM {T} WHERE cell_type IN (?, ?, ?)", ("B cell", "NK", "DC")),
        ("percent_mt range", "SELECT count(*) FROM {T} WHERE percent_mt BETWEEN ? AND ?", (1.0, 1.5)),
        ("n_counts > ?", "SELECT count(*) FROM {T} WHERE n_counts > ?", (12000,)),
        ("cell_type AND donor", "SELECT count(*) FROM {T} WHERE cell_type = ? AND donor = ?", ("CD14 Mono", "D042")),
        ("cell_type, percent_mt", "SELECT cell_id FROM {T} WHERE cell_type IN (?, ?) AND percent_mt < ?",
         ("B cell", "NK", 5.0)),
    ]
    res = []
    print(f"budget: cells dc_config('cache_mb', {a.cache_mb}) + {DEFAULT_PAGE_CACHE_KIB} KiB page cache; "
          f"native {a.cache_mb} MiB + {DEFAULT_PAGE_CACHE_KIB} KiB page cache; "
          f"native indexes: {', '.join(f'({v})' for v in NATIVE_INDEXES.values())}")
    print(f"{'query':24} {'rows':>8} | {'cold: cells ms':>14} {'native ms':>10} {'ratio':>6} | "
          f"{'warm: cells ms':>14} {'native ms':>10} {'ratio':>6}")
    for name, sql, params in queries:
        s1, s2 = sql.replace("{T}", "cells"), sql.replace("{T}", "obs")
        k1, q1 = timed_cold(dc, True, a.cache_mb, s1, params, a.cold_reps)
        k2, q2 = timed_cold(nat, False, a.cache_mb, s2, params, a.cold_reps)
        t1, r1 = timed(c1, s1, params, a.reps)
        t2, r2 = timed(c2, s2, params, a.reps)
        if not (sorted(r1) == sorted(r2) == sorted(q1) == sorted(q2)):
            raise SystemExit(f"{name}: results differ: {r1[:3]} vs {r2[:3]}")
        vs = {}
        if before:   # the other build, the same query, cold then warm (interleaved with this one)
            # ABBA (the other build, this one, this one, the other): the order biases neither
            kb1, qb = timed_cold(dc, before, a.cache_mb, s1, params, a.cold_reps)
            k1b1, _ = timed_cold(dc, True, a.cache_mb, s1, params, a.cold_reps)
            k1b2, _ = timed_cold(dc, True, a.cache_mb, s1, params, a.cold_reps)
            kb2, _ = timed_cold(dc, before, a.cache_mb, s1, params, a.cold_reps)
            tb1, rb = timed(cb, s1, params, a.reps)
            t1b1, _ = timed(c1, s1, params, a.reps)
            t1b2, _ = timed(c1, s1, params, a.reps)
            tb2, _ = timed(cb, s1, params, a.reps)
            kb, k1b, tb, t1b = (kb1 + kb2) / 2, (k1b1 + k1b2) / 2, (tb1 + tb2) / 2, (t1b1 + t1b2) / 2
            if not (sorted(qb) == sorted(rb) == sorted(r1)):
                raise SystemExit(f"{name}: the --before build answers differently: {rb[:3]} vs {r1[:3]}")
            vs = {"cold_before_s": kb, "cold_now_s": k1b, "cold_before_over_now": kb / k1b,
                  "warm_before_s": tb, "warm_now_s": t1b, "warm_before_over_now": tb / t1b}
        plan = " / ".join(r[-1] for r in c2.execute("EXPLAIN QUERY PLAN " + s2, params))
        rows = r1[0][0] if sql.startswith("SELECT count") else len(r1)
        res.append({"query": name, "rows": rows, "native_plan": plan,
                    "cold_cells_s": k1, "cold_native_s": k2, "cold_ratio": k1 / k2,
                    "warm_cells_s": t1, "warm_native_s": t2, "warm_ratio": t1 / t2, **vs})
        print(f"{name:24} {rows:8d} | {k1 * 1e3:14.2f} {k2 * 1e3:10.2f} {k1 / k2:6.2f} | "
              f"{t1 * 1e3:14.2f} {t2 * 1e3:10.2f} {t1 / t2:6.2f}   native: {plan}")
        if vs:
            print(f"{'  before / now':24} {'':8} | cold {kb * 1e3:.2f} / {k1b * 1e3:.2f} ms = "
                  f"{vs['cold_before_over_now']:.2f}x | warm {tb * 1e3:.3f} / {t1b * 1e3:.3f} ms = "
                  f"{vs['warm_before_over_now']:.2f}x")
    geo = {w: geomean([r[f"{w}_ratio"] for r in res]) for w in ("cold", "warm")}
    if before:
        for w in ("cold", "warm"):
            g = geomean([r[f"{w}_before_over_now"] for r in res])
            print(f"{w} time, --before build / this build: geometric mean {g:.2f}x "
                  f"(min {min(r[f'{w}_before_over_now'] for r in res):.2f}x; > 1: this build is faster)")
    for w in ("cold", "warm"):
        print(f"{w} time ratio (cells / native): geometric mean {geo[w]:.2f}, "
              f"max {max(r[f'{w}_ratio'] for r in res):.2f} (target <= 1.0)")
    print(f"obs bytes: cells {obs_bytes:,} (blocks+present {blocks_bytes:,}, dictionaries {dict_bytes:,}"
          + (f", pages of the cells_* tables {pages:,}" if pages else "") + ")")
    print(f"native: {nat_pages:,} bytes with its indexes" + (f" ({nat_table:,} table alone)" if nat_table else ""))
    print(f"bytes ratio (cells / native with indexes): {obs_bytes / nat_pages:.4f}"
          + (f"; vs the table alone {obs_bytes / nat_table:.4f}" if nat_table else ""))
    cols = c1.execute("SELECT name, kind, bytes FROM cells_columns ORDER BY col").fetchall()
    for nm, kind, b in cols:
        print(f"  {nm:16} {kind:9} {b:>10,} bytes  {b / a.cells:6.3f} B/cell")
    out = {"cells": a.cells, "cache_mb": a.cache_mb, "before": str(before) if before else None, "queries": res, "cold_ratio_geomean": geo["cold"],
           "warm_ratio_geomean": geo["warm"], "obs_bytes": obs_bytes,
           "native_bytes": nat_pages, "native_table_bytes": nat_table, "bytes_ratio": obs_bytes / nat_pages,
           "columns": [{"name": n, "kind": k, "bytes": b} for n, k, b in cols]}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
