"""Helpers of the converter tests: run build/deltacells, read a dataset back.

A dataset is read back without the SQLite extension: the tiles, obs blocks and
the genes table's blocks are decoded with the codec and obs libraries themselves (build/libdccore.a,
linked into a shared object for ctypes), so these tests check the converter's
output against the format, whatever state the virtual tables are in.
"""
import ctypes
import os
import sqlite3
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build")
# DELTACELLS_CONVERTER: another build of the converter (e.g. one made with ASan) to test
CONVERTER = os.path.abspath(os.environ.get("DELTACELLS_CONVERTER", os.path.join(BUILD, "deltacells")))
EXTENSION = os.path.join(BUILD, "deltacells.so")
# the real files: where they are ($DC_REAL_DATA), their names, and a skip when absent
from _batch_util import REAL_FILES, real_file  # noqa: E402,F401
from _batch_util import REAL as _REAL  # noqa: E402

REAL = str(_REAL)
GEN = os.path.join(ROOT, "scripts", "gen_h5ad.py")
PY = "/usr/bin/python3"


def need_converter():
    if not os.access(CONVERTER, os.X_OK):
        pytest.skip("build/deltacells is not built (run make)")


def run(*args, check=True, timeout=600, **kw):
    """Runs build/deltacells with args; returns the CompletedProcess."""
    need_converter()
    p = subprocess.run([CONVERTER, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"deltacells {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def convert(inputs, out, *opts, check=True):
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    return run("convert", *inputs, "-o", out, "--quiet", *opts, check=check)


# ---------------------------------------------------------------- the format libraries via ctypes
class DcError(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 256)]


class DcOut(ctypes.Structure):
    _fields_ = [("indptr", ctypes.c_void_p), ("indices", ctypes.c_void_p),
                ("values", ctypes.c_void_p), ("values_f32", ctypes.c_int)]


class ObsBlock(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("n", ctypes.c_uint32), ("null_count", ctypes.c_uint32),
                ("codes", ctypes.POINTER(ctypes.c_int32)), ("i64", ctypes.POINTER(ctypes.c_int64)),
                ("valid", ctypes.POINTER(ctypes.c_uint8)), ("f64", ctypes.POINTER(ctypes.c_double)),
                ("text", ctypes.POINTER(ctypes.c_char)), ("text_off", ctypes.POINTER(ctypes.c_uint64))]


class ObsExpect(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("n", ctypes.c_uint32), ("n_categories", ctypes.c_uint32)]


_lib = None


def corelib():
    """build/libdccore.a as a shared object (built once, into build/tests/).  $DC_CORELIB_LDFLAGS:
    more flags for its link (make coverage: --coverage)."""
    global _lib
    if _lib is not None:
        return _lib
    a = os.path.join(BUILD, "libdccore.a")
    if not os.path.exists(a):
        pytest.skip("build/libdccore.a is not built (run make)")
    so = os.path.join(BUILD, "tests", "libdccore_py.so")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(a):
        os.makedirs(os.path.dirname(so), exist_ok=True)
        libs = subprocess.run(["pkg-config", "--libs", "libzstd", "libxxhash"], capture_output=True,
                              text=True, check=True).stdout.split()
        tmp = so + f".{os.getpid()}"
        subprocess.run(["gcc", "-shared", "-o", tmp, "-Wl,--whole-archive", a, "-Wl,--no-whole-archive",
                        *libs, "-lpthread", "-lm", *os.environ.get("DC_CORELIB_LDFLAGS", "").split()],
                       check=True)
        os.replace(tmp, so)
    lib = ctypes.CDLL(so)
    lib.dc_decoder_new.restype = ctypes.c_void_p
    lib.dc_tile_decode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                   ctypes.POINTER(DcOut), ctypes.POINTER(DcError)]
    lib.dc_decoder_free.argtypes = [ctypes.c_void_p]
    lib.dc_obs_decoder_new.restype = ctypes.c_void_p
    lib.dc_obs_decoder_free.argtypes = [ctypes.c_void_p]
    lib.dc_obs_decode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.POINTER(ObsExpect), ctypes.POINTER(ObsBlock),
                                  ctypes.POINTER(DcError)]
    _lib = lib
    return lib


def decode_tiles(db, what=""):
    """Every tile of a dataset (an open sqlite3 connection) decoded through the codec library,
    in tile order: (tile, indptr int64, indices int32, counts int32) per tile.  The decoder path
    is the one DC_SIMD selects; `what` goes into the failure message."""
    lib = corelib()
    dec = lib.dc_decoder_new()
    try:
        for tile, nc, nnz, data in db.execute(
                "SELECT tile, n_cells, nnz, data FROM tiles_data ORDER BY tile"):
            ip = np.zeros(nc + 1, np.int64)
            ix = np.zeros(max(nnz, 1), np.int32)
            vx = np.zeros(max(nnz, 1), np.int32)
            out = DcOut(ip.ctypes.data, ix.ctypes.data, vx.ctypes.data, 0)
            err = DcError()
            rc = lib.dc_tile_decode(dec, bytes(data), len(data), ctypes.byref(out), ctypes.byref(err))
            assert rc == 0, f"{what}tile {tile}: {err.msg.decode()}"
            yield tile, ip, ix[:nnz], vx[:nnz]
    finally:
        lib.dc_decoder_free(dec)


