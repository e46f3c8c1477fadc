"""A `cells` query with many constraints works whatever their number: xBestIndex pushes down
at most DC_PLAN_MAX_TERMS (250, dc_plan.h) and SQLite checks the rest (a query with 65 range terms used to
fail with "cells: plan with 65 arguments")."""
import pytest

from _batch_util import connect, generated


@pytest.mark.parametrize("n_terms", [1, 64, 65, 250, 251, 400])
def test_many_range_terms(tmp_path_factory, n_terms):
    d = tmp_path_factory.mktemp("terms")
    _, db = generated(d, 1200, 200, 41, 400)
    con = connect(db)
    # cell_id > k for k < n_terms/2, and cell_id < 1200 - k for the other half
    terms = [f"cell_id > {k}" if k % 2 == 0 else f"cell_id < {1200 - k}" for k in range(n_terms)]
    lo = max([k for k in range(n_terms) if k % 2 == 0], default=-1)
    hi = min([1200 - k for k in range(n_terms) if k % 2 == 1], default=1200)
    want = list(range(lo + 1, hi))
    got = [r[0] for r in con.execute("SELECT cell_id FROM cells WHERE " + " AND ".join(terms) + " ORDER BY cell_id")]
    assert got == want
    # the same with LIMIT/OFFSET (pushed down only when every term is)
    got = [r[0] for r in con.execute("SELECT cell_id FROM cells WHERE " + " AND ".join(terms) +
                                     " ORDER BY cell_id LIMIT 5 OFFSET 3")]
    assert got == want[3:8]
    plan = " ".join(r[-1] for r in con.execute("EXPLAIN QUERY PLAN SELECT cell_id FROM cells WHERE " + " AND ".join(terms)))
    assert plan.count("?") == min(n_terms, 250)
