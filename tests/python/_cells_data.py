"""Datasets for the `cells` virtual table tests: h5ad files written with anndata, converted
with the converter (build/deltacells), and the same obs loaded into a native SQLite table
with the same declared types."""
import os
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DC_BUILD", ROOT / "build"))
CONVERTER = BUILD / "deltacells"
EXTENSION = BUILD / "deltacells.so"
# the real files: where they are ($DC_REAL_DATA), their names, and a skip when absent
from _batch_util import REAL, REAL_FILES, real_file  # noqa: E402,F401

SQL_TYPE = {"category": "TEXT", "int": "INTEGER", "real": "REAL", "bool": "INTEGER", "text": "TEXT"}


def need_build():
    missing = [str(p) for p in (CONVERTER, EXTENSION) if not p.exists()]
    if missing:
        pytest.fail("not built: " + ", ".join(missing) + " (run make)")


def convert(h5, db, *args):
    need_build()
    r = subprocess.run([str(CONVERTER), "convert", str(h5), "-o", str(db), "--quiet", "--force", *args],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"convert {h5} failed: {r.stderr}")
    return db


def connect(db):
    con = sqlite3.connect(str(db))
    con.enable_load_extension(True)
    con.load_extension(str(EXTENSION.with_suffix("")))
    con.enable_load_extension(False)
    return con


def sql_value(kind, v):
    """A pandas/numpy obs value as the SQL value a native table stores."""
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    if kind in ("int", "bool"):
        return int(v)
    if kind == "real":
        return float(v)
    return str(v)


def obs_kind(series):
    dt = series.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return "category"
    if pd.api.types.is_bool_dtype(dt):
        return "bool"
    if pd.api.types.is_integer_dtype(dt):
        return "int"
    if pd.api.types.is_float_dtype(dt):
        return "real"
    return "text"


def native_table(con, schema, obs, names, tiles):
    """Creates schema.obs(cell_id, name, tile, <obs columns>) holding the same data."""
    kinds = {c: obs_kind(obs[c]) for c in obs.columns}
    cols = ", ".join(f'"{c}" {SQL_TYPE[kinds[c]]}' for c in obs.columns)
    con.execute(f"CREATE TABLE {schema}.obs(cell_id INTEGER PRIMARY KEY, name TEXT, tile INTEGER"
                + (", " + cols if cols else "") + ")")
    rows = []
    columns = [obs[c].astype(object).tolist() for c in obs.columns]
    for i in range(len(names)):
        rows.append([i, str(names[i]), int(tiles[i])] +
                    [sql_value(kinds[c], columns[j][i]) for j, c in enumerate(obs.columns)])
    q = ",".join("?" * (3 + len(obs.columns)))
    con.executemany(f"INSERT INTO {schema}.obs VALUES({q})", rows)
    con.commit()
    return kinds


def tiles_of(n_cells, tile_cells):
    """The tile of each cell, from what the converter was asked for (docs/converter.md: tiles
    of --tile-cells consecutive cells), not from the dataset under test."""
    return np.arange(n_cells, dtype=np.int64) // int(tile_cells)


def stored_tiles(con, n_cells):
    """The tile of each cell as the dataset's shadow table tiles_data records it."""
    t = np.full(n_cells, -1, dtype=np.int64)
    for tile, first, n in con.execute("SELECT tile, first_cell, n_cells FROM tiles_data"):
        t[first:first + n] = tile
    return t
