#!/usr/bin/python3
"""Runs every benchmark and writes bench/results/*.json (what `make benchmark` runs).

    PYTHONPATH=python /usr/bin/python3 bench/run_benchmarks.py [--cells 100000]
        [--threads 1,2] [--workers 0,1,2] [--real ../shared/data/real] [--out bench/results]
        [--only decode,levels,formats,pipeline,obs,real,remote,append] [--smoke]

Suites (each writes bench/results/<suite>.json: a JSON list, one record per measurement):
  decode    build/bench_decode on the reference tile (10,000 x 61,497, 23.5 M nonzeros), once
            per decoder path this CPU has (DC_SIMD=avx2, scalar; and avx512 where present),
            --threads, with the zstd-19 byte-plane design decoded in the same run
  levels    the same tile: rans at each level (cell-size buckets 1-4) and chunk count
            (2, 8, 32, 128), zstd at levels 3 and 19: size against decode time
  formats   bench/compare_formats.py on a synthetic shard shaped like the reference tile
            (scripts/gen_h5ad.py --tile-like) and on each real h5ad: size, file -> CSR
  pipeline  bench/bench_pipeline.py --epochs 3 --fresh-workers --read: DataLoader cells/s by
            workers and batch size (workers persistent, and new every epoch; every batch read)
            (the third epoch, persistent workers; the first epoch's too), against the in-memory
            ceiling, on --cells synthetic cells
  obs       bench/bench_obs.py: the cells table against a native table, and column sizes
  real      build/bench_decode --csr on each real h5ad (bench/dump_csr.py first)
  remote    bench/bench_remote.py: the loader over HTTP range reads from nginx through the VFS's
            throttle (50 ms per request, 150 MB/s per connection), against the raw-read
            ceiling of the same store in the same run; 0 and 2 DataLoader workers,
            prefetch_tiles 2, max_inflight 0 and 4, on the --cells synthetic dataset
  append    bench/bench_append.py: 9 appends against one convert of 10 small files, and merge
            of two converted halves against converting the whole (generated and real files)
A suite that fails or times out is recorded with its error; the others still run.

Every record: {"suite", "name", "settings", "machine", "commit", "date", "result"}, where
`result` is the JSON the benchmark printed.  --smoke runs each suite on tiny inputs (a few
seconds each, for `make test`: it checks that every script runs and writes valid JSON; the
numbers mean nothing).  bench/report turns the results into docs/benchmarks.md.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable or "/usr/bin/python3"
SUITES = ["decode", "levels", "formats", "pipeline", "obs", "real", "remote", "append"]
REAL_NAMES = ["fhil_pbmc3k", "soupx_pbmc4k_subset", "pisces_pbmc1k", "mudan_sorted_pbmc_reference",
              "scanpy_10x10k_subset"]


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    flags = ""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        pass
    simd = "avx512" if " avx512bw" in flags else "avx2" if " avx2" in flags else "scalar"
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "memory_bytes": mem,
            "best_simd": simd, "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def commit():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def last_json(text):
    """The last JSON object of a program's output: one line, or indented over many."""
    lines = text.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{"):
            try:
                return json.loads("\n".join(lines[i:]))
            except ValueError:
                continue
    raise ValueError("no JSON object in the output")


class Runner:
    def __init__(self, out_dir, smoke):
        self.out_dir, self.smoke = out_dir, smoke
        self.machine, self.commit = machine(), commit()
        self.env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))

    def run(self, cmd, timeout, env=None, json_file=None):
        """Runs cmd; returns (parsed JSON of its last '{' line or of json_file, error)."""
        t = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                               env=dict(self.env, **(env or {})))
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout} s: {' '.join(cmd)}"
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
            return None, f"exit {p.returncode}: {' '.join(cmd)}: " + " | ".join(tail)
        try:
            if json_file:
                with open(json_file) as f:
                    return json.load(f), None
            return last_json(p.stdout), None
        except (IndexError, ValueError, OSError) as e:
            return None, f"no JSON from {' '.join(cmd)} ({e}) after {time.time() - t:.0f} s"

    def record(self, suite, name, settings, result, error, skipped=None):
        r = {"suite": suite, "name": name, "settings": settings, "machine": self.machine,
             "commit": self.commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                 timespec="seconds"), "result": result}
        if skipped:
            r["skipped"] = skipped
            print(f"  {suite}/{name}: skipped: {skipped}", file=sys.stderr)
        elif error:
            r["error"] = error
            print(f"  {suite}/{name}: FAILED: {error}", file=sys.stderr)
        else:
            print(f"  {suite}/{name}: ok", file=sys.stderr)
        return r

    def save(self, suite, records):
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, suite + ".json")
        with open(path + ".tmp", "w") as f:
            json.dump(records, f, indent=1)
        os.replace(path + ".tmp", path)


