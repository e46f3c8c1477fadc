"""A full disk under the commands that write: append, annotate, merge, export.

Each runs on a small tmpfs (root only; skipped elsewhere) sized so that the disk fills at
different points of the command.  Every run either succeeds, or exits 1 with a message that
names the dataset (or output) and says the disk is full; an existing dataset is byte for byte
what it was, with no hot journal left for the next reader to play back, and no scratch or
temporary file stays behind.  Never a crash (export crashed in HDF5's exit handler once)."""
import contextlib
import os
import subprocess

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _converter_util import CONVERTER, convert, need_converter

FULL = ("disk full", "database or disk is full")


def h5ad(path, seed, n=2500, g=1500):
    rng = np.random.default_rng(seed)
    m = (rng.integers(1, 30, (n, g)) * (rng.random((n, g)) < 0.3)).astype(np.int32)
    a = ad.AnnData(X=sp.csr_matrix(m),
                   obs=pd.DataFrame({"ct": pd.Categorical(rng.choice(["a", "b", "c"], n)),
                                     "depth": rng.random(n)}, index=[f"s{seed}_c{i}" for i in range(n)]),
                   var=pd.DataFrame(index=[f"G{i}" for i in range(g)]), dtype=np.int32)
    a.write_h5ad(path)
    return path


@contextlib.contextmanager
def small_fs(tmp_path, nbytes):
    mnt = tmp_path / f"fs{nbytes}"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={nbytes}", "tmpfs", mnt],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", mnt], check=False)


def cli(*args):
    r = subprocess.run([CONVERTER, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), (args, r.returncode, r.stderr)   # a signal (a crash) is negative
    return r


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    need_converter()
    d = tmp_path_factory.mktemp("fulldisk")
    a, b = h5ad(d / "a.h5ad", 1), h5ad(d / "b.h5ad", 2)
    ds = d / "a.dcdb"
    convert([a], ds)
    other = d / "b.dcdb"
    convert([b], other)
    csv = d / "ann.csv"
    rng = np.random.default_rng(3)
    with open(csv, "w") as f:
        f.write("name,note\n")
        for i in range(2500):
            f.write(f"s1_c{i},{''.join(rng.choice(list('ACGT'), 400))}\n")
    return {"a": a, "b": b, "ds": ds, "other": other, "csv": csv}


def sizes(base, steps):
    """tmpfs sizes from just above base, in 4 KiB pages"""
    return [((base + s) // 4096 + 1) * 4096 for s in steps]


def check_in_place(tmp_path, inputs, args, steps):
    need_converter()
    old = inputs["ds"].read_bytes()
    failed = ok = 0
    for size in sizes(len(old), steps):
        with small_fs(tmp_path, size) as mnt:
            ds = mnt / "d.dcdb"
            ds.write_bytes(old)
            r = cli(args[0], ds, *args[1:])
            left = sorted(set(os.listdir(mnt)) - {"d.dcdb"})
            assert not left, (size, left, r.stderr)
            if r.returncode == 1:
                failed += 1
                assert str(ds) in r.stderr and any(w in r.stderr for w in FULL), (size, r.stderr)
                assert ds.read_bytes() == old, (size, r.stderr)
            else:
                ok += 1
            v = cli("verify", ds)
            assert v.returncode == 0, (size, v.stdout, v.stderr)
    assert failed, "the disk never filled: make the inputs larger"
    return failed, ok


def test_append_onto_a_full_disk(tmp_path, inputs):
    steps = [4096, 60_000, 150_000, 300_000, 600_000, 900_000, 1_200_000, 1_600_000, 2_200_000, 3_000_000]
    check_in_place(tmp_path, inputs, ["append", inputs["b"], "--quiet"], steps)


def test_annotate_onto_a_full_disk(tmp_path, inputs):
    steps = [4096, 100_000, 300_000, 600_000, 900_000, 1_300_000, 2_000_000, 3_000_000]
    check_in_place(tmp_path, inputs, ["annotate", inputs["csv"], "--key", "name", "--quiet"], steps)


def test_merge_onto_a_full_disk(tmp_path, inputs):
    need_converter()
    total = inputs["ds"].stat().st_size + inputs["other"].stat().st_size
    failed = 0
    for size in sizes(0, [total // 8, total // 3, total // 2, 2 * total // 3, 5 * total // 6, total]):
        with small_fs(tmp_path, size) as mnt:
            out = mnt / "m.dcdb"
            r = cli("merge", inputs["ds"], inputs["other"], "-o", out, "--quiet")
            if r.returncode == 1:
                failed += 1
                assert str(out) in r.stderr and any(w in r.stderr for w in FULL), (size, r.stderr)
                assert not os.listdir(mnt), (size, os.listdir(mnt))
    assert failed


def test_export_onto_a_full_disk(tmp_path, inputs):
    need_converter()
    with small_fs(tmp_path, 256 << 10) as mnt:
        out = mnt / "e.h5ad"
        r = cli("export", inputs["ds"], "-o", out, "--quiet")
        assert r.returncode == 1 and str(out) in r.stderr and "disk full" in r.stderr, r.stderr
        assert not os.listdir(mnt)
        out.write_bytes(b"the old export")
        r = cli("export", inputs["ds"], "-o", out, "--force", "--quiet")
        assert r.returncode == 1 and str(out) in r.stderr, r.stderr
        assert out.read_bytes() == b"the old export" and os.listdir(mnt) == ["e.h5ad"]


def test_export_past_a_file_size_limit(tmp_path, inputs):
    """The disk filling at any point of export, without root: a file size limit (`ulimit -f`;
    the converter ignores SIGXFSZ, so writes fail with EFBIG).  HDF5 writes a cached chunk when
    its dataset is closed, and that failure reached no return value: export renamed a
    truncated h5ad into place and exited 0, at every limit tried.  Now each run fails naming
    the output, leaves nothing, or writes a complete file."""
    import resource
    need_converter()
    full = tmp_path / "full.h5ad"
    cli("export", inputs["ds"], "-o", full, "--quiet")
    size = full.stat().st_size
    want = ad.read_h5ad(full)
    failed = 0
    for frac in (0.05, 0.3, 0.6, 0.9, 0.99, 1.5):
        lim = int(size * frac)
        out = tmp_path / f"e{frac}.h5ad"
        r = subprocess.run([CONVERTER, "export", str(inputs["ds"]), "-o", str(out), "--quiet"], capture_output=True,
                           text=True, timeout=300,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (lim, lim)))
        assert r.returncode in (0, 1), r.stderr
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((f"e{frac}", f".e{frac}")))
        if r.returncode:
            failed += 1
            assert str(out) in r.stderr and "disk full" in r.stderr, r.stderr
            assert not left, left
        else:
            assert frac > 1 and left == [out.name], (frac, left)
            got = ad.read_h5ad(out)
            assert (got.X != want.X).nnz == 0 and got.obs.equals(want.obs)
    assert failed == 5