KINDS = {"category": 1, "int": 2, "real": 3, "bool": 4, "text": 5}


class Dataset:
    """A dataset read back: meta, genes, X (CSR, dataset gene order), obs."""

    def __init__(self, path):
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.meta = dict(self.db.execute("SELECT key, value FROM dc_meta"))
        self.n_cells = int(self.meta["n_cells"])
        self.n_genes = int(self.meta["n_genes"])
        self.gene_columns = {r[1]: (r[0], r[2]) for r in
                             self.db.execute("SELECT col, name, kind FROM genes_columns ORDER BY col")}
        assert list(self.gene_columns)[:3] == ["name", "total_counts", "n_cells"]
        self.gene_names = self.genes("name")
        assert None not in self.gene_names
        self.gene_total = np.array(self.genes("total_counts"), dtype=np.int64)
        self.gene_ncells = np.array(self.genes("n_cells"), dtype=np.int64)
        self.columns = {r[1]: (r[0], r[2], r[3]) for r in
                        self.db.execute("SELECT col, name, kind, n_categories FROM cells_columns ORDER BY col")}

    def close(self):
        self.db.close()

    def X(self):
        ptrs, inds, vals = [np.zeros(1, np.int64)], [], []
        base = 0
        for _, ip, ix, vx in decode_tiles(self.db):
            ptrs.append(ip[1:] + base)
            inds.append(ix)
            vals.append(vx.view(np.uint32).astype(np.int64))
            base += len(ix)
        indptr = np.concatenate(ptrs)
        assert len(indptr) == self.n_cells + 1
        indices = np.concatenate(inds) if inds else np.zeros(0, np.int32)
        data = np.concatenate(vals) if vals else np.zeros(0, np.int64)
        return sp.csr_matrix((data, indices, indptr), shape=(self.n_cells, self.n_genes))

    @staticmethod
    def _decode(dec, data, kind, n, ncat, labels, what):
        """One obs-format block (format.md section 3) -> (values, null count)."""
        lib = corelib()
        ex = ObsExpect(KINDS[kind], n, ncat or 0)
        blk = ObsBlock()
        err = DcError()
        rc = lib.dc_obs_decode(dec, bytes(data), len(data), ctypes.byref(ex), ctypes.byref(blk), ctypes.byref(err))
        assert rc == 0, f"{what}: {err.msg.decode()}"
        if kind == "category":
            c = np.ctypeslib.as_array(blk.codes, (n,)) if n else []
            out = [None if k < 0 else labels[k] for k in c]
        elif kind in ("int", "bool"):
            v = np.ctypeslib.as_array(blk.i64, (n,)) if n else []
            ok = np.ctypeslib.as_array(blk.valid, (n,)) if n else []
            out = [int(x) if o else None for x, o in zip(v, ok)]
        elif kind == "real":
            v = np.ctypeslib.as_array(blk.f64, (n,)) if n else []
            out = [None if np.isnan(x) else float(x) for x in v]
        else:
            offs = np.ctypeslib.as_array(blk.text_off, (n + 1,)).copy() if n else []
            ok = np.ctypeslib.as_array(blk.valid, (n,)).copy() if n else []
            raw = ctypes.string_at(blk.text, int(offs[-1])) if n else b""
            out = [raw[offs[i]:offs[i + 1]].decode("utf-8") if ok[i] else None for i in range(n)]
        return out, blk.null_count

    def obs(self, name):
        """Values of one obs column: list of Python values, None for NULL."""
        lib = corelib()
        col, kind, ncat = self.columns[name]
        labels = None
        if kind == "category":
            labels = [v for (v,) in self.db.execute("SELECT value FROM cells_dict WHERE col=? ORDER BY code", (col,))]
            assert len(labels) == ncat
        dec = lib.dc_obs_decoder_new()
        out = []
        try:
            for block, fc, n, nulls, data in self.db.execute(
                    "SELECT block, first_cell, n_cells, null_count, data FROM cells_blocks WHERE col=? ORDER BY block",
                    (col,)):
                assert fc == len(out)
                vals, nn = self._decode(dec, data, kind, n, ncat, labels, f"{name} block {block}")
                assert nn == nulls
                out += vals
        finally:
            lib.dc_obs_decoder_free(dec)
        assert len(out) == self.n_cells
        return out

    def genes(self, name):
        """Values of one column of the genes table (name, total_counts, n_cells or a var
        column), decoded from genes_blocks: list in gene_id order, None for NULL."""
        lib = corelib()
        col, kind = self.gene_columns[name]
        per = int(self.meta["genes_block"])
        dec = lib.dc_obs_decoder_new()
        out, nulls = [], 0
        try:
            for bid, c, block, first, n, data in self.db.execute(
                    "SELECT id, col, block, first_gene, n_genes, data FROM genes_blocks WHERE col=? ORDER BY block",
                    (col,)):
                assert bid == (col << 32) + block and c == col and first == len(out) == block * per
                assert n == min(per, self.n_genes - first)
                vals, nn = self._decode(dec, data, kind, n, 0, None, f"genes column {name} block {block}")
                out += vals
                nulls += nn
        finally:
            lib.dc_obs_decoder_free(dec)
        assert len(out) == self.n_genes
        assert nulls == self.db.execute("SELECT null_count FROM genes_columns WHERE col=?", (col,)).fetchone()[0]
        return out