def real_files(real_dir):
    if not real_dir or not os.path.isdir(real_dir):
        return []
    return [os.path.join(real_dir, n + ".h5ad") for n in REAL_NAMES
            if os.path.exists(os.path.join(real_dir, n + ".h5ad"))]


def simd_paths():
    paths = ["avx2", "scalar"]
    try:
        if " avx512bw" in open("/proc/cpuinfo").read():
            paths.append("avx512")
        elif " avx2" not in open("/proc/cpuinfo").read():
            paths = ["scalar"]
    except OSError:
        paths = ["scalar"]
    return paths


def tiny_inputs(work):
    """--smoke: a small tile-like h5ad and its CSR dump (made once per work dir)."""
    h5 = os.path.join(work, "smoke.h5ad")
    csr = os.path.join(work, "smoke_csr")
    if not os.path.exists(h5):
        subprocess.run([PY, "scripts/gen_h5ad.py", "--cells", "600", "--genes", "3000", "--seed", "3",
                        "-o", h5], cwd=ROOT, check=True, capture_output=True)
    if not os.path.isdir(csr):
        subprocess.run([PY, "bench/dump_csr.py", h5, csr], cwd=ROOT, check=True, capture_output=True)
    return h5, csr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=100000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--real", default=os.path.join(os.path.dirname(ROOT), "shared", "data", "real"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--only", default=",".join(SUITES))
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    only = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in only if s not in SUITES]
    if bad:
        ap.error(f"unknown suite(s) {', '.join(bad)}; known: {', '.join(SUITES)}")
    threads = [int(t) for t in a.threads.split(",") if t.strip()]
    if not threads or min(threads) < 1:
        ap.error("--threads: a list of counts >= 1, e.g. 1,2")
    work = os.path.join(ROOT, "build", "bench-smoke" if a.smoke else "bench-run")
    os.makedirs(work, exist_ok=True)
    R = Runner(a.out, a.smoke)
    reals = real_files(a.real)
    nt = ",".join(map(str, threads))
    t_all = time.time()
    smoke_h5 = smoke_csr = None
    if a.smoke:
        smoke_h5, smoke_csr = tiny_inputs(work)
    csr_arg = ["--csr", smoke_csr] if a.smoke else []
    runs = "2" if a.smoke else "7"

    if "decode" in only:
        recs = []
        for path in simd_paths():
            cmd = [os.path.join(ROOT, "build", "bench_decode"), *csr_arg, "--threads", nt, "--runs", runs,
                   "--json"]
            res, err = R.run(cmd, 900, env={"DC_SIMD": path})
            recs.append(R.record("decode", f"reference tile, DC_SIMD={path}" if not a.smoke else f"smoke, {path}",
                                 {"simd": path, "threads": threads, "input": "smoke" if a.smoke else "reference"},
                                 res, err))
        R.save("decode", recs)

    if "levels" in only:
        recs = []
        variants = [("rans", lv, 8) for lv in (1, 2, 3, 4)] + [("rans", 0, ch) for ch in (2, 32, 128)] + \
                   [("zstd", lv, 8) for lv in (3, 19)]
        if a.smoke:
            variants = [("rans", 0, 8), ("zstd", 3, 8)]
        for codec, lv, ch in variants:
            cmd = [os.path.join(ROOT, "build", "bench_decode"), *csr_arg, "--codec", codec, "--level", str(lv),
                   "--chunks", str(ch), "--threads", "1", "--runs", "2" if a.smoke else "5", "--no-zstd",
                   "--json"]
            res, err = R.run(cmd, 900)
            recs.append(R.record("levels", f"{codec} level {lv or 'default'}, {ch} chunks",
                                 {"codec": codec, "level": lv, "chunks": ch}, res, err))
        R.save("levels", recs)

    if "formats" in only:
        recs = []
        inputs = []
        if a.smoke:
            inputs.append(("smoke", smoke_h5))
        else:
            shard = os.path.join(work, "tile_like_10000.h5ad")
            if not os.path.exists(shard):
                subprocess.run([PY, "scripts/gen_h5ad.py", "--tile-like", "--cells", str(min(a.cells, 10000)),
                                "--seed", "0", "-o", shard], cwd=ROOT, check=True, capture_output=True)
            inputs.append(("synthetic tile-like shard", shard))
            inputs += [(os.path.splitext(os.path.basename(f))[0], f) for f in reals]
        for name, f in inputs:
            cmd = [PY, "bench/compare_formats.py", f, "--threads", str(max(threads)),
                   "--repeat", "1" if a.smoke else "3", "--work", os.path.join(work, "formats"), "--json"]
            res, err = R.run(cmd, 1800)
            recs.append(R.record("formats", name, {"input": name, "threads": max(threads)}, res, err))
        R.save("formats", recs)

    if "pipeline" in only:
        cells = 1200 if a.smoke else a.cells
        cmd = [PY, "bench/bench_pipeline.py", "--workers", "0" if a.smoke else a.workers,
               "--batch-size", "300" if a.smoke else "512,5000", "--cells", str(cells),
               "--genes", "2000" if a.smoke else "61497", "--read", "--json"]
        if a.smoke:
            cmd += ["--no-baselines", "--no-global"]
        else:   # training runs many epochs: the last of 3 (persistent workers), the first kept too
            cmd += ["--epochs", "3", "--fresh-workers"]
        res, err = R.run(cmd, 3600)
        R.save("pipeline", [R.record("pipeline", f"{cells} cells", {"cells": cells, "workers": a.workers},
                                     res, err)])

    if "obs" in only:
        cells = 3000 if a.smoke else a.cells
        with tempfile.TemporaryDirectory() as td:
            jf = os.path.join(td, "obs.json")
            cmd = [PY, "bench/bench_obs.py", "--cells", str(cells), "--reps", "1" if a.smoke else "5",
                   "--json", jf]
            res, err = R.run(cmd, 3600, json_file=jf)
        R.save("obs", [R.record("obs", f"{cells} cells", {"cells": cells}, res, err)])

    if "real" in only:
        recs = []
        files = [("smoke", smoke_h5)] if a.smoke else [(os.path.splitext(os.path.basename(f))[0], f)
                                                       for f in reals]
        for name, f in files:
            d = os.path.join(work, "csr_" + name)
            if not os.path.isdir(d):
                subprocess.run([PY, "bench/dump_csr.py", f, d], cwd=ROOT, check=True, capture_output=True)
            for path in simd_paths():
                cmd = [os.path.join(ROOT, "build", "bench_decode"), "--csr", d, "--threads", nt,
                       "--runs", runs, "--json"]
                res, err = R.run(cmd, 900, env={"DC_SIMD": path})
                recs.append(R.record("real", f"{name}, DC_SIMD={path}", {"input": name, "simd": path,
                                                                       "threads": threads}, res, err))
        if not files:
            recs.append(R.record("real", "real files", {"dir": a.real}, None, None,
                                 skipped=f"no real h5ad files in {a.real}"))
        R.save("real", recs)

    if "remote" in only:
        recs = []
        cells = 1200 if a.smoke else a.cells
        for w in ([0] if a.smoke else [0, 2]):
            cmd = [PY, "bench/bench_remote.py", "--workers", str(w), "--prefetch-tiles", "2",
                   "--max-inflight", "0,2" if a.smoke else "0,4", "--cells", str(cells),
                   "--genes", "2000" if a.smoke else "61497", "--batch-size", "300" if a.smoke else "5000",
                   "--json"]
            if a.smoke:
                cmd += ["--latency-ms", "2", "--bandwidth-mbps", "500", "--block-kb", "64"]
            res, err = R.run(cmd, 3600)
            recs.append(R.record("remote", f"{cells} cells, {w} workers", {"cells": cells, "workers": w},
                                 res, err))
        R.save("remote", recs)

    if "append" in only:
        cmd = [PY, "bench/bench_append.py", "--json"]
        if a.smoke:
            cmd += ["--files", "3", "--cells", "300", "--genes", "500", "--reps", "1", "--real",
                    os.path.join(work, "no-real-files")]
        else:
            cmd += ["--real", a.real or os.path.join(work, "no-real-files")]
        res, err = R.run(cmd, 3600)
        R.save("append", [R.record("append", "10 small files" if not a.smoke else "smoke", {}, res, err)])

    print(f"run_benchmarks: done in {time.time() - t_all:.0f} s; results in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
