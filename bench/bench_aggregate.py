#!/usr/bin/python3
"""Pseudobulk (cell_type x all genes: sum, mean with zeros, fraction expressing) from a dataset,
against scipy on a CSR already in RAM and against to_anndata + scipy, in the same run.

    /usr/bin/python3 bench/bench_aggregate.py [--repeat 5] [--threads 0] [--work build/bench]
                                              [--cells 10000] [--skip-real] [--json]

Datasets (made once in --work and reused):
  tile   scripts/gen_h5ad.py --tile-like: the reference tile's shape (10,000 cells x 61,497 genes,
         about 23 M nonzeros; --cells changes the cell count), tiles of 10,000 cells, by cell_type.
  real5  the five real 10x PBMC files of ../shared/data/real merged into one dataset, by cell_type
         (the two files without a cell_type form the NULL group); skipped when absent.

Timed, interleaved, each after an untimed warm-up, medians of --repeat runs:
  scipy       the counts already in RAM as scipy CSR (in the input's X dtype, as to_anndata
              gives them: int32 for the generated data and the five real files); the
              statistics as scanpy's sc.get.aggregate computes them: an indicator matrix
              (groups x cells) times X for the sums, times (X != 0) for the cells expressing,
              divided by the group sizes.
  sql         SELECT label, n_cells, sum, n_expressing FROM dc_aggregate_wide('cell_type'),
              every row fetched and turned into numpy arrays (mean and fraction divided out),
              on an open connection: blob reads, decoding and accumulation on the pool.
  python      deltacells.aggregate(path, by='cell_type'): a fresh connection, the same query,
              and the long pandas DataFrame (one row per group and gene).
  python_ad   the same with as_anndata=True (groups x genes layers, scipy's output shape).
  to_anndata  deltacells.to_anndata(path, obs=['cell_type']) then the scipy computation.
  gene_long   the gene axis: SELECT cell_type, sum(count) FROM expression_long JOIN cells
              WHERE gene_id = (the 5th gene by total counts) GROUP BY 1, cache off (a cell-major
              format decodes every chunk to find one gene).
  gene_agg    the same sums from dc_aggregate('cell_type', NULL, '[that gene]').
Every method's sums and counts are checked equal to scipy's before timing.
Reported: seconds, and the ratios of the medians to scipy's and of to_anndata + scipy to ours.
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
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
import deltacells  # noqa: E402

PY = "/usr/bin/python3"
CONVERTER = ROOT / "build" / "deltacells"
REAL = ROOT.parent / "shared" / "data" / "real"
REAL_FILES = ["fhil_pbmc3k.h5ad", "mudan_sorted_pbmc_reference.h5ad", "pisces_pbmc1k.h5ad",
              "scanpy_10x10k_subset.h5ad", "soupx_pbmc4k_subset.h5ad"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def make_tile(work, cells):
    h5 = work / f"agg_tile_{cells}.h5ad"
    db = work / f"agg_tile_{cells}.dcdb"
    if not h5.exists():
        log(f"generating {h5} ...")
        subprocess.run([PY, str(ROOT / "scripts" / "gen_h5ad.py"), "--tile-like", "--cells", str(cells),
                        "-o", str(h5)], check=True, stdout=subprocess.DEVNULL)
    if not db.exists():
        subprocess.run([str(CONVERTER), "convert", str(h5), "-o", str(db), "--tile-cells", "10000", "--quiet",
                        "--force"], check=True)
    return db


def make_real5(work):
    paths = [REAL / f for f in REAL_FILES]
    if not all(p.is_file() for p in paths):
        return None
    db = work / "agg_real5.dcdb"
    if not db.exists():
        subprocess.run([str(CONVERTER), "convert", *map(str, paths), "-o", str(db), "--quiet", "--force"],
                       check=True)
    return db


def scipy_stats(X, codes, G):
    """scanpy's way: indicator (groups x cells) @ X, @ (X != 0)."""
    n = X.shape[0]
    ind = sp.csr_matrix((np.ones(n, dtype=np.int64), (codes, np.arange(n))), shape=(G, n))
    n_cells = np.asarray(ind.sum(axis=1)).ravel()
    sums = (ind @ X).toarray()
    nexpr = (ind @ (X != 0)).toarray()
    return n_cells, sums, sums / n_cells[:, None], nexpr, nexpr / n_cells[:, None]


def labels_codes(con):
    labels = [r[0] for r in con.execute("SELECT cell_type FROM cells ORDER BY cell_id")]
    order = [r[0] for r in con.execute("SELECT label FROM dc_aggregate_wide('cell_type')")]
    pos = {g: i for i, g in enumerate(order)}
    return np.array([pos[v] for v in labels], dtype=np.int64), order


