"""deltacells append / merge: a dataset that changes.

The target: `convert A` then `append B` holds the same cells, obs and counts per gene name as
`convert A B`; `merge` of converted parts equals converting them together; `verify` passes after
each; an append is one transaction (SIGKILL leaves the old dataset), and an open connection sees
the new version after the commit while a reader inside a transaction keeps the old one.
"""
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
import threading
import time

import numpy as np
import pytest

from _converter_util import CONVERTER, PY, ROOT, need_converter, run

sys.path.insert(0, os.path.join(ROOT, "python"))


def write_h5ad(path, n, genes, seed, extra=None, age_kind="int", density=0.2):
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    r = np.random.default_rng(seed)
    X = sp.random(n, len(genes), density=density, random_state=seed, format="csr",
                  data_rvs=lambda k: r.integers(1, 50, k)).astype(np.int32)
    age = r.integers(20, 80, n)
    obs = pd.DataFrame({"cell_type": pd.Categorical(r.choice(["T", "B", "NK"] if seed % 2 else ["T", "Mono", "B"], n)),
                        "age": age if age_kind == "int" else pd.Categorical([f"y{a}" for a in age]),
                        "frac": r.random(n), "doublet": r.random(n) < 0.1},
                       index=[f"{os.path.basename(str(path))}_c{i}" for i in range(n)])
    obs.loc[obs.index[::7], "frac"] = np.nan
    if extra:
        obs[extra] = pd.Categorical(r.choice(["x", "y", "z"], n))
    var = pd.DataFrame({"gene_ids": [f"ENS{g}" for g in genes]}, index=genes)
    ad.AnnData(X=X, obs=obs, var=var, dtype=np.int32).write_h5ad(path)
    return str(path)


def snapshot(path):
    """cells (names, in order), obs (per column: name -> list of values), X by gene name, gene totals."""
    import scipy.sparse as sp

    import deltacells
    a = deltacells.to_anndata(str(path))
    names = list(a.var_names)
    uniq = sorted(set(names))
    col = {g: i for i, g in enumerate(uniq)}
    # duplicate names are summed: which of two same-named genes joins which is not defined by name
    P = sp.csr_matrix((np.ones(len(names)), ([i for i in range(len(names))], [col[g] for g in names])),
                      shape=(len(names), len(uniq)))
    X = (a.X.astype(np.int64) @ P).tocsr()
    X.sort_indices()
    obs = {}
    for c in a.obs.columns:
        s = a.obs[c].astype(object)
        obs[c] = [None if (v is None or (isinstance(v, float) and np.isnan(v)) or v is getattr(__import__("pandas"), "NA"))
                  else (bool(v) if isinstance(v, (bool, np.bool_)) else v) for v in s.tolist()]
    tot = {}
    for g, t in zip(names, a.var["total_counts"].tolist()):
        tot[g] = tot.get(g, 0) + int(t)
    return {"cells": list(a.obs_names), "obs": obs, "genes": uniq, "X": X, "totals": tot}


def assert_same(s1, s2, what):
    assert s1["cells"] == s2["cells"], f"{what}: cells differ"
    assert sorted(s1["obs"]) == sorted(s2["obs"]), f"{what}: obs columns {sorted(s1['obs'])} vs {sorted(s2['obs'])}"
    for c in s1["obs"]:
        assert s1["obs"][c] == s2["obs"][c], f"{what}: obs column {c} differs"
    assert s1["genes"] == s2["genes"], f"{what}: gene names differ"
    d = s1["X"] - s2["X"]
    assert d.count_nonzero() == 0, f"{what}: X differs at {d.count_nonzero()} places"
    assert s1["X"].sum() > 0
    assert s1["totals"] == s2["totals"], f"{what}: genes.total_counts differ"


