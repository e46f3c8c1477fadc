#!/usr/bin/python3
"""Synthetic h5ad generator with reference-tile-like counts.

    gen_h5ad.py --cells N --genes G --seed S -o OUT.h5ad [--tile-like] [--compression gzip]
                [--chunk-cells 2000] [--csc | --dense] [--float]

Counts follow the reference tile of the codec issue: gene abundances are lognormal
(sigma 2.2) in a random gene order, library sizes are lognormal with sigma 0.6 and a mean
of 3,500 reads (with --tile-like a median of 3,500, exp(N(log 3500, 0.6)), exactly as
bench_decode's reference tile: ~23.3 M nonzeros per 10,000 x 61,497), and each cell's
reads are drawn multinomially (one uniform draw per read, a searchsorted on the
cumulative abundance, then counted per (cell, gene)).
`--tile-like` also makes the reference tile's shape the default: 10,000 cells x 61,497 genes.

X is written as anndata's CSR (int32 data/indices, int64 indptr when needed) in chunks of
cells, so 100,000 x 61,497 needs memory for one chunk only (plus the output of h5py).
obs: cell_type (categorical, 10 labels), donor (categorical, 12 donors), batch (categorical,
some missing = code -1), age (int), n_counts (int), percent_mt (float, some NaN),
is_doublet (bool), barcode (string); obs index 'cell_<i>'.  var: index 'GENE<i>', gene_ids
(string, 'ENSG...'), feature_types (categorical).  The output is deterministic for a seed.
Run with Debian's /usr/bin/python3 (numpy, pandas, h5py, anndata).
"""
import argparse
import os
import sys

import h5py
import numpy as np
import pandas as pd
from anndata._io.specs import write_elem

CELL_TYPES = ["CD4 T", "CD8 T", "B cell", "NK", "CD14 Mono", "FCGR3A Mono",
              "DC", "pDC", "Platelet", "HSC"]
CELL_TYPE_P = np.array([0.30, 0.15, 0.12, 0.10, 0.14, 0.06, 0.04, 0.02, 0.04, 0.03])


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=None)
    ap.add_argument("--genes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--tile-like", action="store_true",
                    help="the reference tile: its library sizes, and its shape (10,000 x 61,497) by default")
    ap.add_argument("--compression", choices=["none", "gzip", "lzf"], default="none")
    ap.add_argument("--chunk-cells", type=int, default=2000)
    fmt = ap.add_mutually_exclusive_group()
    fmt.add_argument("--csc", action="store_true", help="write X as CSC (holds X in memory)")
    fmt.add_argument("--dense", action="store_true", help="write X dense (holds X in memory)")
    ap.add_argument("--float", action="store_true", help="write X as float32 (integral values)")
    a = ap.parse_args(argv)
    if a.cells is None:
        a.cells = 10000 if a.tile_like else 1000
    if a.genes is None:
        a.genes = 61497 if a.tile_like else 2000
    if a.cells < 0 or a.genes < 0:
        ap.error("--cells and --genes must be >= 0")
    return a


def gene_cdf(rng, n_genes):
    ab = rng.lognormal(0.0, 2.2, n_genes)
    rng.shuffle(ab)
    cdf = np.cumsum(ab)
    return cdf / cdf[-1]


def library_sizes(rng, n_cells, tile_like):
    sigma = 0.6
    if tile_like:
        mu = np.log(3500.0)  # the reference tile's exp(N(log 3500, 0.6)): 23.3 M nonzeros per 10,000 cells
    else:
        mu = np.log(3500.0) - sigma * sigma / 2.0  # a mean of 3,500 reads (the SQL-test fixture)
    return np.maximum(1, rng.lognormal(mu, sigma, n_cells)).astype(np.int64)


def draw_chunk(rng, cdf, libs):
    """CSR (indptr, indices, data) of len(libs) cells with multinomial counts."""
    n = len(libs)
    g = np.int64(len(cdf))
    total = int(libs.sum())
    genes = np.searchsorted(cdf, rng.random(total), side="right")
    np.minimum(genes, g - 1, out=genes)
    cell = np.repeat(np.arange(n, dtype=np.int64), libs)
    key = cell * g + genes
    key.sort()
    first = np.empty(len(key), dtype=bool)
    if len(key):
        first[0] = True
        np.not_equal(key[1:], key[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, len(key)))
    ukey = key[starts]
    ucell = ukey // g
    indices = (ukey % g).astype(np.int32)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(ucell, minlength=n), out=indptr[1:])
    return indptr, indices, counts.astype(np.int32)


