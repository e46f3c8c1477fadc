"""make benchmark's scripts run and write what bench/report reads (issue 15).  A smoke run
on tiny inputs: it checks that every suite runs and writes valid JSON records, and that the
report turns them into tables and plots.  It does not check speed."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT  # noqa: E402

SUITES = ["decode", "levels", "formats", "pipeline", "obs", "real", "remote", "append"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_results")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([PY, "bench/run_benchmarks.py", "--smoke", "--out", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return out, p.stderr


def test_every_suite_writes_valid_records(smoke):
    out, log = smoke
    for s in SUITES:
        path = out / f"{s}.json"
        assert path.exists(), f"{s}: no results file\n{log}"
        recs = json.loads(path.read_text())
        assert isinstance(recs, list) and recs, s
        for r in recs:
            for k in ("suite", "name", "settings", "machine", "commit", "date", "result"):
                assert k in r, (s, k)
            assert r["suite"] == s
            assert "error" not in r, f"{s}/{r['name']}: {r.get('error')}"
            assert isinstance(r["result"], dict), (s, r["name"])
            assert r["machine"]["cores"] >= 1 and r["commit"]


def test_results_carry_the_measurements_the_report_uses(smoke):
    out, _ = smoke
    dec = json.loads((out / "decode.json").read_text())
    for r in dec:
        x = r["result"]
        assert x["simd"] == r["settings"]["simd"]
        assert x["decode_1t_ms"] > 0 and x["zstd_decode_1t_ms"] > 0 and x["bits_per_nnz"] > 0
    fm = json.loads((out / "formats.json").read_text())[0]["result"]
    names = [f["format"] for f in fm["formats"]]
    assert names == ["h5ad", "zarr", "npz", "sqlite_zstd", "deltacells"]
    by = {f["format"]: f for f in fm["formats"]}
    assert by["deltacells"]["read_nt_s"] is not None and by["npz"]["read_nt_s"] is None
    assert all(f["bytes"] > 0 and f["read_1t_s"] > 0 for f in fm["formats"])
    pl = json.loads((out / "pipeline.json").read_text())[0]["result"]
    assert any(q["kind"] == "deltacells" and q["cells_per_s"] > 0 for q in pl["results"])
    rm = json.loads((out / "remote.json").read_text())[0]["result"]
    remote = [q for q in rm["runs"] if q["source"] == "remote"]
    assert {q["max_inflight"] for q in remote} == {0, 2}
    assert all(q["cells_per_s"] > 0 and q["of_ceiling"] > 0 for q in remote)
    # a cold and a warm epoch, with the bytes the store served in each (nginx's access log); one
    # process's warm epoch comes from its block cache, and is then not set against the ceiling
    for q in remote:
        assert len(q["epochs"]) == 2 and q["epochs"][0]["store_MB"] > 0, q
        w = q["warm"]
        assert w["cells_per_s"] > 0 and isinstance(w["from_cache"], bool), q
        assert (w.get("of_ceiling") is None) == w["from_cache"], q
    assert all(c["MB_per_s"] > 0 for c in rm["ceiling"].values())
    ap = json.loads((out / "append.json").read_text())[0]["result"]
    assert ap["append"]["files"] == 3 and ap["append"]["ratio"] > 0
    assert ap["merge_generated"]["speedup"] > 0 and "skipped" in ap["merge_real"]
    ob = json.loads((out / "obs.json").read_text())[0]["result"]
    for q in ob["queries"]:
        for k in ("cold_cells_s", "cold_native_s", "cold_ratio", "warm_cells_s", "warm_native_s", "warm_ratio"):
            assert q[k] > 0, (q["query"], k)
    assert ob["cold_ratio_geomean"] > 0 and ob["warm_ratio_geomean"] > 0 and ob["bytes_ratio"] > 0
    assert not (out / "not_measured.json").exists()


def test_report_writes_tables_and_plots(smoke, tmp_path):
    out, _ = smoke
    md = tmp_path / "benchmarks.md"
    p = subprocess.run([PY, "bench/report", "--results", str(out), "--out", str(md)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    text = md.read_text()
    for h in ("## Where deltacells loses", "## Decode: the reference tile", "## Compression level and chunking",
              "## Formats: size and file -> CSR in RAM", "## DataLoader throughput", "## Obs:",
              "## Real files: decode", "## Remote: a dataset behind an emulated object store",
              "## Changing a dataset: append and merge", "## Is the loader fast enough for my model?"):
        assert h in text, h
    assert "| deltacells |" in text
    # every obs query row carries its numbers (a report that lost them showed dashes)
    obs = text.split("## Obs:")[1].split("\n## ")[0]
    qrows = [l for l in obs.splitlines() if l.startswith("| ") and not l.startswith("| query")
             and l.count("|") == 9]
    assert qrows and all("| - |" not in l for l in qrows), obs
    assert "| avx2 |" in text or "| scalar |" in text
    for png in ("levels.png", "formats.png", "pipeline.png"):
        f = tmp_path / "img" / png
        assert f.exists() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_report_refuses_what_is_not_results(tmp_path):
    (tmp_path / "decode.json").write_text(json.dumps({"not": "a list"}))
    p = subprocess.run([PY, "bench/report", "--results", str(tmp_path), "--out", str(tmp_path / "b.md")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "not a list of records" in p.stderr
    empty = tmp_path / "none"
    empty.mkdir()
    p = subprocess.run([PY, "bench/report", "--results", str(empty), "--out", str(tmp_path / "b.md")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "no results" in p.stderr


def test_pipeline_bench_takes_the_remote_issues_command_line(tmp_path):
    """bench_pipeline.py with --bandwidth-mbps / --latency-ms (issue 14's command) measures the
    emulated object store: bench_remote.py's run, with its ceiling, not an argument error."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([PY, "bench/bench_pipeline.py", "--bandwidth-mbps", "500", "--latency-ms", "2",
                        "--prefetch-tiles", "0,2", "--max-inflight", "2", "--workers", "0", "--epochs", "1",
                        "--cells", "1200", "--genes", "2000", "--batch-size", "300", "--block-kb", "64",
                        "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    assert res["latency_ms"] == 2 and res["bandwidth_MBps_per_connection"] == 500
    c = res["ceiling"]["2"]
    assert c["MB_per_s"] > 0
    # the store's rate is the readers' own read time, not their interpreters' start
    assert 0 < c["s"] <= c["s_with_start"]
    remote = [r for r in res["runs"] if r["source"] == "remote"]
    assert sorted(r["prefetch_tiles"] for r in remote) == [0, 2]
    assert all(r["cells_per_s"] > 0 and r["of_ceiling"] > 0 for r in remote)


@pytest.mark.parametrize("simd", ["scalar", None])
def test_decode_stages_build_splits_a_decode(simd):
    """build/bench_decode_stages (the codec with its stage timers compiled in) prints where one
    decode's time goes: each stage measured, the streams and the cells each a real part of it,
    and together no more than the decode's own time."""
    env = dict(os.environ)
    env.pop("DC_SIMD", None)
    if simd:
        env["DC_SIMD"] = simd
    p = subprocess.run([os.path.join(ROOT, "build", "bench_decode_stages"), "--threads", "1", "--runs", "2",
                        "--no-zstd", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    if simd:
        assert res["simd"] == simd
    assert "stages of a decode on 1 thread" in p.stdout
    st = [res["stage_tables_counts_ms"], res["stage_streams_ms"], res["stage_cells_ms"]]
    assert all(v > 0 for v in st), st
    total = sum(st)
    assert res["stage_streams_ms"] > 0.1 * total and res["stage_cells_ms"] > 0.1 * total, st
    assert res["stage_tables_counts_ms"] < res["stage_streams_ms"], st
    # thread CPU time of a one-thread decode, per stage the fastest run: not more than its wall time
    assert total <= 1.5 * res["decode_1t_ms"], (st, res["decode_1t_ms"])


def test_bench_ab_times_two_revisions_alternately():
    """make bench-ab BASE=HEAD: HEAD's core library built apart with its symbols renamed, linked
    into one bench_decode with this tree's, checked to decode the same tiles right, and timed
    alternately on every decoder path this CPU has.  It does not check speed."""
    if subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("not a git checkout: bench-ab needs a revision to export")
    env = dict(os.environ, RUNS="2")
    env.pop("DC_SIMD", None)
    p = subprocess.run(["make", "-s", "bench-ab", "BASE=HEAD"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("A/B 1 thread(s)")]
    paths = [ln.split(": ", 1)[1].split(" ")[0] for ln in p.stdout.splitlines() if ln.startswith("decoder path")]
    assert "scalar" in paths and len(lines) == len(paths) >= 1, p.stdout
    for ln in lines:
        ratio = float(ln.split("(medians): ")[1].split("x")[0])
        assert ratio > 0, ln


def test_first_touch_bench_measures_each_kind_of_page():
    """build/bench_first_touch prints the cost per 4 KiB page of each way a loader's buffers
    meet memory for the first time, and the two hand-overs of a worker new every epoch as the
    sums of their parts; a page written before costs less than a fresh one (a bench whose
    timer measured nothing would fail here)."""
    p = subprocess.run([os.path.join(ROOT, "build", "bench_first_touch"), "--mib", "4", "--runs", "3", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["mib"] == 4 and res["runs"] == 3
    parts = ["private_4k_us", "private_huge_us", "shared_write_us", "child_write_us", "rewrite_us", "copy_us"]
    assert all(res[k] > 0 for k in parts), res
    assert res["fresh_worker_lanes_us"] == pytest.approx(res["child_populate_us"] + res["child_write_us"], abs=1e-3)
    assert res["fresh_worker_copy_us"] == pytest.approx(res["private_huge_us"] + res["copy_us"], abs=1e-3)
    assert res["rewrite_us"] < res["private_4k_us"], res
    assert ("lanes cost less" in p.stdout) == (res["fresh_worker_lanes_us"] <= res["fresh_worker_copy_us"])
    p = subprocess.run([os.path.join(ROOT, "build", "bench_first_touch"), "--mib", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--mib must be at least 2" in p.stderr


def test_pipeline_bench_where_selects_the_same_cells_for_loader_and_ceiling():
    """bench_pipeline.py --where: the loader (CellDataset(where=)) and the in-memory ceiling
    each deliver exactly the cells the filter selects, counted by SQL on the same dataset."""
    p = subprocess.run([PY, "bench/bench_pipeline.py", "--cells", "1200", "--genes", "2000", "--workers", "0",
                        "--batch-size", "100", "--baselines", "ceiling", "--no-global", "--no-malloc",
                        "--where", "cell_type = 'B cell'", "--json"],
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads(p.stdout)["results"]
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import deltacells
    con = deltacells.connect(os.path.join(ROOT, "build", "bench-data", "bench_1200x2000_s1.dcdb"))
    want = con.execute("SELECT count(*) FROM cells WHERE cell_type = 'B cell'").fetchone()[0]
    con.close()
    assert 0 < want < 1200
    timed = [r for r in res if r["kind"] in ("ceiling", "deltacells")]
    assert sorted(r["kind"] for r in timed) == ["ceiling", "deltacells"]
    assert all(r["cells"] == want and r["cells_per_s"] > 0 for r in timed), timed
