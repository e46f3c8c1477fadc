"""`deltacells verify` checks everything a query relies on (issue 12 cases 4-6): missing tables,
missing rows, dc_meta against the data, statistics recomputed from the values, dictionaries,
seals; one line per fault, at most 20, then a count; --json.  And the property behind it:
after any damage, either verify reports a fault or every query still gives the original answer."""
import json
import random
import shutil
import sqlite3
import subprocess

import pytest

from _cells_data import CONVERTER, ROOT, connect, convert

SQLITE_CORRUPT = 11


@pytest.fixture(scope="module")
def h5(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify")
    p = d / "small.h5ad"
    subprocess.run(["/usr/bin/python3", str(ROOT / "scripts" / "gen_h5ad.py"), "--cells", "3000", "--genes", "200",
                    "--seed", "7", "-o", str(p)], check=True, capture_output=True, timeout=300)
    return p


@pytest.fixture(scope="module")
def good(h5):
    return convert(h5, h5.parent / "good.dcdb", "--tile-cells", "1000")


def damaged(src, tmp_path, *sql, name="bad.dcdb"):
    p = tmp_path / name
    shutil.copy(src, p)
    con = sqlite3.connect(p)
    for q in sql:
        con.execute(q)
    con.commit()
    con.close()
    return p


def verify(path, *args):
    return subprocess.run([str(CONVERTER), "verify", str(path), *args], capture_output=True, text=True, timeout=600)


def faults(path):
    r = verify(path)
    assert r.returncode != 0, f"verify passed a damaged dataset: {r.stdout}"
    lines = [l for l in r.stderr.splitlines() if l.startswith("verify: ")]
    assert lines, r.stderr
    return "\n".join(lines)


def col_id(db, name):
    con = sqlite3.connect(db)
    (c,) = con.execute("SELECT col FROM cells_columns WHERE name = ?", (name,)).fetchone()
    con.close()
    return c


def query_fails(path, q, word):
    con = connect(path)
    with pytest.raises(sqlite3.DatabaseError, match=word):
        con.execute(q).fetchall()
    con.close()


def test_good_dataset(good):
    r = verify(good)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "ok: 3 tiles (3000 cells" in r.stdout and "seals" in r.stdout
    r = verify(good, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["ok"] is True and j["faults"] == 0 and j["messages"] == [] and j["sealed"] is True
    assert (j["tiles"], j["cells"], j["genes"], j["format_version"]) == (3, 3000, 200, 3)
    assert j["obs_blocks"] == sqlite3.connect(good).execute("SELECT count(*) FROM cells_blocks").fetchone()[0]


def test_case4_tiles_data_dropped(good, tmp_path):
    bad = damaged(good, tmp_path, "DROP TABLE tiles_data")
    # the cells table no longer pretends every cell has tile NULL
    query_fails(bad, "SELECT * FROM cells", "tiles_data is missing")
    query_fails(bad, "SELECT tile FROM cells WHERE cell_id = 3", "tiles_data is missing")
    assert "table tiles_data is missing" in faults(bad)


@pytest.mark.parametrize("table", ["cells_dict", "cells_blocks", "cells_columns", "genes_blocks", "genes_columns"])
def test_shadow_table_dropped(good, tmp_path, table):
    bad = damaged(good, tmp_path, f"DROP TABLE {table}")
    assert f"table {table} is missing" in faults(bad)


def test_case5_cells_columns_row_deleted(good, tmp_path):
    c = col_id(good, "age")
    bad = damaged(good, tmp_path, f"DELETE FROM cells_columns WHERE col = {c}")
    query_fails(bad, "SELECT count(*) FROM cells WHERE cell_id < 10", "lacks")
    f = faults(bad)
    assert f"col {c + 1} where {c} is expected" in f and f"blocks of column {c}, which cells_columns lacks" in f


def test_case5_cells_dict_row_deleted(good, tmp_path):
    c = col_id(good, "cell_type")
    bad = damaged(good, tmp_path, f"DELETE FROM cells_dict WHERE col = {c} AND code = 3")
    query_fails(bad, "SELECT cell_type FROM cells", "cell_type")
    assert "'cell_type': dictionary code 4 where 3 is expected" in faults(bad)
    bad = damaged(good, tmp_path, f"DELETE FROM cells_dict WHERE col = {c} AND code = "
                                  f"(SELECT max(code) FROM cells_dict WHERE col = {c})", name="bad2.dcdb")
    assert "'cell_type': the dictionary has" in faults(bad)


@pytest.mark.parametrize("key,delta", [("n_tiles", 1), ("n_tiles", -1), ("n_cells", 1), ("nnz", 5), ("n_genes", 1)])
def test_case5_meta_edited(good, tmp_path, key, delta):
    bad = damaged(good, tmp_path, f"UPDATE dc_meta SET value = value + {delta} WHERE key = '{key}'")
    f = faults(bad)
    assert f"dc_meta.{key}" in f, f
    if key == "n_tiles":
        query_fails(bad, "SELECT * FROM dc_batch('[0]')", "dc_meta says|dc_meta.n_tiles says")


@pytest.mark.parametrize("sql", ["UPDATE dc_meta SET value = 1099511627776 WHERE key = 'n_genes'",
                                 "DELETE FROM dc_meta WHERE key = 'n_genes'"])
def test_meta_n_genes_impossible_or_missing(good, tmp_path, sql):
    """Said once, and the tiles still checked against their own genes: an n_genes of 2^40 made
    verify allocate per-gene totals of that size and end in 'out of memory'; a missing one
    made every tile's genes 'bad gene index'."""
    r = verify(damaged(good, tmp_path, sql))
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.startswith("verify: ")]
    assert len(lines) == 1 and "dc_meta.n_genes is missing, not an integer or impossible" in lines[0], r.stderr
    assert "out of memory" not in r.stderr


def test_meta_not_an_integer(good, tmp_path):
    bad = damaged(good, tmp_path, "UPDATE dc_meta SET value = 'many' WHERE key = 'n_tiles'")
    assert "dc_meta.n_tiles is missing, not an integer or impossible" in faults(bad)


@pytest.mark.parametrize("key,value,words", [
    ("obs_names", '{"nope": "cell_id"}', "dc_meta.obs_names names 'nope', not an obs column"),
    ("obs_names", '{"cell_type": 3}', "dc_meta.obs_names names 'cell_type', not an obs column"),
    ("obs_names", '["cell_type"]', "dc_meta.obs_names is not a JSON object"),
    ("var_names", '{"cell_type": "x"}', "dc_meta.var_names names 'cell_type', not a var column"),
    ("obs_ordered", '["n_counts"]', "dc_meta.obs_ordered names 'n_counts', not a categorical obs column"),
    ("obs_ordered", '["cell_type"', "dc_meta.obs_ordered is not JSON"),
    ("obs_ordered", '[null]', "dc_meta.obs_ordered names NULL, not a categorical obs column"),
    ("var_categories", '{"feature_types": "Gene Expression"}', "dc_meta.var_categories names 'feature_types', not a var column"),
    ("var_categories", '{"feature_types": ["Gene Expression", "CRISPR", "Gene Expression"]}',
     "dc_meta.var_categories lists 'Gene Expression' twice among the categories of 'feature_types'"),
])
def test_meta_of_export_checked(good, tmp_path, key, value, words):
    """dc_meta's keys that export and to_anndata read about the columns (names in the inputs,
    ordered categoricals, var categories) are JSON of their shape naming existing columns."""
    con = sqlite3.connect(good)
    assert {"cell_type", "n_counts"} <= {r[0] for r in con.execute("SELECT name FROM cells_columns")}
    assert "feature_types" in {r[0] for r in con.execute("SELECT name FROM genes_columns")}
    con.close()
    bad = damaged(good, tmp_path, f"INSERT OR REPLACE INTO dc_meta VALUES ('{key}', '{value}')")
    # export reads them too: an error or the columns as they are, never a crash ('[null]' was SIGSEGV)
    r = subprocess.run([str(CONVERTER), "export", str(bad), "-o", str(tmp_path / "x.h5ad")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), (r.returncode, r.stderr)
    assert words in faults(bad)
    ok = damaged(good, tmp_path, "INSERT OR REPLACE INTO dc_meta VALUES ('obs_ordered', '[\"cell_type\"]')",
                 "INSERT OR REPLACE INTO dc_meta VALUES ('obs_names', '{\"n_counts\": \"total\"}')", name="ok.dcdb")
    assert verify(ok).returncode == 0


def stored_counts(db):
    """X of a dataset as stored (genes in gene_id order), through deltacells.to_anndata."""
    import deltacells
    import scipy.sparse as sp
    X = sp.csr_matrix(deltacells.to_anndata(str(db)).X, dtype="uint32")
    X.sort_indices()
    return X


@pytest.mark.parametrize("x_dtype", ["int8", "uint8", "float16"])
def test_meta_x_dtype_that_cannot_hold_a_count(good, tmp_path, x_dtype):
    """dc_meta.x_dtype, the dtype export and to_anndata give X, must hold every count: one that
    does not (the dataset's counts go up to 3366) passed verify, and export then refused the
    dataset.  One fault, naming the largest such count, its tile, cell and gene and how many
    there are (not one line per count)."""
    import numpy as np
    X = stored_counts(good)
    with np.errstate(over="ignore"):
        bad = X.data.astype(x_dtype) != X.data
    at = int(np.flatnonzero(bad)[np.argmax(X.data[bad])])    # the first of the largest
    cell = int(np.searchsorted(X.indptr, at, side="right")) - 1
    big, gene = int(X.data[at]), int(X.indices[at])
    assert big > 2048
    r = verify(damaged(good, tmp_path, f"UPDATE dc_meta SET value = '{x_dtype}' WHERE key = 'x_dtype'"))
    assert r.returncode == 1
    lines = [l for l in r.stderr.splitlines() if l.startswith("verify: ")]
    assert len(lines) == 1, r.stderr
    assert (f"dc_meta.x_dtype is '{x_dtype}', but a count of {big} (tile {cell // 1000}, dataset cell {cell}, "
            f"gene_id {gene}) does not fit it") in lines[0], lines[0]
    assert f"the largest of {int(bad.sum())} counts it does not hold" in lines[0], lines[0]
    assert ("exactly (it holds every count up to 2048" in lines[0]) == (x_dtype == "float16"), lines[0]
    # export refuses it too, naming the dataset, the dtype and a count
    out = tmp_path / "x.h5ad"
    e = subprocess.run([str(CONVERTER), "export", str(tmp_path / "bad.dcdb"), "-o", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert e.returncode == 1 and f"which X's dtype {x_dtype} does not hold" in e.stderr, e.stderr
    assert str(tmp_path / "bad.dcdb") in e.stderr and not out.exists(), e.stderr
    # a dtype that holds them all (the converter records the input's; int32 here) passes
    ok = damaged(good, tmp_path, "UPDATE dc_meta SET value = 'uint16' WHERE key = 'x_dtype'", name="ok.dcdb")
    assert verify(ok).returncode == 0, verify(ok).stderr


@pytest.mark.parametrize("value", ["bool", "float128", "", "Int32"])
def test_meta_x_dtype_unknown(good, tmp_path, value):
    """An x_dtype that is none of the converter's dtype table's names (cv_dtype.c) is a fault:
    export and to_anndata would give X another type than the input's."""
    r = verify(damaged(good, tmp_path, f"UPDATE dc_meta SET value = '{value}' WHERE key = 'x_dtype'"))
    assert r.returncode == 1
    lines = [l for l in r.stderr.splitlines() if l.startswith("verify: ")]
    assert len(lines) == 1 and f"dc_meta.x_dtype is '{value}', which is not a dtype this version knows (int8, " in lines[0], \
        r.stderr
    # absent (a dataset written before it was recorded) is no fault
    assert verify(damaged(good, tmp_path, "DELETE FROM dc_meta WHERE key = 'x_dtype'", name="old.dcdb")).returncode == 0


def test_case5_gene_names_swapped(good, tmp_path):
    # the block of gene names swapped with the block of another text column of the genes table
    con = sqlite3.connect(good)
    (other,) = con.execute("SELECT col FROM genes_columns WHERE kind = 'text' AND col > 0").fetchone()
    con.close()
    bad = damaged(good, tmp_path, "CREATE TEMP TABLE s AS SELECT col, data FROM genes_blocks",
                  f"UPDATE genes_blocks SET data = (SELECT data FROM s WHERE s.col = {other}) WHERE col = 0",
                  f"UPDATE genes_blocks SET data = (SELECT data FROM s WHERE s.col = 0) WHERE col = {other}")
    query_fails(bad, "SELECT name FROM genes", "checksum mismatch")
    query_fails(bad, "SELECT * FROM dc_batch('[0]', '[\"GENE1\"]')", "checksum mismatch")
    f = faults(bad)
    assert "genes column 'name' block 0: checksum mismatch" in f


def downgrade(good, tmp_path, name="v2.dcdb"):
    return damaged(good, tmp_path, "DROP INDEX tiles_data_meta", *[f"ALTER TABLE {t} DROP COLUMN checksum"
                                     for t in ("tiles_data", "cells_blocks", "genes_blocks", "cells_columns")],
                   "DELETE FROM dc_meta WHERE key = 'dataset_id'",
                   "UPDATE dc_meta SET value = 2 WHERE key = 'format_version'", name=name)


@pytest.mark.parametrize("stat,sql", [
    ("max", "UPDATE cells_blocks SET max = max + 1 WHERE col = {age}"),
    ("min", "UPDATE cells_blocks SET min = min - 1 WHERE col = {n_counts}"),
    ("null_count", "UPDATE cells_blocks SET null_count = null_count + 1 WHERE col = {n_counts}"),
    ("present", "UPDATE cells_blocks SET present = zeroblob(length(present)) WHERE col = {cell_type}"),
    ("max", "UPDATE cells_blocks SET max = max * 2 WHERE col = {percent_mt}"),
])
def test_statistics_recomputed(good, tmp_path, stat, sql):
    # without seals (version 2) only recomputing the statistics finds these
    old = downgrade(good, tmp_path)
    ids = {n: col_id(good, n) for n in ("age", "n_counts", "cell_type", "percent_mt")}
    bad = damaged(old, tmp_path, sql.format(**ids), name="v2bad.dcdb")
    assert f"cells_blocks.{stat} disagrees with the block's values" in faults(bad)


def test_case6_output_capped(h5, tmp_path):
    # 30 tiles, every one damaged: 20 lines, then the count
    src = convert(h5, tmp_path / "t30.dcdb", "--tile-cells", "100")
    bad = damaged(src, tmp_path, "UPDATE tiles_data SET data = substr(data, 1, 60) || zeroblob(8) || substr(data, 69)")
    r = verify(bad)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len([l for l in lines if l.startswith("verify: ")]) == 21, r.stderr
    assert "... and 10 more faults (only the first 20 are shown)" in r.stderr
    assert lines[-1].endswith("30 faults found"), lines[-1]
    r = verify(bad, "--json")
    assert r.returncode == 1
    j = json.loads(r.stdout)
    assert j["ok"] is False and j["faults"] == 30 and len(j["messages"]) == 20 and j["not_shown"] == 10
    assert all(m.startswith("tile ") for m in j["messages"])


# --- the property: damage is either found by verify or changes no answer ---------------------

QUERIES = [
    "SELECT * FROM cells ORDER BY cell_id",
    "SELECT count(*) FROM cells WHERE n_counts > 1000",
    "SELECT count(*) FROM cells WHERE age BETWEEN 30 AND 50 AND is_doublet = 0",
    "SELECT cell_type, count(*) FROM cells GROUP BY 1 ORDER BY 1",
    "SELECT count(*) FROM cells WHERE cell_type IN (SELECT cell_type FROM cells WHERE cell_id = 7)",
    "SELECT cell_id FROM cells WHERE percent_mt < 2 ORDER BY cell_id",
    "SELECT * FROM genes ORDER BY gene_id",
    "SELECT * FROM tiles ORDER BY tile",
    "SELECT n_cells, indptr, indices, data FROM dc_batch('[0, 999, 1000, 1999, 2000, 2999, 5, 1500]')",
    "SELECT n_genes, indices, data FROM dc_batch('[0, 1, 1500, 2999]', '[\"GENE0\", \"GENE5\", \"GENE150\"]')",
    "SELECT cell_id, genes, counts FROM expression WHERE cell_id IN (1, 1001, 2001)",
    "SELECT sum(count) FROM expression_long WHERE gene_id = 3",
]


def answers(path):
    con = connect(path)
    out = []
    for q in QUERIES:
        try:
            out.append(con.execute(q).fetchall())
        except sqlite3.DatabaseError as e:
            out.append(("error", str(e)))
    con.close()
    return out


# (table, key column, columns that may be damaged)
DAMAGE = [
    ("tiles_data", "tile", ["first_cell", "n_cells", "nnz", "chunks", "data", "checksum"]),
    ("cells_blocks", "id", ["null_count", "min", "max", "present", "data", "checksum", "first_cell", "n_cells"]),
    ("cells_columns", "col", ["name", "kind", "n_categories", "null_count", "bytes", "checksum"]),
    ("cells_dict", "rowid", ["value", "code"]),
    ("genes_blocks", "id", ["data", "checksum", "n_genes", "first_gene"]),
    ("genes_columns", "col", ["name", "kind", "null_count", "bytes"]),
    ("dc_meta", "key", ["value"]),
]


def random_damage(con, rng):
    table, key, cols = rng.choice(DAMAGE)
    col = rng.choice(cols)
    if table == "cells_dict":
        keys = [r[0] for r in con.execute("SELECT col || ',' || code FROM cells_dict")]
        a, b = rng.sample(keys, 2)
        where = lambda k: f"col = {k.split(',')[0]} AND code = {k.split(',')[1]}"  # noqa: E731
    else:
        keys = [r[0] for r in con.execute(f"SELECT {key} FROM {table}")]
        a, b = rng.sample(keys, 2) if len(keys) > 1 else (keys[0], keys[0])
        where = lambda k: f"{key} = {k!r}" if isinstance(k, str) else f"{key} = {k}"  # noqa: E731
    how = rng.choice(["copy", "swap", "null", "bump"])
    if how in ("copy", "swap"):
        va = con.execute(f"SELECT {col} FROM {table} WHERE {where(a)}").fetchone()[0]
        vb = con.execute(f"SELECT {col} FROM {table} WHERE {where(b)}").fetchone()[0]
        try:
            con.execute(f"UPDATE {table} SET {col} = ? WHERE {where(a)}", (vb,))
            if how == "swap":
                con.execute(f"UPDATE {table} SET {col} = ? WHERE {where(b)}", (va,))
        except sqlite3.IntegrityError:
            return None
    elif how == "null":
        try:
            con.execute(f"UPDATE {table} SET {col} = NULL WHERE {where(a)}")
        except sqlite3.IntegrityError:
            return None
    else:
        v = con.execute(f"SELECT {col} FROM {table} WHERE {where(a)}").fetchone()[0]
        if isinstance(v, int):
            v += rng.choice([-1, 1, 1000])
        elif isinstance(v, float):
            v = v * 1.5 + 1
        elif isinstance(v, bytes) and v:
            i = rng.randrange(len(v))
            v = v[:i] + bytes([v[i] ^ (1 << rng.randrange(8))]) + v[i + 1:]
        elif isinstance(v, str):
            v = v + "x"
        else:
            return None
        try:
            con.execute(f"UPDATE {table} SET {col} = ? WHERE {where(a)}", (v,))
        except sqlite3.IntegrityError:
            return None
    return f"{how} {table}.{col} ({a}, {b})"


@pytest.mark.parametrize("seed", range(6))
def test_damage_is_found_or_harmless(good, tmp_path, seed):
    want = answers(good)
    assert not any(isinstance(a, tuple) and a and a[0] == "error" for a in want)
    rng = random.Random(seed)
    for i in range(10):
        p = tmp_path / f"d{i}.dcdb"
        shutil.copy(good, p)
        con = sqlite3.connect(p)
        what = random_damage(con, rng)
        con.commit()
        con.close()
        if what is None:
            continue
        got = answers(p)
        for q, g, w in zip(QUERIES, got, want):
            assert g == w or (isinstance(g, tuple) and g[0] == "error"), f"{what}: a wrong answer to {q}"
        r = verify(p)
        if r.returncode == 0:
            assert got == want, f"{what}: verify passes but queries fail: {[g for g in got if isinstance(g, tuple)]}"


def test_meta_sizes_by_the_extension_rule(good, tmp_path):
    """verify applies the extension's tile-index rules (ext/tile_check.c, compiled into the
    converter), so what the readers refuse verify names: here dc_meta.n_tiles beyond the
    rule's bound (the readers say "dc_meta has impossible sizes")"""
    bad = damaged(good, tmp_path, "UPDATE dc_meta SET value = 200000001 WHERE key = 'n_tiles'")
    query_fails(bad, "SELECT count(*) FROM expression_long WHERE cell_id = 1", "impossible sizes")
    assert "dc_meta has impossible sizes (n_cells 3000, n_genes 200, n_tiles 200000001)" in faults(bad)


def test_damage_in_an_index_no_query_reads_is_a_fault(good, tmp_path):
    """A page of cells_columns' name index (read only by a lookup or insert by name, e.g. annotate)
    and the free list: SQLite's own integrity check, which verify runs, sees what its reads do not."""
    con = sqlite3.connect(good)
    ps = con.execute("PRAGMA page_size").fetchone()[0]
    try:
        (page,) = con.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_autoindex_cells_columns_1'").fetchone()
    except sqlite3.OperationalError:
        con.close()
        pytest.skip("this sqlite3 module has no dbstat")
    con.close()
    p = tmp_path / "index.dcdb"
    shutil.copy(good, p)
    with open(p, "r+b") as f:
        f.seek((page - 1) * ps + (100 if page == 1 else 0))
        f.write(b"\x0d\xff\xff\xff\xff\xff\xff\xff")     # a leaf page whose header points nowhere
    assert "integrity_check" in faults(p)
    # the annotate that would have needed the index: a clear error, the file as it was
    before = p.read_bytes()
    csv = tmp_path / "a.csv"
    csv.write_text("name,x\n" + "".join(f"{n},1\n" for n in ["cell_0", "cell_1"]))
    r = subprocess.run([str(CONVERTER), "annotate", str(p), str(csv), "--key", "name"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and str(p) in r.stderr and "malformed" in r.stderr, r.stderr
    assert p.read_bytes() == before


@pytest.mark.parametrize("table", ["cells_dict", "cells_blocks", "genes_columns"])
def test_a_read_that_fails_is_a_fault_naming_the_table(good, tmp_path, table):
    """A damaged page under a table verify reads row by row: the failing read is reported as
    such (it used to end the loop as if the rows had ended)."""
    con = sqlite3.connect(good)
    ps = con.execute("PRAGMA page_size").fetchone()[0]
    try:
        pages = [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,))]
    except sqlite3.OperationalError:
        con.close()
        pytest.skip("this sqlite3 module has no dbstat")
    con.close()
    p = tmp_path / f"{table}.dcdb"
    shutil.copy(good, p)
    with open(p, "r+b") as f:
        f.seek((pages[0] - 1) * ps)
        f.write(b"\x0d\xff\xff\xff\xff\xff\xff\xff")
    out = faults(p)
    assert f"reading {table}: database disk image is malformed" in out, out
    assert "integrity_check" in out


@pytest.mark.parametrize("n_cells", [0, 1, 2999])
def test_export_with_n_cells_lowered_fails_cleanly(good, tmp_path, n_cells):
    """export sizes X's indptr by dc_meta.n_cells: tiles that hold more cells are an error naming
    it (before, export wrote past indptr's end and died of SIGSEGV at n_cells 0)."""
    bad = damaged(good, tmp_path, f"UPDATE dc_meta SET value = {n_cells} WHERE key = 'n_cells'")
    assert "dc_meta.n_cells" in faults(bad)
    r = subprocess.run([str(CONVERTER), "export", str(bad), "-o", str(tmp_path / "x.h5ad")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"but dc_meta.n_cells says {n_cells}" in r.stderr, r.stderr
    assert not (tmp_path / "x.h5ad").exists()


@pytest.mark.parametrize("key,value", [("tile_cells", "1 << 40"), ("tile_cells", "-1"), ("chunks", "300"),
                                       ("chunks", "-1"), ("chunk_cells", "-1"), ("chunk_cells", "1 << 40")])
def test_append_refuses_impossible_codec_settings(h5, good, tmp_path, key, value):
    """append encodes new tiles with dc_meta's tile_cells and chunks: out of what convert accepts
    they are an error naming them (tile_cells 2^40 hung, the others were taken as they came)."""
    bad = damaged(good, tmp_path, f"UPDATE dc_meta SET value = {value} WHERE key = '{key}'")
    before = bad.read_bytes()
    r = subprocess.run([str(CONVERTER), "append", str(bad), str(h5), "--quiet"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"dc_meta.{'chunk_cells' if key == 'chunk_cells' else 'tile_cells'}" in r.stderr, r.stderr
    assert "is impossible" in r.stderr, r.stderr
    assert bad.read_bytes() == before


def test_empty_tile_blob_is_a_truncated_header(good, tmp_path):
    """A tile whose blob is empty (SQLite hands it over as NULL): verify and export say its header
    is truncated, not 'tile parse: NULL argument'."""
    bad = damaged(good, tmp_path, "UPDATE tiles_data SET data = x'' WHERE tile = 2")
    assert "tile 2: tile header: truncated (0 bytes, need 32)" in faults(bad)
    r = subprocess.run([str(CONVERTER), "export", str(bad), "-o", str(tmp_path / "x.h5ad")], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 1 and "tile 2: tile header: truncated (0 bytes" in r.stderr, r.stderr


@pytest.mark.parametrize("key,value", [("tile_cells", "1099511627776"), ("tile_cells", "0"), ("chunks", "257"),
                                       ("chunks", "'x'"), ("chunk_cells", "-1"), ("chunk_cells", "'x'")])
def test_codec_settings_out_of_range(good, tmp_path, key, value):
    """dc_meta.tile_cells and chunks are what append and merge encode new tiles with (they refuse
    values convert does not accept: tile_cells 2^40 hung append); verify reported nothing."""
    bad = damaged(good, tmp_path, f"UPDATE dc_meta SET value = {value} WHERE key = '{key}'")
    r = verify(bad)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lo = 0 if key == "chunk_cells" else 1     # chunk_cells 0: every tile has `chunks` chunks
    assert f"dc_meta.{key} is not an integer in {lo}.." in r.stderr, r.stderr
