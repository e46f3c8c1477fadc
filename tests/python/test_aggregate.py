"""dc_aggregate / dc_aggregate_wide on a generated dataset against numpy/scipy computed from
its h5ad: every statistic, every kind of group_by column (categorical, with NULLs, integer,
real, bool, none), selections, gene panels, windows, threads, the cache, and the errors."""
import json
import sqlite3

import anndata
import numpy as np
import pytest

from _aggregate_ref import assert_matches, long, reference, wide
from _batch_util import connect, generated, reference_matrix


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    h5, db = generated(tmp_path_factory.mktemp("agg"), 3000, 2000, 7, 500)
    X = reference_matrix(h5, db)
    obs = anndata.read_h5ad(str(h5)).obs
    return db, X, obs


@pytest.mark.parametrize("col", ["cell_type", "batch", "age", "percent_mt", "is_doublet", None])
def test_wide_every_column_kind(data, col):
    db, X, obs = data
    con = connect(db)
    ref, ref_order = reference(X, None if col is None else obs[col])
    order, got = wide(con, col)
    assert_matches(order, got, ref_order, ref, gene_ids=np.arange(X.shape[1]))
    if col == "batch":
        assert order[-1] is None and got[None]["n_cells"] == int(obs["batch"].isna().sum()) > 0


def test_long_form_all_columns(data):
    db, X, obs = data
    con = connect(db)
    ref, ref_order = reference(X, obs["cell_type"])
    order, got = long(con, "cell_type")
    assert_matches(order, got, ref_order, ref, gene_ids=np.arange(X.shape[1]), long_form=True)
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    assert got[order[0]]["gene"] == names
    # every (group, gene) pair is a row, zeros included
    n = con.execute("SELECT count(*) FROM dc_aggregate('cell_type')").fetchone()[0]
    assert n == len(ref_order) * X.shape[1]


def test_mean_includes_zeros_unlike_expression_long(data):
    db, X, obs = data
    con = connect(db)
    gene = 40
    mean, frac = con.execute("SELECT mean, frac_expressing FROM dc_aggregate(NULL) WHERE gene_id = ?",
                             (gene,)).fetchone()
    col = X[:, gene].toarray().ravel()
    assert mean == pytest.approx(col.mean(), rel=1e-12)
    assert frac == pytest.approx((col > 0).mean(), rel=1e-12)
    nz_avg = con.execute("SELECT avg(count) FROM expression_long WHERE gene_id = ?", (gene,)).fetchone()[0]
    assert 0 < frac < 1 and nz_avg == pytest.approx(col[col > 0].mean()) and nz_avg > mean


def test_selection_and_panels(data):
    db, X, obs = data
    con = connect(db)
    rng = np.random.default_rng(4)
    cells = np.sort(rng.choice(X.shape[0], 700, replace=False))
    shuffled = rng.permutation(cells)
    panel = rng.permutation(X.shape[1])[:150]
    names = [r[0] for r in con.execute("SELECT name FROM genes ORDER BY gene_id")]
    ref, ref_order = reference(X, obs["age"], cells=cells, panel=panel)
    # JSON cells in any order, int32 gene ids
    order, got = wide(con, "age", json.dumps(shuffled.tolist()), np.asarray(panel, "<i4").tobytes())
    assert_matches(order, got, ref_order, ref, gene_ids=panel)
    # int64 blob cells, gene names (JSON), long form
    order, got = long(con, "age", np.asarray(shuffled, "<i8").tobytes(), json.dumps([names[g] for g in panel]))
    assert_matches(order, got, ref_order, ref, gene_ids=panel, long_form=True)
    assert got[order[0]]["gene"] == [names[g] for g in panel]
    # one tile's worth at the end, a single cell, and nothing
    for sel in (np.arange(2600, 3000), np.array([1234]), np.array([], dtype=np.int64)):
        ref, ref_order = reference(X, obs["donor"], cells=sel)
        order, got = wide(con, "donor", json.dumps(sel.tolist()))
        assert_matches(order, got, ref_order, ref)


