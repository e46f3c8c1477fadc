#!/usr/bin/python3
"""bench_obs: the `cells` virtual table against a native SQLite table holding the same obs.

A dataset of 1,000,000 cells with realistic obs columns (30 cell types with skewed frequencies,
178 donors whose cells are contiguous as in concatenated samples, batches, clusters, counts,
float32 and float64 QC metrics with NaN, a bool, a unique string barcode) and 8 genes, written
with anndata and converted with build/deltacells.  The native table (same declared types) gets
an index on each filtered column.  In the same run, each query is timed on both (median of
--reps runs after one warm-up) and the stored bytes are compared.

Target (issue 4): the cells table takes at most 1.0x the native table's time, with at most
0.10x its bytes.

    /usr/bin/python3 bench/bench_obs.py [--cells 1000000] [--reps 7] [--json out.json]
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
        for c in ("cell_type", "donor", "percent_mt", "n_counts"):
            con.execute(f"CREATE INDEX obs_{c} ON obs({c})")
        con.commit()
        con.execute("VACUUM")
        con.close()
    return dc, nat


def connect(path, ext):
    con = sqlite3.connect(str(path))
    if ext:
        con.enable_load_extension(True)
        con.load_extension(str(BUILD / "deltacells"))
        con.enable_load_extension(False)
    return con


def timed(con, sql, params, reps):
    con.execute(sql, params).fetchall()   # warm-up (page cache, dictionaries)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        r = con.execute(sql, params).fetchall()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--work", default=str(ROOT / "build" / "bench_obs"))
    ap.add_argument("--json")
    a = ap.parse_args()
    dc, nat = build(Path(a.work), a.cells)
    c1, c2 = connect(dc, True), connect(nat, False)

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
    print(f"{'query':24} {'rows':>8} {'cells ms':>9} {'native ms':>10} {'ratio':>6}")
    for name, sql, params in queries:
        t1, r1 = timed(c1, sql.replace("{T}", "cells"), params, a.reps)
        t2, r2 = timed(c2, sql.replace("{T}", "obs"), params, a.reps)
        if sorted(r1) != sorted(r2):
            raise SystemExit(f"{name}: results differ: {r1[:3]} vs {r2[:3]}")
        rows = r1[0][0] if sql.startswith("SELECT count") else len(r1)
        res.append({"query": name, "rows": rows, "cells_s": t1, "native_s": t2, "ratio": t1 / t2})
        print(f"{name:24} {rows:8d} {t1 * 1e3:9.2f} {t2 * 1e3:10.2f} {t1 / t2:6.2f}")
    geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in res])))
    print(f"time ratio (cells / native): geometric mean {geo:.2f}, max {max(r['ratio'] for r in res):.2f}")
    print(f"obs bytes: cells {obs_bytes:,} (blocks+present {blocks_bytes:,}, dictionaries {dict_bytes:,}"
          + (f", pages of the cells_* tables {pages:,}" if pages else "") + ")")
    print(f"native: {nat_pages:,} bytes with its indexes" + (f" ({nat_table:,} table alone)" if nat_table else ""))
    print(f"bytes ratio (cells / native with indexes): {obs_bytes / nat_pages:.4f}"
          + (f"; vs the table alone {obs_bytes / nat_table:.4f}" if nat_table else ""))
    cols = c1.execute("SELECT name, kind, bytes FROM cells_columns ORDER BY col").fetchall()
    for nm, kind, b in cols:
        print(f"  {nm:16} {kind:9} {b:>10,} bytes  {b / a.cells:6.3f} B/cell")
    out = {"cells": a.cells, "queries": res, "time_ratio_geomean": geo, "obs_bytes": obs_bytes,
           "native_bytes": nat_pages, "native_table_bytes": nat_table, "bytes_ratio": obs_bytes / nat_pages,
           "columns": [{"name": n, "kind": k, "bytes": b} for n, k, b in cols]}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
