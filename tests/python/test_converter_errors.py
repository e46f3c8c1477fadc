"""Bad input, an existing output, interruption and a full disk: a clear message, a
non-zero exit, no partial dataset, no stray temporary file, an existing OUT intact.
Also the other commands: info, obs info, verify (on damaged datasets), --help."""
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import time
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _converter_util import CONVERTER, GEN, PY, Dataset, convert, need_converter, run

warnings.filterwarnings("ignore")


def small(tmp_path, name="ok.h5ad", n=40, g=12, csc=False):
    rng = np.random.default_rng(0)
    m = (rng.integers(1, 9, (n, g)) * (rng.random((n, g)) < 0.4)).astype(np.int32)
    X = sp.csc_matrix(m) if csc else sp.csr_matrix(m)
    a = ad.AnnData(X=X, obs=pd.DataFrame({"ct": pd.Categorical(["a", "b"] * (n // 2))},
                                         index=[f"c{i}" for i in range(n)]),
                   var=pd.DataFrame(index=[f"G{i}" for i in range(g)]), dtype=np.int32)
    p = tmp_path / name
    a.write_h5ad(p)
    return p


def leftovers(d):
    """Temporary files the converter may have left in d."""
    return [f for f in os.listdir(d) if ".tmp-" in f or "spool" in f or f.endswith("-journal")]


def fails(tmp_path, inp, *words, opts=()):
    out = tmp_path / "out.dcdb"
    r = convert(inp, out, *opts, check=False)
    assert r.returncode == 1, r.stderr
    for w in words:
        assert w in r.stderr, f"{w!r} not in {r.stderr!r}"
    assert r.stderr.startswith("deltacells: ") and len(r.stderr.strip().splitlines()) <= 3
    assert not out.exists()
    assert not leftovers(tmp_path)
    return r.stderr


def edit(p, fn):
    with h5py.File(p, "r+") as f:
        fn(f)


def test_nonexistent_file(tmp_path):
    fails(tmp_path, tmp_path / "nope.h5ad", "nope.h5ad", "No such file")


def test_directory_input(tmp_path):
    d = tmp_path / "dir.h5ad"
    d.mkdir()
    fails(tmp_path, d, "is a directory")


def test_not_hdf5(tmp_path):
    p = tmp_path / "text.h5ad"
    p.write_text("hello, not HDF5\n" * 100)
    fails(tmp_path, p, "text.h5ad", "not an HDF5 file")


def test_hdf5_but_not_h5ad(tmp_path):
    p = tmp_path / "plain.h5"
    with h5py.File(p, "w") as f:
        f["foo"] = np.arange(10)
    fails(tmp_path, p, "plain.h5", "no 'obs'", "not an h5ad file")


def test_truncated_file(tmp_path):
    p = small(tmp_path)
    data = p.read_bytes()
    for frac in (0.3, 0.6, 0.9):
        t = tmp_path / "trunc.h5ad"
        t.write_bytes(data[:int(len(data) * frac)])
        fails(tmp_path, t, "trunc.h5ad")


def test_missing_x(tmp_path):
    p = small(tmp_path)
    edit(p, lambda f: f.__delitem__("X"))
    fails(tmp_path, p, "no X", "--layer")


def test_mismatched_shapes(tmp_path):
    p = small(tmp_path)
    edit(p, lambda f: f["X"].attrs.__setitem__("shape", np.array([41, 12])))
    fails(tmp_path, p, "X", "41", "indptr")
    p = small(tmp_path, "b.h5ad")

    def more_genes(f):
        f["X"].attrs["shape"] = np.array([40, 13])
    edit(p, more_genes)
    fails(tmp_path, p, "shape 40 x 13", "var has 12")


def test_data_indices_lengths_differ(tmp_path):
    p = small(tmp_path)

    def cut(f):
        d = f["X/data"][:-1]
        del f["X/data"]
        f["X/data"] = d
    edit(p, cut)
    fails(tmp_path, p, "data has", "indices")


def test_gene_index_out_of_range(tmp_path):
    p = small(tmp_path)

    def bad(f):
        ind = f["X/indices"][:]
        ptr = f["X/indptr"][:]
        row = int(np.argmax(np.diff(ptr) > 0))
        ind[ptr[row + 1] - 1] = 12
        f["X/indices"][:] = ind
    edit(p, bad)
    fails(tmp_path, p, "gene index 12, out of range 0..11")


def test_negative_gene_index(tmp_path):
    p = small(tmp_path)
    edit(p, lambda f: f["X/indices"].__setitem__(0, -3))
    fails(tmp_path, p, "gene index -3")


def test_duplicate_gene_in_a_cell(tmp_path):
    """A gene given twice in one cell (next to each other) names the cell and the gene."""
    p = small(tmp_path)

    def bad(f):
        ind = f["X/indices"][:]
        ptr = f["X/indptr"][:]
        row = int(np.argmax(np.diff(ptr) >= 2))
        ind[ptr[row] + 1] = ind[ptr[row]]
        f["X/indices"][:] = ind
    edit(p, bad)
    fails(tmp_path, p, "appears twice", "sum_duplicates", "cell 'c", "gene 'G")


def test_csc_cell_index_out_of_range(tmp_path):
    p = small(tmp_path, csc=True)
    edit(p, lambda f: f["X/indices"].__setitem__(0, 40))
    fails(tmp_path, p, "cell index 40, out of range")


def test_negative_and_fractional_counts(tmp_path):
    p = small(tmp_path)
    edit(p, lambda f: f["X/data"].__setitem__(3, -2))
    fails(tmp_path, p, "negative value")
    m = sp.csr_matrix(np.array([[0, 1.5], [2, 0]], dtype=np.float32))
    a = ad.AnnData(X=m, obs=pd.DataFrame(index=["x", "y"]), var=pd.DataFrame(index=["A", "B"]))
    q = tmp_path / "frac.h5ad"
    a.write_h5ad(q)
    fails(tmp_path, q, "cell 'x' (row 0), gene 'B' (column 1): value 1.5 is not an integer count",
          "--layer counts", "--raw")
    # values printed as they are (a %g had printed -4294967295 as -4.29497e+09, a %.9g
    # 3.0000000000000004 as 3, and 2^64-1 went through a double to 18446744073709551616)
    for k, (dtype, v, words) in enumerate([(np.int64, -(2**32) + 1, ("negative value -4294967295;",)),
                                           (np.float64, 3.0000000000000004, ("value 3.0000000000000004 is not",)),
                                           (np.uint64, 2**64 - 1, ("exceeds 2^32-1",))]):
        m = sp.csr_matrix(np.array([[0, 1], [2, 0]], dtype=dtype))
        m.data[0] = v
        p = tmp_path / f"v{k}.h5ad"
        ad.AnnData(X=m, obs=pd.DataFrame(index=["x", "y"]), var=pd.DataFrame(index=["A", "B"]), dtype=dtype).write_h5ad(p)
        msg = fails(tmp_path, p, *words)
        assert "18446744073709551616" not in msg, msg


def test_category_code_out_of_range(tmp_path):
    p = small(tmp_path)
    edit(p, lambda f: f["obs/ct/codes"].__setitem__(5, 7))
    fails(tmp_path, p, "column ct", "code 7 of row 5")


def test_uint64_past_int64_is_an_error_not_a_clamped_value(tmp_path):
    """An unsigned 64-bit obs or var column holding 2^63 or more: the dataset stores integers as
    int64, and HDF5's conversion had clamped 2^64-1 to 2^63-1 without a word (a wrong value).
    Now an error names the column, the value and the row; values that fit still convert."""
    p = small(tmp_path)
    edit(p, lambda f: f["obs"].create_dataset("hash", data=np.array([5] * 39 + [2**64 - 1], dtype=np.uint64)))
    edit(p, lambda f: f["obs"].attrs.__setitem__("column-order", np.array(["ct", "hash"], dtype=object)))
    fails(tmp_path, p, "hash", "18446744073709551615", "row 39", "float64 or text")
    q = small(tmp_path, name="fits.h5ad")
    edit(q, lambda f: f["var"].create_dataset("big", data=np.array([2**63 - 1] + [1] * 11, dtype=np.uint64)))
    edit(q, lambda f: f["var"].attrs.__setitem__("column-order", np.array(["big"], dtype=object)))
    out = tmp_path / "fits.dcdb"
    convert(q, out)
    import deltacells
    con = deltacells.connect(str(out))
    assert con.execute("SELECT max(big), min(big) FROM genes").fetchone() == (2**63 - 1, 1)
    con.close()


def test_obs_column_wrong_length(tmp_path):
    p = small(tmp_path)

    def bad(f):
        del f["obs/ct"]
        f["obs/ct"] = np.arange(39)
    edit(p, bad)
    fails(tmp_path, p, "obs/ct", "39 values", "40 rows")


def test_fixed_length_string_with_a_nul_inside_is_an_error(tmp_path):
    """A fixed-length HDF5 string (numpy 'S') ends at its first NUL byte only where padding
    follows; b'AB\\0CD' was stored as 'AB', the rest lost unseen. Now an error naming the file,
    the dataset and the string; padding NULs (b'c2' in 'S5') stay fine."""
    p = small(tmp_path, n=4)

    def index(values):
        def fn(f):
            del f["obs/_index"]
            f["obs"].create_dataset("_index", data=np.array(values, dtype="S5"))
        return fn
    edit(p, index([b"c0", b"c1", b"AB\0CD", b"c3"]))
    fails(tmp_path, p, "ok.h5ad", "_index", "string 2 holds a NUL byte before its end")
    p = small(tmp_path, n=4)
    edit(p, index([b"c0", b"c1", b"c2", b"c3xyz"]))
    out = tmp_path / "pad.dcdb"
    convert(p, out)
    assert Dataset(out).obs("_index") == ["c0", "c1", "c2", "c3xyz"]


@pytest.mark.parametrize("obj, attr, value, words", [
    ("X", "encoding-type", b"csr_matrix\0junk", [": X: ", "`encoding-type` attribute holds a NUL byte"]),
    ("obs", "_index", b"_index\0x", ["obs", "`_index` attribute holds a NUL byte"]),
    ("obs", "column-order", [b"ct\0x"], ["obs", "`column-order` attribute holds a NUL byte"]),
    ("obs/ct", "encoding-type", b"categorical\0x", ["obs/ct", "`encoding-type` attribute holds a NUL byte"]),
])
def test_fixed_length_attribute_with_a_nul_inside_is_an_error(tmp_path, obj, attr, value, words):
    """The same for attributes: `encoding-type` b'csr_matrix\\0junk' was read as 'csr_matrix',
    `_index` or a `column-order` name as the text before the NUL (another column, or none).
    Now an error naming the object and the attribute; NUL padding after the text stays fine."""
    p = small(tmp_path, n=4)
    edit(p, lambda f: f[obj].attrs.__setitem__(attr, np.array(value, dtype=f"S{len(value[0]) if isinstance(value, list) else len(value)}")))
    fails(tmp_path, p, "ok.h5ad", *words)
    p = small(tmp_path, n=4)
    padded = [v.split(b"\0")[0] for v in value] if isinstance(value, list) else value.split(b"\0")[0]
    edit(p, lambda f: f[obj].attrs.__setitem__(attr, np.array(padded, dtype="S20")))
    out = tmp_path / "pad.dcdb"
    convert(p, out)
    assert Dataset(out).obs("ct") == ["a", "b", "a", "b"]


def test_bad_input_among_several_keeps_out(tmp_path):
    good = small(tmp_path)
    out = tmp_path / "out.dcdb"
    convert(good, out)
    before = out.read_bytes()
    bad = tmp_path / "bad.h5ad"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    r = convert([good, bad], out, "--force", check=False)
    assert r.returncode == 1 and "bad.h5ad" in r.stderr
    assert out.read_bytes() == before
    assert not leftovers(tmp_path)


def test_force_semantics(tmp_path):
    p = small(tmp_path)
    out = tmp_path / "out.dcdb"
    out.write_bytes(b"precious")
    r = convert(p, out, check=False)
    assert r.returncode == 1 and "exists" in r.stderr and "--force" in r.stderr
    assert out.read_bytes() == b"precious"
    convert(p, out, "--force")
    ds = Dataset(out)
    assert ds.n_cells == 40
    ds.close()
    d = tmp_path / "adir.dcdb"
    d.mkdir()
    r = convert(p, d, "--force", check=False)
    assert r.returncode == 1 and "is a directory" in r.stderr
    r = convert(p, p, "--force", check=False)
    assert r.returncode == 1 and "replace an input" in r.stderr
    assert not leftovers(tmp_path)


def slow_input(tmp_path):
    p = tmp_path / "big.h5ad"
    subprocess.run([PY, GEN, "--cells", "12000", "--genes", "3000", "--seed", "5", "-o", p], check=True,
                   capture_output=True)
    return p


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_conversion(tmp_path, sig):
    need_converter()
    p = slow_input(tmp_path)
    out = tmp_path / "out.dcdb"
    out.write_bytes(b"the previous dataset")
    # slow settings, so that the signal comes mid-way through writing tiles
    proc = subprocess.Popen([CONVERTER, "convert", p, "-o", out, "--force", "--quiet", "--codec", "zstd",
                             "--level", "19", "--threads", "1", "--tile-cells", "500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not [f for f in os.listdir(tmp_path) if ".tmp-" in f] and time.time() - t0 < 60:
        time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read()
    time.sleep(0.3)
    assert proc.poll() is None, "conversion finished before the signal; make it slower"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert out.read_bytes() == b"the previous dataset"
    assert not leftovers(tmp_path)


def test_full_disk_file_size_limit(tmp_path):
    need_converter()
    p = small(tmp_path, n=3000, g=400)
    out = tmp_path / "out.dcdb"
    out.write_bytes(b"old")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
    r = subprocess.run([CONVERTER, "convert", p, "-o", out, "--force", "--quiet"], capture_output=True, text=True,
                       preexec_fn=limit)
    assert r.returncode == 1, r.stderr
    assert "out.dcdb" in r.stderr and ("disk full" in r.stderr or "I/O error" in r.stderr or "large" in r.stderr)
    assert out.read_bytes() == b"old"
    assert not leftovers(tmp_path)


def test_full_disk_tmpfs(tmp_path):
    need_converter()
    mnt = tmp_path / "small_fs"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mnt],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        p = small(tmp_path, n=6000, g=400)     # a dataset of 0.85 MB: more than the 512 KiB
        out = mnt / "out.dcdb"
        out.write_bytes(b"old")
        r = convert(p, out, "--force", check=False)
        assert r.returncode == 1 and "disk full" in r.stderr, r.stderr
        assert out.read_bytes() == b"old"
        assert not leftovers(mnt)
    finally:
        subprocess.run(["umount", mnt], check=False)


def test_usage_errors():
    need_converter()
    for args, word in [(["convert"], "at least one input"), (["convert", "x.h5ad"], "-o OUT.dcdb"),
                       (["convert", "x.h5ad", "-o", "y", "--chunks", "0"], "--chunks"),
                       (["convert", "x.h5ad", "-o", "y", "--tile-cells", "abc"], "--tile-cells"),
                       (["convert", "x.h5ad", "-o", "y", "--codec", "lzma"], "unknown codec"),
                       (["convert", "x.h5ad", "-o", "y", "--level", "5"], "--level 5: codec rans takes 1..4"),
                       (["convert", "x.h5ad", "-o", "y", "--codec", "zstd", "--level", "23"], "codec zstd takes"),
                       (["convert", "x.h5ad", "-o"], "-o needs a value"),
                       (["export", "x.dcdb", "-o", "y.h5ad", "--where"], "--where needs a value"),
                       (["merge", "a.dcdb", "b.dcdb", "-o"], "-o needs a value"),
                       (["annotate", "a.dcdb", "t.csv", "--key"], "--key needs a value"),
                       (["convert", "x.h5ad", "-o", "y", "--raw", "--layer", "counts"], "exclude"),
                       (["convert", "x.h5ad", "-o", "y", "--bogus"], "unknown option --bogus"),
                       (["frobnicate"], "unknown command"), ([], "which command")]:
        r = subprocess.run([CONVERTER, *args], capture_output=True, text=True)
        assert r.returncode == 2 and word in r.stderr, (args, r.stderr)


def test_help():
    need_converter()
    for args, word in [(["--help"], "convert IN.h5ad"), (["convert", "--help"], "--tile-cells"),
                       (["convert", "--help"], "Memory is bounded"), (["info", "--help"], "--json"),
                       (["obs", "info", "--help"], "per obs column"), (["obs", "--help"], "per obs column"),
                       (["verify", "--help"], "checksum")]:
        r = subprocess.run([CONVERTER, *args], capture_output=True, text=True)
        assert r.returncode == 0 and word in r.stdout, (args, r.stdout)


def test_info_obs_info(tmp_path):
    p = small(tmp_path, n=300, g=50)
    out = tmp_path / "i.dcdb"
    convert(p, out, "--tile-cells", "100")
    j = json.loads(run("info", out, "--json").stdout)
    ds = Dataset(out)
    assert j["n_cells"] == 300 and j["n_genes"] == ds.n_genes and j["tiles"] == 3
    assert j["nnz"] == ds.X().nnz
    assert j["expression_bytes"] == ds.db.execute("SELECT sum(length(data)) FROM tiles_data").fetchone()[0]
    assert j["obs_bytes"] == ds.db.execute("SELECT sum(bytes) FROM cells_columns").fetchone()[0]
    assert j["file_bytes"] == os.path.getsize(out)
    assert j["chunks"] == 32 and j["chunk_cells"] == 512 and j["tile_cells"] == 100 and j["codec"] in ("rans", "zstd")
    ds.close()
    t = run("info", out).stdout
    assert "cells        300" in t and "bits per nonzero" in t
    assert "up to 32 chunks per tile (8, one per 1 M nonzeros past 8 M, then a multiple of 4) of at least 512 cells each" in t
    convert(p, out, "--tile-cells", "100", "--chunks", "4", "--force")   # given: exactly 4
    assert json.loads(run("info", out, "--json").stdout)["chunk_cells"] == 0
    assert "4 chunks per tile\n" in run("info", out).stdout
    o = run("obs", "info", out).stdout
    assert "_index" in o and "ct" in o and "category" in o and "per 100M cells" in o
    r = run("info", tmp_path / "nope.dcdb", check=False)
    assert r.returncode == 1 and "nope.dcdb" in r.stderr
    r = run("info", p, check=False)
    assert r.returncode == 1 and "not a deltacells dataset" in r.stderr


def test_verify_finds_damage(tmp_path):
    p = small(tmp_path, n=300, g=50)
    out = tmp_path / "v.dcdb"
    convert(p, out, "--tile-cells", "100")
    assert run("verify", out).returncode == 0
    # a flipped byte in the middle of tile 1's payload
    bad = tmp_path / "bad.dcdb"
    shutil.copy(out, bad)
    db = sqlite3.connect(bad)
    blob = bytearray(db.execute("SELECT data FROM tiles_data WHERE tile=1").fetchone()[0])
    blob[len(blob) * 2 // 3] ^= 0x5A
    db.execute("UPDATE tiles_data SET data=? WHERE tile=1", (bytes(blob),))
    db.commit()
    db.close()
    r = run("verify", bad, check=False)
    assert r.returncode == 1 and "tile 1" in r.stderr and "tile 0" not in r.stderr
    # a truncated tile
    shutil.copy(out, bad)
    db = sqlite3.connect(bad)
    db.execute("UPDATE tiles_data SET data=substr(data, 1, 20) WHERE tile=2")
    db.commit()
    db.close()
    r = run("verify", bad, check=False)
    assert r.returncode == 1 and "tile 2" in r.stderr
    # gene totals that disagree with the tiles
    shutil.copy(out, bad)
    db = sqlite3.connect(bad)
    # (total_counts, stored column 1, replaced by the block of n_cells, column 2): in format
    # version 3 the block's seal finds it first; in a version-2 file (no seals) the totals do
    db.execute("UPDATE genes_blocks SET data=(SELECT data FROM genes_blocks WHERE col=2) WHERE col=1")
    db.commit()
    r = run("verify", bad, check=False)
    assert r.returncode == 1 and "genes column 'total_counts' block 0: checksum mismatch" in r.stderr, r.stderr
    db.execute("DROP INDEX tiles_data_meta")       # (version 2 had no covering index)
    for t in ("tiles_data", "cells_blocks", "genes_blocks", "cells_columns"):
        db.execute(f"ALTER TABLE {t} DROP COLUMN checksum")
    db.execute("DELETE FROM dc_meta WHERE key = 'dataset_id'")
    db.execute("UPDATE dc_meta SET value = 2 WHERE key = 'format_version'")
    db.commit()
    db.close()
    r = run("verify", bad, check=False)
    assert r.returncode == 1 and "gene 0" in r.stderr and "total_counts" in r.stderr, r.stderr
    # a damaged block of the genes table
    shutil.copy(out, bad)
    db = sqlite3.connect(bad)
    blob = bytearray(db.execute("SELECT data FROM genes_blocks WHERE col=0").fetchone()[0])
    blob[-1] ^= 0xFF
    db.execute("UPDATE genes_blocks SET data=? WHERE col=0", (bytes(blob),))
    db.commit()
    db.close()
    r = run("verify", bad, check=False)
    assert r.returncode == 1 and "genes column 'name' block 0" in r.stderr
    # a damaged obs block
    shutil.copy(out, bad)
    db = sqlite3.connect(bad)
    blob = bytearray(db.execute("SELECT data FROM cells_blocks WHERE col=1").fetchone()[0])
    blob[-1] ^= 0xFF
    db.execute("UPDATE cells_blocks SET data=? WHERE col=1", (bytes(blob),))
    db.commit()
    db.close()
    r = run("verify", bad, check=False)
    assert r.returncode == 1 and "obs column 'ct'" in r.stderr


# Damage to the genes table's storage and to dc_meta, each found by verify (exit status 1) with a
# message that names the part and what is wrong with it; `info` refuses a file without dc_meta.
GENES_DAMAGE = [
    ("genes_block missing", "DELETE FROM dc_meta WHERE key = 'genes_block'",
     "dc_meta.genes_block is missing or impossible"),
    ("genes_block impossible", "UPDATE dc_meta SET value = 0 WHERE key = 'genes_block'",
     "dc_meta.genes_block is missing or impossible (0)"),
    ("fixed column renamed", "UPDATE genes_columns SET name = 'totals' WHERE col = 1",
     "genes_columns: col 1 ('totals', kind 'int') is not what the format allows"),
    ("fixed column of another kind", "UPDATE genes_columns SET kind = 'real' WHERE col = 2",
     "genes_columns: col 2 ('n_cells', kind 'real') is not what the format allows"),
    ("block at the wrong genes", "UPDATE genes_blocks SET first_gene = 3 WHERE col = 1",
     "genes column 'total_counts' block 0: first_gene 3"),
    ("block of too few genes", "UPDATE genes_blocks SET n_genes = n_genes - 1 WHERE col = 2",
     "genes column 'n_cells' block 0: first_gene 0, n_genes"),
    ("a block no column owns", "INSERT INTO genes_blocks SELECT id + (40 << 32), 40, block, first_gene, n_genes, "
     "data, checksum FROM genes_blocks WHERE col = 0", "genes_blocks: 5 rows, of which 4 belong to the columns"),
    ("n_genes in dc_meta", "UPDATE dc_meta SET value = value + 1 WHERE key = 'n_genes'",
     "dc_meta.n_genes says 51, the tiles are of 50 genes"),
    ("sources not JSON", "UPDATE dc_meta SET value = '[{' WHERE key = 'sources'", "dc_meta.sources: malformed JSON"),
]


@pytest.mark.parametrize("what,sql,message", GENES_DAMAGE, ids=[d[0] for d in GENES_DAMAGE])
def test_verify_names_damage_to_genes_and_meta(tmp_path, what, sql, message):
    p = small(tmp_path, n=300, g=50)
    out = tmp_path / "v.dcdb"
    convert(p, out, "--tile-cells", "100")
    cols = sqlite3.connect(out).execute("SELECT count(*) FROM genes_columns").fetchone()[0]
    assert cols == 4 and run("verify", out).returncode == 0  # name, total_counts, n_cells, orig_index
    db = sqlite3.connect(out)
    db.execute(sql)
    db.commit()
    db.close()
    r = run("verify", out, check=False)
    assert r.returncode == 1 and message in r.stderr, (what, r.stderr)


def test_info_without_dc_meta(tmp_path):
    p = small(tmp_path, n=40, g=12)
    out = tmp_path / "m.dcdb"
    convert(p, out)
    db = sqlite3.connect(out)
    db.execute("DELETE FROM dc_meta WHERE key = 'format_version'")
    db.commit()
    db.close()
    for cmd in (["info"], ["obs", "info"], ["verify"]):
        r = run(*cmd, out, check=False)
        assert r.returncode == 1 and "not a deltacells dataset (no dc_meta format_version)" in r.stderr, (cmd, r.stderr)


def test_a_truncated_dataset_is_called_damaged(tmp_path):
    """A truncated dataset file (a copy cut short) was 'not a deltacells dataset (no dc_meta
    format_version)' to every command; it is an SQLite file that SQLite reports malformed."""
    p = small(tmp_path, n=3000, g=400)
    out = tmp_path / "m.dcdb"
    convert(p, out)
    whole = out.read_bytes()
    for frac in (0.9, 0.5, 0.1):
        cut = tmp_path / "cut.dcdb"
        cut.write_bytes(whole[:int(len(whole) * frac)])
        for cmd in (["info"], ["obs", "info"], ["verify"], ["genes"], ["export"]):
            args = [*cmd, cut] + (["-o", tmp_path / "x.h5ad"] if cmd == ["export"] else [])
            r = run(*args, check=False)
            assert r.returncode == 1, (cmd, frac, r.stdout)
            if "damaged or truncated" not in r.stderr:     # a cut that leaves dc_meta readable: said otherwise
                assert frac == 0.9 and "not a deltacells dataset" not in r.stderr, (cmd, frac, r.stderr)


def test_messages_are_text_whatever_they_quote(tmp_path):
    """A message quotes paths, arguments and a damaged input's bytes; it reaches stderr as one
    line of valid UTF-8 (a UTF-8 reader of stderr, as subprocess's text mode, took a raw byte of a
    damaged matrix.mtx as a UnicodeDecodeError): control bytes and bytes that are not UTF-8 as
    \\xNN, valid UTF-8 as it is."""
    bad = str(tmp_path / "donn\u00e9es-\udcff\x01\x1b[31m.h5ad")      # \udcff: the byte 0xff in a path
    r = run("convert", bad, "-o", tmp_path / "o.dcdb", check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "donn\u00e9es-\\xff\\x01\\x1b[31m.h5ad" in r.stderr, r.stderr
    r = run("convert", tmp_path / "x.h5ad", "-o", tmp_path / "o.dcdb", "--tile-cells", "\udcfe\t7", check=False)
    assert r.returncode == 2 and "'\\xfe\\x097'" in r.stderr and r.stderr.count("\n") == 1, r.stderr
