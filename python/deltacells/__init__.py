"""deltacells: single-cell count matrices in one SQLite file, served to PyTorch.

    import deltacells
    con = deltacells.connect("pbmc.dcdb")          # sqlite3 connection, extension loaded
    con.execute("SELECT cell_type, count(*) FROM cells GROUP BY 1").fetchall()
    adata = deltacells.to_anndata("pbmc.dcdb", where="cell_type = 'B cell'")
    ds = deltacells.CellDataset("pbmc.dcdb", obs=["cell_type"], batch_size=5000)   # batches
    m = deltacells.CellMapDataset("pbmc.dcdb", obs=["cell_type"])                 # m[i]: one cell
    split = deltacells.train_val_split("pbmc.dcdb", val_fraction=0.2, by="donor")
    df = deltacells.aggregate("pbmc.dcdb", by="cell_type")   # pseudobulk: sum, mean (with zeros), ...
    deltacells.annotate("pbmc.dcdb", labels_df)                # add/replace obs columns (keyed by cell name)

to_anndata and aggregate import numpy/pandas/anndata on first use; the PyTorch parts (CellDataset, CellMapDataset,
GroupBatchSampler, WindowBatchSampler, CellBatch, CSRBatch, collate, transforms, train_val_split) import torch
on first use.
"""
from ._connect import (NO_LOADING_MESSAGE, ExtensionNotFoundError, connect, find_extension,
                       load_extension, vfs_error, vfs_stats)

__version__ = "0.1.0"

import os as _os  # noqa: E402

from . import _malloc  # noqa: E402


def tune_malloc():
    """Opt-in, process-wide: raise glibc's malloc mmap/trim thresholds (see _malloc.py).
    deltacells itself does not need it: it reuses its own buffers."""
    return _malloc.tune()


if _os.environ.get("DELTACELLS_MALLOC_TUNE") == "1":
    _malloc.tune()

_LAZY = {"annotate": "_annotate", "to_anndata": "anndata_io", "aggregate": "_aggregate", "CellDataset": "dataset", "CellMapDataset": "mapdataset",
         "GroupBatchSampler": "mapdataset", "WindowBatchSampler": "mapdataset", "collate": "mapdataset",
         "CellBatch": "mapdataset",
         "CSRBatch": "_convert", "Categories": "_core", "train_val_split": "split",
         "Split": "split", "transforms": None}

__all__ = ["connect", "find_extension", "load_extension", "vfs_stats", "vfs_error", "ExtensionNotFoundError", "tune_malloc",
           "NO_LOADING_MESSAGE"] + list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        if _LAZY[name] is None:
            return importlib.import_module("." + name, __name__)
        mod = importlib.import_module("." + _LAZY[name], __name__)
        return getattr(mod, name)
    raise AttributeError(f"module 'deltacells' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
