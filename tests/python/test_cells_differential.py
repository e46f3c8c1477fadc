"""The `cells` virtual table returns exactly what a native SQLite table with the same data and
declared types returns: thousands of generated queries (every pushed-down operator, IN lists
of mixed types, NULL checks, string vs number literals and bound parameters, affinity through
joins and subqueries, collations, LIMIT/OFFSET, ORDER BY, GROUP BY) run against both.

The dataset (140,000 cells, three obs blocks of 65,536) is written with anndata, converted
with build/deltacells, and its obs loaded into a native table in an attached in-memory
database."""
import random
import re

import anndata
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _cells_data import connect, convert, native_table, stored_tiles, tiles_of

N = 140_000
SEED = 20261130
TILE_CELLS = 10_000  # --tile-cells: cell i is in tile i // TILE_CELLS


def make_obs(rng):
    blk = np.arange(N) // 65536
    ct_labels = [f"type {i}" for i in range(28)] + ["B cell", "NK"]
    ct = rng.integers(0, 30, N)
    ct[blk == 1] = rng.integers(0, 8, (blk == 1).sum())        # block 1 holds 8 types only
    ct[(blk == 2) & (rng.random(N) < 0.1)] = -1                # NULLs only in block 2
    weird_labels = ["1", "2", "10", " 5", "5", "5.0", "1e3", "Inf", "-3", "", "x", "abc", "007",
                    "+4", ".5", "B cell", "\u00e9t\u00e9"]
    weird = rng.integers(-1, len(weird_labels), N)
    weird[blk == 0] = rng.integers(0, 4, (blk == 0).sum())
    big_labels = [f"g{i:03d}" for i in range(300)]
    big = rng.integers(-1, 300, N)
    age = pd.array(np.where(blk == 0, rng.integers(20, 40, N),
                            np.where(blk == 1, rng.integers(40, 80, N), rng.integers(60, 90, N))),
                   dtype="Int64")
    age[(blk == 2) & (rng.random(N) < 0.2)] = pd.NA
    specials = np.array([2**53, 2**53 + 1, -2**63, 2**63 - 1, 0, -1, 1, 123456789012345, 5])
    big_int = specials[rng.integers(0, len(specials), N)].astype(np.int64)
    score = np.round(rng.normal(5, 3, N), 2)
    score[rng.random(N) < 0.05] = np.nan
    score[blk == 1] = np.abs(score[blk == 1]) + 100        # block 1 only has large scores
    for i, v in enumerate([-0.0, np.inf, -np.inf, 5.0, 1e300, 0.0, 2.0**53, 0.1]):
        score[1000 + i] = v
    frac = rng.random(N).astype(np.float32)
    flag = rng.random(N) < 0.3
    flag_n = pd.array(rng.random(N) < 0.5, dtype="boolean")
    flag_n[rng.random(N) < 0.1] = pd.NA
    note_labels = np.array(["alpha", "beta", "5", "", "\u00fcn\u00ef", "\u03b2 cell", " 5", "5.0", "Alpha"],
                           dtype=object)
    note = note_labels[rng.integers(0, len(note_labels), N)]
    return pd.DataFrame({
        "cell_type": pd.Categorical.from_codes(ct, ct_labels),
        "weird": pd.Categorical.from_codes(weird, weird_labels),
        "big_cat": pd.Categorical.from_codes(big, big_labels),
        "age": age,
        "n_counts": rng.integers(500, 50000, N),
        "big_int": big_int,
        "score": score,
        "frac": frac,
        "flag": flag,
        "flag_n": flag_n,
        "note": note,
    }, index=[f"c{i:06d}" for i in range(N)])


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("cells_diff")
    rng = np.random.default_rng(SEED)
    obs = make_obs(rng)
    X = sp.random(N, 5, density=0.2, format="csr", random_state=1, dtype=np.float32)
    X.data[:] = np.ceil(X.data * 10)
    h5 = d / "diff.h5ad"
    anndata.AnnData(X=X, obs=obs).write_h5ad(h5)
    path = convert(h5, d / "diff.dcdb", "--tile-cells", str(TILE_CELLS))
    con = connect(path)
    con.execute("ATTACH ':memory:' AS n")
    tiles = tiles_of(N, TILE_CELLS)
    assert np.array_equal(stored_tiles(con, N), tiles)
    kinds = native_table(con, "n", obs, obs.index, tiles)
    # a small table for joins and subqueries: TEXT, INTEGER, REAL and untyped columns
    prng = random.Random(5)
    con.execute("CREATE TABLE n.pick(id INTEGER, t TEXT, i INTEGER, r REAL, u)")
    texts = ["NK", "B cell", "5", "Inf", "", "type 3", "g007", "alpha", "1e3", "10", "x", "5.0"]
    for _ in range(60):
        con.execute("INSERT INTO n.pick VALUES(?,?,?,?,?)",
                    (prng.randrange(N), prng.choice(texts), prng.choice([1, 2, 5, 10, 1000, -3, 7]),
                     prng.choice([5.0, 0.5, 2.0, 1e3]), prng.choice([5, "5", "NK", 1.5, None])))
    con.commit()
    yield con, kinds, obs
    con.close()


