"""The command line's manners: `version`, one-line usage errors with a pointer to --help,
errors that list what exists (layers, var columns) and suggest the closest name, --raw on a
file without raw, pass 3's progress line, and `source` labels (base names; full paths in
dc_meta)."""
import json
import os
import pty
import select
import subprocess
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _converter_util import CONVERTER, Dataset, convert, need_converter, run

warnings.filterwarnings("ignore")


def small(path, n=40, g=12, layers=(), raw=False, obs_cols=3):
    rng = np.random.default_rng(0)
    m = (rng.integers(1, 9, (n, g)) * (rng.random((n, g)) < 0.4)).astype(np.int32)
    obs = pd.DataFrame({f"c{k}": rng.integers(0, 5, n) for k in range(obs_cols)}, index=[f"c{i}" for i in range(n)])
    var = pd.DataFrame({"gene_ids": [f"ENSG{i}" for i in range(g)], "feature_types": ["Gene Expression"] * g},
                       index=[f"G{i}" for i in range(g)])
    a = ad.AnnData(X=sp.csr_matrix(m), obs=obs, var=var, dtype=np.int32)
    for name in layers:
        a.layers[name] = sp.csr_matrix(m)
    if raw:
        a.raw = a
    os.makedirs(os.path.dirname(path), exist_ok=True)
    a.write_h5ad(path)
    return path


def test_version():
    need_converter()
    for args in (["version"], ["--version"]):
        r = subprocess.run([CONVERTER, *args], capture_output=True, text=True)
        assert r.returncode == 0
        line = r.stdout.strip()
        assert line.startswith("deltacells 0.") and "dataset format 3" in line and "SQLite 3." in line
        assert "HDF5 1." in line and "zlib 1." in line and len(r.stdout.splitlines()) == 1


