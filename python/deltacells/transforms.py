"""Batch transforms for the datasets' ``transform=`` argument.

A transform is any callable taking the batch dict ({'X': ..., 'cell_id': ..., obs ...})
and returning a batch dict; the datasets call it on every batch, where the batch is
made (in the DataLoader worker, or CellDataset's prefetch thread), before it is handed
out.  CellMapDataset's single cells (``ds[i]``, torch's default collate) are rows of the
transformed batch.

The shipped transforms work on every form of X the datasets produce (torch sparse CSR,
CSRBatch, dense tensor, scipy CSR) and keep a sparse X sparse: they only touch the
stored values and the column indices.

    ds = deltacells.CellDataset(path, transform=deltacells.transforms.Compose([
        deltacells.transforms.TopGenes(2000),        # the 2,000 genes with most counts
        deltacells.transforms.NormalizeLog1p(1e4, total="n_counts")]))
    ds.n_genes, ds.gene_names                         # X's columns after the transform

A transform may define ``bind(dataset, columns) -> columns``: the dataset calls it once
with the int64 array of its X columns (0..n-1) and gets back the columns the transform
keeps, in output order; that is how ``ds.n_genes`` and ``ds.gene_names`` follow
TopGenes.
"""
import numpy as np
import torch

from ._convert import CSRBatch


def _parts(X):
    """X -> (kind, crow, col, values, shape) with torch tensors (dense: values only)."""
    if isinstance(X, torch.Tensor):
        if X.layout == torch.sparse_csr:
            return "csr", X.crow_indices(), X.col_indices(), X.values(), tuple(X.shape)
        if X.layout == torch.strided:
            return "dense", None, None, X, tuple(X.shape)
        raise TypeError(f"unsupported tensor layout {X.layout} (use sparse CSR or dense)")
    if isinstance(X, CSRBatch):
        return "parts", X.crow_indices, X.col_indices, X.values, X.shape
    try:
        import scipy.sparse
        if scipy.sparse.isspmatrix_csr(X):
            return ("scipy", torch.from_numpy(X.indptr), torch.from_numpy(X.indices),
                    torch.from_numpy(X.data), X.shape)
    except ImportError:
        pass
    raise TypeError(f"unsupported X of type {type(X).__name__}")


def _build(kind, crow, col, values, shape):
    if kind == "csr":
        return torch.sparse_csr_tensor(crow, col, values, size=shape)
    if kind == "parts":
        return CSRBatch(crow, col, values, shape)
    if kind == "scipy":
        import scipy.sparse
        return scipy.sparse.csr_matrix((values.numpy(), col.numpy(), crow.numpy()), shape=shape)
    return values


def _float_dtype(t):
    return t.dtype if t.is_floating_point() else torch.float32


class NormalizeLog1p:
    """Library-size normalisation and log1p: x -> log1p(x / total * target_sum) per cell.

    target_sum: the total every cell is scaled to (default 1e4; None: the median of the
                cells' totals in each batch).
    total:      None: a cell's total over X's columns (the panel, if one is given); or the
                name of an obs column requested with obs= (e.g. 'n_counts', the total over
                all genes) whose per-cell values are used instead.
    log:        False: normalise only.
    Cells with a total of 0 stay 0.  Integer values become float32.  Sparse X stays
    sparse (only its stored values change); the total key stays in the batch.
    """

    def __init__(self, target_sum=1e4, total=None, log=True, key="X"):
        if target_sum is not None and not target_sum > 0:
            raise ValueError(f"target_sum must be > 0 (or None), got {target_sum!r}")
        self.target_sum, self.total, self.log, self.key = target_sum, total, bool(log), key

    def __call__(self, batch):
        kind, crow, col, vals, shape = _parts(batch[self.key])
        n = shape[0]
        vals = vals.to(_float_dtype(vals))
        if kind == "dense":
            rows = None
            tot = vals.sum(dim=1)
        else:
            rows = torch.repeat_interleave(torch.arange(n), torch.diff(crow.long()))
            tot = torch.zeros(n, dtype=vals.dtype).index_add_(0, rows, vals)
        if self.total is not None:
            if self.total not in batch:
                raise KeyError(f"NormalizeLog1p(total={self.total!r}): the batch has no "
                               f"{self.total!r}; request it with obs=[{self.total!r}, ...]")
            tot = torch.as_tensor(np.asarray(batch[self.total], dtype=np.float64)).to(vals.dtype)
            if tot.shape != (n,):
                raise ValueError(f"{self.total!r} has shape {tuple(tot.shape)}, expected ({n},)")
        target = self.target_sum
        if target is None:
            nz = tot[tot > 0]
            target = float(nz.median()) if len(nz) else 1.0
        scale = torch.where(tot > 0, target / tot, torch.zeros_like(tot))
        out = vals * (scale[:, None] if kind == "dense" else scale[rows])
        if self.log:
            out = torch.log1p(out)
        res = dict(batch)
        res[self.key] = _build(kind, crow, col, out, shape)
        return res

    def bind(self, dataset, columns):
        return columns

    def __repr__(self):
        return f"NormalizeLog1p(target_sum={self.target_sum}, total={self.total!r}, log={self.log})"


