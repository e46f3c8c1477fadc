"""The shipped examples run and say what is true: sql/examples.sql (through the sqlite3 shell,
and statement by statement against native tables that sql/tests/oracle.py builds from the
h5ad with anndata and numpy), examples/train.py (a short run, on generated data and on a
real PBMC file when present), and `make fuzz-long` for a few seconds."""
import json
import os
import re
import sqlite3
import subprocess

import numpy as np
import pytest

from _python_data import PY, ROOT, gen, read_h5ad, real_file

import deltacells

TILE = 400


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("examples")
    h5, db = gen(d, 1500, 500, 21, TILE)
    oracle = d / "oracle.db"
    subprocess.run([PY, str(ROOT / "sql" / "tests" / "oracle.py"), str(h5), str(TILE), str(oracle)],
                   check=True, capture_output=True, timeout=600)
    return h5, db, oracle


def statements(path):
    """The SQL statements of a shell script (dot-commands and comments dropped)."""
    out, cur = [], ""
    for line in open(path):
        if not cur and (line.startswith(".") or line.startswith("--") or not line.strip()):
            continue
        cur += line
        if sqlite3.complete_statement(cur):
            out.append(cur.strip())
            cur = ""
    assert not cur.strip(), f"unterminated statement: {cur!r}"
    return out


def _native_agg(ora, group_col, cell_where="1", genes=None):
    """(label, gene, n_cells, sum, mean, n_expressing, frac, mean_log1p_cpm) per group and gene,
    computed from the oracle's native tables (nonzeros only there), zeros counted."""
    import math
    cells = ora.execute(f"SELECT cell_id, {group_col} FROM cells WHERE {cell_where}").fetchall()
    label = dict(cells)
    names = dict(ora.execute("SELECT gene_id, name FROM genes"))
    total = dict(ora.execute("SELECT cell_id, sum(count) FROM expression_long GROUP BY cell_id"))
    n = {}
    for _, lab in cells:
        n[lab] = n.get(lab, 0) + 1
    acc = {}
    for cid, gid, c in ora.execute("SELECT cell_id, gene_id, count FROM expression_long"):
        if cid not in label or (genes is not None and names[gid] not in genes):
            continue
        a = acc.setdefault((label[cid], gid), [0, 0, 0.0])
        a[0] += c
        a[1] += 1
        a[2] += math.log1p(c / total[cid] * 1e4)
    gids = [g for g in names if genes is None or names[g] in genes]
    out = []
    for lab, k in n.items():
        for g in gids:
            s_, e_, l_ = acc.get((lab, g), [0, 0, 0.0])
            out.append((lab, names[g], k, s_, s_ / k, e_, e_ / k, l_ / k))
    return out


def _check_aggregate(sql, got, ora):
    """The dc_aggregate statements of sql/examples.sql against _native_agg."""
    if "WHERE label = 'NK'" in sql:                       # top 5 genes of NK by mean
        want = [(g, round(m, 3), round(f, 3)) for lab, g, _, _, m, _, f, _ in _native_agg(ora, "cell_type")
                if lab == "NK"]
        top = sorted((w[1] for w in want), reverse=True)[:5]
        assert [r[1] for r in got] == top, (got, top)
        assert all(r in want for r in got), got
    elif "'donor'" in sql:                                # mean log1p cpm of gene 0 among NK, per donor
        top = ora.execute("SELECT name FROM genes WHERE gene_id = 0").fetchone()[0]
        want = [(lab, g, round(l, 4)) for lab, g, _, _, _, _, _, l in
                _native_agg(ora, "donor", "cell_type = 'NK'", {top})]
        assert all(r[2] > 0 for r in got), got              # gene 0 is expressed (a demo shows numbers)
        assert len(got) == min(3, len(want)) and all(
            any(r[:2] == w[:2] and abs(r[2] - w[2]) < 1e-4 for w in want) for r in got), (got, want)
    else:                                                 # one gene per cell type
        name = ora.execute("SELECT name FROM genes WHERE gene_id = 200").fetchone()[0]
        want = [(lab, g, k, s_, round(m, 4), e_, round(f, 4)) for lab, g, k, s_, m, e_, f, _ in
                _native_agg(ora, "cell_type", genes={name})]
        assert sorted(got, key=str) == sorted(want, key=str), (got, want)
    assert got


