"""Every table plans with the shared codec (ext/dc_plan.h) and one cap: xBestIndex pushes down at
most DC_PLAN_MAX_TERMS (250) terms and SQLite checks the rest.  expression, expression_long,
tiles and genes used to take 12 or 8; with many range terms each still returns what the same
query returns with nothing pushed down (`+col` hides a term from xBestIndex), and EXPLAIN QUERY
PLAN shows the terms in the codec's grammar."""
import pytest

from _batch_util import connect, generated


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return generated(tmp_path_factory.mktemp("plan_terms"), 1200, 200, 43, 400)[1]


CASES = [  # table, column, selected columns, upper bound of the column
    ("expression", "cell_id", "cell_id, hex(genes), hex(counts)", 1200),
    ("expression_long", "cell_id", "cell_id, gene_id, count", 1200),
    ("tiles", "tile", "tile, first_cell, n_cells, nnz", 3),
    ("genes", "gene_id", "gene_id, name", 200),
]


@pytest.mark.parametrize("table,col,sel,top", CASES)
@pytest.mark.parametrize("n_terms", [1, 9, 13, 250, 251, 300])
def test_many_range_terms(db, table, col, sel, top, n_terms):
    con = connect(db)
    # col > k for the even k, col < top - k for the odd k (at most 1 + the last even k excluded below)
    terms = [f"{col} > {k % top if k % top < top // 2 else 0}" if k % 2 == 0 else f"{col} < {top - (k % (top // 2 + 1))}"
             for k in range(n_terms)]
    where = " AND ".join(terms)
    plain = " AND ".join(t.replace(col, "+" + col, 1) for t in terms)
    order = f" ORDER BY {col}"
    got = con.execute(f"SELECT {sel} FROM {table} WHERE {where}{order}").fetchall()
    want = con.execute(f"SELECT {sel} FROM {table} WHERE {plain}{order}").fetchall()
    assert got == want
    assert len(want) > 0 or top <= 3
    plan = " ".join(r[-1] for r in con.execute(f"EXPLAIN QUERY PLAN SELECT {sel} FROM {table} WHERE {where}{order}"))
    assert plan.count("?") == min(n_terms, 250), plan[:300]
    assert f'"{col}" > ?1' in plan
    nothing = " ".join(r[-1] for r in con.execute(f"EXPLAIN QUERY PLAN SELECT {sel} FROM {table} WHERE {plain}"))
    assert "?" not in nothing.split("INDEX", 1)[-1]
    con.close()
