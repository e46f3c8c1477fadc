"""expression_long with gene_id = / IN skips the tiles that hold none of the genes, as the tiles'
gene maps say (a dataset of several inputs: no tile spans two, and a tile of one input maps its
genes), or as the tile's gene count says (genes appended later): the rows are the same as the
input's, and the chunks decoded (dc_config('cache_misses')) are those of the tiles that may hold
a gene, no others."""
import json
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from _batch_util import connect
from deltacells import _core
from _converter_util import run

warnings.filterwarnings("ignore")

TILE = 100


def write(path, genes, n, seed):
    rng = np.random.default_rng(seed)
    m = (rng.integers(1, 9, (n, len(genes))) * (rng.random((n, len(genes))) < 0.3)).astype(np.int32)
    m[0, :] = 1                                  # every gene has counts in every input it is in
    a = ad.AnnData(X=sp.csr_matrix(m), obs=pd.DataFrame(index=[f"{path.stem}_{i}" for i in range(n)]),
                   var=pd.DataFrame(index=genes), dtype=np.int32)
    a.write_h5ad(path)
    return a


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("geneskip")
    shared = [f"S{i}" for i in range(10)]
    a = write(d / "a.h5ad", [f"A{i}" for i in range(120)] + shared, 250, 1)
    b = write(d / "b.h5ad", [f"B{i}" for i in range(120)] + shared, 200, 2)
    c = write(d / "c.h5ad", [f"A{i}" for i in range(0, 120, 2)] + shared, 150, 3)
    return d, [a, b, c]


def truth(adatas, gene):
    """(cell_id, count) of gene in the inputs converted together, cells in input order."""
    rows, first = [], 0
    for a in adatas:
        if gene in a.var_names:
            col = np.asarray(a.X[:, a.var_names.get_loc(gene)].todense()).ravel()
            rows += [(first + int(i), int(col[i])) for i in np.nonzero(col)[0]]
        first += a.n_obs
    return rows


def chunks_of(con, cells):
    """Chunks of the tiles holding any of the cells [lo, hi) ranges given."""
    n = 0
    for t, fc, nc, ch in con.execute("SELECT tile, first_cell, n_cells, chunks FROM tiles"):
        if any(lo < fc + nc and fc < hi for lo, hi in cells):
            n += ch
    return n


def query(db, sql, args=()):
    con = connect(db)                             # a fresh connection: an empty cache
    rows = con.execute(sql, args).fetchall()
    misses = con.execute("SELECT dc_config('cache_misses')").fetchone()[0]
    return con, rows, misses


def gene_id(con, name):
    return con.execute("SELECT gene_id FROM genes WHERE name = ?", (name,)).fetchone()[0]


def test_merged_inputs_skip_tiles_without_the_gene(inputs):
    d, adatas = inputs
    db = d / "abc.dcdb"
    run("convert", d / "a.h5ad", d / "b.h5ad", d / "c.h5ad", "-o", db, "--tile-cells", TILE, "--quiet", "--force")
    con = connect(db)
    spans = {"a": (0, 250), "b": (250, 450), "c": (450, 600)}
    n_chunks = con.execute("SELECT sum(chunks) FROM tiles").fetchone()[0]
    # A0 is in a and c, B7 in b only, S3 everywhere, A1 in a only
    for gene, where in (("A0", "ac"), ("B7", "b"), ("S3", "abc"), ("A1", "a")):
        g = gene_id(con, gene)
        c2, rows, misses = query(db, "SELECT cell_id, count FROM expression_long WHERE gene_id = ? ORDER BY cell_id", (g,))
        assert rows == truth(adatas, gene), gene
        want = chunks_of(c2, [spans[k] for k in where])
        assert misses == want, (gene, misses, want, n_chunks)
    assert chunks_of(con, [spans["b"]]) < n_chunks                      # skipping was possible
    # IN: the tiles that hold either gene
    ga, gb = gene_id(con, "A1"), gene_id(con, "B7")
    _, rows, misses = query(db, "SELECT cell_id, gene_id, count FROM expression_long WHERE gene_id IN (?, ?) "
                                "ORDER BY cell_id, gene_id", (ga, gb))
    want = sorted([(c, ga, n) for c, n in truth(adatas, "A1")] + [(c, gb, n) for c, n in truth(adatas, "B7")])
    assert rows == want
    assert misses == chunks_of(con, [spans["a"], spans["b"]])
    # with a cell list or a range: the same rows as without skipping, nothing decoded in b's tiles
    cells = [10, 260, 300, 449, 455, 599]
    _, rows, misses = query(db, "SELECT cell_id, count FROM expression_long WHERE gene_id = ? AND cell_id IN "
                                f"({','.join(map(str, cells))}) ORDER BY cell_id", (gene_id(con, "A0"),))
    assert rows == [r for r in truth(adatas, "A0") if r[0] in cells]
    _, rows, misses = query(db, "SELECT cell_id, count FROM expression_long WHERE gene_id = ? AND cell_id BETWEEN 260 AND 440",
                            (gene_id(con, "A0"),))
    assert rows == [] and misses == 0
    _, rows, misses = query(db, "SELECT cell_id, count FROM expression_long WHERE gene_id = ? AND cell_id >= 200 "
                                "ORDER BY cell_id", (gene_id(con, "B7"),))
    assert rows == truth(adatas, "B7") and misses == chunks_of(con, [spans["b"]])


