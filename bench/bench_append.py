#!/usr/bin/python3
"""append and merge against converting everything together (issue 13's targets), same run.

    /usr/bin/python3 bench/bench_append.py [--files 10] [--cells 3000] [--genes 8000] [--reps 3]
        [--real ../shared/data/real] [--json]

append: 10 small generated h5ad files (scripts/gen_h5ad.py, seeds 1..10): `convert` of the
first then `append` of each other one, one at a time (9 transactions), against one `convert`
of all 10.  Target: at most 1.10x.
merge: the first half and the second half converted apart, then `merge`d, against the
`convert` of the whole (the halves' conversion is not counted: merge is the step after sharded
conversion).  Target: merge at least 5x faster.  Twice: shards converted apart (each numbers its
genes by its own counts, so merge decodes and encodes the second one's tiles again), and shards
converted with a shared gene order (`convert --gene-order FIRST.dcdb`: every tile copied).  Also on the real files when present (the
first two against the other three).
Wall-clock seconds, best of --reps (the machine is shared; ratios are of the same run).
"""
import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONV = os.path.join(ROOT, "build", "deltacells")
GEN = os.path.join(ROOT, "scripts", "gen_h5ad.py")


def run(*args):
    p = subprocess.run([CONV, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"deltacells {' '.join(map(str, args))}: {p.stderr}")
    return p.stdout


def timed(fn, reps):
    """(wall s, CPU s of the child processes: user + system), each the best of reps."""
    best, best_cpu = None, None
    for _ in range(reps):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        best = dt if best is None else min(best, dt)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    return best, best_cpu


def clean(*paths):
    for p in paths:
        if os.path.exists(p):
            os.unlink(p)


def bench_append(d, files, reps):
    together = os.path.join(d, "together.dcdb")
    one = os.path.join(d, "one_by_one.dcdb")

    def conv_all():
        clean(together)
        run("convert", *files, "-o", together, "--quiet")

    def append_each():
        clean(one)
        run("convert", files[0], "-o", one, "--quiet")
        for f in files[1:]:
            run("append", one, f, "--quiet")

    def conv_each():   # the floor of one process per file: each file converted on its own
        for i, f in enumerate(files):
            x = os.path.join(d, f"each{i}.dcdb")
            clean(x)
            run("convert", f, "-o", x, "--quiet")

    (t_conv, c_conv), (t_app, c_app) = timed(conv_all, reps), timed(append_each, reps)
    t_each, c_each = timed(conv_each, reps)
    return {"files": len(files), "convert_together_s": round(t_conv, 3), "convert_then_append_each_s": round(t_app, 3),
            "ratio": round(t_app / t_conv, 3), "convert_together_cpu_s": round(c_conv, 3),
            "convert_then_append_each_cpu_s": round(c_app, 3), "cpu_ratio": round(c_app / c_conv, 3), "convert_each_apart_s": round(t_each, 3),
            "convert_each_apart_cpu_s": round(c_each, 3), "apart_cpu_ratio": round(c_each / c_conv, 3), "target": "<= 1.10"}


def bench_merge(d, files, reps, tag, shared_order=False):
    half = len(files) // 2
    a, b, whole, m = (os.path.join(d, f"{tag}_{x}.dcdb") for x in ("a", "b", "whole", "m"))
    clean(a, b)
    run("convert", *files[:half], "-o", a, "--quiet")
    # shared_order: the second shard numbers its genes as the first does (--gene-order), so merge copies its tiles
    run("convert", *files[half:], "-o", b, "--quiet", *(["--gene-order", a] if shared_order else []))

    def conv_whole():
        clean(whole)
        run("convert", *files, "-o", whole, "--quiet")

    out = {}

    def merge():
        clean(m)
        out["summary"] = run("merge", a, b, "-o", m)

    (t_conv, c_conv), (t_merge, c_merge) = timed(conv_whole, reps), timed(merge, reps)
    return {"inputs": tag, "shards_share_gene_order": shared_order, "convert_whole_s": round(t_conv, 3), "merge_halves_s": round(t_merge, 3),
            "speedup": round(t_conv / t_merge, 2), "convert_whole_cpu_s": round(c_conv, 3),
            "merge_halves_cpu_s": round(c_merge, 3), "cpu_speedup": round(c_conv / max(c_merge, 1e-9), 2),
            "target": ">= 5", "merge_summary": out["summary"].strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--cells", type=int, default=3000)
    ap.add_argument("--genes", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--real", default=os.path.join(ROOT, "..", "shared", "data", "real"))
    ap.add_argument("--json", action="store_true")
    o = ap.parse_args()
    if not os.access(CONV, os.X_OK):
        sys.exit("build/deltacells is not built (run make)")
    res = {}
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as d:
        files = []
        for s in range(1, o.files + 1):
            f = os.path.join(d, f"small{s}.h5ad")
            subprocess.run([sys.executable, GEN, "--cells", str(o.cells), "--genes", str(o.genes), "--seed", str(s),
                            "-o", f], check=True, capture_output=True)
            files.append(f)
        res["append"] = bench_append(d, files, o.reps)
        res["merge_generated"] = bench_merge(d, files, o.reps, "generated")
        res["merge_generated_shared_order"] = bench_merge(d, files, o.reps, "generated", shared_order=True)
        real = sorted(glob.glob(os.path.join(o.real, "*.h5ad")))
        if len(real) >= 2:
            res["merge_real"] = bench_merge(d, real, o.reps, "real")
            res["merge_real_shared_order"] = bench_merge(d, real, o.reps, "real", shared_order=True)
        else:
            res["merge_real"] = res["merge_real_shared_order"] = {"skipped": f"real data not present in {o.real}"}
    if o.json:
        print(json.dumps(res, indent=1))
        return
    a = res["append"]
    print(f"append: convert of {a['files']} files together {a['convert_together_s']} s; convert of the first + "
          f"{a['files'] - 1} appends {a['convert_then_append_each_s']} s: {a['ratio']}x (target <= 1.10x); CPU "
          f"{a['convert_together_cpu_s']} s vs {a['convert_then_append_each_cpu_s']} s: {a['cpu_ratio']}x\n"
          f"    floor, one process per file: {a['files']} separate converts {a['convert_each_apart_s']} s, CPU "
          f"{a['convert_each_apart_cpu_s']} s: {a['apart_cpu_ratio']}x of converting together")
    for k in ("merge_generated", "merge_generated_shared_order", "merge_real", "merge_real_shared_order"):
        r = res[k]
        if "skipped" in r:
            print(f"{k}: skipped: {r['skipped']}")
            continue
        print(f"{k}: convert of the whole {r['convert_whole_s']} s; merge of the two converted halves "
              f"{r['merge_halves_s']} s: {r['speedup']}x faster (target >= 5x); CPU {r['convert_whole_cpu_s']} s vs "
              f"{r['merge_halves_cpu_s']} s: {r['cpu_speedup']}x\n    {r['merge_summary']}")


if __name__ == "__main__":
    main()
