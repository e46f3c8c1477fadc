"""Repeated gene names (duplicate var names, as 10x files have unless made unique) across
convert, merge and append: one rule for all three (cv_gene_repeats, docs/converter.md "Genes
across inputs"): the k-th gene of a name in an input's original order is gene (name, k) and joins
gene (name, k) of another input or dataset.  A dataset counts its genes in its original order
(genes.orig_index), not in its stored order (decreasing counts), which differs between the
parts of a split file when the repeats' counts do.

So merge of converted halves equals convert of the whole, and convert + append equals convert of
both, compared on cells, obs and X by (name, k), through to_anndata and export in the original
gene order.  Before the shared rule, merge and append paired repeats by stored order.
"""
import os
import sys

import numpy as np
import pytest

from _converter_util import ROOT, need_converter, run

sys.path.insert(0, os.path.join(ROOT, "python"))

# three X, two Y; the halves' counts order the X's (and Y's) differently: stored orders differ
NAMES = ["A", "X", "B", "X", "C", "Y", "X", "Y", "D"]


def write(path, X, names, cells, seed, ids=None):
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    r = np.random.default_rng(seed)
    obs = pd.DataFrame({"kind": pd.Categorical(r.choice(["T", "B", "NK"], len(cells))),
                        "score": r.random(len(cells))}, index=cells)
    var = pd.DataFrame({"gene_ids": ids if ids is not None else [f"E{n}" for n in names]}, index=names)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # anndata: "Variable names are not unique"
        ad.AnnData(X=sp.csr_matrix(X.astype(np.int32)), obs=obs, var=var, dtype=np.int32).write_h5ad(path)
    return str(path)


def matrix(n, names, heavy, seed):
    """n cells of small counts; columns in heavy multiplied, so they lead the stored order"""
    r = np.random.default_rng(seed)
    X = r.integers(1, 5, (n, len(names))) * (r.random((n, len(names))) < 0.5)
    for j, f in heavy.items():
        X[:, j] *= f
    return X


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    need_converter()
    d = tmp_path_factory.mktemp("dup")
    # half 1: the first X leads; half 2: the third X and the second Y lead
    X1 = matrix(150, NAMES, {1: 30}, 1)
    X2 = matrix(130, NAMES, {6: 50, 7: 40}, 2)
    cells = [f"c{i}" for i in range(280)]
    h1 = write(d / "h1.h5ad", X1, NAMES, cells[:150], 1)
    h2 = write(d / "h2.h5ad", X2, NAMES, cells[150:], 2)
    whole = write(d / "whole.h5ad", np.vstack([X1, X2]), NAMES, cells, 3)
    # the obs of the whole: the halves' (written apart, with their own seeds)
    import anndata as ad
    import pandas as pd
    o = pd.concat([ad.read_h5ad(h1).obs, ad.read_h5ad(h2).obs])
    a = ad.read_h5ad(whole)
    a.obs = o
    a.write_h5ad(whole)
    return d, h1, h2, whole, np.vstack([X1, X2])


def by_key(names, X):
    """columns of X by (name, k): k the occurrence of name in this (original) order"""
    seen, out = {}, {}
    for j, g in enumerate(names):
        k = seen.get(g, 0)
        seen[g] = k + 1
        out[(g, k)] = np.asarray(X[:, j]).ravel()
    return out


def snapshot(path):
    import deltacells
    a = deltacells.to_anndata(str(path), gene_order="original")
    X = a.X.toarray()
    obs = {c: [None if isinstance(v, float) and np.isnan(v) else v for v in a.obs[c].astype(object).tolist()]
           for c in a.obs.columns}
    return {"cells": list(a.obs_names), "obs": obs, "names": list(a.var_names), "X": X,
            "keys": by_key(list(a.var_names), X)}