def test_schema_and_full_scan(db):
    con, kinds, obs = db
    cols = [r[1] for r in con.execute("PRAGMA table_info(cells)")]
    assert cols == ["cell_id", "name", "tile"] + list(obs.columns)
    types = {r[1]: r[2] for r in con.execute("PRAGMA table_info(cells)")}
    assert types["score"] == "REAL" and types["age"] == "INTEGER" and types["cell_type"] == "TEXT"
    a = con.execute("SELECT * FROM cells ORDER BY cell_id").fetchall()
    b = con.execute("SELECT * FROM n.obs ORDER BY cell_id").fetchall()
    assert len(a) == N
    assert typed(a) == typed(b)


def typed(rows):
    return [tuple((type(v).__name__, v) for v in r) for r in rows]


class Gen:
    """Random WHERE clauses and statements over the obs columns."""

    def __init__(self, rng, kinds, obs):
        self.r = rng
        self.kinds = kinds
        self.cols = list(obs.columns)
        self.labels = {c: list(obs[c].cat.categories) for c in self.cols if kinds[c] == "category"}
        self.params = []

    def lit(self, col):
        r = self.r
        k = self.kinds.get(col, "int")
        choice = r.random()
        if choice < 0.35:   # a value of the column's own domain
            if k == "category":
                v = r.choice(self.labels[col])
            elif k == "text":
                v = r.choice(["alpha", "beta", "5", "", "\u00fcn\u00ef", " 5", "5.0", "Alpha", "zzz"])
            elif k == "real":
                v = r.choice([5.0, 0.1, -0.0, 100.5, 2.5, 1e300, float("inf"), 7.25, 0.5])
            elif k == "bool":
                v = r.choice([0, 1])
            elif col == "cell_id":
                v = r.choice([0, 1, 65535, 65536, 65537, 131071, 131072, N - 1, N, r.randrange(N)])
            elif col == "tile":
                v = r.randrange(-1, 16)
            elif col == "big_int":
                v = r.choice([2**53, 2**53 + 1, -2**63, 2**63 - 1, 0, -1, 5, 123456789012345])
            else:
                v = r.randrange(0, 50000) if col == "n_counts" else r.randrange(15, 95)
        elif choice < 0.55:
            v = r.choice(["5", " 5", "5.0", "1e3", "Inf", "10", "-3", "007", "+4", ".5", "abc", "",
                          "NK", "B cell", "type 1", "g100", "1"])
        elif choice < 0.75:
            v = r.choice([5, 1, 10, 1000, -3, 0, 7, 2**53 + 1, 9223372036854775807])
        elif choice < 0.9:
            v = r.choice([5.0, 0.5, 1e3, 10.0, -3.0, 2.0**53, 1e30, 7.25, float("inf")])
        elif choice < 0.95:
            v = None
        else:
            v = b"\x41"
        if r.random() < 0.3:   # a bound parameter (no affinity)
            self.params.append(v)
            return "?"
        return sql_lit(v)

    def pred(self):
        r = self.r
        x = r.random()
        col = r.choice(self.cols + ["cell_id", "cell_id", "tile", "name", "rowid"])
        if x < 0.45:
            op = r.choice(["=", "=", "<", "<=", ">", ">=", "==", "!=", "<>"])
            if r.random() < 0.15:
                return f"{self.lit(col)} {op} {col}"
            return f"{col} {op} {self.lit(col)}"
        if x < 0.55:
            return f"{col} BETWEEN {self.lit(col)} AND {self.lit(col)}"
        if x < 0.72:
            items = ", ".join(self.lit(col) for _ in range(r.randint(1, 6)))
            neg = "NOT " if r.random() < 0.1 else ""
            return f"{col} {neg}IN ({items})"
        if x < 0.77:
            sub = r.choice(["t", "i", "r", "u", "id"])
            return f"{col} IN (SELECT {sub} FROM n.pick WHERE id % 3 = {r.randrange(3)})"
        if x < 0.87:
            return f"{col} IS {r.choice(['NULL', 'NOT NULL'])}"
        if x < 0.92:
            coll = r.choice(["NOCASE", "RTRIM", "BINARY"])
            return f"{col} {r.choice(['=', '<', '>='])} {self.lit(col)} COLLATE {coll}"
        if x < 0.95:
            return f"{col} LIKE '{r.choice(['B%', '%5%', 'type 1%', '_'])}'"
        if x < 0.98:
            return f"NOT ({col} {r.choice(['<', '=', '>'])} {self.lit(col)})"
        return f"{col} IS {self.lit(col)}"

    def where(self):
        n = self.r.choice([1, 1, 2, 2, 3])
        parts = [self.pred() for _ in range(n)]
        w = parts[0]
        for p in parts[1:]:
            w += (" OR " if self.r.random() < 0.12 else " AND ") + p
        return w

    def stmt(self):
        self.params = []
        r = self.r
        w = self.where()
        c1, c2 = r.choice(self.cols), r.choice(self.cols + ["name", "tile"])
        t = r.random()
        if t < 0.3:
            return f"SELECT count(*) FROM {{T}} WHERE {w}", False
        if t < 0.5:
            lim = r.choice([1, 5, 37, 1000])
            off = r.choice(["", "", f" OFFSET {r.randrange(0, 200)}"])
            return f"SELECT cell_id, {c1}, {c2} FROM {{T}} WHERE {w} ORDER BY cell_id LIMIT {lim}{off}", True
        if t < 0.62:
            return f"SELECT {c1}, count(*), sum(cell_id) FROM {{T}} WHERE {w} GROUP BY 1", False
        if t < 0.72 and " OR " not in w:   # (an OR may run as a multi-index OR: any row order)
            lim = r.choice([3, 50])
            off = r.choice(["", f" OFFSET {r.randrange(0, 100)}"])
            return f"SELECT cell_id, {c1} FROM {{T}} WHERE {w} LIMIT {lim}{off}", "nolimit-order"
        if t < 0.8:
            d = r.choice(["DESC", "ASC"])
            return f"SELECT cell_id, {c1} FROM {{T}} WHERE {w} ORDER BY {c1} {d}, cell_id LIMIT 25", True
        if t < 0.86:
            return f"SELECT count(*), min({c1}), max({c1}), total(n_counts) FROM {{T}} WHERE {w}", False
        if t < 0.9:
            return f"SELECT * FROM {{T}} WHERE {w} ORDER BY cell_id LIMIT 20", True
        if t < 0.95:
            self.params = []   # this statement does not use w
            jc = r.choice(["t", "i", "r", "u"])
            tc = r.choice(self.cols + ["cell_id", "name"])
            return (f"SELECT p.id, a.cell_id, a.{c1} FROM n.pick p JOIN {{T}} a ON a.{tc} = p.{jc} "
                    f"WHERE a.cell_id {r.choice(['< 3000', '> 137000', 'BETWEEN 65000 AND 66000'])}", False)
        wj = re.sub(r"\browid\b", "a.rowid", w)   # rowid alone is ambiguous in a join
        return f"SELECT a.cell_id, a.{c1} FROM n.pick p JOIN {{T}} a ON a.cell_id = p.id WHERE {wj}", False


