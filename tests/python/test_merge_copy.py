"""`merge` builds its output from the first dataset row by row (its schema, its tables' rows,
its tiles streamed with their seals under the new dataset id), not from a byte copy of it:
what the first dataset holds beyond the converter's tables survives, every tile blob is
copied as it is, and a tile whose seal does not match stops the merge with nothing written."""
import os
import sqlite3

import pytest

from _converter_util import GEN, PY, need_converter, run

import subprocess


def gen_h5ad(path, seed, cells, genes):
    subprocess.run([PY, GEN, "--cells", str(cells), "--genes", str(genes), "--seed", str(seed), "-o", str(path)],
                   check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    need_converter()
    d = tmp_path_factory.mktemp("mc")
    h5 = [gen_h5ad(d / f"p{s}.h5ad", s, 700, 300) for s in (1, 2, 3)]
    a, b = d / "a.dcdb", d / "b.dcdb"
    run("convert", h5[0], h5[1], "-o", a, "--quiet", "--tile-cells", "256")
    run("convert", h5[2], "-o", b, "--quiet", "--tile-cells", "256", "--gene-order", a)
    return d, a, b


def schema(path):
    con = sqlite3.connect(path)
    rows = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name").fetchall()
    con.close()
    return rows


def test_merge_keeps_the_first_datasets_schema_and_own_tables(parts, tmp_path):
    d, a, b = parts
    a2 = tmp_path / "a2.dcdb"
    a2.write_bytes(a.read_bytes())
    con = sqlite3.connect(a2)
    con.executescript("""
        CREATE TABLE notes(id INTEGER PRIMARY KEY AUTOINCREMENT, cell TEXT NOT NULL, note TEXT);
        CREATE INDEX notes_cell ON notes(cell);
        CREATE VIEW notes_count AS SELECT count(*) AS n FROM notes;
        CREATE TRIGGER notes_upper AFTER INSERT ON notes BEGIN UPDATE notes SET note = upper(note) WHERE id = new.id; END;
        INSERT INTO notes(cell, note) VALUES ('c1', 'first'), ('c2', 'second');
        DELETE FROM notes WHERE cell = 'c2';
        PRAGMA user_version = 7;
    """)
    con.commit()
    con.close()
    m = tmp_path / "m.dcdb"
    run("merge", a2, b, "-o", m, "--quiet")
    assert schema(m) == schema(a2)
    con, c1 = sqlite3.connect(m), sqlite3.connect(a2)
    for q in ("PRAGMA page_size", "PRAGMA application_id", "PRAGMA user_version", "SELECT * FROM notes",
              "SELECT * FROM sqlite_sequence", "SELECT * FROM notes_count"):
        assert con.execute(q).fetchall() == c1.execute(q).fetchall(), q
    assert con.execute("PRAGMA user_version").fetchone()[0] == 7
    con.execute("INSERT INTO notes(cell, note) VALUES ('c3', 'third')")   # the trigger and the sequence came along
    assert con.execute("SELECT id, note FROM notes WHERE cell = 'c3'").fetchall() == [(3, "THIRD")]
    con.rollback()
    con.close()
    c1.close()
    p = run("verify", m, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_merge_copies_every_tile_blob_as_it_is_with_new_seals(parts, tmp_path):
    d, a, b = parts
    m = tmp_path / "m.dcdb"
    p = run("merge", a, b, "-o", m)
    assert "(0 tiles decoded" in p.stdout, p.stdout
    q = "SELECT tile, first_cell, n_cells, nnz, chunks, data, checksum FROM tiles_data ORDER BY tile"
    ra, rb, rm = (sqlite3.connect(x).execute(q).fetchall() for x in (a, b, m))
    assert len(rm) == len(ra) + len(rb) and len(ra) >= 2 and len(rb) >= 2
    n_a = sum(r[2] for r in ra)
    want = ra + [(t + len(ra), f + n_a, *rest) for (t, f, *rest) in rb]
    assert [r[:6] for r in rm] == [r[:6] for r in want]
    # the seals bind each tile to its place in the merged dataset: none is the input's
    assert all(x[6] != y[6] for x, y in zip(rm, want))
    assert run("verify", m, check=False).returncode == 0


@pytest.mark.parametrize("which", ["first", "second"])
def test_a_tile_whose_seal_does_not_match_stops_the_merge(parts, tmp_path, which):
    d, a, b = parts
    bad = tmp_path / "bad.dcdb"
    bad.write_bytes((a if which == "first" else b).read_bytes())
    con = sqlite3.connect(bad)
    con.execute("UPDATE tiles_data SET checksum = checksum + 1 WHERE tile = 1")
    con.commit()
    con.close()
    out = tmp_path / "out" / "m.dcdb"
    out.parent.mkdir()
    args = (bad, b) if which == "first" else (a, bad)
    p = run("merge", *args, "-o", out, check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "bad.dcdb" in p.stderr and "tile 1" in p.stderr and "seal does not match" in p.stderr, p.stderr
    assert os.listdir(out.parent) == []   # no output, no temporary file left behind


@pytest.mark.parametrize("n_genes", [200, 1500, 6000])   # radix digits: one pass of 8 bits, two of 6, two of 7
def test_shards_numbered_apart_merge_to_the_whole_by_gene_name(tmp_path, n_genes):
    """Shards converted apart number genes by their own counts: merge decodes the later shard's
    tiles, maps its genes and sorts each cell again (cv_sort_row: insertion sort for short cells,
    else a radix sort whose digits split the gene bits) before encoding.  X by gene name equals
    the whole's."""
    from _converter_util import Dataset
    need_converter()
    h5 = [gen_h5ad(tmp_path / f"q{s}.h5ad", s, 400, n_genes) for s in (4, 5, 6)]
    a, b, whole, m = (tmp_path / f"{x}.dcdb" for x in ("a", "b", "whole", "m"))
    run("convert", h5[0], "-o", a, "--quiet", "--tile-cells", "256")
    run("convert", h5[1], h5[2], "-o", b, "--quiet", "--tile-cells", "256")
    run("convert", *h5, "-o", whole, "--quiet", "--tile-cells", "256")
    p = run("merge", a, b, "-o", m)
    assert "(0 tiles decoded" not in p.stdout, p.stdout   # b's tiles were encoded again
    assert run("verify", m, check=False).returncode == 0
    dm, dw = Dataset(str(m)), Dataset(str(whole))
    try:
        assert dm.n_genes == dw.n_genes and (dm.n_genes > 2048) == (n_genes > 2048)
        xm, xw = dm.X(), dw.X()
        assert xm.shape == xw.shape and xm.nnz == xw.nnz > 0
        assert xm.getnnz(axis=1).max() >= 48   # cells long enough for the radix sort
        order = {g: i for i, g in enumerate(dw.gene_names)}
        perm = [order[g] for g in dm.gene_names]   # merged gene id -> whole's gene id
        xm = xm.tocoo()
        import scipy.sparse as sp
        xm = sp.csr_matrix((xm.data, ([*xm.row], [perm[c] for c in xm.col])), shape=xw.shape)
        assert (xm != xw).nnz == 0
        # each cell's gene ids strictly increase in the merged tiles (the codec's order)
        xr = dm.X()
        for r in range(0, xr.shape[0], 37):
            ix = xr.indices[xr.indptr[r]:xr.indptr[r + 1]]
            assert (ix[1:] > ix[:-1]).all()
    finally:
        dm.close()
        dw.close()


def test_repeated_gene_names_match_by_repeat(tmp_path):
    """A name repeated within a dataset: its k-th repeat in a later dataset joins its k-th repeat
    in the first (gene_map's table of names), counted in each dataset's original order
    (genes.orig_index), as convert counts an input's; extra repeats become new genes."""
    import warnings
    import numpy as np
    import scipy.sparse as sp
    from _converter_util import Dataset
    need_converter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import anndata as ad
        import pandas as pd
        for name, genes, n, seed in (("d1", ["A", "B", "A", "C", "D", "A", "E"], 300, 1),
                                     ("d2", ["A", "Z", "A", "B", "A", "A", "Y", "C"], 200, 2)):
            r = np.random.default_rng(seed)
            X = sp.random(n, len(genes), density=0.3, random_state=seed, format="csr",
                          data_rvs=lambda k: r.integers(1, 50, k)).astype(np.int32)
            obs = pd.DataFrame({"t": pd.Categorical(r.choice(["a", "b"], n))}, index=[f"{name}_{i}" for i in range(n)])
            ad.AnnData(X=X, obs=obs, var=pd.DataFrame(index=genes), dtype=np.int32).write_h5ad(tmp_path / f"{name}.h5ad")
    for name in ("d1", "d2"):
        run("convert", tmp_path / f"{name}.h5ad", "-o", tmp_path / f"{name}.dcdb", "--quiet")
    m = tmp_path / "m.dcdb"
    run("merge", tmp_path / "d1.dcdb", tmp_path / "d2.dcdb", "-o", m, "--quiet")
    assert run("verify", m, check=False).returncode == 0
    dm, d1, d2 = Dataset(str(m)), Dataset(str(tmp_path / "d1.dcdb")), Dataset(str(tmp_path / "d2.dcdb"))
    try:
        assert sorted(dm.gene_names) == sorted(["A"] * 4 + ["B", "C", "D", "E", "Y", "Z"])
        assert dm.gene_names[:d1.n_genes] == d1.gene_names   # the first's ids kept
        # the second's k-th A (in its original order) joined the first's k-th A; its 4th A is new
        def a_ids(d):   # the ids of the A's, by original order
            orig = d.genes("orig_index")
            return sorted((i for i, g in enumerate(d.gene_names) if g == "A"), key=lambda i: orig[i])
        a1, a2, am = a_ids(d1), a_ids(d2), a_ids(dm)
        x2 = d2.X().toarray()
        xm = dm.X().toarray()
        assert am[:3] == a1 and am[3] >= d1.n_genes
        for k in range(4):
            assert (xm[d1.n_cells:, am[k]] == x2[:, a2[k]]).all(), k
        assert int(dm.gene_total.sum()) == int(d1.gene_total.sum() + d2.gene_total.sum())
    finally:
        dm.close()
        d1.close()
        d2.close()


@pytest.fixture(scope="module")
def apart(tmp_path_factory):
    """a and b converted apart (b numbers genes by its own counts): b's 7 tiles of unequal
    sizes are decoded, mapped and encoded again by a merge."""
    need_converter()
    d = tmp_path_factory.mktemp("ma")
    h5 = [gen_h5ad(d / f"r{s}.h5ad", s, cells, 3000) for s, cells in ((7, 300), (8, 400), (9, 300))]
    a, b = d / "a.dcdb", d / "b.dcdb"
    run("convert", h5[0], "-o", a, "--quiet", "--tile-cells", "128")
    run("convert", h5[1], h5[2], "-o", b, "--quiet", "--tile-cells", "128")
    return d, a, b


def tile_blobs(path):
    con = sqlite3.connect(path)
    rows = con.execute("SELECT tile, first_cell, n_cells, nnz, data FROM tiles_data ORDER BY tile").fetchall()
    con.close()
    return rows


def test_tiles_encoded_again_on_threads_are_the_same_whatever_the_batches(apart, tmp_path):
    """The re-encoded tiles are made on a pool, in batches written in tile order: one thread,
    two, three (a last round of fewer tiles than threads, whose encoder gets the spare
    threads), and batches cut by their nonzeros (down to a tile each) give the same tiles,
    in the same places."""
    d, a, b = apart
    nb = len(tile_blobs(b))
    assert nb == 7   # 128, 128, 128, 16; 128, 128, 44 cells
    got = {}
    for threads, batch in ((1, None), (2, None), (3, None), (2, "1"), (3, "200000")):   # 200000: batches of 2, 3, 2
        m = tmp_path / f"m{threads}_{batch}.dcdb"
        env = dict(os.environ)
        env.pop("DELTACELLS_MERGE_BATCH_NNZ", None)
        if batch:
            env["DELTACELLS_MERGE_BATCH_NNZ"] = batch
        p = run("merge", a, b, "-o", m, "--threads", threads, env=env)
        assert f"({nb} tiles decoded and encoded again" in p.stdout, p.stdout
        assert run("verify", m, check=False).returncode == 0
        got[(threads, batch)] = tile_blobs(m)
    first = got[(1, None)]
    assert len(first) == len(tile_blobs(a)) + nb
    for k, v in got.items():
        assert v == first, k


def test_a_corrupt_tile_encoded_again_on_a_pool_thread_stops_the_merge(apart, tmp_path):
    """A chunk whose bytes changed (its tile's seal, over the header, still matches) fails
    its checksum on the pool thread that decodes it: the merge stops with the dataset and
    tile named, and leaves nothing."""
    d, a, b = apart
    bad = tmp_path / "bad.dcdb"
    bad.write_bytes(b.read_bytes())
    con = sqlite3.connect(bad)
    blob = bytearray(con.execute("SELECT data FROM tiles_data WHERE tile = 5").fetchone()[0])
    blob[-3] ^= 0x55
    con.execute("UPDATE tiles_data SET data = ? WHERE tile = 5", (bytes(blob),))
    con.commit()
    con.close()
    out = tmp_path / "out" / "m.dcdb"
    out.parent.mkdir()
    p = run("merge", a, bad, "-o", out, "--threads", "2", check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "bad.dcdb" in p.stderr and "tile 5" in p.stderr and "checksum" in p.stderr, p.stderr
    assert os.listdir(out.parent) == []


def test_page_size_follows_the_nonzeros(tmp_path):
    """A dataset of fewer than 4,000,000 nonzeros gets 16 KiB pages, a larger one 32 KiB
    (dc_page_size_for, ext/dc_format.h): convert decides from its inputs' nonzeros, and merge from
    its inputs' together, so that merging small datasets into a large one gives the large pages."""
    need_converter()
    h = [gen_h5ad(tmp_path / f"s{s}.h5ad", s, 2200, 6000) for s in (1, 2)]
    a, b, m = tmp_path / "a.dcdb", tmp_path / "b.dcdb", tmp_path / "m.dcdb"
    run("convert", h[0], "-o", a, "--quiet")
    run("convert", h[1], "-o", b, "--quiet", "--gene-order", a)

    def page_and_nnz(p):
        con = sqlite3.connect(p)
        r = (con.execute("PRAGMA page_size").fetchone()[0],
             con.execute("SELECT value FROM dc_meta WHERE key = 'nnz'").fetchone()[0])
        con.close()
        return r

    (pa, na), (pb, nb) = page_and_nnz(a), page_and_nnz(b)
    assert na < 4_000_000 and nb < 4_000_000 and na + nb >= 4_000_000, (na, nb)
    assert pa == pb == 16384
    run("merge", a, b, "-o", m, "--quiet")
    assert page_and_nnz(m) == (32768, na + nb)
    p = run("verify", m, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    # one convert of both inputs: the large pages too
    w = tmp_path / "w.dcdb"
    run("convert", *h, "-o", w, "--quiet")
    assert page_and_nnz(w) == (32768, na + nb)
