"""Format version 2 (docs/format.md section 1): the genes table stored compactly and read
through the `genes` virtual table, tiles that never span two inputs, the format version
every reader checks, and the size of the real files' datasets against the bound of
issue 9: file <= 1.25 x (expression + obs bytes) + 256 KiB."""
import json
import os
import shutil
import sqlite3
import sys
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _converter_util import EXTENSION, REAL, ROOT, Dataset, check_matrix, convert, corelib, decode_tiles, run

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

REAL_FILES = ["fhil_pbmc3k.h5ad", "mudan_sorted_pbmc_reference.h5ad", "pisces_pbmc1k.h5ad",
              "scanpy_10x10k_subset.h5ad", "soupx_pbmc4k_subset.h5ad"]


def connect(path):
    if not os.path.exists(EXTENSION):
        pytest.skip("build/deltacells.so is not built (run make)")
    con = sqlite3.connect(str(path))
    con.enable_load_extension(True)
    con.execute("SELECT load_extension(?, 'sqlite3_deltacells_init')", (EXTENSION,))
    con.enable_load_extension(False)
    return con


def counts(n, g, seed=0, density=0.3):
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 30, (n, g)) * (rng.random((n, g)) < density)).astype(np.int32)


def write(tmp_path, name, X, var_names, var=None, csc=False):
    n = X.shape[0]
    a = ad.AnnData(X=(sp.csc_matrix(X) if csc else sp.csr_matrix(X)), dtype=np.int32,
                   obs=pd.DataFrame({"k": np.arange(n, dtype=np.int64)}, index=[f"{name}{i}" for i in range(n)]),
                   var=var if var is not None else pd.DataFrame(index=var_names))
    a.var_names = var_names
    p = tmp_path / f"{name}.h5ad"
    a.write_h5ad(p)
    return a, p


def tiles(path):
    con = sqlite3.connect(str(path))
    t = con.execute("SELECT tile, first_cell, n_cells FROM tiles_data ORDER BY tile").fetchall()
    meta = dict(con.execute("SELECT key, value FROM dc_meta"))
    con.close()
    return t, meta


# ---------------------------------------------------------------- tiles and inputs
def test_tiles_never_span_inputs(tmp_path):
    """Three inputs (CSR, CSC, CSC) of 23, 7 and 40 cells with --tile-cells 10: each input has
    tiles of its own (10+10+3, 7, 10x4), recorded in sources, read back exactly."""
    g = [f"G{i}" for i in range(30)]
    a, pa = write(tmp_path, "a", counts(23, 30, 1), g)
    b, pb = write(tmp_path, "b", counts(7, 30, 2), g[::-1], csc=True)
    c, pc = write(tmp_path, "c", counts(40, 30, 3), g, csc=True)
    out = tmp_path / "abc.dcdb"
    convert([pa, pb, pc], out, "--tile-cells", "10")
    t, meta = tiles(out)
    assert [(fc, n) for _, fc, n in t] == [(0, 10), (10, 10), (20, 3), (23, 7), (30, 10), (40, 10), (50, 10),
                                           (60, 10)]
    assert meta["format_version"] == 3 and meta["n_tiles"] == 8
    src = json.loads(meta["sources"])
    assert [(s["first_cell"], s["n_cells"], s["first_tile"], s["n_tiles"]) for s in src] == \
        [(0, 23, 0, 3), (23, 7, 3, 1), (30, 40, 4, 4)]
    for s in src:      # every tile of a source lies inside it
        for tile, fc, n in t[s["first_tile"]:s["first_tile"] + s["n_tiles"]]:
            assert s["first_cell"] <= fc and fc + n <= s["first_cell"] + s["n_cells"]
    ds = Dataset(out)
    check_matrix(ds, [a, b, c])
    ds.close()
    run("verify", out)