class TopGenes:
    """Keep the n genes of X with the highest value of a genes-table column.

    n:   genes kept (all, if X has fewer); they stay in X's column order.
    by:  'total_counts' (default: the genes with the most counts in the whole dataset) or
         'n_cells' (expressed in the most cells), or another numeric column of the genes
         table; ties go to the lower column.  Zero-filled panel genes count as 0.
    The choice is made once, from the dataset (not from the batch), so every batch has the
    same columns: pass the transform to a dataset (transform=) or call bind(dataset)
    before use.  After binding, .gene_names and .columns (X's columns kept) say which.
    One instance can serve several datasets with the same X columns (train/validation).
    Sparse X stays sparse: entries of dropped genes are removed, column indices renumbered.
    """

    def __init__(self, n, by="total_counts", key="X"):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        self.n, self.by, self.key = int(n), by, key
        self.columns = None        # positions kept, in the transform's input columns
        self.gene_names = None
        self._n_in = None
        self._map = None

    def bind(self, dataset, columns=None):
        """Choose the genes from `dataset` (its X columns `columns`, default all)."""
        stats = np.asarray(dataset.gene_column(self.by, transformed=False), dtype=np.float64)
        names = dataset._input_gene_names()
        if columns is None:
            columns = np.arange(len(stats))
        columns = np.asarray(columns, dtype=np.int64)
        s = np.nan_to_num(stats[columns], nan=-np.inf)
        order = np.lexsort((np.arange(len(s)), -s))     # by value descending, then position
        keep = np.sort(order[:self.n])
        if self.columns is not None and (self._n_in != len(columns)
                                         or not np.array_equal(self.columns, keep)):
            raise ValueError("this TopGenes is already bound to a dataset with other genes; "
                             "use one instance per gene layout")
        self.columns, self._n_in = keep, len(columns)
        self.gene_names = [names[c] for c in columns[keep]]
        m = np.full(len(columns), -1, dtype=np.int64)
        m[keep] = np.arange(len(keep))
        self._map = torch.from_numpy(m)
        return columns[keep]

    def __call__(self, batch):
        if self._map is None:
            raise RuntimeError("TopGenes chooses its genes from a dataset: pass it to the dataset "
                               "(transform=...) or call .bind(dataset) first")
        kind, crow, col, vals, shape = _parts(batch[self.key])
        if shape[1] != self._n_in:
            raise ValueError(f"TopGenes was bound to X with {self._n_in} columns, got {shape[1]}")
        k = len(self.columns)
        if kind == "dense":
            X = vals[:, torch.from_numpy(self.columns)]
        else:
            newcol = self._map[col.long()]
            keep = newcol >= 0
            n = shape[0]
            rows = torch.repeat_interleave(torch.arange(n), torch.diff(crow.long()))
            counts = torch.bincount(rows[keep], minlength=n)
            newcrow = torch.zeros(n + 1, dtype=crow.dtype)
            newcrow[1:] = torch.cumsum(counts, 0).to(crow.dtype)
            X = _build(kind, newcrow, newcol[keep].to(col.dtype), vals[keep], (n, k))
        res = dict(batch)
        res[self.key] = X
        return res

    def __repr__(self):
        return f"TopGenes({self.n}, by={self.by!r})"


def apply(transform, batch):
    """transform(batch), whose result must be a batch: None (a transform that changes the
    dict in place and forgets `return batch`) is an error naming the transform, here rather
    than as "'NoneType' object is not subscriptable" wherever the batch is used next."""
    out = transform(batch)
    if out is None:
        name = getattr(transform, "__qualname__", None) or repr(transform)
        raise TypeError(f"transform {name} returned None instead of the batch dict "
                        "(does it end with `return batch`?)")
    return out


class Compose:
    """Apply transforms in order (like torchvision.transforms.Compose)."""

    def __init__(self, transforms):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not callable(t):
                raise TypeError(f"{t!r} is not callable")

    def __call__(self, batch):
        for t in self.transforms:
            batch = apply(t, batch)
        return batch

    def bind(self, dataset, columns):
        for t in self.transforms:
            if hasattr(t, "bind"):
                columns = t.bind(dataset, columns)
        return columns

    def __repr__(self):
        return "Compose([" + ", ".join(map(repr, self.transforms)) + "])"