def assert_same(s, t, what, skip_obs=()):
    assert s["cells"] == t["cells"], f"{what}: cells differ"
    cs = sorted(c for c in s["obs"] if c not in skip_obs)
    assert cs == sorted(c for c in t["obs"] if c not in skip_obs), what
    for c in cs:
        assert s["obs"][c] == t["obs"][c], f"{what}: obs column {c} differs"
    assert s["names"] == t["names"], f"{what}: genes in the original order differ"
    assert sorted(s["keys"]) == sorted(t["keys"]), f"{what}: genes (name, k) differ"
    bad = [k for k in s["keys"] if not np.array_equal(s["keys"][k], t["keys"][k])]
    assert not bad, f"{what}: X differs for {len(bad)} genes (name, k), e.g. {bad[:8]}"
    assert s["X"].sum() > 0


def assert_export(db, out, X, names):
    import anndata as ad
    run("export", db, "-o", out, "--quiet")
    a = ad.read_h5ad(out)
    assert list(a.var_names) == names
    assert np.array_equal(a.X.toarray(), X), f"export of {db}: X differs from the input"


@pytest.mark.parametrize("key", [[], ["--gene-key", "gene_ids"]], ids=["names", "gene-key"])
def test_merge_of_halves_equals_convert_of_whole(halves, tmp_path, key):
    d, h1, h2, whole, X = halves
    p1, p2, m, w, both = (tmp_path / f"{x}.dcdb" for x in ("p1", "p2", "m", "w", "both"))
    run("convert", h1, "-o", p1, "--quiet", *key)
    run("convert", h2, "-o", p2, "--quiet", *key)
    # the premise: each half stores its X's in another order (else any pairing would agree)
    import deltacells
    orders = [[r[0] for r in deltacells.connect(str(p)).execute(
        "SELECT orig_index FROM genes WHERE name = ? ORDER BY gene_id", ("EX" if key else "X",))] for p in (p1, p2)]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1]) and len(orders[0]) == 3
    run("merge", p1, p2, "-o", m, "--quiet")
    assert run("verify", m, "--quiet", check=False).returncode == 0
    run("convert", whole, "-o", w, "--quiet", *key)
    run("convert", h1, h2, "-o", both, "--quiet", *key)
    sm, sw, sb = snapshot(m), snapshot(w), snapshot(both)
    # the whole, one input, has no `source` column; the two inputs converted together have it
    assert_same(sm, sw, "merge of halves vs convert of the whole", skip_obs=("source",))
    assert_same(sm, sb, "merge of halves vs convert of both halves")
    names = [f"E{n}" for n in NAMES] if key else NAMES
    assert sm["names"] == names and np.array_equal(sm["X"], X)
    assert_export(m, tmp_path / "m.h5ad", X, NAMES)


@pytest.mark.parametrize("key", [[], ["--gene-key", "gene_ids"]], ids=["names", "gene-key"])
def test_convert_and_append_equals_convert_of_both(halves, tmp_path, key):
    d, h1, h2, whole, X = halves
    ap, both = tmp_path / "ap.dcdb", tmp_path / "both.dcdb"
    run("convert", h1, "-o", ap, "--quiet", *key)
    run("append", ap, h2, "--quiet", *key)
    assert run("verify", ap, "--quiet", check=False).returncode == 0
    run("convert", h1, h2, "-o", both, "--quiet", *key)
    sa, sb = snapshot(ap), snapshot(both)
    assert_same(sa, sb, "convert + append vs convert of both")
    assert np.array_equal(sa["X"], X)
    assert_export(ap, tmp_path / "ap.h5ad", X, NAMES)