def test_tile_split_of_one_input(tmp_path):
    """One input: tiles of --tile-cells cells from cell 0, the last one shorter."""
    g = [f"G{i}" for i in range(12)]
    for n, tc, want in [(25, 10, [10, 10, 5]), (20, 10, [10, 10]), (21, 10, [10, 10, 1]), (5, 10, [5]),
                        (1, 1, [1]), (3, 1, [1, 1, 1])]:
        a, p = write(tmp_path, f"s{n}_{tc}_", counts(n, 12, n), g)
        out = tmp_path / f"s{n}_{tc}.dcdb"
        convert(p, out, "--tile-cells", str(tc))
        t, meta = tiles(out)
        assert [k for _, _, k in t] == want, (n, tc)
        assert json.loads(meta["sources"])[0]["n_tiles"] == len(want)
        ds = Dataset(out)
        check_matrix(ds, [a])
        ds.close()


def test_empty_input_has_no_tiles(tmp_path):
    g = [f"G{i}" for i in range(8)]
    a, pa = write(tmp_path, "a", counts(5, 8, 1), g)
    e, pe = write(tmp_path, "e", np.zeros((0, 8), np.int32), g)
    b, pb = write(tmp_path, "b", counts(6, 8, 2), g)
    out = tmp_path / "aeb.dcdb"
    convert([pa, pe, pb], out, "--tile-cells", "4")
    t, meta = tiles(out)
    assert [(fc, n) for _, fc, n in t] == [(0, 4), (4, 1), (5, 4), (9, 2)]
    src = json.loads(meta["sources"])
    assert [(s["first_tile"], s["n_tiles"]) for s in src] == [(0, 2), (2, 0), (2, 2)]
    run("verify", out)


def test_verify_checks_sources(tmp_path):
    g = [f"G{i}" for i in range(8)]
    _, pa = write(tmp_path, "a", counts(5, 8, 1), g)
    _, pb = write(tmp_path, "b", counts(6, 8, 2), g)
    out = tmp_path / "ab.dcdb"
    convert([pa, pb], out, "--tile-cells", "4")
    run("verify", out)
    bad = tmp_path / "bad.dcdb"
    shutil.copy(out, bad)
    con = sqlite3.connect(bad)
    src = json.loads(con.execute("SELECT value FROM dc_meta WHERE key='sources'").fetchone()[0])
    src[1]["first_tile"] -= 1
    src[0]["n_tiles"] -= 1
    con.execute("UPDATE dc_meta SET value=? WHERE key='sources'", (json.dumps(src),))
    con.commit()
    con.close()
    r = run("verify", bad, check=False)
    assert r.returncode == 1 and "sources[0]" in r.stderr and "do not hold exactly its cells" in r.stderr


# ---------------------------------------------------------------- the genes table
NAMES = ["5", "05", "5.0", "G1", "G1", "CD3E", "", "x y", "ü-gene", "G1", "12", "abc"]


@pytest.fixture(scope="module")
def gds(tmp_path_factory):
    """A dataset whose genes have awkward names (numbers, duplicates, empty) and var columns of
    every kind with NULLs, in blocks of 5 genes; and the same with the default block."""
    d = tmp_path_factory.mktemp("genes")
    g = len(NAMES)
    rng = np.random.default_rng(4)
    var = pd.DataFrame({
        "feature": pd.Categorical(["Gene Expression", None, "Peaks"] * 4),
        "length": pd.array([100, None, 300, 4, 5, 6, 7, 8, None, 10, 11, 12], dtype="Int64"),
        "gc": np.where(np.arange(g) % 4 == 1, np.nan, rng.random(g)),
        "hv": np.arange(g) % 3 == 0,
        "note": np.array(["a", "b", None, "d", "", "f", "g", "h", "i", "j", "k", "l"], dtype=object),
    })
    X = counts(40, g, 9, density=0.5)
    a = ad.AnnData(X=sp.csr_matrix(X), dtype=np.int32, var=var,
                   obs=pd.DataFrame(index=[f"c{i}" for i in range(40)]))
    a.var_names = NAMES
    p = d / "g.h5ad"
    a.write_h5ad(p)
    small, big = d / "small.dcdb", d / "big.dcdb"
    convert(p, small, "--genes-block", "5")
    convert(p, big)
    return a, small, big


