#!/usr/bin/python3
"""Dump the X matrix of an .h5ad into the raw CSR layout read by
build/bench_decode --csr DIR:

    DIR/indptr.u64   n_cells+1 little-endian uint64
    DIR/indices.u32  nnz little-endian uint32 (gene index, as stored)
    DIR/data.u32     nnz little-endian uint32 (counts; must be whole numbers)

Usage: /usr/bin/python3 bench/dump_csr.py FILE.h5ad DIR [--layer NAME | --raw]

Reads X (or raw/X, or layers/NAME) with h5py, chunk by chunk, so large
files need not fit in memory twice.  CSC and dense X are converted to CSR with
scipy.  Counts that are not whole non-negative numbers below 2^32 are an error
(the codec stores integer counts).
"""
import os
import sys

import h5py
import numpy as np


def fail(msg):
    sys.stderr.write("dump_csr: %s\n" % msg)
    sys.exit(1)


def to_u32(values, where):
    v = np.asarray(values)
    if v.dtype.kind == "f":
        if not np.all(np.isfinite(v)) or np.any(v < 0) or np.any(v != np.floor(v)) or np.any(v > 4294967295):
            fail("%s: counts must be whole numbers in [0, 2^32-1]" % where)
    elif v.dtype.kind in "iu":
        if v.size and (v.min() < 0 or v.max() > 4294967295):
            fail("%s: counts out of the uint32 range" % where)
    else:
        fail("%s: unsupported dtype %s" % (where, v.dtype))
    return v.astype("<u4")


def main(argv):
    if len(argv) < 3:
        fail("usage: dump_csr.py FILE.h5ad DIR [--layer NAME | --raw]")
    path, out = argv[1], argv[2]
    key = "X"
    if len(argv) >= 5 and argv[3] == "--layer":
        key = "layers/" + argv[4]
    elif len(argv) >= 4 and argv[3] == "--raw":
        key = "raw/X"
    os.makedirs(out, exist_ok=True)
    with h5py.File(path, "r") as f:
        if key not in f:
            fail("%s: no %s" % (path, key))
        x = f[key]
        if isinstance(x, h5py.Dataset):                     # dense
            import scipy.sparse as sp
            m = sp.csr_matrix(x[()])
            indptr, indices, data = m.indptr, m.indices, m.data
        else:
            enc = x.attrs.get("encoding-type", "")
            if isinstance(enc, bytes):
                enc = enc.decode()
            shape = tuple(int(s) for s in x.attrs.get("shape", x.attrs.get("h5sparse_shape", (0, 0))))
            if enc == "csc_matrix":
                import scipy.sparse as sp
                m = sp.csc_matrix((x["data"][()], x["indices"][()], x["indptr"][()]), shape=shape).tocsr()
                m.sort_indices()
                indptr, indices, data = m.indptr, m.indices, m.data
            elif enc in ("csr_matrix", ""):
                indptr, indices, data = x["indptr"][()], x["indices"][()], x["data"][()]
            else:
                fail("%s: %s has encoding %r" % (path, key, enc))
        indptr = np.asarray(indptr, dtype="<u8")
        with open(os.path.join(out, "indptr.u64"), "wb") as fo:
            fo.write(indptr.tobytes())
        with open(os.path.join(out, "indices.u32"), "wb") as fo:
            fo.write(np.asarray(indices).astype("<u4").tobytes())
        with open(os.path.join(out, "data.u32"), "wb") as fo:
            fo.write(to_u32(data, path + ":" + key).tobytes())
    n_cells = len(indptr) - 1
    print("%s: %d cells, %d nonzeros -> %s" % (path, n_cells, int(indptr[-1]) if n_cells >= 0 else 0, out))


if __name__ == "__main__":
    main(sys.argv)