def test_merge_with_new_repeats_equals_convert_together(tmp_path):
    """B has one X more than A (X's third is new in the merge) and genes of its own: merge keeps
    A's genes, then B's new ones in B's original order, as convert A B numbers the union"""
    need_converter()
    na = ["X", "A", "X", "B", "Y"]
    nb = ["C", "X", "Y", "X", "Y", "X", "B", "E"]
    # gene_ids of distinct values: a text var column (repeated ones are written as a categorical)
    a = write(tmp_path / "a.h5ad", matrix(120, na, {2: 40}, 5), na, [f"a{i}" for i in range(120)], 5,
              ids=[f"Ea{j}" for j in range(len(na))])
    b = write(tmp_path / "b.h5ad", matrix(90, nb, {5: 60, 4: 30}, 6), nb, [f"b{i}" for i in range(90)], 6,
              ids=[f"Eb{j}" for j in range(len(nb))])
    pa, pb, m, ab, ap = (tmp_path / f"{x}.dcdb" for x in ("a", "b", "m", "ab", "ap"))
    run("convert", a, "-o", pa, "--quiet")
    run("convert", b, "-o", pb, "--quiet")
    run("merge", pa, pb, "-o", m, "--quiet")
    run("convert", a, b, "-o", ab, "--quiet")
    run("convert", a, "-o", ap, "--quiet")
    run("append", ap, b, "--quiet")
    sab = snapshot(ab)
    assert sab["names"] == ["X", "A", "X", "B", "Y", "C", "Y", "X", "E"]   # the union, first input first
    assert_same(snapshot(m), sab, "merge a b vs convert a b")
    assert_same(snapshot(ap), sab, "convert a + append b vs convert a b")
    import anndata as ad
    for db in (m, ap, ab):
        run("export", db, "-o", tmp_path / (db.name + ".h5ad"), "--quiet")
    x, y, z = (ad.read_h5ad(tmp_path / (db.name + ".h5ad")) for db in (m, ap, ab))
    assert list(x.var_names) == list(y.var_names) == list(z.var_names) == sab["names"]
    assert np.array_equal(x.X.toarray(), z.X.toarray()) and np.array_equal(y.X.toarray(), z.X.toarray())


def test_gene_order_from_a_shard_pairs_repeats_in_original_order(halves, tmp_path):
    """shards converted with --gene-order FIRST.dcdb: the first shard's repeats are counted in its
    original order, so the second shard's tiles are copied (same gene ids) and the merge is right"""
    d, h1, h2, whole, X = halves
    p1, p2, m, w = (tmp_path / f"{x}.dcdb" for x in ("p1", "p2", "m", "w"))
    run("convert", h1, "-o", p1, "--quiet")
    run("convert", h2, "-o", p2, "--quiet", "--gene-order", p1)
    p = run("merge", p1, p2, "-o", m)
    assert "(0 tiles decoded" in p.stdout, p.stdout
    run("convert", whole, "-o", w, "--quiet")
    sm = snapshot(m)
    assert_same(sm, snapshot(w), "merge of --gene-order shards vs convert of the whole", skip_obs=("source",))
    assert np.array_equal(sm["X"], X)


def test_categorical_var_columns_united_by_merge_and_append(tmp_path):
    """a categorical var column whose categories differ between the parts: merge and append unite
    them (dc_meta var_categories) as convert does, so export writes it back (before: 'writing var
    column' failed on a category it did not know)"""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    need_converter()

    def part(name, genes, kinds, notes, seed):
        r = np.random.default_rng(seed)
        X = sp.random(60, len(genes), density=0.3, format="csr", random_state=seed,
                      data_rvs=lambda k: r.integers(1, 9, k)).astype(np.int32)
        var = pd.DataFrame({"kind": pd.Categorical(kinds), "note": notes}, index=genes)
        a = ad.AnnData(X=X, obs=pd.DataFrame(index=[f"{name}{i}" for i in range(60)]), var=var, dtype=np.int32)
        a.write_h5ad(tmp_path / f"{name}.h5ad")
        return str(tmp_path / f"{name}.h5ad")
    ga, gb = [f"g{i}" for i in range(6)], [f"g{i}" for i in range(3, 9)]
    # 'note': categorical in a (repeated values), plain text in b (distinct values)
    a = part("a", ga, ["p", "q", "p", "q", "p", "q"], ["n1", "n1", "n2", "n2", "n1", "n2"], 1)
    b = part("b", gb, ["q", "r", "q", "s", "r", "s"], [f"m{i}" for i in range(6)], 2)
    pa, pb, m, ap, ab = (tmp_path / f"{x}.dcdb" for x in ("pa", "pb", "m", "ap", "ab"))
    run("convert", a, "-o", pa, "--quiet")
    run("convert", b, "-o", pb, "--quiet")
    run("merge", pa, pb, "-o", m, "--quiet")
    run("convert", a, "-o", ap, "--quiet")
    run("append", ap, b, "--quiet")
    run("convert", a, b, "-o", ab, "--quiet")
    got = {}
    for db in (m, ap, ab):
        run("export", db, "-o", tmp_path / (db.name + ".h5ad"), "--quiet")
        got[db.name] = ad.read_h5ad(tmp_path / (db.name + ".h5ad"))
    want = got["ab.dcdb"]
    assert list(want.var_names) == [f"g{i}" for i in range(9)]
    for k in ("m.dcdb", "ap.dcdb"):
        x = got[k]
        assert list(x.var_names) == list(want.var_names), k
        assert list(x.var["kind"].astype(str)) == list(want.var["kind"].astype(str)) == list("pqpqpqsrs"), k
        assert list(x.var["kind"].cat.categories) == ["p", "q", "r", "s"], k
        assert list(x.var["note"].astype(str)) == list(want.var["note"].astype(str)), k
        assert np.array_equal(x.X.toarray(), want.X.toarray()), k