def test_genes_blocks_and_table_agree(gds):
    a, small, big = gds
    for path, per in ((small, 5), (big, 1048576)):
        ds = Dataset(path)
        assert ds.meta["genes_block"] == per
        assert ds.db.execute("SELECT count(*) FROM genes_blocks WHERE col=0").fetchone()[0] == (3 if per == 5 else 1)
        assert list(ds.gene_columns) == ["name", "total_counts", "n_cells", "orig_index", "feature", "length", "gc", "hv",
                                         "note"]
        assert [k for _, k in ds.gene_columns.values()] == ["text", "int", "int", "int", "text", "int", "real", "int",
                                                                 "text"]
        con = connect(path)
        cur = con.execute("SELECT * FROM genes ORDER BY gene_id")
        cols = [c[0] for c in cur.description]
        rows = cur.fetchall()
        assert cols == ["gene_id", "name", "total_counts", "n_cells", "orig_index", "feature", "length", "gc", "hv",
                        "note"]
        assert [r[0] for r in rows] == list(range(len(NAMES)))
        for j, c in enumerate(cols[1:], start=1):
            assert [r[j] for r in rows] == ds.genes(c), c
        # the values are anndata's var, in the dataset's gene order
        order = [NAMES.index(n) if NAMES.count(n) == 1 else None for n in ds.gene_names]
        var = a.var
        for r, i in zip(rows, order):
            if i is None:
                continue
            assert r[4] == i  # orig_index: the place in the input's var
            assert r[5] == (None if pd.isna(var["feature"].iloc[i]) else str(var["feature"].iloc[i]))
            assert r[6] == (None if pd.isna(var["length"].iloc[i]) else int(var["length"].iloc[i]))
            assert r[7] == (None if np.isnan(var["gc"].iloc[i]) else float(var["gc"].iloc[i]))
            assert r[8] == int(var["hv"].iloc[i])
            assert r[9] == (None if pd.isna(var["note"].iloc[i]) else var["note"].iloc[i])
        types = con.execute("SELECT typeof(name), typeof(total_counts), typeof(gc) FROM genes WHERE gc IS NOT NULL"
                            " LIMIT 1").fetchone()
        assert types == ("text", "integer", "real")
        con.close()
        ds.close()
        run("verify", path)