def sql_lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bytes):
        return "x'" + v.hex() + "'"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, float):
        if v == float("inf"):
            return "1e999"
        return repr(v)
    return str(v)


def run_both(con, sql, params, ordered):
    a = con.execute(sql.replace("{T}", "cells"), params).fetchall()
    b = con.execute(sql.replace("{T}", "n.obs"), params).fetchall()
    if ordered is True or ordered == "nolimit-order":
        return typed(a), typed(b)
    return sorted(typed(a), key=repr), sorted(typed(b), key=repr)


@pytest.mark.parametrize("part", range(4))
def test_generated_queries(db, part):
    con, kinds, obs = db
    g = Gen(random.Random(SEED + part), kinds, obs)
    n_rows = 0
    for i in range(500):
        sql, ordered = g.stmt()
        params = list(g.params)
        a, b = run_both(con, sql, params, ordered)
        assert a == b, f"query {i}: {sql} params={params}\n cells: {a[:5]} ({len(a)} rows)\n native: {b[:5]} ({len(b)} rows)"
        n_rows += len(a)
    assert n_rows > 1000   # the queries return rows, not only empty sets


def plan(con, sql, params=()):
    return " ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_pushdown_plans(db):
    con, _, _ = db
    p = plan(con, "SELECT count(*) FROM cells WHERE cell_type = ? AND score < 5", ("NK",))
    assert '#3 "cell_type" = ?1' in p and '"score" < ?2' in p and "prefilter" not in p
    # a category with values that read as numbers: = on it is re-checked by SQLite
    p = plan(con, "SELECT count(*) FROM cells WHERE weird = ?", ("5",))
    assert '"weird" = ?1 prefilter' in p
    # a literal string is exact even there
    p = plan(con, "SELECT count(*) FROM cells WHERE weird = '5'")
    assert '"weird" = ?1' in p and "prefilter" not in p
    # collations other than BINARY stay with SQLite
    p = plan(con, "SELECT count(*) FROM cells WHERE cell_type = 'nk' COLLATE NOCASE")
    assert "cell_type" not in p
    p = plan(con, "SELECT * FROM cells WHERE cell_type IN ('NK','B cell') LIMIT 10 OFFSET 5")
    assert '"cell_type" IN ?1' in p and "LIMIT ?2, OFFSET ?3" in p
    p = plan(con, "SELECT * FROM cells WHERE cell_id = 17")
    assert '#0 "cell_id" = ?1' in p
    p = plan(con, "SELECT * FROM cells ORDER BY cell_id LIMIT 3")
    assert "ORDER BY cell_id" in p and "USE TEMP B-TREE" not in p
    # a join drives the lookup by cell_id from the small side
    p = plan(con, "SELECT * FROM n.pick p JOIN cells a ON a.cell_id = p.id")
    assert p.index("SCAN p") < p.index("SCAN a") and '"cell_id" = ?1' in p


