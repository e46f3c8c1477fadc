#!/usr/bin/python3
"""dc_batch on oversized requests (issue 12): time and peak RSS of one call, each in a fresh
process, on the real pbmc3k file converted with --tile-cells 1000.

    /usr/bin/python3 bench/bench_batch_limits.py [--work build/bench] [--json]

Cases: 1,000,000 ids (refused from the tile index: over batch_mb), 100,000 ids (served),
1,000,000 ids with a 2-gene panel (served), 1,000,000 ids with batch_mb raised to 1,048,576
(refused by SQLite's blob limit, still before decoding).  Real data: ../shared/data/real or
$DC_REAL_DATA; without it the script says so and exits 0.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

CHILD = r"""
import json, resource, sqlite3, sys, time
db, ext, n, panel, batch_mb = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
con = sqlite3.connect(db)
con.enable_load_extension(True)
con.load_extension(ext)
if batch_mb:
    con.execute("SELECT dc_config('batch_mb', ?)", (batch_mb,))
n_cells = con.execute("SELECT count(*) FROM cells").fetchone()[0]
ids = json.dumps([i * 7919 % n_cells for i in range(n)])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    if panel:
        r = con.execute("SELECT n_cells, length(indices) FROM dc_batch(?, ?)", (ids, panel)).fetchone()
    else:
        r = con.execute("SELECT n_cells, length(indices) FROM dc_batch(?)", (ids,)).fetchone()
    out = {"ok": True, "n_cells": r[0], "nnz": r[1] // 4}
except sqlite3.Error as e:
    out = {"ok": False, "error": str(e)}
out["seconds"] = time.perf_counter() - t
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["rss_before_mb"] = base / 1024
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    real = os.environ.get("DC_REAL_DATA", os.path.join(ROOT, "..", "shared", "data", "real"))
    src = os.path.join(real, "fhil_pbmc3k.h5ad")
    if not os.path.exists(src):
        print(f"skipped: real data not present ({src})")
        return 0
    os.makedirs(a.work, exist_ok=True)
    db = os.path.join(a.work, "pbmc3k_t1000.dcdb")
    if not os.path.exists(db):
        subprocess.run([os.path.join(ROOT, "build", "deltacells"), "convert", src, "--tile-cells", "1000", "-o", db,
                        "--quiet"], check=True)
    ext = os.path.join(ROOT, "build", "deltacells.so")
    cases = [("1,000,000 ids", 1000000, "", 0), ("100,000 ids", 100000, "", 0),
             ("1,000,000 ids, 2-gene panel", 1000000, '["CD3E", "MS4A1"]', 0),
             ("1,000,000 ids, batch_mb 1048576", 1000000, "", 1048576)]
    results = []
    for name, n, panel, mb in cases:
        r = subprocess.run([sys.executable, "-c", CHILD, db, ext, str(n), panel, str(mb)], capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        res = json.loads(r.stdout)
        res["case"] = name
        results.append(res)
        if not a.json:
            what = f"served {res['n_cells']} cells, {res['nnz']} nonzeros" if res["ok"] else f"refused: {res['error']}"
            print(f"{name}: {res['seconds']:.2f} s, peak RSS {res['peak_rss_mb']:.0f} MB "
                  f"(before the call {res['rss_before_mb']:.0f} MB); {what}")
    if a.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
