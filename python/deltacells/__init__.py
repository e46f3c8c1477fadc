"""deltacells: single-cell count matrices in one SQLite file, served to PyTorch.

    import deltacells
    con = deltacells.connect("pbmc.dcdb")          # sqlite3 connection, extension loaded
    con.execute("SELECT cell_type, count(*) FROM cells GROUP BY 1").fetchall()
    adata = deltacells.to_anndata("pbmc.dcdb", where="cell_type = 'B cell'")
    ds = deltacells.CellDataset("pbmc.dcdb", obs=["cell_type"], batch_size=5000)

to_anndata imports numpy/anndata on first use; the PyTorch parts (CellDataset, CellMapDataset, GroupBatchSampler, CSRBatch,
collate) import torch on first use.
"""
from ._connect import (NO_LOADING_MESSAGE, ExtensionNotFoundError, connect, find_extension,
                       load_extension)

__version__ = "0.1.0"

from . import _malloc  # noqa: E402
_malloc.tune()
__all__ = ["connect", "find_extension", "load_extension", "to_anndata", "CellDataset",
           "CellMapDataset", "GroupBatchSampler", "CSRBatch", "collate", "ExtensionNotFoundError",
           "NO_LOADING_MESSAGE"]

_LAZY = {"to_anndata": "anndata_io", "CellDataset": "dataset", "CellMapDataset": "mapdataset",
         "GroupBatchSampler": "mapdataset", "collate": "mapdataset", "CSRBatch": "_convert"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        mod = importlib.import_module("." + _LAZY[name], __name__)
        return getattr(mod, name)
    raise AttributeError(f"module 'deltacells' has no attribute {name!r}")