def sql_stats(con):
    rows = con.execute("SELECT label, n_cells, sum, n_expressing FROM dc_aggregate_wide('cell_type')").fetchall()
    n_cells = np.array([r[1] for r in rows], dtype=np.int64)
    sums = np.vstack([np.frombuffer(r[2], "<i8") for r in rows])
    nexpr = np.vstack([np.frombuffer(r[3], "<i8") for r in rows])
    return n_cells, sums, sums / n_cells[:, None], nexpr, nexpr / n_cells[:, None]


def bench(name, db, repeat, threads):
    con = deltacells.connect(db)
    con.execute("SELECT dc_config('threads', ?)", (threads,)).fetchall()
    threads_used = con.execute("SELECT dc_config('threads')").fetchone()[0]
    codes, order = labels_codes(con)
    ad = deltacells.to_anndata(db, obs=["cell_type"])
    X = ad.X.tocsr()
    G = len(order)
    nnz = X.nnz
    # the same numbers from every method
    ref = scipy_stats(X, codes, G)
    got = sql_stats(con)
    assert np.array_equal(ref[0], got[0]) and np.array_equal(ref[1], got[1]) and np.array_equal(ref[3], got[3])
    df = deltacells.aggregate(db, by="cell_type", threads=threads)
    assert np.array_equal(df["sum"].to_numpy(), ref[1].ravel())
    del ad, df

    def t_scipy():
        scipy_stats(X, codes, G)

    def t_sql():
        sql_stats(con)

    def t_python():
        deltacells.aggregate(db, by="cell_type", threads=threads)

    def t_python_ad():
        deltacells.aggregate(db, by="cell_type", threads=threads, as_anndata=True)

    def t_anndata():
        a = deltacells.to_anndata(db, obs=["cell_type"])
        c = a.obs["cell_type"].cat.codes.to_numpy().astype(np.int64)
        k = len(a.obs["cell_type"].cat.categories)
        if (c < 0).any():                       # missing labels: their own group
            c = np.where(c < 0, k, c)
            k += 1
        scipy_stats(a.X.tocsr(), c, k)

    top5 = con.execute("SELECT gene_id, name FROM genes ORDER BY gene_id LIMIT 1 OFFSET 4").fetchone()

    def t_gene_long():
        # the gene axis of a cell-major format: every chunk is decoded to find one gene (cache off)
        con.execute("SELECT dc_config('cache_mb', 0)").fetchall()
        con.execute("SELECT c.cell_type, sum(e.count) FROM expression_long e JOIN cells c USING (cell_id)"
                    " WHERE e.gene_id = ? GROUP BY 1", (top5[0],)).fetchall()
        con.execute("SELECT dc_config('cache_mb', 512)").fetchall()

    def t_gene_agg():
        con.execute("SELECT label, sum FROM dc_aggregate('cell_type', NULL, json_array(?))", (top5[1],)).fetchall()

    fns = {"scipy": t_scipy, "sql": t_sql, "python": t_python, "python_ad": t_python_ad, "to_anndata": t_anndata,
           "gene_long": t_gene_long, "gene_agg": t_gene_agg}
    times = {k: [] for k in fns}
    for f in fns.values():      # warm-up: buffers mapped, caches filled, imports done
        f()
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    con.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {"dataset": name, "cells": int(X.shape[0]), "genes": int(X.shape[1]), "nnz": int(nnz), "groups": G,
           "threads": threads_used, "median_s": med, "all_s": times,
           "sql_over_scipy": med["sql"] / med["scipy"], "python_over_scipy": med["python"] / med["scipy"],
           "python_ad_over_scipy": med["python_ad"] / med["scipy"],
           "to_anndata_over_sql": med["to_anndata"] / med["sql"],
           "to_anndata_over_python": med["to_anndata"] / med["python"]}
    log(f"{name}: {X.shape[0]} cells x {X.shape[1]} genes, {nnz / 1e6:.1f} M nonzeros, {G} groups, "
        f"{threads_used} threads; medians of {repeat}:")
    for k in fns:
        log(f"  {k:<10} {med[k] * 1e3:9.1f} ms")
    log(f"  sql / scipy {res['sql_over_scipy']:.2f}x   python / scipy {res['python_over_scipy']:.2f}x   "
        f"as_anndata / scipy {res['python_ad_over_scipy']:.2f}x   "
        f"to_anndata+scipy / sql {res['to_anndata_over_sql']:.1f}x   / python {res['to_anndata_over_python']:.1f}x")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="dc_config('threads'); 0 = one per core")
    ap.add_argument("--work", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--cells", type=int, default=10000)
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out = [bench("tile", make_tile(work, a.cells), a.repeat, a.threads)]
    if not a.skip_real:
        db = make_real5(work)
        if db is None:
            log(f"real5: skipped: the five real files are not all in {REAL}")
        else:
            out.append(bench("real5", db, a.repeat, a.threads))
    if a.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
