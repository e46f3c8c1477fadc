"""On the real files: every obs value the `cells` table returns equals what anndata reads
(NaN and missing categories as NULL), and filters agree with pandas.
Each file is one test, skipped (with the reason) when the file is absent."""
import math

import anndata
import numpy as np
import pytest

from _cells_data import REAL_FILES, connect, convert, obs_kind, real_file, sql_value


@pytest.mark.parametrize("name", REAL_FILES, ids=[n[:-len(".h5ad")] for n in REAL_FILES])
def test_real_obs(name, tmp_path):
    path = real_file(name)
    db = convert(path, tmp_path / (path.stem + ".dcdb"))
    ad = anndata.read_h5ad(path, backed="r")
    obs = ad.obs
    con = connect(db)
    cols = [r[1] for r in con.execute("PRAGMA table_info(cells)")]
    assert cols[:3] == ["cell_id", "name", "tile"]
    assert set(cols[3:]) == set(obs.columns)
    rows = con.execute("SELECT * FROM cells ORDER BY cell_id").fetchall()
    assert len(rows) == ad.n_obs
    assert [r[1] for r in rows] == [str(x) for x in obs.index]
    for j, c in enumerate(cols[3:], start=3):
        kind = obs_kind(obs[c])
        want = [sql_value(kind, v) for v in obs[c].astype(object).tolist()]
        got = [r[j] for r in rows]
        if kind == "real":
            assert all((a is None and b is None) or (a is not None and b is not None and
                       (a == b or (math.isnan(a) and math.isnan(b)))) for a, b in zip(got, want)), c
        else:
            assert got == want, c
    # filters on each categorical agree with pandas
    for c in cols[3:]:
        if obs_kind(obs[c]) != "category":
            continue
        counts = obs[c].value_counts()
        for label in list(counts.index[:3]):
            n = con.execute(f'SELECT count(*) FROM cells WHERE "{c}" = ?', (str(label),)).fetchone()[0]
            assert n == counts[label], (c, label)
        n = con.execute(f'SELECT count(*) FROM cells WHERE "{c}" IS NULL').fetchone()[0]
        assert n == obs[c].isna().sum()
    for c in cols[3:]:
        if obs_kind(obs[c]) in ("int", "real"):
            med = float(np.nanmedian(obs[c].astype(float)))
            n = con.execute(f'SELECT count(*) FROM cells WHERE "{c}" < ?', (med,)).fetchone()[0]
            assert n == int((obs[c].astype(float) < med).sum()), c
    con.close()