def make_obs(rng, n, n_counts):
    codes = rng.choice(len(CELL_TYPES), size=n, p=CELL_TYPE_P).astype(np.int8)
    cell_type = pd.Categorical.from_codes(codes, CELL_TYPES)
    donors = [f"D{i:02d}" for i in range(12)]
    donor = pd.Categorical.from_codes(rng.integers(0, len(donors), n).astype(np.int8), donors)
    bcodes = rng.integers(0, 4, n).astype(np.int8)
    bcodes[rng.random(n) < 0.05] = -1  # missing batch
    batch = pd.Categorical.from_codes(bcodes, ["b1", "b2", "b3", "b4"])
    age = rng.integers(18, 90, n).astype(np.int64)
    pmt = np.round(rng.gamma(2.0, 2.0, n), 3)
    pmt[rng.random(n) < 0.02] = np.nan
    is_doublet = rng.random(n) < 0.04
    letters = np.array(list("ACGT"))
    bc = letters[rng.integers(0, 4, (n, 16))]
    barcode = np.array(["".join(r) + "-1" for r in bc], dtype=object) if n else np.array([], dtype=object)
    df = pd.DataFrame({
        "cell_type": cell_type, "donor": donor, "batch": batch, "age": age,
        "n_counts": n_counts.astype(np.int64), "percent_mt": pmt,
        "is_doublet": is_doublet, "barcode": barcode,
    }, index=pd.Index([f"cell_{i}" for i in range(n)], dtype=object))
    return df


def make_var(rng, g):
    ftypes = pd.Categorical.from_codes(np.zeros(g, dtype=np.int8), ["Gene Expression"])
    return pd.DataFrame({
        "gene_ids": np.array([f"ENSG{100000 + i:011d}" for i in range(g)], dtype=object),
        "feature_types": ftypes,
    }, index=pd.Index([f"GENE{i}" for i in range(g)], dtype=object))


def main(argv):
    a = parse_args(argv)
    rng = np.random.default_rng(a.seed)
    n, g = a.cells, a.genes
    cdf = gene_cdf(rng, g) if g else None
    libs = library_sizes(rng, n, a.tile_like)
    kw = {} if a.compression == "none" else {"compression": a.compression}
    tmp = a.output + ".tmp"
    n_counts = np.zeros(n, dtype=np.int64)
    dtype = np.float32 if a.float else np.int32
    with h5py.File(tmp, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        chunks = []
        X = None
        if not (a.csc or a.dense):
            X = f.create_group("X")
            X.attrs["encoding-type"] = "csr_matrix"
            X.attrs["encoding-version"] = "0.1.0"
            X.attrs["shape"] = np.array([n, g], dtype=np.int64)
            maxshape = (None,)
            cs = (1 << 16,)
            d_data = X.create_dataset("data", (0,), dtype=dtype, maxshape=maxshape, chunks=cs, **kw)
            d_ind = X.create_dataset("indices", (0,), dtype=np.int32, maxshape=maxshape, chunks=cs, **kw)
            d_ptr = X.create_dataset("indptr", (n + 1,), dtype=np.int64, **kw)
            d_ptr[0] = 0
        nnz = 0
        for c0 in range(0, n, a.chunk_cells):
            c1 = min(n, c0 + a.chunk_cells)
            if g:
                ip, ind, dat = draw_chunk(rng, cdf, libs[c0:c1])
            else:
                ip, ind, dat = np.zeros(c1 - c0 + 1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32)
            n_counts[c0:c1] = np.add.reduceat(dat, ip[:-1]) if len(dat) else 0
            n_counts[c0:c1][np.diff(ip) == 0] = 0
            if X is not None:
                k = len(ind)
                d_data.resize((nnz + k,))
                d_ind.resize((nnz + k,))
                d_data[nnz:nnz + k] = dat.astype(dtype)
                d_ind[nnz:nnz + k] = ind
                d_ptr[c0 + 1:c1 + 1] = ip[1:] + nnz
                nnz += k
            else:
                chunks.append((ip, ind, dat))
        if X is None:
            import scipy.sparse as sp
            if chunks:
                m = sp.vstack([sp.csr_matrix((d.astype(dtype), i, p), shape=(len(p) - 1, g))
                               for p, i, d in chunks], format="csr")
            else:
                m = sp.csr_matrix((0, g), dtype=dtype)
            write_elem(f, "X", m.tocsc() if a.csc else m.toarray(), dataset_kwargs=kw)
        write_elem(f, "obs", make_obs(rng, n, n_counts), dataset_kwargs=kw)
        write_elem(f, "var", make_var(rng, g), dataset_kwargs=kw)
        for k in ("layers", "obsm", "obsp", "varm", "varp", "uns"):
            write_elem(f, k, {})
    os.replace(tmp, a.output)
    print(f"{a.output}: {n} cells x {g} genes", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