QUERIES = [
    "SELECT * FROM genes",
    "SELECT gene_id, name FROM genes ORDER BY gene_id DESC",
    "SELECT gene_id FROM genes WHERE gene_id = 3",
    "SELECT gene_id FROM genes WHERE rowid = 4",
    "SELECT gene_id FROM genes WHERE gene_id = '3'",
    "SELECT gene_id FROM genes WHERE gene_id = ' 3 '",
    "SELECT gene_id FROM genes WHERE gene_id = 3.0",
    "SELECT gene_id FROM genes WHERE gene_id = 3.5",
    "SELECT gene_id FROM genes WHERE gene_id > 2.5 AND gene_id <= 7",
    "SELECT gene_id FROM genes WHERE gene_id >= -5 AND gene_id < 1e300",
    "SELECT gene_id FROM genes WHERE gene_id < 'abc'",
    "SELECT gene_id FROM genes WHERE gene_id > 'abc'",
    "SELECT gene_id FROM genes WHERE gene_id < x'00'",
    "SELECT gene_id FROM genes WHERE gene_id = NULL",
    "SELECT gene_id FROM genes WHERE gene_id IN (1, '2', 3.0, 99, NULL)",
    "SELECT gene_id FROM genes WHERE gene_id BETWEEN 2 AND 5 ORDER BY gene_id DESC",
    "SELECT gene_id FROM genes WHERE gene_id > 9223372036854775807",
    "SELECT gene_id FROM genes WHERE gene_id < -9223372036854775808",
    "SELECT gene_id FROM genes WHERE name = 'G1'",
    "SELECT gene_id FROM genes WHERE name = 'G1' ORDER BY gene_id DESC",
    "SELECT gene_id FROM genes WHERE name = 'G1' AND gene_id > 3",
    "SELECT gene_id FROM genes WHERE name = 'g1'",
    "SELECT gene_id FROM genes WHERE name = 'g1' COLLATE NOCASE",
    "SELECT gene_id FROM genes WHERE name = 5",
    "SELECT gene_id FROM genes WHERE name = 5.0",
    "SELECT gene_id FROM genes WHERE name = '5'",
    "SELECT gene_id FROM genes WHERE name = ''",
    "SELECT gene_id FROM genes WHERE name = x'4731'",
    "SELECT gene_id FROM genes WHERE name = NULL",
    "SELECT gene_id FROM genes WHERE name IS NULL",
    "SELECT gene_id FROM genes WHERE name IN ('G1', 'CD3E', 'nope', 12)",
    "SELECT gene_id FROM genes WHERE name LIKE 'g%'",
    "SELECT g.gene_id, t.v FROM t JOIN genes g ON g.name = t.v",
    "SELECT g.gene_id, t.v FROM t JOIN genes g ON g.gene_id = t.v",
    "SELECT g.gene_id, n.i FROM n JOIN genes g ON g.name = n.i",
    "SELECT count(*), sum(total_counts), max(name), min(gc), sum(hv) FROM genes",
    "SELECT feature, count(*) FROM genes GROUP BY feature ORDER BY 1",
    "SELECT gene_id FROM genes WHERE length IS NULL OR note IS NULL",
]


def test_genes_queries_match_a_native_table(gds):
    """Every query gives what a plain table with the same rows and declared types gives."""
    _, small, _ = gds
    con = connect(small)
    con.execute("CREATE TEMP TABLE ref(gene_id INTEGER PRIMARY KEY, name TEXT, total_counts INTEGER, n_cells INTEGER,"
                " orig_index INTEGER, feature TEXT, length INTEGER, gc REAL, hv INTEGER, note TEXT)")
    con.execute("INSERT INTO ref SELECT * FROM genes")
    con.execute("CREATE TEMP TABLE t(v)")        # no affinity: values as given
    con.executemany("INSERT INTO t VALUES(?)", [("G1",), (5,), ("5",), (3,), ("3",), (2.0,), (None,), (b"G1",)])
    con.execute("CREATE TEMP TABLE n(i INTEGER)")
    con.executemany("INSERT INTO n VALUES(?)", [(5,), (12,), ("abc",)])
    for q in QUERIES:
        ordered = "ORDER BY" in q
        got = con.execute(q).fetchall()
        ref = con.execute(q.replace("genes", "temp.ref")).fetchall()
        if not ordered:
            got, ref = sorted(got, key=repr), sorted(ref, key=repr)
        assert got == ref, q
    con.close()


def test_genes_plans(gds):
    _, small, _ = gds
    con = connect(small)

    def plan(q):
        return " ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + q))
    assert 'INDEX 1:#0 "gene_id" = ?1 prefilter' in plan("SELECT * FROM genes WHERE gene_id = 3")
    assert 'INDEX 1:#1 "name" = ?1 prefilter' in plan("SELECT * FROM genes WHERE name = 'G1'")
    assert '"name"' not in plan("SELECT * FROM genes WHERE name = 'G1' COLLATE NOCASE")
    assert "ORDER BY gene_id DESC" in plan("SELECT * FROM genes ORDER BY gene_id DESC")
    assert "USE TEMP B-TREE" not in plan("SELECT * FROM genes WHERE gene_id > 2 ORDER BY gene_id")
    con.close()