def test_in_with_all_types_and_duplicates(db):
    con, _, _ = db
    for sql, params in [
        ("SELECT cell_id FROM {T} WHERE cell_id IN (5, 5.0, '5', 7, 7, 1e999, NULL, x'05', 139999, 140000, -1) ORDER BY 1", ()),
        ("SELECT cell_id FROM {T} WHERE weird IN (5, '5', 1e3, '1e3', 'Inf', 1e999, '', NULL) AND cell_id < 70000 ORDER BY 1", ()),
        ("SELECT count(*) FROM {T} WHERE age IN ('30', 30.0, 31, '32.0', ' 33 ', 'x', NULL)", ()),
        ("SELECT count(*) FROM {T} WHERE score IN (5, '5', 100.5, 2.5, 1e999, -0.0)", ()),
        ("SELECT count(*) FROM {T} WHERE big_int IN (9007199254740992, 9007199254740993, 9007199254740992.0, "
         "'9007199254740993', -9223372036854775808, 9223372036854775807)", ()),
        ("SELECT count(*) FROM {T} WHERE big_int = ? ", (2.0**53,)),
        ("SELECT count(*) FROM {T} WHERE big_int > ? ", (2.0**53,)),
        ("SELECT count(*) FROM {T} WHERE score = ?", (-0.0,)),
        ("SELECT count(*) FROM {T} WHERE flag_n IN (1, '0', 1.0)", ()),
        ("SELECT count(*) FROM {T} WHERE tile IN (0, 3, 3, 13, 14, 99)", ()),
        ("SELECT count(*) FROM {T} WHERE note IN ('alpha', 5, '5', 5.0, x'35')", ()),
        ("SELECT count(*) FROM {T} WHERE weird IN (SELECT i FROM n.pick)", ()),
        ("SELECT count(*) FROM {T} WHERE weird IN (SELECT r FROM n.pick)", ()),
        ("SELECT count(*) FROM {T} WHERE note IN (SELECT i FROM n.pick)", ()),
        ("SELECT count(*) FROM {T} WHERE name IN ('c000001', 'c139999', 'zz', 3)", ()),
    ]:
        a, b = run_both(con, sql, params, True)
        assert a == b, sql
    # the checks above hit rows
    assert con.execute("SELECT count(*) FROM cells WHERE weird IN (5, '5')").fetchone()[0] > 0


