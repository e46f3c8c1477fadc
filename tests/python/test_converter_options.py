"""The converter's encoding options read back: --codec, --level, --chunks (each checked against
anndata's X and against the tile header's bytes as docs/format.md lays them out), and its
bounded-memory claim (peak RSS of a conversion against the size of its input)."""
import os
import struct
import subprocess
import sys
import warnings

import anndata as ad
import h5py
import numpy as np
import pytest

from _converter_util import CONVERTER, GEN, PY, Dataset, check_matrix, check_obs, convert, need_converter, run

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

N_CELLS, N_GENES, TILE = 1300, 400, 500       # tiles of 500, 500 and 300 cells
CODEC_ID = {"rans-v1": 1, "zstd": 2, "rans": 3}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("conv_opts")
    h5 = d / "in.h5ad"
    subprocess.run([PY, GEN, "--cells", str(N_CELLS), "--genes", str(N_GENES), "--seed", "4", "-o", str(h5)],
                   check=True, capture_output=True, timeout=600)
    return h5, ad.read_h5ad(h5)


def headers(db):
    """Per tile: (codec id, n_cells, n_chunks, [chunk n_cells], [chunk nnz], payload bytes) parsed
    from the tile blob's header by offset (docs/format.md, "Header")."""
    out = []
    for (blob,) in db.execute("SELECT data FROM tiles_data ORDER BY tile"):
        blob = bytes(blob)
        assert blob[:4] == b"DCTL"
        _ver, codec, n_cells, _n_genes, _nnz, n_chunks, _shared = struct.unpack_from("<HHIIQII", blob, 4)
        recs = [struct.unpack_from("<IIQQ", blob, 32 + 24 * k) for k in range(n_chunks)]
        out.append((codec, n_cells, n_chunks, [r[0] for r in recs], [r[2] for r in recs], sum(r[3] for r in recs)))
    return out


def read_back(out, adata):
    ds = Dataset(out)
    try:
        check_matrix(ds, [adata])
        check_obs(ds, [adata])
        return ds.meta, headers(ds.db)
    finally:
        ds.close()


@pytest.mark.parametrize("codec,level,chunks", [
    ("zstd", None, None),        # the codec's default level (19); tiles of 500 and 300 cells: 2 chunks
    ("zstd", 1, 3),
    ("rans", 3, 1),              # 3 cell-size buckets, one chunk per tile
    ("rans", None, 256),         # the most chunks allowed: 1 or 2 cells each
    ("rans-v1", 2, 5),
])
def test_codec_level_chunks_read_back(tmp_path, source, codec, level, chunks):
    h5, adata = source
    out = tmp_path / "o.dcdb"
    opts = ["--codec", codec, "--tile-cells", str(TILE)]
    if level is not None:
        opts += ["--level", str(level)]
    if chunks is not None:
        opts += ["--chunks", str(chunks)]
    convert(h5, out, *opts)
    meta, hdrs = read_back(out, adata)
    assert meta["codec"] == codec
    assert int(meta["chunks"]) == (chunks or 32)
    assert int(meta["chunk_cells"]) == (0 if chunks else 512)     # --chunks N: exactly N
    assert int(meta["level"]) == (level or 0)
    assert [h[1] for h in hdrs] == [500, 500, 300]
    want_chunks = chunks or 2     # by default 8 (few nonzeros here), at least 512 cells each where a tile has room for 2
    X = adata.X.tocsr()
    first = 0
    for codec_id, n_cells, n_chunks, chunk_cells, chunk_nnz, _ in hdrs:
        assert codec_id == CODEC_ID[codec]
        assert n_chunks == min(want_chunks, n_cells)
        assert sum(chunk_cells) == n_cells and min(chunk_cells) >= 1
        # each chunk's nonzeros are those of its cells in anndata's X
        bounds = first + np.concatenate([[0], np.cumsum(chunk_cells)])
        assert chunk_nnz == [int(X.indptr[b] - X.indptr[a]) for a, b in zip(bounds[:-1], bounds[1:])]
        first += n_cells
    run("verify", out)


def test_level_reaches_the_encoder(tmp_path, source):
    """--level changes the bytes written (and only those): zstd 1 against zstd 19, rans with one
    bucket against four; every variant reads back to the same matrix."""
    h5, adata = source
    size = {}
    for codec, level in (("zstd", 1), ("zstd", 19), ("rans", 1), ("rans", 4)):
        out = tmp_path / f"{codec}{level}.dcdb"
        convert(h5, out, "--codec", codec, "--level", str(level), "--tile-cells", str(TILE))
        _, hdrs = read_back(out, adata)
        size[codec, level] = sum(h[5] for h in hdrs)
    assert size["zstd", 19] < size["zstd", 1], size
    assert size["rans", 1] != size["rans", 4], size