def test_real_file_with_names_repeated(tmp_path):
    """pbmc3k with its gene names cut at the first '-' or '.' (RP11-34P13.3 -> RP11: 6,000 names
    repeated, up to hundreds of times, with counts that order them differently in each half):
    merge of the halves and convert + append equal convert of the whole, X in the input's order"""
    import warnings
    import anndata as ad
    import scipy.sparse as sp
    from _converter_util import real_file
    need_converter()
    src = real_file("fhil_pbmc3k.h5ad")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = ad.read_h5ad(src)
        names = [n.split("-")[0].split(".")[0] for n in a.var_names]
        assert len(set(names)) < len(names) - 1000   # the test means something
        a.var_names = names
        a.X = sp.csr_matrix(a.X).astype(np.int32)
        h = a.n_obs // 2
        for x, part in (("whole", a), ("h1", a[:h]), ("h2", a[h:])):
            part.copy().write_h5ad(tmp_path / f"{x}.h5ad")
    X = a.X.toarray()
    w, p1, p2, m, ap = (tmp_path / f"{x}.dcdb" for x in ("w", "p1", "p2", "m", "ap"))
    run("convert", tmp_path / "whole.h5ad", "-o", w, "--quiet")
    run("convert", tmp_path / "h1.h5ad", "-o", p1, "--quiet")
    run("convert", tmp_path / "h2.h5ad", "-o", p2, "--quiet")
    run("merge", p1, p2, "-o", m, "--quiet")
    run("convert", tmp_path / "h1.h5ad", "-o", ap, "--quiet")
    run("append", ap, tmp_path / "h2.h5ad", "--quiet")
    sw = snapshot(w)
    assert sw["names"] == names and np.array_equal(sw["X"], X)
    assert_same(snapshot(m), sw, "merge of the halves vs convert of the whole", skip_obs=("source",))
    assert_same(snapshot(ap), sw, "convert + append vs convert of the whole", skip_obs=("source",))


def test_intersect_records_an_original_order_export_reads(tmp_path):
    """convert --genes intersect: orig_index is the kept genes' place in the union's var order,
    0 .. n-1 (before, the union's places with gaps, which export and `genes` refused)"""
    import anndata as ad
    need_converter()
    na, nb = ["A", "X", "B", "X", "C"], ["X", "C", "D", "X", "X", "A"]
    Xa, Xb = matrix(80, na, {3: 20}, 7), matrix(70, nb, {0: 20}, 8)
    a = write(tmp_path / "a.h5ad", Xa, na, [f"a{i}" for i in range(80)], 7, ids=[f"Ea{j}" for j in range(5)])
    b = write(tmp_path / "b.h5ad", Xb, nb, [f"b{i}" for i in range(70)], 8, ids=[f"Eb{j}" for j in range(6)])
    db = tmp_path / "i.dcdb"
    run("convert", a, b, "-o", db, "--quiet", "--genes", "intersect")
    run("export", db, "-o", tmp_path / "i.h5ad", "--quiet")
    x = ad.read_h5ad(tmp_path / "i.h5ad")
    # kept: A, X (twice), C, in a's order; b's X's pair with a's by (name, k)
    assert list(x.var_names) == ["A", "X", "X", "C"]
    assert np.array_equal(x.X.toarray()[:80], Xa[:, [0, 1, 3, 4]])
    assert np.array_equal(x.X.toarray()[80:], Xb[:, [5, 0, 3, 1]])