def test_appended_genes_past_a_tile_skip_it(inputs):
    """a converted alone, b appended: b's own genes get ids past a's tiles' genes, so a query for
    them decodes b's tiles only, whether or not a's tiles map their genes."""
    d, adatas = inputs
    db = d / "a_then_b.dcdb"
    run("convert", d / "a.h5ad", "-o", db, "--tile-cells", TILE, "--quiet", "--force")
    run("append", db, d / "b.h5ad", "--quiet")
    con = connect(db)
    g = gene_id(con, "B7")
    _, rows, misses = query(db, "SELECT cell_id, count FROM expression_long WHERE gene_id = ? ORDER BY cell_id", (g,))
    assert rows == truth(adatas[:2], "B7")
    assert misses == chunks_of(con, [(250, 450)])
    g = gene_id(con, "S3")
    _, rows, misses = query(db, "SELECT cell_id, count FROM expression_long WHERE gene_id = ? ORDER BY cell_id", (g,))
    assert rows == truth(adatas[:2], "S3")
    assert misses == chunks_of(con, [(0, 450)])


def test_aggregate_panel_skips_tiles_without_its_genes(inputs):
    """dc_aggregate with a gene panel: a tile holding none of the panel's genes is not decoded, and
    its cells still count (n_cells, means with zeros, mean_log1p_cpm), as the inputs say."""
    d, adatas = inputs
    db = d / "abc_agg.dcdb"
    run("convert", d / "a.h5ad", d / "b.h5ad", d / "c.h5ad", "-o", db, "--tile-cells", TILE, "--quiet", "--force")
    spans = {"a": (0, 250), "b": (250, 450), "c": (450, 600)}
    for panel, where in ((["B7", "B9"], "b"), (["A1", "B7"], "ab"), (["S3"], "abc"), (["A0"], "ac")):
        con, rows, misses = query(db, "SELECT label, gene, n_cells, sum, n_expressing, mean_log1p_cpm FROM "
                                      "dc_aggregate('source', NULL, ?) ORDER BY label, gene", (str(panel).replace("'", '"'),))
        assert misses == chunks_of(con, [spans[k] for k in where]), panel
        want = []
        for a, name in zip(adatas, ("a.h5ad", "b.h5ad", "c.h5ad")):
            x = a.X.toarray().astype(np.float64)
            tot = x.sum(axis=1)
            for gene in sorted(panel):
                col = x[:, a.var_names.get_loc(gene)] if gene in a.var_names else np.zeros(a.n_obs)
                want.append((name, gene, a.n_obs, int(col.sum()), int((col > 0).sum()),
                             float(np.mean(np.log1p(col / tot * 1e4)))))
        want.sort()
        assert [r[:5] for r in rows] == [w[:5] for w in want], panel
        assert np.allclose([r[5] for r in rows], [w[5] for w in want], rtol=1e-12), panel