# ---------------------------------------------------------------- bounded memory
RSS_SCRIPT = ("import resource, subprocess, sys\n"
              "r = subprocess.run(sys.argv[1:])\n"
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
              "sys.exit(r.returncode)\n")


def peak_rss_kib(args):
    """Runs the converter with args in a process of its own; its peak RSS in KiB."""
    p = subprocess.run([sys.executable, "-c", RSS_SCRIPT, CONVERTER, *map(str, args)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.split()[-1])


def write_big_csr(path, n_cells, n_genes, per_cell, chunk=2000):
    """An h5ad whose X (CSR, int32 data and indices) is n_cells * per_cell nonzeros, written
    with h5py in slabs so that this process never holds it."""
    rng = np.random.default_rng(0)
    nnz = n_cells * per_cell
    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"], f.attrs["encoding-version"] = "anndata", "0.1.0"
        X = f.create_group("X")
        X.attrs["encoding-type"], X.attrs["encoding-version"] = "csr_matrix", "0.1.0"
        X.attrs["shape"] = np.array([n_cells, n_genes], dtype=np.int64)
        data = X.create_dataset("data", (nnz,), dtype=np.int32, chunks=(1 << 20,))
        ind = X.create_dataset("indices", (nnz,), dtype=np.int32, chunks=(1 << 20,))
        X.create_dataset("indptr", data=np.arange(n_cells + 1, dtype=np.int64) * per_cell)
        for s in range(0, n_cells, chunk):
            m = min(chunk, n_cells - s)
            cols = np.sort(rng.random((m, n_genes)).argpartition(per_cell, axis=1)[:, :per_cell], axis=1)
            ind[s * per_cell:(s + m) * per_cell] = cols.astype(np.int32).ravel()
            data[s * per_cell:(s + m) * per_cell] = rng.integers(1, 30, m * per_cell, dtype=np.int32)
        for name, n, prefix in (("obs", n_cells, "c"), ("var", n_genes, "g")):
            g = f.create_group(name)
            g.attrs["encoding-type"], g.attrs["encoding-version"] = "dataframe", "0.2.0"
            g.attrs["_index"], g.attrs["column-order"] = "_index", np.array([], dtype=object).astype("S")
            g.create_dataset("_index", data=np.array([f"{prefix}{i}" for i in range(n)], dtype="S"))
            g["_index"].attrs["encoding-type"], g["_index"].attrs["encoding-version"] = "string-array", "0.2.0"
    return nnz


def test_peak_memory_bounded_by_tiles_not_input(tmp_path):
    """The converter's --help promises memory bounded whatever the input size: (threads + 1)
    tiles in flight at 8 bytes per nonzero + 8 per cell, plus about 100 MiB of buffers.  An
    input whose X holds 8 bytes x 30 M nonzeros (240 MB) is converted with 1,000-cell tiles
    (8 MB each) and one encoder thread: the peak RSS must stay under the promise plus a
    generous 100 MiB for the process itself (libraries, SQLite, allocator slack), which is well
    below the input; a converter that held X would need at least 240 MB more."""
    need_converter()
    n_cells, n_genes, per_cell, tile = 30000, 2000, 1000, 1000
    h5 = tmp_path / "big.h5ad"
    nnz = write_big_csr(h5, n_cells, n_genes, per_cell)
    x_bytes = nnz * 8
    tile_bytes = tile * per_cell * 8 + tile * 8
    promise = 2 * tile_bytes + 100 * 2**20
    bound = promise + 100 * 2**20
    assert bound < x_bytes, "the test input must be larger than the bound"
    peak = peak_rss_kib(["convert", h5, "-o", tmp_path / "big.dcdb", "--quiet", "--threads", "1",
                         "--tile-cells", tile]) * 1024
    assert peak < bound, f"peak RSS {peak / 2**20:.0f} MiB, bound {bound / 2**20:.0f} MiB (X: {x_bytes / 2**20:.0f} MiB)"
    # the output holds all of it
    ds = Dataset(tmp_path / "big.dcdb")
    try:
        assert ds.n_cells == n_cells
        assert sum(n for (n,) in ds.db.execute("SELECT nnz FROM tiles_data")) == nnz
    finally:
        ds.close()
