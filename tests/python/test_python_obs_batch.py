"""Obs labels in the same dc_batch call as the counts (dc_batch's obs argument and
obs_values column; ObsCodes in the package): codes, not per-cell text; NULLs of every
kind; the same values as the cells table and as the obs the h5ad holds."""
import json
import os
import sqlite3
import sys

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _cells_data import connect, convert  # noqa: E402
from _python_data import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "python"))
N, TILE = 1800, 400


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    import anndata
    import scipy.sparse as sp
    d = tmp_path_factory.mktemp("obs_batch")
    rng = np.random.default_rng(11)
    ct = rng.integers(0, 4, N)
    ct[rng.random(N) < 0.1] = -1
    age = pd.array(rng.integers(20, 90, N), dtype="Int64")
    age[:TILE][rng.random(TILE) < 0.3] = pd.NA            # NULL ints in tile 0 only
    score = rng.normal(0, 1, N)
    score[rng.random(N) < 0.1] = np.nan
    flag = pd.array(rng.random(N) < 0.5, dtype="boolean")
    flag[rng.random(N) < 0.1] = pd.NA
    obs = pd.DataFrame({
        "cell_type": pd.Categorical.from_codes(ct, ["B", "NK", "T", "mono"]),
        "age": age, "score": score, "flag": flag, "n": rng.integers(0, 2**40, N),
        "note": np.array([f"note {i} {rng.integers(1 << 30)}" for i in range(N)], dtype=object),
    }, index=[f"c{i}" for i in range(N)])
    X = sp.random(N, 50, density=0.1, format="csr", random_state=2, dtype=np.float32)
    X.data[:] = np.ceil(X.data * 20)
    h5 = d / "obs.h5ad"
    anndata.AnnData(X=X, obs=obs).write_h5ad(h5)
    return str(convert(h5, d / "obs.dcdb", "--tile-cells", str(TILE))), obs


def values(con, ids, cols, genes=None):
    row = con.execute("SELECT n_cells, obs_values FROM dc_batch(?, ?, ?)",
                      (np.asarray(ids, dtype="<i8").tobytes(), genes, json.dumps(cols))).fetchone()
    n, blob = row
    m = len(cols)
    fmt = np.frombuffer(blob, dtype="<i8", count=m)
    return n, fmt, [np.frombuffer(blob, dtype="<i8", count=n, offset=8 * (m + j * n))
                    for j in range(m)]


def test_sql_obs_values_match_the_cells_table(data):
    db, obs = data
    con = connect(db)
    ids = np.array([5, 3, 1799, 5, 0, 401, 399, 1000])
    cols = ["cell_type", "age", "score", "flag", "n"]
    n, fmt, v = values(con, ids, cols)
    assert n == len(ids)
    # age: this batch holds a NULL of tile 0 -> float64; others by kind
    has_null = obs["age"].isna().to_numpy()[ids].any()
    assert fmt.tolist() == [0, 1 if has_null else 0, 1, 0, 0]
    cats = [r[0] for r in con.execute(
        "SELECT value FROM cells_dict WHERE col = (SELECT col FROM cells_columns WHERE name = "
        "'cell_type') ORDER BY code")]
    for i, cell in enumerate(ids):
        row = con.execute('SELECT cell_type, age, score, flag, n FROM cells WHERE cell_id = ?',
                          (int(cell),)).fetchone()
        code = int(v[0][i])
        assert (None if code < 0 else cats[code]) == row[0]
        a = v[1][i].view("<f8") if fmt[1] else v[1][i]
        assert (row[1] is None and np.isnan(a)) or a == row[1]
        s = v[2][i].view("<f8")
        assert (row[2] is None and np.isnan(s)) or s == row[2]
        assert (int(v[3][i]) == -1 and row[3] is None) or int(v[3][i]) == row[3]
        assert int(v[4][i]) == row[4]
    # a batch without NULL ages keeps int64; a gene panel changes nothing of obs
    ids2 = np.arange(TILE, TILE + 50)
    _, fmt2, v2 = values(con, ids2, ["age"])
    assert fmt2.tolist() == [0]
    assert v2[0].tolist() == obs["age"].to_numpy()[ids2].astype(np.int64).tolist()
    con.close()


@pytest.mark.parametrize("bad,msg", [
    ('["nope"]', "no stored obs column 'nope'"),
    ('["note"]', "is text"),
    ('[1]', "JSON array of column names"),
    ('not json', "malformed JSON"),
])
def test_sql_obs_errors_name_the_column_and_reason(data, bad, msg):
    con = connect(data[0])
    with pytest.raises(sqlite3.Error, match=msg):
        con.execute("SELECT obs_values FROM dc_batch(?, NULL, ?)",
                    (np.array([1, 2], dtype="<i8").tobytes(), bad)).fetchall()
    # without obs: NULL, and the plan names its arguments
    assert con.execute("SELECT obs_values FROM dc_batch(?)",
                       (np.array([1], dtype="<i8").tobytes(),)).fetchone() == (None,)
    plan = con.execute("EXPLAIN QUERY PLAN SELECT obs_values FROM dc_batch(?, NULL, ?)",
                       (b"", '["age"]')).fetchall()
    assert '#6 "cells" = ?1, #7 "genes" = ?2, #8 "obs" = ?3' in plan[0][3]
    con.close()


def test_dataset_obs_from_dc_batch_equal_the_h5ad(data):
    import torch
    import deltacells
    db, obs = data
    cols = ["cell_type", "age", "score", "flag", "n", "note", "tile"]
    ds = deltacells.CellDataset(db, obs=cols, batch_size=97, seed=4, missing_code=-7)
    codes = ds._obs_reader()[0]
    assert codes.columns == ["cell_type", "age", "score", "flag", "n"]   # text/builtin: cells
    seen = 0
    for b in ds:
        ids = b["cell_id"].numpy()
        seen += len(ids)
        ct = obs["cell_type"].cat.codes.to_numpy()[ids].astype(np.int64)
        assert b["cell_type"].tolist() == np.where(ct < 0, -7, ct).tolist()
        age = obs["age"].to_numpy(dtype=np.float64, na_value=np.nan)[ids]
        got = b["age"].numpy()
        if np.isnan(age).any():
            assert got.dtype == np.float64
        assert np.array_equal(got.astype(np.float64), age, equal_nan=True)
        assert np.array_equal(b["score"].numpy(), obs["score"].to_numpy()[ids], equal_nan=True)
        fl = obs["flag"].to_numpy(dtype=np.float64, na_value=np.nan)[ids]
        want = np.where(np.isnan(fl), -7, fl)
        assert b["flag"].numpy().astype(np.float64).tolist() == want.tolist()
        if not np.isnan(fl).any():
            assert b["flag"].dtype == torch.bool
        assert b["n"].tolist() == obs["n"].to_numpy()[ids].tolist()
        assert list(b["note"]) == list(obs["note"].to_numpy()[ids])
        assert b["tile"].tolist() == (ids // TILE).tolist()
    assert seen == N
