"""10x Genomics inputs: a CellRanger 3+ HDF5 file (filtered_feature_bc_matrix.h5), a
CellRanger 2 HDF5 file, and Matrix Market directories (gzipped or not, entries in any
order, either orientation), all written here from one scipy matrix, convert to the same
dataset: the same cells, gene names, var columns and X by gene name.  Malformed inputs
fail with a message naming the file and the reason."""
import gzip
import json
import os
import shutil
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _converter_util import Dataset, check_matrix, convert, run

warnings.filterwarnings("ignore")

N_CELLS, N_GENES = 57, 41


def make_matrix(seed=3, n=N_CELLS, g=N_GENES, antibodies=0):
    rng = np.random.default_rng(seed)
    m = (rng.integers(1, 300, (n, g)) * (rng.random((n, g)) < 0.3)).astype(np.int32)
    m[5] = 0            # an empty cell
    m[:, 7] = 0         # a gene no cell has
    barcodes = [f"{''.join(rng.choice(list('ACGT'), 16))}-1" for _ in range(n)]
    ids = [f"ENSG{i:011d}" for i in range(g)]
    names = [f"GENE{i}" for i in range(g)]
    types = ["Gene Expression"] * (g - antibodies) + ["Antibody Capture"] * antibodies
    return sp.csr_matrix(m), barcodes, ids, names, types


def write_h5_v3(path, X, barcodes, ids, names, types):
    """As CellRanger 3+ writes it: /matrix CSC of genes x cells."""
    C = sp.csc_matrix(X.T)   # genes x cells, compressed by cell
    with h5py.File(path, "w") as f:
        m = f.create_group("matrix")
        m["barcodes"] = np.array(barcodes, dtype="S")
        m["data"] = C.data.astype(np.int32)
        m["indices"] = C.indices.astype(np.int64)
        m["indptr"] = C.indptr.astype(np.int64)
        m["shape"] = np.array(C.shape, dtype=np.int32)
        ft = m.create_group("features")
        ft["_all_tag_keys"] = np.array([b"genome"])
        ft["feature_type"] = np.array(types, dtype="S")
        ft["genome"] = np.array(["GRCh38"] * len(ids), dtype="S")
        ft["id"] = np.array(ids, dtype="S")
        ft["name"] = np.array(names, dtype="S")
    return path


def write_h5_v2(path, X, barcodes, ids, names, genome="hg19"):
    C = sp.csc_matrix(X.T)
    with h5py.File(path, "w") as f:
        m = f.create_group(genome)
        m["barcodes"] = np.array(barcodes, dtype="S")
        m["data"] = C.data.astype(np.int32)
        m["indices"] = C.indices.astype(np.int64)
        m["indptr"] = C.indptr.astype(np.int64)
        m["shape"] = np.array(C.shape, dtype=np.int32)
        m["genes"] = np.array(ids, dtype="S")
        m["gene_names"] = np.array(names, dtype="S")
    return path


def write_mtx(d, X, barcodes, ids, names, types, gz=True, shuffle=False, transpose=False, v2=False,
              prefix="", header="%%MatrixMarket matrix coordinate integer general", field_fmt="{}"):
    """A 10x Matrix Market directory (matrix.mtx: genes x cells, 1-based)."""
    os.makedirs(d, exist_ok=True)
    op = (lambda p: gzip.open(p, "wt")) if gz else (lambda p: open(p, "w"))
    ext = ".gz" if gz else ""
    C = sp.coo_matrix(X.T)  # genes x cells
    r, c, v = C.row + 1, C.col + 1, C.data
    order = np.lexsort((r, c))        # by cell, then gene (as CellRanger writes)
    if shuffle:
        order = np.random.default_rng(1).permutation(len(r))
    r, c, v = r[order], c[order], v[order]
    rows, cols = X.shape[1], X.shape[0]
    if transpose:
        r, c, rows, cols = c, r, cols, rows
    with op(os.path.join(d, f"{prefix}matrix.mtx{ext}")) as f:
        f.write(header + "\n%metadata_json: {\"software_version\": \"test\"}\n")
        f.write(f"{rows} {cols} {len(v)}\n")
        f.writelines(f"{a} {b} {field_fmt.format(x)}\n" for a, b, x in zip(r, c, v))
    feat = f"{prefix}genes.tsv{ext}" if v2 else f"{prefix}features.tsv{ext}"
    with op(os.path.join(d, feat)) as f:
        for i, n, t in zip(ids, names, types):
            f.write(f"{i}\t{n}\n" if v2 else f"{i}\t{n}\t{t}\n")
    with op(os.path.join(d, f"{prefix}barcodes.tsv{ext}")) as f:
        f.writelines(b + "\n" for b in barcodes)
    return d


def as_anndata(X, barcodes, names):
    return ad.AnnData(X=X, obs=pd.DataFrame(index=barcodes), var=pd.DataFrame(index=names), dtype=np.int32)