def test_genes_is_read_only_and_drop_removes_its_storage(gds, tmp_path):
    _, small, _ = gds
    p = tmp_path / "c.dcdb"
    shutil.copy(small, p)
    con = connect(p)
    for q in ("UPDATE genes SET name = 'x'", "DELETE FROM genes", "INSERT INTO genes(gene_id) VALUES(99)"):
        with pytest.raises(sqlite3.OperationalError, match="may not be modified"):
            con.execute(q)
    with pytest.raises(sqlite3.OperationalError, match="access permission denied"):
        con.execute("DROP TABLE genes")    # refused unless asked for (dc_config('allow_drop', 1))
    assert "DROP TABLE main.genes refused" in con.execute("SELECT dc_config('last_refusal')").fetchone()[0]
    assert con.execute("SELECT count(*) FROM genes").fetchone()[0] == len(NAMES)
    con.execute("SELECT dc_config('allow_drop', 1)")
    con.execute("DROP TABLE genes")
    left = [r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE name LIKE 'genes%'")]
    assert left == []
    con.close()


def test_genes_of_attached_datasets(gds, tmp_path):
    a, small, _ = gds
    g = [f"A{i}" for i in range(6)]
    _, p2 = write(tmp_path, "o", counts(9, 6, 5), g)
    other = tmp_path / "o.dcdb"
    convert(p2, other)
    con = connect(small)
    con.execute("ATTACH ? AS o", (str(other),))
    assert sorted(r[0] for r in con.execute("SELECT name FROM o.genes")) == g
    assert con.execute("SELECT count(*) FROM main.genes").fetchone()[0] == len(NAMES)
    assert con.execute("SELECT gene_id FROM o.genes WHERE name = 'A3'").fetchone() is not None
    con.close()


def test_genes_see_changes_and_report_damage(gds, tmp_path):
    _, small, _ = gds
    p = tmp_path / "d.dcdb"
    shutil.copy(small, p)
    con = connect(p)
    before = con.execute("SELECT total_counts, n_cells FROM genes ORDER BY gene_id").fetchall()
    # another connection replaces total_counts by n_cells: the first sees it at its next statement,
    # as a block that was not written for its place (format version 3 seals it), never as data
    w = sqlite3.connect(str(p))
    w.execute("UPDATE genes_blocks SET data = (SELECT data FROM genes_blocks b WHERE b.col = 2 AND"
              " b.block = genes_blocks.block) WHERE col = 1")
    w.commit()
    with pytest.raises(sqlite3.DatabaseError, match="column 'total_counts' block 0: checksum mismatch"):
        con.execute("SELECT total_counts, n_cells FROM genes ORDER BY gene_id").fetchall()
    # ... and a change that keeps blocks in their places is seen: the columns back as they were
    w.execute("ATTACH ? AS s", (str(small),))
    w.execute("UPDATE genes_blocks SET data = (SELECT data FROM s.genes_blocks b WHERE b.id = genes_blocks.id)"
              " WHERE col = 1")
    w.commit()
    w.execute("DETACH s")
    after = con.execute("SELECT total_counts, n_cells FROM genes ORDER BY gene_id").fetchall()
    assert after == before
    # a flipped byte in block 1 of the names: SQLITE_CORRUPT naming the column and block
    blob = bytearray(w.execute("SELECT data FROM genes_blocks WHERE col = 0 AND block = 1").fetchone()[0])
    blob[-1] ^= 0xFF
    w.execute("UPDATE genes_blocks SET data = ? WHERE col = 0 AND block = 1", (bytes(blob),))
    w.commit()
    with pytest.raises(sqlite3.DatabaseError) as ei:
        con.execute("SELECT name FROM genes").fetchall()
    assert "column 'name' block 1" in str(ei.value)
    assert getattr(ei.value, "sqlite_errorname", "SQLITE_CORRUPT").startswith("SQLITE_CORRUPT")
    # a missing block
    w.execute("DELETE FROM genes_blocks WHERE col = 4 AND block = 2")
    w.commit()
    with pytest.raises(sqlite3.DatabaseError, match="column 'feature'"):
        con.execute("SELECT feature FROM genes").fetchall()
    # columns the query does not use are not read
    assert len(con.execute("SELECT gene_id FROM genes").fetchall()) == len(NAMES)
    w.close()
    con.close()


# ---------------------------------------------------------------- format versions
def set_version(src, dst, v):
    shutil.copy(src, dst)
    con = sqlite3.connect(str(dst))
    con.execute("UPDATE dc_meta SET value = ? WHERE key = 'format_version'", (v,))
    con.commit()
    con.close()
    return dst


def test_newer_format_version_is_refused_by_every_reader(gds, tmp_path):
    _, small, _ = gds
    p = set_version(small, tmp_path / "v4.dcdb", 4)
    con = connect(p)
    for q in ("SELECT * FROM genes", "SELECT n_cells FROM dc_batch('[0]')", "SELECT * FROM expression LIMIT 1",
              "SELECT * FROM cells", "SELECT * FROM tiles"):
        with pytest.raises(sqlite3.Error, match=r"format_version 4.*versions [12]\.\.3.*upgrade deltacells"):
            con.execute(q).fetchall()
    con.close()
    for cmd in ("info", "verify"):
        r = run(cmd, p, check=False)
        assert r.returncode == 1 and "format_version 4" in r.stderr and "1..3" in r.stderr, r.stderr
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import deltacells
    with pytest.raises(ValueError, match=r"format_version 4; this deltacells reads versions 1\.\.3"):
        deltacells.connect(p)
    for v in (0, "two"):
        q = set_version(small, tmp_path / f"v{v}.dcdb", v)
        with pytest.raises(ValueError, match="format_version"):
            deltacells.connect(q)
        assert run("info", q, check=False).returncode == 1


def test_version_1_dataset_still_reads(gds, tmp_path):
    """A dataset of format version 1 (genes a plain table, 64 KiB pages) reads as before; its
    layout with a version-2 genes table is refused by that table (it needs version 2)."""
    a, small, _ = gds
    p = tmp_path / "v1.dcdb"
    shutil.copy(small, p)
    con = connect(p)
    con.execute("CREATE TABLE g1 AS SELECT * FROM genes")
    con.execute("SELECT dc_config('allow_drop', 1)")
    con.execute("DROP TABLE genes")
    con.execute("ALTER TABLE g1 RENAME TO genes")
    con.execute("CREATE INDEX genes_name ON genes(name)")
    con.execute("UPDATE dc_meta SET value = 1 WHERE key = 'format_version'")
    con.execute("DELETE FROM dc_meta WHERE key = 'dataset_id'")   # version 1 drew none (seals came with 3)
    con.commit()
    ref = connect(small)
    want = ref.execute("SELECT n_cells, indptr, indices, data FROM dc_batch('[0, 5, 39]')").fetchall()
    ref.close()
    assert con.execute("SELECT n_cells, indptr, indices, data FROM dc_batch('[0, 5, 39]')").fetchall() == want
    assert con.execute("SELECT count(*) FROM genes").fetchone()[0] == len(NAMES)
    con.close()
    run("verify", p)
    j = json.loads(run("info", "--json", p).stdout)
    assert j["format_version"] == 1 and "genes_bytes" not in j
    q = set_version(small, tmp_path / "v1b.dcdb", 1)
    con = connect(q)
    with pytest.raises(sqlite3.Error, match=r"format_version 1; this deltacells_genes table reads versions 2\.\.3"):
        con.execute("SELECT * FROM genes").fetchall()
    con.close()


# ---------------------------------------------------------------- real files
def real_paths():
    paths = [os.path.join(REAL, f) for f in REAL_FILES]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        pytest.skip(f"real data not present: {', '.join(missing)}")
    return paths


@pytest.fixture(scope="module")
def real_sets(tmp_path_factory):
    paths = real_paths()
    d = tmp_path_factory.mktemp("realsize")
    outs = []
    for p in paths:
        out = d / (os.path.basename(p)[:-5] + ".dcdb")
        convert(p, out)
        outs.append(out)
    merged = d / "merged.dcdb"
    convert(paths, merged)
    return outs, merged


def test_real_file_size_bound(real_sets):
    """Each real file's dataset is at most 1.25 x (expression + obs bytes) + 256 KiB."""
    outs, _ = real_sets
    for out in outs:
        j = json.loads(run("info", "--json", out).stdout)
        bound = 1.25 * (j["expression_bytes"] + j["obs_bytes"]) + 256 * 1024
        assert j["file_bytes"] == os.path.getsize(out)
        assert j["file_bytes"] <= bound, (out.name, j["file_bytes"], bound)
        assert j["format_version"] == 3 and j["genes_bytes"] > 0


def test_real_merged_tiles_are_the_separate_files_tiles(real_sets):
    """Merged, every input keeps the tile boundaries it has when converted alone."""
    outs, merged = real_sets
    t, meta = tiles(merged)
    src = json.loads(meta["sources"])
    assert len(src) == len(outs)
    for s, out in zip(src, outs):
        alone, _ = tiles(out)
        mine = t[s["first_tile"]:s["first_tile"] + s["n_tiles"]]
        assert [(fc - s["first_cell"], n) for _, fc, n in mine] == [(fc, n) for _, fc, n in alone]
    run("verify", merged, "--quiet")


def test_real_merged_costs_about_the_separate_files(real_sets):
    """Merged, the five files' expression costs at most 1.08x their separate bytes (the
    decoder issue's bound; each tile of one input maps its genes densely)."""
    outs, merged = real_sets
    sep = sum(json.loads(run("info", "--json", o).stdout)["expression_bytes"] for o in outs)
    m = json.loads(run("info", "--json", merged).stdout)["expression_bytes"]
    assert m <= 1.08 * sep, (m, sep, m / sep)


def _decode_tiles(path, simd):
    """Every tile of a dataset decoded with DC_SIMD=simd, as (indptr, indices, values) arrays."""
    old = os.environ.get("DC_SIMD")
    os.environ["DC_SIMD"] = simd
    db = sqlite3.connect(str(path))
    try:
        return [(ip, ix, vx) for _, ip, ix, vx in decode_tiles(db, f"{path.name} with DC_SIMD={simd}: ")]
    finally:
        db.close()
        if old is None:
            os.environ.pop("DC_SIMD", None)
        else:
            os.environ["DC_SIMD"] = old


def test_real_tiles_decode_alike_on_every_path(real_sets):
    """The decoder paths this CPU has (portable C, AVX2, AVX-512) decode every real tile to
    the same bytes (the portable path is checked against anndata by the other real tests)."""
    import ctypes
    lib = corelib()
    lib.dc_simd_supported.argtypes = [ctypes.c_int]
    paths = [("avx2", 1), ("avx512", 2)]
    have = [name for name, level in paths if lib.dc_simd_supported(level)]
    if not have:
        pytest.skip("this CPU has neither AVX2 nor AVX-512: only the portable path exists")
    outs, merged = real_sets
    for ds in list(outs) + [merged]:
        ref = _decode_tiles(ds, "scalar")
        for name in have:
            got = _decode_tiles(ds, name)
            assert len(got) == len(ref)
            for (a, b, c), (x, y, z) in zip(ref, got):
                assert np.array_equal(a, x) and np.array_equal(b, y) and np.array_equal(c, z), (ds.name, name)