def test_windows_threads_and_cache_do_not_change_results(data):
    db, X, obs = data
    con = connect(db)
    ref, ref_order = reference(X, obs["cell_type"])
    # warm part of the cache through dc_batch so some chunks come from it
    con.execute("SELECT n_cells FROM dc_batch(?)", (json.dumps(list(range(0, 3000, 7))),)).fetchone()
    for threads, cache_mb, decode_mb in ((1, 0, 256), (2, 512, 1), (3, 512, 256), (2, 0, 1)):
        con.execute("SELECT dc_config('threads', ?), dc_config('cache_mb', ?), dc_config('decode_mb', ?)",
                    (threads, cache_mb, decode_mb))
        order, got = wide(con, "cell_type")
        assert_matches(order, got, ref_order, ref)


def test_without_log1p_column_and_plans(data):
    db, X, obs = data
    con = connect(db)
    ref, ref_order = reference(X, obs["cell_type"], log1p=False)
    order, got = wide(con, "cell_type", log1p=False)
    assert_matches(order, got, ref_order, ref, log1p=False)
    plan = " ".join(r[-1] for r in con.execute(
        "EXPLAIN QUERY PLAN SELECT label, sum FROM dc_aggregate('cell_type', NULL, '[\"GENE1\"]')"))
    assert '#9 "group_by" = ?1, #10 "cells" = ?2, #11 "genes" = ?3' in plan
    assert "log1p" not in plan and "names" not in plan
    plan = " ".join(r[-1] for r in con.execute("EXPLAIN QUERY PLAN SELECT * FROM dc_aggregate()"))
    assert "INDEX 0:log1p, names" in plan


def test_declared_in_temp_for_older_datasets(data):
    db, X, obs = data
    con = connect(db)
    con.execute("CREATE VIRTUAL TABLE temp.agg2 USING deltacells_aggregate_wide(main)")
    ref, ref_order = reference(X, obs["donor"])
    order, got = wide(con, "donor", table="temp.agg2")
    assert_matches(order, got, ref_order, ref)


@pytest.mark.parametrize("args,message", [
    (("nope",), "dc_aggregate: group_by: cells has no column 'nope' (columns: cell_id, name, tile, cell_type"),
    ((3,), "dc_aggregate: group_by must be the name of a column of cells (text) or NULL, not an integer"),
    (("cell_type", "[1, 2, 1]"), "dc_aggregate: cells: cell id 1 appears twice"),
    (("cell_type", "[5, 99999]"), "dc_aggregate: cell id 99999 (element 1) is out of range"),
    (("cell_type", "[1.5]"), "dc_aggregate: cells: element 0 of the JSON array is not an integer cell id"),
    (("cell_type", 12), "dc_aggregate: cells must be a blob of little-endian int64 cell ids or a JSON array"),
    (("cell_type", None, '["GENE1", "NOPE"]'), "dc_aggregate: unknown gene 'NOPE'"),
    (("cell_type", None, b"\x01\x00\x00"), "dc_aggregate: genes blob has 3 bytes, not a multiple of 4"),
    (("cell_type", None, 7), "dc_aggregate: genes must be a JSON array of gene names or a blob"),
])
def test_errors_name_the_argument(data, args, message):
    db, _, _ = data
    con = connect(db)
    q = "SELECT count(*) FROM dc_aggregate(" + ", ".join("?" * len(args)) + ")"
    with pytest.raises(sqlite3.Error) as e:
        con.execute(q, args).fetchall()
    assert message in str(e.value)


def test_too_many_groups_is_a_clear_error(data):
    db, X, _ = data
    con = connect(db)
    con.execute("SELECT dc_config('decode_mb', 1)")
    with pytest.raises(sqlite3.Error) as e:
        con.execute("SELECT count(*) FROM dc_aggregate('cell_id')").fetchall()
    assert "group_by 'cell_id' gives" in str(e.value) and "decode_mb" in str(e.value)
    # with a small gene panel the same grouping fits
    n = con.execute("SELECT count(*), sum(n_cells) FROM dc_aggregate('cell_id', NULL, '[\"GENE1\"]')").fetchone()
    assert n == (X.shape[0], X.shape[0])


def test_threads_with_their_own_connections(data):
    """Several connections in threads aggregate at once (each its own pool and accumulators)."""
    import threading
    db, X, obs = data
    ref, ref_order = reference(X, obs["cell_type"], log1p=False)
    errors = []

    def work(seed):
        try:
            con = connect(db, check_same_thread=False)
            for _ in range(3):
                order, got = wide(con, "cell_type", log1p=False)
                assert_matches(order, got, ref_order, ref, log1p=False)
            con.close()
        except Exception as e:      # reported by the main thread
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "a thread hung"
    assert not errors, errors