def contents(path):
    """What must agree between inputs: cells, genes (name -> total), X by gene name, var columns."""
    ds = Dataset(path)
    X = ds.X().toarray()
    names = ds.gene_names
    order = np.argsort(names, kind="stable")
    out = {"cells": ds.obs("_index"), "genes": [names[i] for i in order],
           "X": X[:, order], "cols": {c: [ds.genes(c)[i] for i in order]
                                      for c in ds.gene_columns if c not in ("name", "total_counts", "n_cells")}}
    ds.close()
    return out


def same(a, b):
    assert a["cells"] == b["cells"]
    assert a["genes"] == b["genes"]
    assert np.array_equal(a["X"], b["X"])


@pytest.fixture(scope="module")
def mat():
    return make_matrix()


def test_h5_and_mtx_give_the_same_dataset(tmp_path, mat):
    X, bc, ids, names, types = mat
    h5 = write_h5_v3(tmp_path / "filtered_feature_bc_matrix.h5", *mat)
    gzd = write_mtx(tmp_path / "gz", *mat, gz=True)
    pld = write_mtx(tmp_path / "plain", *mat, gz=False)
    shd = write_mtx(tmp_path / "shuffled", *mat, gz=True, shuffle=True)
    trd = write_mtx(tmp_path / "transposed", *mat, gz=False, transpose=True, shuffle=True)
    res = {}
    for name, inp in [("h5", h5), ("gz", gzd), ("plain", pld), ("shuffled", shd), ("transposed", trd)]:
        out = tmp_path / f"{name}.dcdb"
        convert(inp, out, "--tile-cells", "20")
        ds = Dataset(out)
        check_matrix(ds, [as_anndata(X, bc, names)])    # X equals the matrix, genes by name
        assert ds.obs("_index") == bc                     # barcodes name the cells
        assert ds.n_cells == N_CELLS and ds.n_genes == N_GENES
        gid = dict(zip(ds.gene_names, ds.genes("gene_ids")))
        assert gid == dict(zip(names, ids))               # gene_ids kept as a var column
        assert ds.genes("feature_types") == ["Gene Expression"] * N_GENES
        src = json.loads(ds.meta["sources"])
        assert len(src) == 1 and src[0]["n_cells"] == N_CELLS
        ds.close()
        res[name] = contents(out)
    for k in ("gz", "plain", "shuffled", "transposed"):
        same(res["h5"], res[k])
    assert res["h5"]["cols"]["gene_ids"] == res["gz"]["cols"]["gene_ids"]
    assert res["h5"]["cols"]["genome"] == ["GRCh38"] * N_GENES
    # the same dataset, byte for byte, from the HDF5 file and the mtx directory (same id);
    # only dc_meta's sources differ (paths), and the h5's genome column
    a, b = tmp_path / "a.dcdb", tmp_path / "b.dcdb"
    convert(h5, a, "--dataset-id", "00000000000000aa")
    convert(gzd, b, "--dataset-id", "00000000000000aa")
    qa, qb = Dataset(a), Dataset(b)
    assert (list(qa.db.execute("SELECT data FROM tiles_data ORDER BY tile")) ==
            list(qb.db.execute("SELECT data FROM tiles_data ORDER BY tile")))


def test_gene_key_gene_ids(tmp_path, mat):
    X, bc, ids, names, types = mat
    h5 = write_h5_v3(tmp_path / "m.h5", *mat)
    d = write_mtx(tmp_path / "d", *mat)
    for inp in (h5, d):
        out = tmp_path / "k.dcdb"
        convert(inp, out, "--gene-key", "gene_ids", "--force")
        ds = Dataset(out)
        a = as_anndata(X, bc, names)
        a.var["gene_ids"] = ids
        check_matrix(ds, [a], key="gene_ids")
        assert dict(zip(ds.gene_names, ds.genes("var_index"))) == dict(zip(ids, names))
        ds.close()


def test_cellranger2_h5_and_genes_tsv(tmp_path, mat):
    X, bc, ids, names, types = mat
    h5 = write_h5_v2(tmp_path / "v2.h5", X, bc, ids, names)
    d = write_mtx(tmp_path / "v2", *mat, v2=True, gz=False)
    outs = []
    for k, inp in enumerate((h5, d)):
        out = tmp_path / f"v2_{k}.dcdb"
        convert(inp, out)
        ds = Dataset(out)
        check_matrix(ds, [as_anndata(X, bc, names)])
        assert dict(zip(ds.gene_names, ds.genes("gene_ids"))) == dict(zip(names, ids))
        ds.close()
        outs.append(contents(out))
    same(outs[0], outs[1])


def test_prefixed_mtx_file_and_real_values(tmp_path, mat):
    """GEO-style prefixed names, the matrix file given itself; 'real' values holding whole numbers."""
    X, bc, ids, names, types = mat
    d = write_mtx(tmp_path / "geo", *mat, prefix="GSM1_", header="%%MatrixMarket matrix coordinate real general",
                  field_fmt="{}.0")
    out = tmp_path / "geo.dcdb"
    convert(tmp_path / "geo" / "GSM1_matrix.mtx.gz", out)
    ds = Dataset(out)
    check_matrix(ds, [as_anndata(X, bc, names)])
    ds.close()


