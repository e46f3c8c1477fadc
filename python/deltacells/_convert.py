"""Blobs from dc_batch -> the output forms of the datasets.

Copies: the values are converted once into the requested dtype (in torch, which
uses its intra-op threads); the column indices and cell ids are viewed in place
(torch.frombuffer / torch.from_numpy on the bytes SQLite returned); the row
pointers (n+1 values) are narrowed to int32 so that both index tensors agree.
"""
import warnings

import numpy as np
import torch

# Torch warns once per process that a tensor views a read-only buffer (the
# bytes returned by sqlite3 are only ever referenced by the tensor), and that
# sparse CSR is beta.  Both are TORCH_WARN_ONCE: trigger them here, silenced.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.from_numpy(np.frombuffer(b"\0" * 8, dtype=np.int32))
    torch.sparse_csr_tensor(torch.zeros(2, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                            torch.zeros(0), size=(1, 1))

_TORCH_DTYPES = {
    "float32": torch.float32, "float": torch.float32, "float16": torch.float16,
    "half": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "double": torch.float64, "int32": torch.int32, "int": torch.int32,
    "int64": torch.int64, "long": torch.int64, "int16": torch.int16, "short": torch.int16,
    "int8": torch.int8, "uint8": torch.uint8,
}
# value dtypes the extension writes directly (the others: float32, then converted)
_DIRECT = {torch.int32: "int32", torch.float32: "float32", torch.int16: "int16",
           torch.int8: "int8", torch.uint8: "uint8", torch.float64: "float64",
           torch.int64: "int64"}


def take_dtype(tdtype):
    """The numpy dtype the extension writes the values in for a torch dtype."""
    return _DIRECT.get(tdtype, "float32")


def torch_dtype(dtype):
    """Accept a torch dtype, a numpy dtype or a name -> torch dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in set(_TORCH_DTYPES.values()):
            raise ValueError(f"unsupported dtype {dtype}")
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in _TORCH_DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of {sorted(_TORCH_DTYPES)}")
    return _TORCH_DTYPES[name]


def numpy_dtype(tdtype):
    if tdtype == torch.bfloat16:
        raise ValueError("output='scipy' cannot hold bfloat16 values")
    return torch.empty(0, dtype=tdtype).numpy().dtype


class CSRBatch:
    """A CSR matrix as three dense tensors: a form that pins (DataLoader
    pin_memory=True calls .pin_memory()) and moves (.to(device)), which torch's
    sparse CSR tensors do not do in every version.

    crow_indices: int32 (n+1,); col_indices: int32 (nnz,); values: (nnz,); shape: (n, n_genes).
    """
    __slots__ = ("crow_indices", "col_indices", "values", "shape")

    def __init__(self, crow_indices, col_indices, values, shape):
        self.crow_indices = crow_indices
        self.col_indices = col_indices
        self.values = values
        self.shape = tuple(int(s) for s in shape)

    def pin_memory(self, device=None):
        a = (self.crow_indices, self.col_indices, self.values)
        return CSRBatch(*(t.pin_memory() if device is None else t.pin_memory(device) for t in a),
                        self.shape)

    def is_pinned(self):
        return all(t.is_pinned() for t in (self.crow_indices, self.col_indices, self.values))

    def to(self, *args, **kwargs):
        """Like Tensor.to: a device moves all three tensors; a dtype applies to values."""
        dev_kw = {k: v for k, v in kwargs.items() if k != "dtype"}
        dtype = kwargs.get("dtype")
        dev_args = []
        for a in args:
            if isinstance(a, torch.dtype):
                dtype = a
            else:
                dev_args.append(a)
        mv = (lambda t: t.to(*dev_args, **dev_kw)) if (dev_args or dev_kw) else (lambda t: t)
        vals = mv(self.values)
        if dtype is not None:
            vals = vals.to(dtype)
        return CSRBatch(mv(self.crow_indices), mv(self.col_indices), vals, self.shape)

    def cuda(self, device=None, non_blocking=False):
        return self.to(device or "cuda", non_blocking=non_blocking)

    @property
    def device(self):
        return self.values.device

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def nnz(self):
        return int(self.values.numel())

    def to_sparse_csr(self):
        return torch.sparse_csr_tensor(self.crow_indices, self.col_indices, self.values,
                                       size=self.shape)

    def to_dense(self):
        return self.to_sparse_csr().to_dense()

    def to_scipy(self):
        import scipy.sparse
        return scipy.sparse.csr_matrix(
            (self.values.cpu().numpy(), self.col_indices.cpu().numpy(),
             self.crow_indices.cpu().numpy()), shape=self.shape)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"CSRBatch(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype}, device={self.device})"


def _crow32(indptr):
    if indptr.dtype == np.int32:
        return indptr
    if len(indptr) and int(indptr[-1]) >= 2**31:
        raise ValueError("a batch with 2^31 or more nonzeros does not fit int32 indices; "
                         "use a smaller batch_size")
    return indptr.astype(np.int32)


def make_x(indptr, indices, data, n_cells, n_genes, output, tdtype):
    """numpy views of the blobs -> X in the requested output form."""
    if output == "scipy":
        import scipy.sparse
        ndt = numpy_dtype(tdtype)
        vals = data if ndt == data.dtype else data.astype(ndt)
        return scipy.sparse.csr_matrix((vals, indices, _crow32(indptr)), shape=(n_cells, n_genes))
    vals = torch.from_numpy(data)
    if vals.dtype != tdtype:
        vals = vals.to(tdtype)     # float16: checked first (_core.check_float16)
    if output == "dense":
        out = torch.zeros((n_cells, n_genes), dtype=tdtype)
        if len(data):
            rows = torch.repeat_interleave(torch.arange(n_cells),
                                           torch.from_numpy(np.diff(indptr)))
            out[rows, torch.from_numpy(indices).long()] = vals
        return out
    crow = torch.from_numpy(_crow32(indptr))
    col = torch.from_numpy(indices)
    if output == "csr_parts":
        return CSRBatch(crow, col, vals, (n_cells, n_genes))
    return csr_tensor(crow, col, vals, (n_cells, n_genes))


# torch.sparse_csr_tensor checks every index (about 10 ms for 12 M nonzeros); dc_batch's
# output already holds the invariants (indptr from 0 to nnz, non-decreasing; indices in
# range and sorted within each row: the extension checks decoded gene indices), so the
# unchecked constructor is used where this torch has it.
_csr_unsafe = getattr(torch, "_sparse_csr_tensor_unsafe", None)


def csr_tensor(crow, col, vals, shape):
    if _csr_unsafe is not None:
        return _csr_unsafe(crow, col, vals, size=shape)
    return torch.sparse_csr_tensor(crow, col, vals, size=shape)


def obs_out(arr, as_torch):
    if not as_torch or arr.dtype == object:
        return arr
    return torch.from_numpy(np.ascontiguousarray(arr))


def _rebuild_csr(crow, col, values, shape):
    return csr_tensor(crow, col, values, tuple(shape))


def install_csr_reduction():
    """Let sparse CSR tensors cross process boundaries (DataLoader workers -> the main
    process).  torch 1.13's tensor reducer cannot share a sparse CSR tensor ("Cannot
    access storage of SparseCsrTensorImpl"), so a worker's batch would be lost.  This
    wraps torch's reducer for torch.Tensor: a sparse CSR tensor travels as its three
    component tensors (each shared the usual way) and is rebuilt on arrival; every
    other tensor goes through torch's own reducer unchanged."""
    from multiprocessing.reduction import ForkingPickler
    orig = ForkingPickler._extra_reducers.get(torch.Tensor)
    if orig is None or getattr(orig, "_deltacells_csr", False):
        return

    from . import _xfer

    def reduce_tensor(t):
        if t.layout == torch.sparse_csr:
            return (_rebuild_csr, (t.crow_indices(), t.col_indices(), t.values(), tuple(t.shape)))
        shared = _xfer.reduce_worker_tensor(t)   # a worker's reused slot: copied once
        if shared is not None:
            return shared
        return orig(t)
    reduce_tensor._deltacells_csr = True
    ForkingPickler.register(torch.Tensor, reduce_tensor)
