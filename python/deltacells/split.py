"""deltacells.train_val_split: disjoint, deterministic train / validation cell sets.

    split = deltacells.train_val_split("pbmc.dcdb", val_fraction=0.2, by="donor", seed=0)
    train = deltacells.CellDataset("pbmc.dcdb", cells=split.train, obs=["cell_type"])
    val = deltacells.CellDataset("pbmc.dcdb", cells=split.val, obs=["cell_type"], shuffle=False)
"""
import numpy as np

from ._core import Catalogue, with_connection


class Split:
    """The result of train_val_split: .train and .val are sorted int64 cell-id arrays
    (disjoint; together the selection); with by=, .train_groups and .val_groups are the
    group values on each side.  Unpacks as (train, val)."""

    def __init__(self, train, val, by=None, train_groups=None, val_groups=None):
        self.train, self.val, self.by = train, val, by
        self.train_groups, self.val_groups = train_groups, val_groups

    def __iter__(self):
        return iter((self.train, self.val))

    def __len__(self):
        return 2

    def __repr__(self):
        g = ""
        if self.by is not None:
            g = f", by={self.by!r}: {len(self.train_groups)} / {len(self.val_groups)} groups"
        return f"Split(train={len(self.train)} cells, val={len(self.val)} cells{g})"


def _quote(name):
    return '"' + name.replace('"', '""') + '"'


def train_val_split(path, val_fraction=0.1, by=None, where=None, seed=0):
    """Split the cells matching `where` (all by default) into train and validation sets.

    val_fraction: the share of cells to put in validation (0 < val_fraction < 1).
    by:           None: cells are assigned one by one (a random val_fraction of them);
                  or an obs column (e.g. 'donor', 'batch'): whole groups go to one side
                  (NULL is a group of its own), as many groups to validation as brings it
                  closest to val_fraction of the cells, at least one group on each side.
    seed:         the split is a function of (dataset, where, by, val_fraction, seed) only.
    Returns a Split (unpacks as train, val: sorted int64 cell ids) for the datasets' cells=.
    """
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) \
            or not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1 (exclusive), got {val_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    con = with_connection(path)
    try:
        cat = Catalogue(con, path)
        ids = cat.select(con, where)
        if ids is None:
            ids = np.arange(cat.n_cells, dtype=np.int64)
        if by is None:
            if len(ids) < 2:
                raise ValueError(f"cannot split {len(ids)} cell(s) into two non-empty sets")
            n_val = min(max(1, int(round(val_fraction * len(ids)))), len(ids) - 1)
            rng = np.random.default_rng([int(seed), 0x5EED])
            pick = np.zeros(len(ids), dtype=bool)
            pick[rng.permutation(len(ids))[:n_val]] = True
            return Split(ids[~pick], ids[pick])
        cat.resolve_obs([by])                     # a clear error for an unknown column
        sql = f"SELECT cell_id, {_quote(by)} FROM cells"
        if where is not None and str(where).strip():
            sql += f" WHERE ({where})"
        rows = con.execute(sql + " ORDER BY cell_id").fetchall()
    finally:
        con.close()
    if len(rows) != len(ids):
        raise RuntimeError("the cells table and the selection disagree")
    values = [r[1] for r in rows]
    # groups in a fixed order: NULL first, then by (type name, value)
    keys = sorted(set(values), key=lambda v: (v is not None, type(v).__name__, v if v is not None else 0))
    if len(keys) < 2:
        raise ValueError(f"obs column {by!r} has {len(keys)} group(s) among the selected cells; "
                         "a split by group needs at least 2")
    index = {k: i for i, k in enumerate(keys)}
    codes = np.array([index[v] for v in values], dtype=np.int64)
    sizes = np.bincount(codes, minlength=len(keys))
    rng = np.random.default_rng([int(seed), 0x6E0F])
    order = rng.permutation(len(keys))
    cum = np.cumsum(sizes[order])[:-1]            # groups 1 .. n-1 in validation
    target = val_fraction * len(ids)
    k = int(np.argmin(np.abs(cum - target))) + 1
    val_groups = set(order[:k].tolist())
    is_val = np.isin(codes, list(val_groups))
    return Split(ids[~is_val], ids[is_val], by,
                 [keys[i] for i in range(len(keys)) if i not in val_groups],
                 [keys[i] for i in range(len(keys)) if i in val_groups])