def test_batch_panel_skips_tiles_without_its_genes(inputs):
    """dc_batch with a gene panel: the cells of a tile holding none of the panel's genes are empty
    rows and the tile is not decoded; every row equals the inputs' panel columns, in request
    order, repeats and cached chunks included."""
    d, adatas = inputs
    db = d / "abc_batch.dcdb"
    run("convert", d / "a.h5ad", d / "b.h5ad", d / "c.h5ad", "-o", db, "--tile-cells", TILE, "--quiet", "--force")
    spans = {"a": (0, 250), "b": (250, 450), "c": (450, 600)}
    first = {"a": 0, "b": 250, "c": 450}
    rng = np.random.default_rng(7)
    cells = rng.permutation(600)
    cells = np.concatenate([cells, cells[:40]]).astype(np.int64)          # repeats

    def want_rows(panel):
        out = []
        for cid in cells:
            k = "a" if cid < 250 else "b" if cid < 450 else "c"
            a = adatas["abc".index(k)]
            row = a.X[int(cid) - first[k]].toarray().ravel()
            out.append([(p, int(row[a.var_names.get_loc(g)])) for p, g in enumerate(panel)
                        if g in a.var_names and row[a.var_names.get_loc(g)] != 0])
        return out

    for panel, where in ((["B7", "B9"], "b"), (["A1", "B7"], "ab"), (["S3"], "abc"), (["A0", "A2"], "ac")):
        con = connect(db)
        for by_id in (False, True):                  # names as JSON, or an int32 blob of ids
            arg = (np.array([gene_id(con, g) for g in panel], dtype="<i4").tobytes() if by_id
                   else str(panel).replace("'", '"'))
            n, ng, indptr, indices, data = con.execute(
                "SELECT n_cells, n_genes, indptr, indices, data FROM dc_batch(?, ?)", (cells.tobytes(), arg)).fetchone()
            misses = con.execute("SELECT dc_config('cache_misses')").fetchone()[0]
            # the first call decodes the chunks of the tiles that may hold a panel gene; the
            # second finds them cached and reads no other
            assert misses == chunks_of(con, [spans[k] for k in where]), (panel, by_id)
            ip = np.frombuffer(indptr, "<i8")
            ix, dv = np.frombuffer(indices, "<i4"), np.frombuffer(data, "<i4")
            got = [list(zip(ix[ip[i]:ip[i + 1]].tolist(), dv[ip[i]:ip[i + 1]].tolist())) for i in range(n)]
            assert (n, ng) == (len(cells), len(panel))
            assert got == want_rows(panel), (panel, by_id)
        # placing (the loader's path): the same skip, the same rows (cells once each: a repeated
        # cell has no place of its own)
        uniq = cells[:600]
        arg = str(panel).replace("'", '"')
        n, nnz, ticket, cnz = con.execute("SELECT n_cells, nnz, ticket, cell_nnz FROM dc_batch(?, ?, ?, 1)",
                                          (uniq.tobytes(), arg, None)).fetchone()
        last = json.loads(con.execute("SELECT dc_config('last_batch')").fetchone()[0])
        assert last["fetched_chunks"] == chunks_of(con, [spans[k] for k in where]), panel
        sizes = np.frombuffer(cnz, "<i4").astype(np.int64)
        off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        ix, dv = np.zeros(max(1, nnz), np.int32), np.zeros(max(1, nnz), np.int32)
        row_nnz = np.full(n, -1, np.int64)
        fn = _core._ticket_place_fn()
        assert fn(ticket, n, nnz, (ix.ctypes.data + 4 * off).astype(np.uint64).ctypes.data,
                  (dv.ctypes.data + 4 * off).astype(np.uint64).ctypes.data, 0, row_nnz.ctypes.data, 0, None, None, 0) == 0
        want = want_rows(panel)[:600]
        for i in range(n):
            k = "a" if uniq[i] < 250 else "b" if uniq[i] < 450 else "c"
            if k not in where:
                assert sizes[i] == 0 and row_nnz[i] == 0
            got = list(zip(ix[off[i]:off[i] + row_nnz[i]].tolist(), dv[off[i]:off[i] + row_nnz[i]].tolist()))
            assert got == want[i], (panel, i)
        con.close()
