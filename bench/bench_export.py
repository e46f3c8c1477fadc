#!/usr/bin/python3
"""bench_export: `deltacells export` — peak memory against the size of the CSR it writes, and
its time against reading X and obs apart (issue 13).

Datasets (each converted here with build/deltacells, default settings):
  pbmc3k      fhil_pbmc3k.h5ad alone: 2,700 cells in one tile (the reference tile)
  real5       the five real files converted together (18,010 cells, 66,311 genes)
  synthetic   --cells cells x 2,000 genes written with anndata (always; the only one when
              ../shared/data/real is absent)

For each, in the same run:
  export      `deltacells export DATASET -o OUT.h5ad` (every cell, every gene in the input's
              order, every obs column): wall time (process start included) and peak RSS
              (/usr/bin/time's %M);
  csr bytes   data + indices + indptr of the X it wrote (from the file's dataset shapes);
  apart       reading X and obs apart through the extension in Python: deltacells.read_csr over
              every cell (X, stored order) plus `SELECT * FROM cells` fetched whole, no writing;
  anndata     to_anndata(gene_order='original') then AnnData.write_h5ad: the Python route to the
              same file;
  info        `deltacells info DATASET`: what starting the converter's process costs (libhdf5
              and SQLite loaded, first pages touched), which export pays and the in-process
              Python reading does not.
Each time is the median of --reps runs after one warm-up run (files in the OS cache).

Targets: peak RSS / csr bytes < 2; export time not much above reading X and obs apart.

    /usr/bin/python3 bench/bench_export.py [--reps 3] [--cells 50000] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
CONVERTER = ROOT / "build" / "deltacells"
REAL = Path(os.environ.get("DC_REAL_DATA", ROOT.parent / "shared" / "data" / "real"))
REAL_FILES = ["fhil_pbmc3k.h5ad", "mudan_sorted_pbmc_reference.h5ad", "pisces_pbmc1k.h5ad",
              "scanpy_10x10k_subset.h5ad", "soupx_pbmc4k_subset.h5ad"]


def run_child(cmd):
    """Runs cmd under /usr/bin/time (forked from that small process, not from this one, whose
    pages a forked child would count); returns (seconds, peak RSS in bytes) of cmd alone."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M", *map(str, cmd)], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed: {p.stderr}")
    kb = [int(l.split("=")[1]) for l in p.stderr.splitlines() if l.startswith("maxrss_kb=")][-1]
    return dt, kb * 1024


def csr_bytes(h5):
    import h5py
    with h5py.File(h5, "r") as f:
        X = f["X"]
        return int(sum(X[k].size * X[k].dtype.itemsize for k in ("data", "indices", "indptr"))), int(X["data"].size)


def read_apart(db):
    import numpy as np
    from deltacells._core import read_csr, with_connection
    con = with_connection(str(db))
    try:
        n = int(con.execute("SELECT value FROM dc_meta WHERE key='n_cells'").fetchone()[0])
        t0 = time.perf_counter()
        read_csr(con, np.arange(n, dtype=np.int64))
        con.execute("SELECT * FROM cells").fetchall()
        return time.perf_counter() - t0
    finally:
        con.close()


def via_anndata(db, out):
    import deltacells
    t0 = time.perf_counter()
    ad = deltacells.to_anndata(str(db), gene_order="original")
    ad.write_h5ad(out)
    return time.perf_counter() - t0


def synthetic(path, n_cells, n_genes=2000, seed=0):
    import anndata
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp
    rng = np.random.default_rng(seed)
    nnz_per = 800
    rows = np.repeat(np.arange(n_cells), nnz_per)
    cols = rng.integers(0, n_genes, rows.size)
    vals = rng.geometric(0.4, rows.size).astype(np.int32)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n_cells, n_genes), dtype=np.int32)
    X.sum_duplicates()
    obs = pd.DataFrame({"cell_type": pd.Categorical(rng.choice([f"type{i}" for i in range(30)], n_cells)),
                        "n_counts": np.asarray(X.sum(1)).ravel().astype(np.int64),
                        "percent_mt": rng.uniform(0, 10, n_cells).astype(np.float32)},
                       index=[f"cell{i}" for i in range(n_cells)])
    var = pd.DataFrame(index=[f"gene{i}" for i in range(n_genes)])
    anndata.AnnData(X=X, obs=obs, var=var, dtype=np.int32).write_h5ad(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cells", type=int, default=50000)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not CONVERTER.exists():
        raise SystemExit("build/deltacells is not built (run make)")
    tmp = Path(tempfile.mkdtemp(prefix="bench_export."))
    sets = []
    if all((REAL / f).exists() for f in REAL_FILES):
        sets.append(("pbmc3k", [REAL / "fhil_pbmc3k.h5ad"]))
        sets.append(("real5", [REAL / f for f in REAL_FILES]))
    else:
        print(f"real data not present ({REAL}): synthetic only", file=sys.stderr)
    syn = tmp / "synthetic.h5ad"
    synthetic(syn, a.cells)
    sets.append((f"synthetic{a.cells}", [syn]))
    results = []
    for name, inputs in sets:
        db = tmp / f"{name}.dcdb"
        subprocess.run([str(CONVERTER), "convert", *map(str, inputs), "-o", str(db), "--quiet", "--force"], check=True)
        out = tmp / f"{name}.h5ad"
        cmd = [str(CONVERTER), "export", str(db), "-o", str(out), "--force", "--quiet"]
        run_child(cmd)  # warm-up
        ex = [run_child(cmd) for _ in range(a.reps)]
        t_ex = statistics.median(t for t, _ in ex)
        rss = max(r for _, r in ex)
        cb, nnz = csr_bytes(out)
        t_info = statistics.median(run_child([str(CONVERTER), "info", str(db)])[0] for _ in range(a.reps))
        read_apart(db)  # warm-up
        t_ap = statistics.median(read_apart(db) for _ in range(a.reps))
        via_anndata(db, tmp / "py.h5ad")
        t_py = statistics.median(via_anndata(db, tmp / "py.h5ad") for _ in range(a.reps))
        r = {"dataset": name, "nnz": nnz, "csr_bytes": cb, "export_peak_rss": rss,
             "rss_over_csr": rss / cb, "export_s": t_ex, "read_x_obs_apart_s": t_ap,
             "export_over_apart": t_ex / t_ap, "to_anndata_write_s": t_py, "export_over_anndata": t_ex / t_py,
             "info_s": t_info}
        results.append(r)
        print(f"{name:>18}: nnz {nnz:,}  CSR {cb / 1e6:.1f} MB  export peak RSS {rss / 1e6:.1f} MB "
              f"({r['rss_over_csr']:.2f}x CSR)  export {t_ex:.3f} s  read X+obs apart {t_ap:.3f} s "
              f"({r['export_over_apart']:.2f}x)  to_anndata+write_h5ad {t_py:.3f} s ({r['export_over_anndata']:.2f}x)  "
              f"[`deltacells info` {t_info:.3f} s: a process's start]")
    if a.json:
        Path(a.json).write_text(json.dumps({"bench": "export", "results": results}, indent=1) + "\n")
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    main()