def test_sql_examples(small):
    h5, db, oracle = small
    script = ROOT / "sql" / "examples.sql"
    # as a user runs it: the shell, from the repo root, exit 0 and nothing on stderr
    r = subprocess.run(["sqlite3", "-batch", "-bail", str(db)], stdin=open(script), cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    shown = r.stdout.splitlines()
    # every statement again, through Python, checked against the oracle's native tables
    con = deltacells.connect(db)
    ora = sqlite3.connect(f"file:{oracle}?mode=ro", uri=True)
    stmts = statements(script)
    assert len(stmts) >= 10
    checked = set()
    for sql in stmts:
        got = con.execute(sql).fetchall()
        if sql.startswith("EXPLAIN QUERY PLAN"):
            assert any("cells" in str(row[-1]) for row in got), got
            checked.add("plan")
        elif "dc_batch" in sql:
            ids = [c for (c,) in ora.execute("SELECT cell_id FROM cells WHERE cell_type = 'NK'")]
            nnz = ora.execute("SELECT count(*) FROM expression_long WHERE cell_id IN "
                              "(SELECT cell_id FROM cells WHERE cell_type = 'NK')").fetchone()[0]
            assert got == [(len(ids), 4 * nnz)] and nnz > 0
            checked.add("dc_batch")
        elif sql == "SELECT * FROM tiles;":
            want = ora.execute("SELECT tile, first_cell, n_cells, nnz FROM tiles ORDER BY tile").fetchall()
            assert [row[:4] for row in got] == want
            assert all(row[4] > 0 and 1 <= row[5] <= min(8, row[2]) for row in got)
            checked.add("tiles")
        elif "dc_aggregate" in sql:
            _check_aggregate(sql, got, ora)
            checked.add(sql)
        elif "dc_config" in sql:
            assert got == [(os.cpu_count(), con.execute("SELECT dc_config('cache_mb')").fetchone()[0])]
            assert got[0][1] > 0
            checked.add("dc_config")
        else:
            want = ora.execute(sql).fetchall()
            assert got == want, sql
            assert want and all(v is not None for row in want for v in row), sql   # a real answer
            checked.add(sql)
    assert {"plan", "dc_batch", "tiles", "dc_config"} <= checked and len(checked) == len(stmts)
    # the shell showed the same answers: the cell type counts, in its column layout
    for cell_type, n in ora.execute("SELECT cell_type, count(*) FROM cells GROUP BY cell_type"):
        assert any(re.fullmatch(rf"{re.escape(str(cell_type))}\s+{n}\s*", ln) for ln in shown), (cell_type, n)
    con.close()
    ora.close()


TRAIN = str(ROOT / "examples" / "train.py")
REPORT = re.compile(r"(?P<name>\S+): (?P<total>[\d,]+) cells, .* trained on (?P<train>[\d,]+) cells for "
                    r"(?P<epochs>\d+) epochs \(loss (?P<loss>[\d.]+)\)\n"
                    r"  held-out accuracy (?P<acc>[\d.]+) on (?P<val>[\d,]+) cells \(majority class (?P<maj>[\d.]+)\)\n"
                    r"  data-stall fraction (?P<stall>[\d.]+) ")


def train(data, out, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([PY, TRAIN, "--data", str(data), "--out", str(out), *args],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    m = REPORT.search(r.stdout)
    assert m, r.stdout
    return {k: float(v.replace(",", "")) if k != "name" else v for k, v in m.groupdict().items()}


def test_train_example_generated(tmp_path):
    """A short run on generated data (labels unrelated to counts): the report's counts are the
    h5ad's labelled cells split 80/20, and the fractions are fractions."""
    data = tmp_path / "data"
    data.mkdir()
    h5, _ = gen(data, 1200, 300, 5, 500)
    for f in data.iterdir():       # only the h5ad stays in the data folder
        if f.suffix != ".h5ad":
            f.unlink()
    rep = train(data, tmp_path / "out", "--epochs", "1", "--top-genes", "100", "--workers", "2")
    labelled = int(read_h5ad(h5).obs["cell_type"].notna().sum())
    assert rep["total"] == labelled and rep["train"] + rep["val"] == labelled
    assert abs(rep["val"] - 0.2 * labelled) <= 0.05 * labelled
    assert rep["epochs"] == 1
    for k in ("acc", "maj", "stall"):
        assert 0 <= rep[k] <= 1


def test_train_example_real(tmp_path):
    """Three epochs on the real PBMC 3k file learn its cell types: well above the majority class."""
    src = real_file("fhil_pbmc3k.h5ad")
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(src, data / src.name)
    rep = train(data, tmp_path / "out", "--epochs", "3")
    assert rep["name"] == "fhil_pbmc3k.dcdb"
    assert rep["acc"] > rep["maj"] + 0.2, rep


def test_make_fuzz_long_runs(tmp_path):
    """`make fuzz-long` with FUZZ_SECONDS=2: every fuzz target runs and exits cleanly."""
    if subprocess.run(["which", "clang"], capture_output=True).returncode != 0:
        pytest.skip("clang is not installed (make test installs it)")
    r = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "fuzz-long", "FUZZ_SECONDS=2"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    targets = sorted(p.stem for p in (ROOT / "tests" / "fuzz").glob("fuzz_*.c"))
    assert targets
    done = re.findall(r"Done (\d+) runs in (\d+) second", r.stderr)
    assert len(done) == len(targets) and all(int(n) > 0 for n, _ in done), r.stderr[-3000:]