def test_tenx_with_h5ad_and_feature_types(tmp_path):
    """A 10x file beside an h5ad: genes joined by name, `source` per file.  Antibody
    features are left out by default (as scanpy's read_10x_h5), with a note; --all-features
    keeps them, told apart by feature_types."""
    X, bc, ids, names, types = make_matrix(antibodies=3)
    h5 = write_h5_v3(tmp_path / "ab.h5", X, bc, ids, names, types)
    d = write_mtx(tmp_path / "abdir", X, bc, ids, names, types)
    X2, bc2, _, _, _ = make_matrix(seed=9, n=20)
    a2 = as_anndata(X2, [b + "x" for b in bc2], names)
    p2 = tmp_path / "b.h5ad"
    a2.write_h5ad(p2)
    gex = [n for n, t in zip(names, types) if t == "Gene Expression"]
    for inp in (h5, d):
        out = tmp_path / "mix.dcdb"
        r = convert([inp, p2], out, "--force")
        assert "3 features that are not 'Gene Expression' (e.g. 'Antibody Capture') are left out" in r.stderr
        ds = Dataset(out)
        a1 = as_anndata(X, bc, names)
        # the h5ad keeps its 3 last genes; the 10x file's cells have none of them
        check_matrix(ds, [a1[:, gex], a2])
        X1 = ds.X()[:N_CELLS].toarray()
        ab_cols = [ds.gene_names.index(n) for n in names[-3:]]
        assert not X1[:, ab_cols].any()
        ds.close()
    out = tmp_path / "all.dcdb"
    r = convert([h5, p2], out, "--all-features")
    assert "left out" not in r.stderr
    ds = Dataset(out)
    check_matrix(ds, [as_anndata(X, bc, names), a2])
    ft = dict(zip(ds.gene_names, ds.genes("feature_types")))
    assert [ft[n] for n in names] == types
    assert ds.obs("source") == ["ab.h5"] * N_CELLS + ["b.h5ad"] * 20
    src = json.loads(ds.meta["sources"])
    assert [s["kind"] for s in src] == ["10x h5", "h5ad"] and [s["source"] for s in src] == ["ab.h5", "b.h5ad"]
    assert [s["file"] for s in src] == [str(h5.resolve()), str(p2.resolve())]
    ds.close()
    # a single 10x input, antibodies left out: verify passes, totals match
    out = tmp_path / "one.dcdb"
    convert(h5, out)
    ds = Dataset(out)
    assert sorted(ds.gene_names) == sorted(gex)
    check_matrix(ds, [as_anndata(X, bc, names)[:, gex]])
    ds.close()
    run("verify", out)


# ---------------------------------------------------------------- malformed inputs
def bad(tmp_path, inp, *words, opts=()):
    out = tmp_path / "bad.dcdb"
    r = convert(inp, out, *opts, check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("deltacells: "), r.stderr
    for w in words:
        assert w in r.stderr, f"{w!r} not in {r.stderr!r}"
    assert not out.exists()
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f or "spool" in f]
    return r.stderr


def rewrite(path, fn):
    """Rewrites a (maybe gzipped) text file's lines through fn."""
    gz = str(path).endswith(".gz")
    op = gzip.open if gz else open
    with op(path, "rt") as f:
        lines = f.read().splitlines()
    with op(path, "wt") as f:
        f.write("".join(x + "\n" for x in fn(lines)))


def test_mtx_truncated(tmp_path, mat):
    d = write_mtx(tmp_path / "t", *mat, gz=False)
    rewrite(d / "matrix.mtx", lambda ls: ls[:-10])
    bad(tmp_path, d, "matrix.mtx", "ends after", "truncated")