def test_affinity_through_joins(db):
    """5 against a TEXT column means '5' for a literal, but 5 for an INTEGER column."""
    con, _, _ = db
    for sql in [
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.weird = p.i",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.weird = p.r",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.weird > p.i WHERE a.cell_id < 1000",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.weird = p.t",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.weird = p.u",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.weird <= p.u WHERE a.cell_id < 1000",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.note = p.i",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.cell_type = p.t",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.age = p.t",
        "SELECT count(*) FROM n.pick p JOIN {T} a ON a.score = p.u",
        "SELECT count(*) FROM {T} a WHERE a.weird = CAST(5 AS INTEGER)",
        "SELECT count(*) FROM {T} a WHERE a.weird = CAST('1e3' AS REAL)",
        "SELECT count(*) FROM {T} a WHERE a.weird < CAST(5 AS INTEGER)",
        "SELECT count(*) FROM {T} a WHERE a.weird = 5",
        "SELECT count(*) FROM {T} a WHERE a.weird = 1e3",
        "SELECT count(*) FROM {T} a WHERE a.weird >= 1e999",
        "SELECT count(*) FROM {T} a WHERE a.weird > 5",
        "SELECT count(*) FROM {T} a WHERE a.cell_type = +5",
        "SELECT count(*) FROM {T} a WHERE a.age = '35'",
        "SELECT count(*) FROM {T} a WHERE a.score < '5.5'",
    ]:
        a, b = run_both(con, sql, (), True)
        assert a == b, sql
    n = con.execute("SELECT count(*) FROM n.pick p JOIN cells a ON a.weird = p.i").fetchone()[0]
    assert n > 0


def test_limit_offset_pushdown(db):
    con, _, _ = db
    for lim, off in [(0, 0), (1, 0), (10, 65530), (5, 139998), (3, 200000), (-1, 139990), (7, -5)]:
        for w in ["1", "cell_type = 'NK'", "age > 50", "flag = 1 AND tile > 3"]:
            sql = f"SELECT cell_id, age FROM {{T}} WHERE {w} LIMIT {lim} OFFSET {off}"
            a, b = run_both(con, sql, (), True)
            assert a == b, sql


@pytest.mark.parametrize("cache_mb", [0, 1])
def test_small_or_no_block_cache(db, cache_mb):
    """The decoded-block cache (a quarter of dc_config cache_mb) off, or smaller than a block:
    the same answers."""
    con, kinds, obs = db
    old = con.execute("SELECT dc_config('cache_mb')").fetchone()[0]
    con.execute("SELECT dc_config('cache_mb', ?)", (cache_mb,)).fetchone()
    try:
        g = Gen(random.Random(SEED + 99 + cache_mb), kinds, obs)
        for i in range(150):
            sql, ordered = g.stmt()
            params = list(g.params)
            a, b = run_both(con, sql, params, ordered)
            assert a == b, f"query {i}: {sql} params={params}"
    finally:
        con.execute("SELECT dc_config('cache_mb', ?)", (old,)).fetchone()


def test_repeated_ranges_use_value_order(db):
    """Selective ranges on int and real columns, repeated (the second use of a block builds its
    value order), at the edges of the data."""
    con, _, _ = db
    for sql in ["SELECT cell_id FROM {T} WHERE n_counts > ? ORDER BY 1", "SELECT cell_id FROM {T} WHERE n_counts <= ? ORDER BY 1",
                "SELECT cell_id FROM {T} WHERE score >= ? ORDER BY 1", "SELECT cell_id FROM {T} WHERE score < ? ORDER BY 1",
                "SELECT cell_id FROM {T} WHERE big_int = ? ORDER BY 1", "SELECT cell_id FROM {T} WHERE age > ? AND cell_id > 70000 ORDER BY 1",
                "SELECT cell_id FROM {T} WHERE frac < ? AND flag = 1 ORDER BY 1"]:
        for v in [49900, 501, 500, 49999, 100.5, -1e300, 1e300, float("inf"), -5.0, 2**53 + 1, 2.0**53, 88, 0.001, "600"]:
            for _ in range(2):
                a, b = run_both(con, sql, (v,), True)
                assert a == b, (sql, v)