@pytest.mark.parametrize("args,word,cmd", [
    (["convert", "x.h5ad", "-o", "y", "--bogus"], "unknown option --bogus", "convert"),
    (["convert", "x.h5ad", "-o"], "-o needs a value", "convert"),
    (["convert", "x.h5ad", "-o", "y", "--force=1"], "--force takes no value", "convert"),
    (["convert"], "at least one input", "convert"),
    (["info"], "which dataset?", "info"),
    (["verify", "a", "b"], "one dataset at a time", "verify"),
    (["obs", "list"], "obs info DATASET", "obs info"),
    (["convret"], "did you mean 'convert'?", ""),
    # version takes nothing; -o once; a number out of range and a bad --type are usage errors too
    (["version", "--bogus"], "version takes no arguments", "version"),
    (["convert", "x.h5ad", "-o", "a", "-o", "b"], "-o given twice", "convert"),
    (["export", "x.dcdb", "-o", "a", "-o", "b"], "-o given twice", "export"),
    (["merge", "a", "b", "-o", "a", "-o", "b"], "-o given twice", "merge"),
    (["convert", "x.h5ad", "-o", "y", "--tile-cells", "0"], "--tile-cells: '0' is not an integer in 1..", "convert"),
    (["append", "x.dcdb", "y.h5ad", "--threads", "z"], "--threads: 'z' is not an integer", "append"),
    (["annotate", "x.dcdb", "t.csv", "--type", "v=bogus"], "--type v=bogus: give COLUMN=KIND", "annotate"),
    ([], "which command?", ""),
])
def test_usage_error_is_one_line(args, word, cmd):
    need_converter()
    r = subprocess.run([CONVERTER, *args], capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert word in lines[0] and lines[0].startswith("deltacells: ")
    assert lines[0].endswith(f"(see deltacells {cmd + ' ' if cmd else ''}--help)"), lines[0]
    assert r.stdout == ""


def test_layer_missing_lists_layers(tmp_path):
    p = small(str(tmp_path / "l.h5ad"), layers=("counts", "spliced", "unspliced"))
    r = convert(p, tmp_path / "o.dcdb", "--layer", "count", check=False)
    assert r.returncode == 1
    assert "no layer 'count'" in r.stderr and "'counts', 'spliced', 'unspliced'" in r.stderr
    assert "did you mean 'counts'?" in r.stderr
    r = convert(p, tmp_path / "o.dcdb", "--layer", "zzzzzzzz", check=False)
    assert r.returncode == 1 and "'counts', 'spliced', 'unspliced'" in r.stderr and "did you mean" not in r.stderr
    p2 = small(str(tmp_path / "n.h5ad"))
    r = convert(p2, tmp_path / "o.dcdb", "--layer", "counts", check=False)
    assert r.returncode == 1 and "the file's layers: none" in r.stderr


def test_raw_missing_says_so(tmp_path):
    p = small(str(tmp_path / "r.h5ad"))
    r = convert(p, tmp_path / "o.dcdb", "--raw", check=False)
    assert r.returncode == 1
    assert "--raw: the file has no raw counts" in r.stderr and "not an h5ad" not in r.stderr
    p2 = small(str(tmp_path / "r2.h5ad"), raw=True)
    convert(p2, tmp_path / "ok.dcdb", "--raw")


def test_gene_key_missing_lists_columns(tmp_path):
    p = small(str(tmp_path / "k.h5ad"))
    r = convert(p, tmp_path / "o.dcdb", "--gene-key", "gene_id", check=False)
    assert r.returncode == 1
    assert "--gene-key" in r.stderr and "no column 'gene_id'" in r.stderr
    assert "'gene_ids', 'feature_types'" in r.stderr and "did you mean 'gene_ids'?" in r.stderr


def test_source_labels_and_full_paths(tmp_path):
    a = small(str(tmp_path / "s1" / "outs" / "filtered.h5ad"), n=10)
    b = small(str(tmp_path / "s2" / "outs" / "filtered.h5ad"), n=12)
    c = small(str(tmp_path / "other.h5ad"), n=5)
    out = tmp_path / "lab.dcdb"
    convert([a, b, c], out)
    ds = Dataset(out)
    # the same base name: the shortest ending that tells them apart
    assert ds.obs("source") == ["s1/outs/filtered.h5ad"] * 10 + ["s2/outs/filtered.h5ad"] * 12 + ["other.h5ad"] * 5
    src = json.loads(ds.meta["sources"])
    assert [s["file"] for s in src] == [os.path.realpath(x) for x in (a, b, c)]
    assert [s["source"] for s in src] == ["s1/outs/filtered.h5ad", "s2/outs/filtered.h5ad", "other.h5ad"]
    ds.close()
    # relative paths are stored in full too
    out2 = tmp_path / "rel.dcdb"
    run("convert", "other.h5ad", os.path.join("s1", "outs", "filtered.h5ad"), "-o", out2, "--quiet", cwd=tmp_path)
    ds = Dataset(out2)
    assert ds.obs("source") == ["other.h5ad"] * 5 + ["filtered.h5ad"] * 10
    assert [s["file"] for s in json.loads(ds.meta["sources"])] == [os.path.realpath(c), os.path.realpath(a)]
    ds.close()


def test_pass3_progress_counts_columns(tmp_path):
    """On a terminal, pass 3 shows the column and the cells of it (never cells x columns)."""
    need_converter()
    n = 300
    p = small(str(tmp_path / "p.h5ad"), n=n, obs_cols=6)
    q = small(str(tmp_path / "q.h5ad"), n=n, obs_cols=6)
    master, slave = pty.openpty()
    proc = subprocess.Popen([CONVERTER, "convert", p, q, "-o", str(tmp_path / "p.dcdb")], stdout=subprocess.PIPE,
                            stderr=slave, close_fds=True)
    os.close(slave)
    buf = b""
    while True:
        r, _, _ = select.select([master], [], [], 60)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0
    text = buf.decode(errors="replace")
    lines = [s.strip() for s in text.replace("\r", "\n").split("\n") if "pass 3/3" in s]
    assert lines, text
    # the columns: _index, c0..c5, source = 8; every line within one column's cells
    for s in lines:
        col = s.split("column ")[1]
        k, of = int(col.split(" of ")[0]), int(col.split(" of ")[1].split(",")[0])
        done, total = (int(x) for x in col.split(", ")[1].split(" cells")[0].split(" / "))
        assert of == 8 and 1 <= k <= 8 and total == 2 * n and 0 <= done <= total, s


def test_a_file_named_like_a_uri_is_that_file(tmp_path):
    """Debian's SQLite reads "file:..." as a URI: `deltacells info file:y.dcdb` opened y.dcdb, another
    dataset, and verify and export used it too.  The converter's names are file names."""
    need_converter()
    a = tmp_path / "file:y.dcdb"
    convert(small(str(tmp_path / "a.h5ad"), n=40), a)
    convert(small(str(tmp_path / "b.h5ad"), n=25), tmp_path / "y.dcdb")
    for cmd in (["info"], ["verify"]):
        r = subprocess.run([CONVERTER, *cmd, "file:y.dcdb"], capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    r = subprocess.run([CONVERTER, "info", "file:y.dcdb", "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert json.loads(r.stdout)["n_cells"] == 40, r.stdout
    r = subprocess.run([CONVERTER, "export", "file:y.dcdb", "-o", "e.h5ad", "--quiet"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0 and ad.read_h5ad(tmp_path / "e.h5ad").n_obs == 40, r.stderr
    assert a.exists()