def test_mtx_gz_truncated(tmp_path, mat):
    d = write_mtx(tmp_path / "tg", *mat, gz=True)
    p = d / "matrix.mtx.gz"
    raw = p.read_bytes()
    p.write_bytes(raw[:len(raw) // 2])
    bad(tmp_path, d, "matrix.mtx.gz", "truncated")


def test_mtx_wrong_header(tmp_path, mat):
    d = write_mtx(tmp_path / "h", *mat, gz=False, header="%%MatrixMarket matrix array integer general")
    bad(tmp_path, d, "matrix.mtx", "matrix coordinate")
    d = write_mtx(tmp_path / "h2", *mat, gz=False, header="hello")
    bad(tmp_path, d, "matrix.mtx", "line 1", "not a Matrix Market header")
    d = write_mtx(tmp_path / "h3", *mat, gz=False, header="%%MatrixMarket matrix coordinate complex general")
    bad(tmp_path, d, "matrix.mtx", "complex")
    d = write_mtx(tmp_path / "h4", *mat, gz=False, header="%%MatrixMarket matrix coordinate integer symmetric")
    bad(tmp_path, d, "symmetric")


def test_mtx_shape_mismatch(tmp_path, mat):
    d = write_mtx(tmp_path / "s", *mat, gz=True)
    rewrite(d / "barcodes.tsv.gz", lambda ls: ls[:-1])
    bad(tmp_path, d, "matrix.mtx.gz", f"{N_GENES} x {N_CELLS}", f"{N_CELLS - 1} barcodes", "barcodes.tsv.gz")


def test_mtx_missing_barcodes(tmp_path, mat):
    d = write_mtx(tmp_path / "mb", *mat, gz=True)
    os.remove(d / "barcodes.tsv.gz")
    bad(tmp_path, d, str(d), "is a directory without barcodes.tsv.gz or barcodes.tsv")
    d2 = tmp_path / "empty"
    d2.mkdir()
    bad(tmp_path, d2, "is a directory without matrix.mtx.gz or matrix.mtx")


def test_mtx_bad_entries(tmp_path, mat):
    X, bc, ids, names, types = mat
    cases = [
        (lambda ls: ls[:3] + [f"{N_GENES + 1} 1 5"] + ls[4:], ("line 4", "outside the")),
        (lambda ls: ls[:3] + ["1 2 -5"] + ls[4:], ("line 4", "not a count", f"'{bc[1]}'", "'GENE0'")),
        (lambda ls: ls[:3] + ["1 2 2.5"] + ls[4:], ("line 4", "not a count")),
        (lambda ls: ls[:3] + ["1 x 2"] + ls[4:], ("line 4", "not an entry")),
        (lambda ls: ls + ["1 1 1"], ("more entries than",)),
        (lambda ls: ls[:2] + ["41 57"] + ls[3:], ("not a size line",)),
        (lambda ls: ls[:2] + ["41 57 -1"] + ls[3:], ("not a size line",)),   # "-1" was 2^64-1 entries
    ]
    for k, (fn, words) in enumerate(cases):
        d = write_mtx(tmp_path / f"e{k}", *mat, gz=False)
        rewrite(d / "matrix.mtx", fn)
        bad(tmp_path, d, "matrix.mtx", *words)


@pytest.mark.parametrize("gz", [False, True])
def test_mtx_nul_byte_in_any_file_is_an_error(tmp_path, mat, gz):
    """A NUL byte inside a line of any of the three files is an error naming the file and the
    line: it would have ended a barcode, a gene name or an entry there unseen (barcode
    'AAAC\\0X-1' read as 'AAAC', a count '3\\0junk' as 3)."""
    ext = ".gz" if gz else ""
    for k, (name, line) in enumerate([("barcodes.tsv", 5), ("features.tsv", 2), ("matrix.mtx", 7)]):
        d = write_mtx(tmp_path / f"nul{k}", *mat, gz=gz)
        p = d / (name + ext)
        raw = (gzip.decompress(p.read_bytes()) if gz else p.read_bytes()).split(b"\n")
        raw[line - 1] = raw[line - 1][:2] + b"\0" + raw[line - 1][2:]
        data = b"\n".join(raw)
        p.write_bytes(gzip.compress(data) if gz else data)
        bad(tmp_path, d, name + ext, f"line {line} holds a NUL byte")


def test_mtx_duplicate_entry(tmp_path, mat):
    X, bc, ids, names, types = mat
    d = write_mtx(tmp_path / "dup", *mat, gz=False, shuffle=True)

    def dup(ls):
        i, j, _ = ls[3].split()
        body = ls[3:] + [f"{i} {j} 1"]
        body = body[:len(body) // 2] + [body[-1]] + body[len(body) // 2:-1]  # apart from its first
        return ls[:2] + [f"{N_GENES} {N_CELLS} {len(body)}"] + body
    rewrite(d / "matrix.mtx", dup)
    i, j, _ = (d / "matrix.mtx").read_text().splitlines()[3].split()
    bad(tmp_path, d, "appears twice", f"'{bc[int(j) - 1]}'", f"'{names[int(i) - 1]}'")


def _damage(rng, raw):
    """One random damage to a text file's bytes: a byte changed, bytes cut out or put in, a
    line repeated, a token replaced by an awkward number, or the end cut off."""
    kind = int(rng.integers(6))
    i = int(rng.integers(max(1, len(raw))))
    if kind == 0:
        return raw[:i] + bytes([int(rng.choice(list(b"\x00\n\t -+.e019%x\xff")))]) + raw[i + 1:]
    if kind == 1:
        return raw[:i] + raw[i + int(rng.integers(1, 40)):]
    if kind == 2:
        return raw[:i] + bytes(rng.integers(0, 256, int(rng.integers(1, 12))).astype(np.uint8)) + raw[i:]
    if kind == 3:
        lines = raw.split(b"\n")
        k = int(rng.integers(len(lines)))
        return b"\n".join(lines[:k + 1] + lines[k:])
    if kind == 4:
        tokens = raw.split(b" ")
        k = int(rng.integers(len(tokens)))
        tokens[k] = rng.choice([b"", b"0", b"-1", b"4294967296", b"18446744073709551616", b"1e10", b"nan",
                                b"99999999999999999999999", b"2147483648", b"007"])
        return b" ".join(tokens)
    return raw[:i]


def test_mtx_random_damage_is_an_error_or_a_dataset(tmp_path, mat):
    """A 10x directory damaged at random, 80 times (seeded): the converter either says what is
    wrong (exit 1, one 'deltacells: ' message, no output, no leftovers; under make test's ASan run
    no sanitizer report, which would not start so) or writes a dataset that verifies, and when
    the damage was to matrix.mtx and scipy reads the damaged file as a Matrix Market file, its
    matrix, cell for cell and gene for gene."""
    import scipy.io
    X, bc, ids, names, types = mat
    rng = np.random.default_rng(20261207)
    clean = write_mtx(tmp_path / "clean", *mat, gz=False)
    files = ["matrix.mtx"] * 6 + ["features.tsv", "barcodes.tsv"]
    outcomes = {0: 0, 1: 0}
    for k in range(80):
        d = tmp_path / f"d{k}"
        shutil.copytree(clean, d)
        name = files[int(rng.integers(len(files)))]
        p = d / name
        p.write_bytes(_damage(rng, p.read_bytes()))
        out = tmp_path / f"o{k}.dcdb"
        r = convert(d, out, check=False)
        assert r.returncode in (0, 1), (k, name, r.returncode, r.stderr[-2000:])
        outcomes[r.returncode] += 1
        if r.returncode == 1:
            assert r.stderr.startswith("deltacells: ") and r.stderr.count("\n") == 1, (k, name, r.stderr[-2000:])
            assert not out.exists()
            assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f or "spool" in f]
            continue
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-2000:]
        run("verify", out)
        if name == "matrix.mtx":
            try:
                ref = sp.csr_matrix(scipy.io.mmread(str(p)).T)
            except Exception:
                ref = None
            if ref is not None and ref.shape == X.shape:
                got = contents(out)
                want_order = np.argsort(names, kind="stable")
                assert got["genes"] == [names[i] for i in want_order]
                assert np.array_equal(got["X"], ref.toarray()[:, want_order]), (k, "X differs from scipy's reading")
        shutil.rmtree(d)
    # the damage is not all harmless, nor all fatal
    assert outcomes[1] >= 20 and outcomes[0] >= 1, outcomes


def test_h5_malformed(tmp_path, mat):
    X, bc, ids, names, types = mat
    p = write_h5_v3(tmp_path / "s.h5", *mat)
    with h5py.File(p, "r+") as f:
        f["matrix/shape"][...] = np.array([N_GENES, N_CELLS + 1], np.int32)
    bad(tmp_path, p, "s.h5", "shape", f"{N_CELLS} barcodes")
    p = write_h5_v3(tmp_path / "i.h5", *mat)
    with h5py.File(p, "r+") as f:
        ip = f["matrix/indptr"][:]
        del f["matrix/indptr"]
        f["matrix/indptr"] = ip[:-1]
    bad(tmp_path, p, "i.h5", "indptr has")
    p = write_h5_v3(tmp_path / "d.h5", *mat)
    with h5py.File(p, "r+") as f:
        del f["matrix/data"]
    bad(tmp_path, p, "d.h5", "without 'data'")
    p = write_h5_v3(tmp_path / "l.h5", *mat)
    bad(tmp_path, p, "l.h5", "--layer", "h5ad files only", opts=("--layer", "counts"))
    p = write_h5_v3(tmp_path / "k.h5", *mat)
    bad(tmp_path, p, "k.h5", "'nope'", "gene_ids", opts=("--gene-key", "nope"))
    # /matrix with a part missing: said so (it said "not an h5ad file (nor a 10x HDF5 file: no 'matrix' group)")
    for part in ("features", "barcodes"):
        p = write_h5_v3(tmp_path / f"no_{part}.h5", *mat)
        with h5py.File(p, "r+") as f:
            del f[f"matrix/{part}"]
        msg = bad(tmp_path, p, f"no_{part}.h5", f"without /matrix/{part}")
        assert "no 'matrix' group" not in msg


# ---------------------------------------------------------------- loom
def write_loom(path, X, barcodes, ids, names, chunks=(16, 16), layer=None):
    """As loompy writes it: /matrix genes x cells (dense, chunked), row_attrs, col_attrs, layers."""
    D = np.asarray(X.todense()).T.astype(np.float32)
    s = h5py.string_dtype()
    with h5py.File(path, "w") as f:
        f.create_dataset("matrix", data=D, chunks=chunks, compression="gzip")
        ra = f.create_group("row_attrs")
        ra.create_dataset("Gene", data=np.array(names, dtype=object), dtype=s)
        ra.create_dataset("Accession", data=np.array(ids, dtype=object), dtype=s)
        ca = f.create_group("col_attrs")
        ca.create_dataset("CellID", data=np.array(barcodes, dtype=object), dtype=s)
        ca["nGene"] = np.asarray((X > 0).sum(axis=1)).ravel().astype(np.int64)
        ca.create_dataset("ClusterName", data=np.array(["T", "B", "NK"] * (len(barcodes) // 3) +
                                                       ["T"] * (len(barcodes) % 3), dtype=object), dtype=s)
        ca["_X_umap"] = np.zeros((len(barcodes), 2), np.float32)   # 2-D: not an obs column
        f.create_group("layers")
        if layer is not None:
            f["layers/spliced"] = np.asarray(layer.todense()).T.astype(np.int32)
        f.create_group("attrs")
    return path


@pytest.mark.parametrize("chunks", [(16, 16), (41, 7), None])
def test_loom(tmp_path, mat, chunks):
    X, bc, ids, names, types = mat
    spliced = X.copy()
    spliced.data = spliced.data // 2 + 1
    p = write_loom(tmp_path / "m.loom", X, bc, ids, names, chunks=chunks, layer=spliced)
    out = tmp_path / "loom.dcdb"
    r = convert(p, out, "--tile-cells", "20")
    assert "_X_umap" not in r.stderr or "not stored" in r.stderr
    ds = Dataset(out)
    check_matrix(ds, [as_anndata(X, bc, names)])
    assert ds.obs("_index") == bc
    assert ds.obs("nGene") == [int(v) for v in np.asarray((X > 0).sum(axis=1)).ravel()]
    assert "_X_umap" not in ds.columns
    assert dict(zip(ds.gene_names, ds.genes("Accession"))) == dict(zip(names, ids))
    assert json.loads(ds.meta["sources"])[0]["kind"] == "loom"
    ds.close()
    h5 = write_h5_v3(tmp_path / "m.h5", *mat)
    convert(h5, tmp_path / "h5.dcdb", "--tile-cells", "20")
    same(contents(out), contents(tmp_path / "h5.dcdb"))
    out2 = tmp_path / "sp.dcdb"
    convert(p, out2, "--layer", "spliced")
    ds = Dataset(out2)
    check_matrix(ds, [as_anndata(spliced, bc, names)])
    ds.close()
    bad(tmp_path, p, "no layer 'unspliced'", "the file's layers: 'spliced'", "did you mean 'spliced'", opts=("--layer", "unspliced"))
    bad(tmp_path, p, "--raw", opts=("--raw",))


def test_loom_fractional_counts(tmp_path, mat):
    X, bc, ids, names, types = mat
    Y = X.astype(np.float32)
    Y.data = Y.data / 3
    p = write_loom(tmp_path / "f.loom", Y, bc, ids, names)
    bad(tmp_path, p, "f.loom", "not an integer count")


def test_inputs_as_other_tools_write_them(tmp_path, mat):
    """Strings and files as tools other than h5py write them: variable-length ASCII strings (R's
    hdf5r, so loomR and Seurat) were refused with 'HDF5 read error'; a UTF-8 byte-order mark at
    the start of barcodes.tsv / features.tsv stayed in the first name; a feature type with
    stray whitespace was not 'Gene Expression'; a file with no gene expression feature kept
    them all without a word; a 'real' matrix.mtx took C hex floats (0x10) as counts."""
    X, bc, ids, names, types = mat
    convert(write_h5_v3(tmp_path / "ref.h5", *mat), tmp_path / "ref.dcdb")
    ref = contents(tmp_path / "ref.dcdb")
    ascii_vlen = h5py.string_dtype("ascii")

    def vlen(g, name, values):
        g.create_dataset(name, data=np.array([v.encode() for v in values], dtype=object), dtype=ascii_vlen)

    C = sp.csc_matrix(X.T)
    with h5py.File(tmp_path / "r.h5", "w") as f:
        m = f.create_group("matrix")
        m["data"], m["indices"], m["indptr"] = C.data, C.indices, C.indptr
        m["shape"] = np.array(C.shape, dtype=np.int32)
        vlen(m, "barcodes", bc)
        ft = m.create_group("features")
        for k, v in (("id", ids), ("name", names), ("feature_type", types), ("genome", ["GRCh38"] * len(ids))):
            vlen(ft, k, v)
    convert(tmp_path / "r.h5", tmp_path / "r.dcdb")
    same(contents(tmp_path / "r.dcdb"), ref)
    loom = write_loom(tmp_path / "r.loom", X, bc, ids, names)
    with h5py.File(loom, "a") as f:
        for g, k, v in (("row_attrs", "Gene", names), ("col_attrs", "CellID", bc)):
            del f[g][k]
            vlen(f[g], k, v)
    convert(loom, tmp_path / "rl.dcdb")
    same(contents(tmp_path / "rl.dcdb"), ref)

    # a byte-order mark, and 'Gene Expression ' with a trailing space
    d = write_mtx(tmp_path / "bom", *mat, gz=False)
    for fn in ("barcodes.tsv", "features.tsv"):
        p = d / fn
        txt = p.read_text().replace("\tGene Expression", "\tGene Expression ")
        p.write_bytes(b"\xef\xbb\xbf" + txt.encode())
    r = convert(d, tmp_path / "bom.dcdb")
    assert "not 'Gene Expression'" not in r.stderr and "no feature" not in r.stderr, r.stderr
    same(contents(tmp_path / "bom.dcdb"), ref)

    # nothing but antibodies: all kept, with a note
    ab = write_h5_v3(tmp_path / "ab.h5", X, bc, ids, names, ["Antibody Capture"] * len(ids))
    r = convert(ab, tmp_path / "ab.dcdb")
    assert f"no feature is typed 'Gene Expression' (e.g. 'Antibody Capture'), so all {N_GENES} are kept" in r.stderr
    same(contents(tmp_path / "ab.dcdb"), ref)

    # Matrix Market numbers are decimal
    for k, v in enumerate(("0x10", "0x1p2", "inf", "1e400")):
        d = write_mtx(tmp_path / f"hex{k}", *mat, gz=False, header="%%MatrixMarket matrix coordinate real general")
        rewrite(d / "matrix.mtx", lambda ls: ls[:3] + [" ".join(ls[3].split()[:2] + [v])] + ls[4:])
        bad(tmp_path, d, "matrix.mtx", "line 4", f"'{v}' is not a count")


def test_loom_names_as_loompy_escapes_them(tmp_path, mat):
    """loompy stores strings as ASCII with XML character references ('G&#232;ne' for 'Gène')
    and unescapes them when it reads; the converter kept them escaped.  Numeric references
    (decimal and hex) and the five XML entities are read back; other '&' text stays."""
    X, bc, ids, names, types = mat
    want = list(names)
    want[:6] = ["Gène", "CD8α", "A&B", "x<y>", "HLA-DRB1 \U0001F600", "AT&T; &nope;"]
    esc = [n.encode("ascii", "xmlcharrefreplace").decode() for n in want]
    esc[2], esc[3] = "A&amp;B", "x&lt;y&gt;"
    esc[4] = "HLA-DRB1 &#x1F600;"
    cells = list(bc)
    cells[0] = "caf&#233;-1"
    p = write_loom(tmp_path / "esc.loom", X, bc, ids, names)
    with h5py.File(p, "a") as f:
        del f["row_attrs/Gene"], f["col_attrs/CellID"]
        f["row_attrs/Gene"] = np.array([s.encode() for s in esc])     # fixed-length, as loompy writes
        f["col_attrs/CellID"] = np.array([s.encode() for s in cells])
    convert(p, tmp_path / "esc.dcdb")
    ds = Dataset(tmp_path / "esc.dcdb")
    assert sorted(ds.gene_names) == sorted(want)
    assert ds.obs("_index")[0] == "café-1" and ds.obs("_index")[1:] == bc[1:]
    ds.close()


def test_mtx_directory_given_as_dot_is_named(tmp_path, mat):
    """An .mtx directory converted from inside it (`deltacells convert . -o ../x.dcdb`) is labelled
    by its name in dc_meta sources and the source column, not '.'."""
    import subprocess
    from _converter_util import CONVERTER
    d = write_mtx(tmp_path / "pbmc_sample7", *mat)
    r = subprocess.run([CONVERTER, "convert", ".", "-o", "../x.dcdb", "--quiet"], cwd=d,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ds = Dataset(tmp_path / "x.dcdb")
    assert json.loads(ds.meta["sources"])[0]["source"] == "pbmc_sample7"
    ds.close()


def test_mtx_directory_with_gzipped_and_plain_files_says_which(tmp_path, mat):
    """A directory holding matrix.mtx.gz and matrix.mtx (one unpacked beside the other, maybe
    edited) read the .gz without a word; now a note names the one read."""
    d = write_mtx(tmp_path / "both", *mat, gz=True)
    write_mtx(tmp_path / "both", *mat, gz=False)
    r = convert(d, tmp_path / "b.dcdb")
    for f in ("matrix.mtx", "features.tsv", "barcodes.tsv"):
        assert f"both {f}.gz and {f} are there; reading {f}.gz" in r.stderr, r.stderr


def test_mtx_square_is_read_as_10x_writes_it_with_a_note(tmp_path):
    """A matrix.mtx of as many genes as cells fits both orders: it is read genes x cells (the
    10x layout, scanpy's read_10x_mtx) and a note says so; it was read so without a word."""
    X, bc, ids, names, types = make_matrix(seed=5, n=23, g=23)
    d = write_mtx(tmp_path / "sq", X, bc, ids, names, types, gz=False)
    r = convert(d, tmp_path / "sq.dcdb")
    assert ("matrix.mtx: 23 x 23, as many features as barcodes: read as genes x cells (rows are features, "
            "as 10x writes it), not cells x genes") in r.stderr, r.stderr
    ds = Dataset(tmp_path / "sq.dcdb")
    check_matrix(ds, [as_anndata(X, bc, names)])
    assert ds.obs("_index") == bc
    ds.close()
    # not square: no such note, whichever the order
    for k, tr in enumerate((False, True)):
        d = write_mtx(tmp_path / f"ns{k}", *make_matrix(), gz=False, transpose=tr)
        r = convert(d, tmp_path / f"ns{k}.dcdb")
        assert "as many features as barcodes" not in r.stderr, r.stderr


def test_mtx_comments_of_any_length(tmp_path, mat):
    """Comment lines of a matrix.mtx (tools write provenance there) are skipped however long:
    one over 1 MiB was refused ('line 2 is longer than 1048576 bytes').  They are read through,
    not held: a 64 MiB comment costs no more memory than none.  A malformed size line after
    them stays an error naming the file and its line."""
    import resource
    import subprocess
    from _converter_util import CONVERTER
    X, bc, ids, names, types = mat
    long_line = "%" + "provenance " * 300_000            # 3.3 MB, one line
    many = ["%" + "x" * 999] * 1500                       # 1.5 MB of lines of 1000 bytes
    for gz in (False, True):
        d = write_mtx(tmp_path / f"c{int(gz)}", *mat, gz=gz)
        p = d / ("matrix.mtx.gz" if gz else "matrix.mtx")
        # after the header; among the entries (one with no end of line at the end of the file)
        rewrite(p, lambda ls: ls[:1] + [long_line] + many + ls[1:6] + [long_line] + ls[6:] + [long_line])
        out = tmp_path / f"c{int(gz)}.dcdb"
        convert(d, out)
        ds = Dataset(out)
        check_matrix(ds, [as_anndata(X, bc, names)])
        ds.close()
        if not gz:
            p.write_bytes(p.read_bytes().rstrip(b"\n"))   # the last comment ends the file without '\n'
            convert(d, out, "--force")
    # a malformed size line after long comments: named, with its line number (header + 1501 comments)
    d = write_mtx(tmp_path / "bad", *mat, gz=True)
    rewrite(d / "matrix.mtx.gz", lambda ls: ls[:1] + [long_line] + many + [f"{N_GENES} {N_CELLS}"] + ls[3:])
    bad(tmp_path, d, "matrix.mtx.gz", f"line {1 + 1 + len(many) + 1}:", "is not a size line")
    # a file that ends inside its comments
    rewrite(d / "matrix.mtx.gz", lambda ls: ls[:1 + 1 + len(many)])
    bad(tmp_path, d, "matrix.mtx.gz", "ends before its size line")

    # memory: a 64 MiB comment line (gzipped, so small on disk) against none
    def peak_kib(src):
        code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
                "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        o = subprocess.run(["/usr/bin/python3", "-c", code, CONVERTER, "convert", str(src), "-o",
                            str(tmp_path / "m.dcdb"), "--quiet", "--force"], capture_output=True, text=True)
        rc, kib = map(int, o.stdout.split())
        assert rc == 0, o
        return kib
    plain = write_mtx(tmp_path / "m0", *mat, gz=True)
    big = write_mtx(tmp_path / "m1", *mat, gz=True)
    with gzip.open(big / "matrix.mtx.gz", "wb", compresslevel=1) as f, \
            gzip.open(plain / "matrix.mtx.gz", "rb") as g:
        lines = g.read().split(b"\n")
        f.write(lines[0] + b"\n%" + b"y" * (64 << 20) + b"\n" + b"\n".join(lines[1:]))
    base, got = peak_kib(plain), peak_kib(big)
    assert got < base + 16 * 1024, (base, got)


def test_tenx_without_gene_names(tmp_path, mat):
    """A 10x input without gene names: features/id (CellRanger 2: genes; a features.tsv of one
    column: that column) names the genes, with a note, and no var column repeats it.  The HDF5
    files did so without a word; the one-column features.tsv also made a gene_ids column equal
    to the names.  --gene-key gene_ids keys such an input by its ids too."""
    X, bc, ids, names, types = mat
    h5 = write_h5_v3(tmp_path / "v3.h5", *mat)
    with h5py.File(h5, "r+") as f:
        del f["matrix/features/name"]
    h2 = write_h5_v2(tmp_path / "v2.h5", X, bc, ids, names)
    with h5py.File(h2, "r+") as f:
        del f["hg19/gene_names"]
    d = write_mtx(tmp_path / "one", *mat, gz=True)
    rewrite(d / "features.tsv.gz", lambda ls: [ln.split("\t")[0] for ln in ls])
    cases = [(h5, "v3.h5: no matrix/features/name: matrix/features/id names the genes", {"feature_types", "genome"}),
             (h2, "v2.h5: no hg19/gene_names: hg19/genes names the genes", set()),
             (d, "features.tsv.gz: one column, no gene names apart from the ids: that column names the genes",
              set())]
    for k, (inp, note, cols) in enumerate(cases):
        out = tmp_path / f"n{k}.dcdb"
        r = convert(inp, out)
        assert note in r.stderr and "no gene_ids column" in r.stderr, r.stderr
        ds = Dataset(out)
        check_matrix(ds, [as_anndata(X, bc, ids)])
        assert set(ds.gene_columns) - {"name", "total_counts", "n_cells", "orig_index"} == cols
        ds.close()
        # keyed by gene_ids beside a file that has names: the same genes, joined by id
        ref = write_h5_v3(tmp_path / f"ref{k}.h5", X, [b + "r" for b in bc], ids, names, types)
        out = tmp_path / f"k{k}.dcdb"
        convert([inp, ref], out, "--gene-key", "gene_ids")
        ds = Dataset(out)
        assert sorted(ds.gene_names) == sorted(ids)
        check_matrix(ds, [as_anndata(X, bc, ids), as_anndata(X, bc, ids)])
        ds.close()
    # neither names nor ids: said so
    with h5py.File(h5, "r+") as f:
        del f["matrix/features/id"]
    bad(tmp_path, h5, "v3.h5", "matrix/features has neither name (gene names) nor id (gene ids)")