# ---------------------------------------------------------------- expectations from anndata
def expected_values(series):
    """What the dataset must hold for a pandas column: list, None for missing."""
    import pandas as pd
    if isinstance(series.dtype, pd.CategoricalDtype):
        return [None if pd.isna(v) else str(v) for v in series.astype(object)]
    if series.dtype == bool:
        return [int(v) for v in series]
    if str(series.dtype) == "boolean":
        return [None if v is pd.NA else int(v) for v in series]
    if str(series.dtype) in ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32"):
        return [None if v is pd.NA else int(v) for v in series]
    if np.issubdtype(series.dtype, np.integer):
        return [int(v) for v in series]
    if np.issubdtype(series.dtype, np.floating):
        return [None if np.isnan(v) else float(v) for v in series]
    return [None if (v is None or (isinstance(v, float) and np.isnan(v))) else str(v) for v in series]


def check_matrix(ds, adatas, matrices=None, key=None, strip=True):
    """The dataset's X equals the inputs' matrices stacked, genes mapped by name (with
    surrounding whitespace removed, as the converter does by default: strip)."""
    X = ds.X()
    gid = {n: i for i, n in enumerate(ds.gene_names)}
    assert len(gid) == len(ds.gene_names), "test inputs must have unique gene names"
    # genes numbered by decreasing total counts; totals and n_cells match the matrix
    assert np.all(np.diff(ds.gene_total) <= 0)
    assert np.array_equal(np.asarray(X.sum(axis=0)).ravel(), ds.gene_total)
    assert np.array_equal(np.diff(X.tocsc().indptr), ds.gene_ncells)
    # gene indices in range and strictly increasing within every cell (all cells, vectorised)
    ix, ip = X.indices.astype(np.int64), X.indptr
    assert ix.size == 0 or (ix.min() >= 0 and ix.max() < ds.n_genes)
    if ix.size > 1:
        starts = np.zeros(ix.size, dtype=bool)
        starts[ip[:-1][ip[:-1] < ix.size]] = True
        bad = np.flatnonzero((np.diff(ix) <= 0) & ~starts[1:])
        assert bad.size == 0, f"cell {np.searchsorted(ip, bad[0] + 1, 'right') - 1}: gene indices not increasing"
    r0 = 0
    for k, a in enumerate(adatas):
        M = a.X if matrices is None else matrices[k]
        M = sp.csr_matrix(M)
        names = list(a.var_names) if key is None else list(a.var[key])
        if strip:
            names = [n.strip() for n in names]
        cols = np.array([gid[n] for n in names], dtype=np.int64)
        exp = sp.csr_matrix((M.shape[0], ds.n_genes), dtype=np.int64)
        if M.shape[1]:
            Mc = M.tocoo()
            exp = sp.csr_matrix((Mc.data.astype(np.int64), (Mc.row, cols[Mc.col])), shape=(M.shape[0], ds.n_genes))
        got = X[r0:r0 + M.shape[0]]
        diff = (got - exp)
        assert diff.count_nonzero() == 0, f"input {k}: {diff.count_nonzero()} values differ"
        r0 += M.shape[0]
    assert r0 == ds.n_cells


def check_obs(ds, adatas):
    """Every obs value equals what anndata reads; the index is column _index."""
    names = []
    for a in adatas:
        names += list(a.obs_names)
    assert ds.obs("_index") == names
    for col in dict.fromkeys(c for a in adatas for c in a.obs.columns):
        exp = []
        for a in adatas:
            exp += expected_values(a.obs[col]) if col in a.obs.columns else [None] * a.n_obs
        stored = col if col not in ("cell_id", "name", "tile") else col + "_1"
        got = ds.obs(stored)
        assert len(got) == len(exp)
        bad = [i for i, (g, e) in enumerate(zip(got, exp)) if not (g == e and type(g) is type(e))]
        assert not bad, f"column {col}: row {bad[0]}: got {got[bad[0]]!r}, expected {exp[bad[0]]!r}"
