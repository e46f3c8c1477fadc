#!/usr/bin/python3
"""Stored size and file -> CSR-in-RAM time of one shard in several formats, same cells, same run.

    PYTHONPATH=python /usr/bin/python3 bench/compare_formats.py SHARD.h5ad
        [--only h5ad,zarr,npz,sqlite_zstd,deltacells] [--threads 2] [--repeat 3]
        [--work build/bench-formats] [--json]

SHARD.h5ad is read once with anndata (X must be integral counts, CSR or CSC); every format
is written from that matrix into --work, then each is read back into a scipy CSR matrix in
RAM --repeat times (median; the files are in the page cache, so this is decode, not disk).
Every read is checked against the source matrix (deltacells stores genes in its own order:
its columns are mapped back by gene name first).

Formats
  h5ad         anndata.write_h5ad(compression="gzip"), as users have it; read_h5ad().X
  zarr         anndata.write_zarr (zarr's default Blosc/LZ4 compressor); read_zarr().X
  npz          scipy.sparse.save_npz(compressed=True); load_npz
  sqlite_zstd  the obvious do-it-yourself design: a native SQLite table of one row per cell,
               its int32 indices and int32 counts in one zstd (level 3) blob; read with
               SELECT, decompressed by a thread pool (python3-zstandard drops the GIL)
  deltacells   build/deltacells convert; read with deltacells._core.read_csr (what
               to_anndata uses): dc_batch in chunks of 20,000 cells, the extension decoding
               on --threads threads, each chunk copied once into the final arrays
Only sqlite_zstd and deltacells have a threaded reader; the others report their one-thread
time for N threads as null ("no threaded reader"). Formats that cannot be installed from
Debian here are listed under "not measured" with the reason, never guessed: TileDB-SOMA and
BPCells (neither is packaged in Debian bookworm; PyPI and CRAN are not reachable).

Output: a table; with --json, one JSON object as the last line:
  {"input":..., "n_cells":..., "n_genes":..., "nnz":..., "threads":N,
   "formats":[{"format", "bytes", "kb_per_cell", "bits_per_nnz", "read_1t_s", "read_nt_s",
               "read_1t_spread", "note"}...], "not_measured":[{"format","reason"}...]}
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = ["h5ad", "zarr", "npz", "sqlite_zstd", "deltacells"]
NOT_MEASURED = [
    {"format": "TileDB-SOMA", "reason": "not packaged in Debian bookworm; PyPI is not reachable here"},
    {"format": "BPCells", "reason": "an R package, not packaged in Debian bookworm; CRAN is not reachable here"},
]


def path_bytes(p):
    if os.path.isdir(p):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)
    return os.path.getsize(p)


def timed(fn, repeat):
    ts, out = [], None
    for _ in range(repeat):
        out = None
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), (max(ts) - min(ts)), out


# ---------------------------------------------------------------- writers and readers
def write_h5ad(adata, p):
    adata.write_h5ad(p, compression="gzip")


def read_h5ad(p, threads):
    import anndata
    return sp.csr_matrix(anndata.read_h5ad(p).X)


def write_zarr(adata, p):
    adata.write_zarr(p)


def read_zarr(p, threads):
    import anndata
    return sp.csr_matrix(anndata.read_zarr(p).X)


def write_npz(adata, p):
    sp.save_npz(p, adata.X, compressed=True)


def read_npz(p, threads):
    return sp.load_npz(p).tocsr()


def write_sqlite_zstd(adata, p):
    import zstandard
    X = adata.X
    c = zstandard.ZstdCompressor(level=3)
    if os.path.exists(p):
        os.remove(p)
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE meta (n_cells INTEGER, n_genes INTEGER)")
    con.execute("INSERT INTO meta VALUES (?, ?)", X.shape)
    con.execute("CREATE TABLE cells (cell_id INTEGER PRIMARY KEY, nnz INTEGER, x BLOB)")
    rows = []
    for i in range(X.shape[0]):
        a, b = X.indptr[i], X.indptr[i + 1]
        raw = X.indices[a:b].astype("<i4").tobytes() + X.data[a:b].astype("<i4").tobytes()
        rows.append((i, int(b - a), c.compress(raw)))
        if len(rows) == 5000:
            con.executemany("INSERT INTO cells VALUES (?, ?, ?)", rows)
            rows = []
    con.executemany("INSERT INTO cells VALUES (?, ?, ?)", rows)
    con.commit()
    con.execute("VACUUM")
    con.close()


def read_sqlite_zstd(p, threads):
    import zstandard
    con = sqlite3.connect(p)
    n_cells, n_genes = con.execute("SELECT n_cells, n_genes FROM meta").fetchone()
    rows = con.execute("SELECT nnz, x FROM cells ORDER BY cell_id").fetchall()
    con.close()
    nnz = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    indptr = np.zeros(n_cells + 1, dtype=np.int64)
    np.cumsum(nnz, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=np.int32)

    def work(lo, hi):
        d = zstandard.ZstdDecompressor()
        for i in range(lo, hi):
            k = int(nnz[i])
            raw = d.decompress(rows[i][1], max_output_size=8 * k)
            a = int(indptr[i])
            indices[a:a + k] = np.frombuffer(raw, dtype="<i4", count=k)
            data[a:a + k] = np.frombuffer(raw, dtype="<i4", count=k, offset=4 * k)

    step = (n_cells + threads - 1) // threads if n_cells else 1
    if threads == 1:
        work(0, n_cells)
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as ex:
            list(ex.map(lambda lo: work(lo, min(n_cells, lo + step)), range(0, n_cells, step)))
    return sp.csr_matrix((data, indices, indptr), shape=(n_cells, n_genes))


def write_deltacells(adata, p, src):
    exe = os.path.join(ROOT, "build", "deltacells")
    subprocess.run([exe, "convert", src, "-o", p, "--force"], check=True,
                   stdout=subprocess.DEVNULL)


def read_deltacells(p, threads):
    from deltacells._core import read_csr, with_connection
    con = with_connection(p, threads=threads)
    try:
        n_cells, = con.execute("SELECT count(*) FROM cells").fetchone()
        nnz, = con.execute("SELECT coalesce(sum(nnz), 0) FROM tiles").fetchone()
        indptr, indices, data, n_genes = read_csr(con, np.arange(n_cells, dtype=np.int64), nnz_hint=nnz)
        return sp.csr_matrix((data, indices, indptr), shape=(n_cells, n_genes))
    finally:
        con.close()


def deltacells_gene_order(p):
    """Stored gene id -> name."""
    import deltacells
    con = deltacells.connect(p)
    try:
        return [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    finally:
        con.close()


def check(fmt, got, X, col_map=None):
    if got.shape != X.shape or got.nnz != X.nnz:
        raise SystemExit(f"compare_formats: {fmt}: read back {got.shape} with {got.nnz} nonzeros, "
                         f"expected {X.shape} with {X.nnz}")
    g = got if col_map is None else got[:, col_map]
    if (g != X).nnz:
        raise SystemExit(f"compare_formats: {fmt}: values differ from the source")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("--only", default=",".join(ALL))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench-formats"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    only = [f.strip() for f in a.only.split(",") if f.strip()]
    bad = [f for f in only if f not in ALL]
    if bad:
        ap.error(f"unknown format(s) {', '.join(bad)}; known: {', '.join(ALL)}")
    if a.threads < 1 or a.repeat < 1:
        ap.error("--threads and --repeat must be >= 1")
    import anndata
    adata = anndata.read_h5ad(a.input)
    X = adata.X
    if not sp.issparse(X):
        X = sp.csr_matrix(X)
    X = sp.csr_matrix(X)
    X.sort_indices()
    if X.dtype.kind == "f":
        if not np.array_equal(X.data, np.round(X.data)):
            raise SystemExit(f"compare_formats: {a.input}: X is not integral counts")
    X = sp.csr_matrix((X.data.astype(np.int32), X.indices.astype(np.int32), X.indptr.astype(np.int64)),
                      shape=X.shape)
    X.eliminate_zeros()
    src = anndata.AnnData(X=X, obs=adata.obs, var=adata.var)
    n_cells, n_genes = X.shape
    os.makedirs(a.work, exist_ok=True)
    stem = os.path.splitext(os.path.basename(a.input))[0]
    src_path = os.path.join(a.work, stem + ".src.h5ad")
    src.write_h5ad(src_path)
    out = {"input": os.path.abspath(a.input), "n_cells": n_cells, "n_genes": n_genes,
           "nnz": int(X.nnz), "threads": a.threads, "repeat": a.repeat, "formats": [],
           "not_measured": NOT_MEASURED}
    spec = {
        "h5ad": (".h5ad", write_h5ad, read_h5ad, False, "anndata, gzip"),
        "zarr": (".zarr", write_zarr, read_zarr, False, "anndata, zarr default compressor"),
        "npz": (".npz", write_npz, read_npz, False, "scipy, compressed"),
        "sqlite_zstd": (".zstd.sqlite", write_sqlite_zstd, read_sqlite_zstd, True,
                        "one zstd-3 blob per cell"),
        "deltacells": (".dcdb", None, read_deltacells, True, "default codec"),
    }
    for fmt in only:
        ext, writer, reader, threaded, note = spec[fmt]
        p = os.path.join(a.work, stem + ext)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)
        if fmt == "deltacells":
            write_deltacells(src, p, src_path)
        else:
            writer(src, p)
        col_map = None
        if fmt == "deltacells":
            names = deltacells_gene_order(p)
            pos = {n: i for i, n in enumerate(names)}
            # (the converter strips surrounding whitespace from gene names by default)
            col_map = np.array([pos[n] if n in pos else pos[n.strip()] for n in src.var_names],
                               dtype=np.int64)
        reader(p, 1)                                   # warm the page cache and the imports
        t1, s1, got = timed(lambda: reader(p, 1), a.repeat)
        check(fmt, got, X, col_map)
        del got
        tn = sn = None
        if threaded and a.threads > 1:
            tn, sn, got = timed(lambda: reader(p, a.threads), a.repeat)
            check(fmt, got, X, col_map)
            del got
        nb = path_bytes(p)
        out["formats"].append({
            "format": fmt, "bytes": nb, "kb_per_cell": nb / 1024 / max(n_cells, 1),
            "bits_per_nnz": 8.0 * nb / max(X.nnz, 1), "read_1t_s": t1, "read_1t_spread": s1,
            "read_nt_s": tn, "read_nt_spread": sn,
            "note": note if threaded or a.threads == 1 else note + "; no threaded reader"})
    print(f"{stem}: {n_cells} cells x {n_genes} genes, {X.nnz} nonzeros; medians of {a.repeat} reads "
          f"(files in the page cache), {a.threads} threads where the format has a threaded reader")
    print(f"{'format':<12} {'MB':>9} {'kB/cell':>8} {'bits/nnz':>9} {'read 1t s':>10} "
          f"{'read %dt s' % a.threads:>10}  note")
    for r in out["formats"]:
        nt = "-" if r["read_nt_s"] is None else f"{r['read_nt_s']:.3f}"
        print(f"{r['format']:<12} {r['bytes'] / 1e6:9.2f} {r['kb_per_cell']:8.3f} {r['bits_per_nnz']:9.2f} "
              f"{r['read_1t_s']:10.3f} {nt:>10}  {r['note']}")
    for r in NOT_MEASURED:
        print(f"not measured: {r['format']}: {r['reason']}")
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