def verify_ok(path):
    p = run("verify", path, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    need_converter()
    d = tmp_path_factory.mktemp("am")
    a = write_h5ad(d / "a.h5ad", 700, [f"G{i}" for i in range(50)], 1)
    b = write_h5ad(d / "b.h5ad", 400, [f"G{i}" for i in range(20, 80)], 2, extra="batch")
    c = write_h5ad(d / "c.h5ad", 300, [f"G{i}" for i in range(70, 90)] + ["G3"], 3, extra="donor")
    return d, a, b, c


def test_append_equals_convert_together(files, tmp_path):
    d, a, b, c = files
    ds = tmp_path / "x.dcdb"
    run("convert", a, "-o", ds, "--quiet", "--tile-cells", "256")
    p = run("append", ds, b)
    assert "appended 400 cells (30 new genes)" in p.stdout, p.stdout
    assert "warning" not in p.stderr, p.stderr
    verify_ok(ds)
    run("append", ds, c, "--quiet")
    verify_ok(ds)
    # a file the dataset already holds is appended all the same, and said
    again = tmp_path / "again.dcdb"
    import shutil
    shutil.copy(ds, again)
    p = run("append", again, a, "--quiet")
    assert f"warning: {a} is already in {again}; its cells are stored twice" in p.stderr, p.stderr
    verify_ok(again)
    whole = tmp_path / "whole.dcdb"
    run("convert", a, b, c, "-o", whole, "--quiet", "--tile-cells", "256")
    s1, s2 = snapshot(ds), snapshot(whole)
    assert_same(s1, s2, "convert a + append b + append c vs convert a b c")
    assert s1["obs"]["source"][0] == Path(a).name and s1["obs"]["source"][-1] == Path(c).name   # base names
    assert s1["obs"]["batch"][0] is None and s1["obs"]["batch"][700] is not None
    import sqlite3
    con = sqlite3.connect(ds)
    meta = dict(con.execute("SELECT key, value FROM dc_meta").fetchall())
    assert (meta["n_cells"], meta["n_genes"], meta["n_tiles"]) == (1400, 90, 3 + 2 + 2)
    # the first tiles are untouched: 50 genes, as written by convert
    assert con.execute("SELECT count(*) FROM tiles_data").fetchone()[0] == 7


def test_append_several_files_at_once(files, tmp_path):
    d, a, b, c = files
    ds = tmp_path / "x.dcdb"
    run("convert", a, "-o", ds, "--quiet")
    run("append", ds, b, c, "--quiet")
    verify_ok(ds)
    whole = tmp_path / "whole.dcdb"
    run("convert", a, b, c, "-o", whole, "--quiet")
    assert_same(snapshot(ds), snapshot(whole), "append b c at once")


def test_append_across_an_obs_block_boundary(tmp_path):
    need_converter()
    a = write_h5ad(tmp_path / "a.h5ad", 65536 + 900, [f"G{i}" for i in range(12)], 5, density=0.3)
    b = write_h5ad(tmp_path / "b.h5ad", 66000, [f"G{i}" for i in range(6, 20)], 6, extra="batch", density=0.3)
    ds = tmp_path / "x.dcdb"
    run("convert", a, "-o", ds, "--quiet")
    run("append", ds, b, "--quiet")
    verify_ok(ds)
    whole = tmp_path / "whole.dcdb"
    run("convert", a, b, "-o", whole, "--quiet")
    assert_same(snapshot(ds), snapshot(whole), "append across obs blocks")
    import sqlite3
    blocks = sqlite3.connect(ds).execute("SELECT block, first_cell, n_cells FROM cells_blocks WHERE col = 0 "
                                         "ORDER BY block").fetchall()
    assert blocks == [(0, 0, 65536), (1, 65536, 65536), (2, 131072, 65536 + 900 + 66000 - 131072)]


def test_append_conflicting_column_is_an_error_and_changes_nothing(files, tmp_path):
    d, a, b, c = files
    ds = tmp_path / "x.dcdb"
    run("convert", a, "-o", ds, "--quiet")
    before = sha(ds)
    bad = write_h5ad(tmp_path / "bad.h5ad", 50, [f"G{i}" for i in range(10)], 9, age_kind="category")
    p = run("append", ds, bad, check=False)
    assert p.returncode == 1
    assert "obs column 'age'" in p.stderr and "int" in p.stderr and "category" in p.stderr, p.stderr
    assert sha(ds) == before
    assert sorted(os.listdir(tmp_path)) == ["bad.h5ad", "x.dcdb"]
    p = run("append", ds, tmp_path / "missing.h5ad", check=False)
    assert p.returncode == 1 and "missing.h5ad" in p.stderr
    assert sha(ds) == before
    p = run("append", tmp_path / "bad.h5ad", a, check=False)
    assert p.returncode == 1 and "bad.h5ad" in p.stderr


def test_open_connection_sees_the_new_version_and_a_reader_in_a_transaction_the_old(files, tmp_path):
    import deltacells
    d, a, b, c = files
    ds = tmp_path / "x.dcdb"
    run("convert", a, "-o", ds, "--quiet")
    con = deltacells.connect(str(ds))
    q = ("SELECT (SELECT count(*) FROM cells), (SELECT count(*) FROM genes), (SELECT sum(total_counts) FROM genes), "
         "(SELECT count(*) FROM cells WHERE batch IS NOT NULL)")
    with pytest.raises(Exception):
        con.execute(q).fetchone()     # no column batch yet
    old = con.execute("SELECT (SELECT count(*) FROM cells), (SELECT count(*) FROM genes), "
                      "(SELECT sum(total_counts) FROM genes)").fetchone()
    assert old[0] == 700
    old_nnz = con.execute("SELECT sum(nnz) FROM tiles").fetchone()[0]
    # a second reader holds a read transaction: the append's commit waits for it, and it keeps the old version
    r2 = deltacells.connect(str(ds))
    r2.isolation_level = None
    r2.execute("BEGIN")
    assert r2.execute("SELECT count(*) FROM cells").fetchone()[0] == 700
    proc = subprocess.Popen([CONVERTER, "append", str(ds), b, "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    assert proc.poll() is None, "the append committed under an open read transaction"
    assert r2.execute("SELECT count(*) FROM cells").fetchone()[0] == 700
    assert r2.execute("SELECT sum(nnz) FROM tiles").fetchone()[0] == old_nnz
    r2.execute("COMMIT")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    new = con.execute(q).fetchone()
    assert new[0] == 1100 and new[1] == 80 and new[3] == 400
    assert new[2] > old[2]
    assert con.execute("SELECT sum(nnz) FROM tiles").fetchone()[0] > old_nnz
    assert r2.execute("SELECT count(*) FROM cells").fetchone()[0] == 1100
    # dc_batch on the same connection reads the new tiles (cells 700.. are the appended ones)
    n = con.execute("SELECT n_cells, length(indices) FROM dc_batch(?)", (str(list(range(695, 705))),)).fetchone()
    assert n[0] == 10 and n[1] > 0
    tot = con.execute("SELECT sum(count) FROM expression_long WHERE cell_id >= 700").fetchone()[0]
    assert tot == new[2] - old[2]


def test_sigkill_during_append_leaves_the_old_dataset(tmp_path):
    need_converter()
    a = write_h5ad(tmp_path / "a.h5ad", 500, [f"G{i}" for i in range(100)], 1)
    big = write_h5ad(tmp_path / "big.h5ad", 40000, [f"G{i}" for i in range(50, 3000)], 4, extra="batch", density=0.08)
    ds = tmp_path / "x.dcdb"
    run("convert", a, "-o", ds, "--quiet")
    old_sha = sha(ds)
    old = snapshot(ds)
    journal = str(ds) + "-journal"
    mid = 0
    for attempt in range(6):
        proc = subprocess.Popen([CONVERTER, "append", str(ds), big, "--quiet"])
        size0 = os.path.getsize(ds)
        killed_mid = False
        deadline = time.time() + 120
        while proc.poll() is None and time.time() < deadline:
            # the main file written while its journal exists: inside the transaction
            if os.path.exists(journal) and (attempt % 2 == 0 or os.path.getsize(ds) != size0):
                proc.send_signal(signal.SIGKILL)
                killed_mid = True
                break
            time.sleep(0.0005)
        proc.wait(timeout=60)
        verify_ok(ds)                 # read-only open: sees the old dataset
        if killed_mid and proc.returncode == -signal.SIGKILL:
            s = snapshot(ds)
            if s["cells"] == old["cells"]:
                mid += 1
                assert_same(s, old, "after SIGKILL")
                continue
        # the kill came too late: the append committed; start again from the old dataset
        run("convert", a, "-o", ds, "--quiet", "--force")
        old_sha = sha(ds)
        old = snapshot(ds)
    assert mid >= 2, f"only {mid} kills landed inside the transaction"
    # a later append (read-write open rolls the journal back) works and verifies
    run("append", ds, big, "--quiet")
    verify_ok(ds)
    assert len(snapshot(ds)["cells"]) == 40500
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f], os.listdir(tmp_path)
    del old_sha


def test_merge_halves_equals_whole(files, tmp_path):
    d, a, b, c = files
    pa, pb, pc = (tmp_path / f"{x}.dcdb" for x in "abc")
    for h5, out in ((a, pa), (b, pb), (c, pc)):
        run("convert", h5, "-o", out, "--quiet", "--tile-cells", "256")
    m = tmp_path / "m.dcdb"
    p = run("merge", pa, pb, pc, "-o", m)
    assert "tiles decoded and encoded again" in p.stdout
    assert "warning" not in p.stderr, p.stderr
    verify_ok(m)
    whole = tmp_path / "whole.dcdb"
    run("convert", a, b, c, "-o", whole, "--quiet", "--tile-cells", "256")
    sm = snapshot(m)
    # merged parts name their source by the part's input file, as converting them together does
    assert_same(sm, snapshot(whole), "merge a b c vs convert a b c")
    # merging a converted pair with a third: the same again
    ab = tmp_path / "ab.dcdb"
    run("convert", a, b, "-o", ab, "--quiet", "--tile-cells", "256")
    m2 = tmp_path / "m2.dcdb"
    run("merge", ab, pc, "-o", m2, "--quiet")
    verify_ok(m2)
    assert_same(snapshot(m2), snapshot(whole), "merge (a b) c vs convert a b c")
    # the inputs are untouched and the output has its own dataset id
    verify_ok(pa)
    import sqlite3
    ids = {sqlite3.connect(x).execute("SELECT value FROM dc_meta WHERE key = 'dataset_id'").fetchone()[0] for x in (pa, m, m2)}
    assert len(ids) == 3


def test_merge_copies_tiles_when_gene_ids_agree(files, tmp_path):
    d, a, b, c = files
    pa = tmp_path / "a.dcdb"
    run("convert", a, "-o", pa, "--quiet")
    m = tmp_path / "m.dcdb"
    p = run("merge", pa, pa, "-o", m)
    assert "(0 tiles decoded" in p.stdout, p.stdout
    # the same dataset twice is allowed, and said (as convert says of a file given twice)
    assert f"warning: {pa} is given twice; its cells are stored twice" in p.stderr, p.stderr
    verify_ok(m)
    s = snapshot(m)
    s1 = snapshot(pa)
    assert s["X"].shape[0] == 2 * s1["X"].shape[0]
    assert (s["X"][:700] - s1["X"]).count_nonzero() == 0 and (s["X"][700:] - s1["X"]).count_nonzero() == 0
    # a copy is the same dataset (its id); a merged dataset has an id of its own
    import shutil
    cp = tmp_path / "copy.dcdb"
    shutil.copy(pa, cp)
    p = run("merge", pa, m, cp, "-o", tmp_path / "m3.dcdb")
    assert f"warning: {cp} is the same dataset as {pa} (or a copy of it)" in p.stderr, p.stderr
    assert str(m) + " is" not in p.stderr, p.stderr


def test_merge_errors(files, tmp_path):
    d, a, b, c = files
    pa = tmp_path / "a.dcdb"
    run("convert", a, "-o", pa, "--quiet")
    p = run("merge", pa, pa, "-o", pa, check=False)
    assert p.returncode == 1 and "exists" in p.stderr
    p = run("merge", pa, a, "-o", tmp_path / "m.dcdb", check=False)
    assert p.returncode == 1 and "a.h5ad" in p.stderr, p.stderr
    p = run("merge", pa, "-o", tmp_path / "m.dcdb", check=False)
    assert p.returncode == 2
    assert sorted(os.listdir(tmp_path)) == ["a.dcdb"]


@pytest.mark.parametrize("pair", [("fhil_pbmc3k.h5ad", "scanpy_10x10k_subset.h5ad"),
                                  ("mudan_sorted_pbmc_reference.h5ad", "soupx_pbmc4k_subset.h5ad")])
def test_real_append_and_merge_equal_convert_together(pair, tmp_path):
    from _converter_util import real_file
    need_converter()
    f1, f2 = (str(real_file(x)) for x in pair)
    ds = tmp_path / "x.dcdb"
    run("convert", f1, "-o", ds, "--quiet")
    run("append", ds, f2, "--quiet")
    verify_ok(ds)
    whole = tmp_path / "whole.dcdb"
    run("convert", f1, f2, "-o", whole, "--quiet")
    sw = snapshot(whole)
    assert_same(snapshot(ds), sw, f"real: convert {pair[0]} + append {pair[1]}")
    p2 = tmp_path / "b.dcdb"
    run("convert", f2, "-o", p2, "--quiet")
    m = tmp_path / "m.dcdb"
    run("merge", tmp_path / "x.dcdb", p2, "-o", m, "--quiet")   # (f1 f2) + f2
    verify_ok(m)
    p1 = tmp_path / "a.dcdb"
    run("convert", f1, "-o", p1, "--quiet")
    m2 = tmp_path / "m2.dcdb"
    run("merge", p1, p2, "-o", m2, "--quiet")
    verify_ok(m2)
    assert_same(snapshot(m2), sw, f"real: merge of {pair[0]} and {pair[1]}")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_shards_with_a_shared_gene_order_merge_by_copying_tiles(files, tmp_path):
    d, a, b, c = files
    pa, pb, pc = (tmp_path / f"{x}.dcdb" for x in "abc")
    run("convert", a, "-o", pa, "--quiet", "--tile-cells", "256")
    order = tmp_path / "order.txt"      # the union of the genes, as a text file (any order works)
    order.write_text("\n".join(f"  G{i} " for i in range(90)) + "\n\n")
    run("convert", b, "-o", pb, "--quiet", "--tile-cells", "256", "--gene-order", pa)
    run("convert", c, "-o", pc, "--quiet", "--tile-cells", "256", "--gene-order", order)
    verify_ok(pb)
    verify_ok(pc)
    m = tmp_path / "m.dcdb"
    p = run("merge", pa, pb, "-o", m)
    assert "(0 tiles decoded" in p.stdout, p.stdout
    whole = tmp_path / "whole.dcdb"
    run("convert", a, b, "-o", whole, "--quiet", "--tile-cells", "256")
    verify_ok(m)
    assert_same(snapshot(m), snapshot(whole), "merge of shards with a shared gene order")
    # a shard numbered by another order: its tiles are decoded and encoded again, the result the same
    m2 = tmp_path / "m2.dcdb"
    p = run("merge", pa, pb, pc, "-o", m2)
    assert "(2 tiles decoded" in p.stdout, p.stdout
    whole3 = tmp_path / "whole3.dcdb"
    run("convert", a, b, c, "-o", whole3, "--quiet", "--tile-cells", "256")
    assert_same(snapshot(m2), snapshot(whole3), "merge of three shards")
    p = run("convert", a, "-o", tmp_path / "x.dcdb", "--gene-order", tmp_path / "none.txt", check=False)
    assert p.returncode == 1 and "none.txt" in p.stderr


def test_append_and_merge_widen_x_dtype_as_convert_does(tmp_path):
    """X's dtype in the files (dc_meta x_dtype) is united as convert unites its inputs': an int32
    dataset appended or merged with float32 counts of 2^31 and more exports float64 (it kept
    int32 and export wrote 3e9 as -1294967296), and float32 with an int32 count of 2^24 + 1
    exports float64 (float32 rounded it to 2^24).  A dtype that cannot hold a count is an error
    of export, never a wrong number."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    need_converter()

    def h5ad(name, rows, dtype):
        X = sp.csr_matrix(np.array(rows, dtype=dtype))
        ad.AnnData(X=X, obs=pd.DataFrame(index=[f"{name}{i}" for i in range(len(rows))]),
                   var=pd.DataFrame(index=["G0", "G1", "G2"]), dtype=dtype).write_h5ad(tmp_path / f"{name}.h5ad")
        return tmp_path / f"{name}.h5ad"

    small_i = h5ad("i", [[1, 2, 0], [0, 3, 4]], np.int32)
    big_f = h5ad("f", [[2147483904.0, 1, 0], [0, 5, 3e9]], np.float32)
    odd_i = h5ad("j", [[16777217, 1, 0]], np.int32)
    small_f = h5ad("g", [[1.0, 0, 2]], np.float32)
    for first, second, want in ((small_i, big_f, "float64"), (small_f, odd_i, "float64"), (small_i, odd_i, "int32")):
        together = tmp_path / "t.dcdb"
        run("convert", first, second, "-o", together, "--quiet", "--force")
        parts = [ad.read_h5ad(f) for f in (first, second)]
        names = [n for p in parts for n in p.obs_names]
        ref = np.vstack([p.X.toarray().astype(np.float64) for p in parts])
        a, b = tmp_path / "a.dcdb", tmp_path / "b.dcdb"
        for p in (a, b):
            if p.exists():
                p.unlink()
        run("convert", first, "-o", a, "--quiet")
        run("convert", second, "-o", b, "--quiet")
        m = tmp_path / "m.dcdb"
        run("merge", a, b, "-o", m, "--force")
        run("append", a, second)
        for ds in (together, a, m):
            out = tmp_path / "e.h5ad"
            run("export", ds, "-o", out, "--force", "--quiet")
            x = ad.read_h5ad(out)
            assert x.X.dtype == want, (ds.name, x.X.dtype)
            got = x[names, ["G0", "G1", "G2"]].X.toarray().astype(np.float64)
            assert np.array_equal(got, ref), (ds.name, got)
            verify_ok(ds)
    # a wrong x_dtype (an older merge wrote them) is refused by export, naming the dtype
    import sqlite3
    c = sqlite3.connect(m)
    c.execute("UPDATE dc_meta SET value = 'int8' WHERE key = 'x_dtype'")
    c.commit()
    c.close()
    p = run("export", m, "-o", tmp_path / "bad.h5ad", check=False)
    assert p.returncode == 1 and "int8" in p.stderr and "x_dtype" in p.stderr, p.stderr
    assert not (tmp_path / "bad.h5ad").exists()


@pytest.mark.parametrize("narrow,wide", [("int", "real"), ("bool", "int"), ("category", "text"), ("bool", "real")])
def test_append_and_merge_widen_a_column_either_way(tmp_path, narrow, wide):
    """The joins the help promises (int joins real, bool joins int, categorical joins text) work
    whichever side holds the wider kind, as converting the files together does: the dataset's
    own column is stored again in the wider kind.  They failed with 'cannot join' when the
    dataset held the narrower one, e.g. a string column that anndata wrote as categorical in
    one batch (it had repeats) and as plain strings in the next (all unique).  A conflict names
    the appended file, not append's scratch dataset."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    import deltacells
    need_converter()

    def col(kind, n, seed):
        r = np.random.default_rng(seed)
        if kind == "int":
            return r.integers(-5, 1000, n)
        if kind == "real":
            return r.random(n) * 100
        if kind == "bool":
            return r.random(n) < 0.5
        if kind == "category":
            return pd.Categorical(r.choice(["a", "b"], n))
        return np.array([f"u{seed}_{i}" for i in range(n)], dtype=object)

    def h5ad(name, kind, n, seed):
        X = sp.random(n, 6, density=0.5, random_state=seed, format="csr", dtype=np.float32)
        X.data[:] = np.arange(1, X.nnz + 1)
        obs = pd.DataFrame({"v": col(kind, n, seed)}, index=[f"{name}{i}" for i in range(n)])
        p = tmp_path / f"{name}.h5ad"
        ad.AnnData(X=X.astype(np.int32), obs=obs, var=pd.DataFrame(index=[f"G{i}" for i in range(6)]),
                   dtype=np.int32).write_h5ad(p)
        return p

    # more cells first than one obs block holds (65,536): the dataset's column is two blocks
    a, b = h5ad("a", narrow, 65536 + 40, 1), h5ad("b", wide, 25, 2)

    def obs_v(path):
        con = deltacells.connect(str(path))
        rows = con.execute("SELECT name, v FROM cells ORDER BY cell_id").fetchall()
        con.close()
        return rows

    together = tmp_path / "t.dcdb"
    run("convert", a, b, "-o", together, "--quiet")
    want = obs_v(together)
    da, db_ = tmp_path / "da.dcdb", tmp_path / "db.dcdb"
    run("convert", a, "-o", da, "--quiet")
    run("convert", b, "-o", db_, "--quiet")
    m = tmp_path / "m.dcdb"
    run("merge", da, db_, "-o", m)
    run("append", da, b)
    for ds in (m, da):
        assert obs_v(ds) == want, ds.name
        verify_ok(ds)
        assert deltacells.to_anndata(str(ds)).obs["v"].tolist() == deltacells.to_anndata(str(together)).obs["v"].tolist()
    # a conflict names the appended file
    c = h5ad("c", "category", 5, 3)
    p = run("append", m, c, check=False) if wide in ("int", "real") else None
    if p is not None:
        assert p.returncode == 1 and "c.h5ad" in p.stderr and "tmp-append" not in p.stderr, p.stderr


def test_append_and_merge_warn_when_few_genes_are_shared(tmp_path):
    """convert warns when its inputs share few genes (another species, ids against symbols);
    append and merge added 30 new genes beside the 30 the dataset had, with no word, when the
    dataset was keyed by Ensembl id (--gene-key gene_ids) and the appended file by symbol."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    need_converter()
    files = []
    for name, seed in (("ga", 1), ("gb", 2)):
        X = sp.random(50, 30, density=0.3, random_state=seed, format="csr", dtype=np.float32)
        X.data[:] = 1
        var = pd.DataFrame({"gene_ids": [f"ENSG{i:05d}" for i in range(30)]}, index=[f"G{i}" for i in range(30)])
        ad.AnnData(X=X, obs=pd.DataFrame(index=[f"{name}{i}" for i in range(50)]), var=var,
                   dtype=np.float32).write_h5ad(tmp_path / f"{name}.h5ad")
        files.append(tmp_path / f"{name}.h5ad")
    by_id, by_name = tmp_path / "id.dcdb", tmp_path / "name.dcdb"
    run("convert", files[0], "--gene-key", "gene_ids", "-o", by_id, "--quiet")
    run("convert", files[1], "-o", by_name, "--quiet")
    p = run("merge", by_id, by_name, "-o", tmp_path / "m.dcdb")
    assert "warning: " in p.stderr and "shares few genes" in p.stderr and "0 of its 30 genes" in p.stderr, p.stderr
    p = run("append", by_id, files[1])
    assert "gb.h5ad shares few genes" in p.stderr and "--gene-key" in p.stderr, p.stderr
    p = run("append", by_id, files[1], "--gene-key", "gene_ids")   # matched: no warning
    assert "few genes" not in p.stderr and "0 new genes" in p.stdout, p.stdout + p.stderr
