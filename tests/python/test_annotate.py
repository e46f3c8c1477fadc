"""deltacells annotate (CLI) and deltacells.annotate (Python): obs columns added or replaced.

Columns are stored as the converter stores obs columns (blocks with statistics and seals, so
`verify` passes and the cells table filters on them); cells missing from the table are NULL;
keys that match no cell are reported; bad CSV is an error naming the line, and changes nothing.
"""
import hashlib
import os
import re
import sqlite3
import sys

import numpy as np
import pytest

from _converter_util import ROOT, need_converter, run

sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(__file__))
from test_append_merge import verify_ok, write_h5ad  # noqa: E402


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


@pytest.fixture()
def ds(tmp_path):
    need_converter()
    a = write_h5ad(tmp_path / "a.h5ad", 300, [f"G{i}" for i in range(30)], 1)
    out = tmp_path / "a.dcdb"
    run("convert", a, "-o", out, "--quiet")
    return out


def cells(path, cols):
    import deltacells
    con = deltacells.connect(str(path))
    q = ", ".join(f'"{c}"' for c in cols)
    return con.execute(f"SELECT name, {q} FROM cells ORDER BY cell_id").fetchall()


def test_annotate_csv_kinds_nulls_and_unmatched_keys(ds, tmp_path):
    names = [r[0] for r in cells(ds, ["age"])]
    lines = ["name,score,count,flag,label,note"]
    for i, n in enumerate(names[:200]):
        score = "" if i % 10 == 0 else f"{i / 7:.6f}"
        flag = "NA" if i % 13 == 0 else ("true" if i % 2 else "false")
        note = f'"a, quoted ""{i}"""' if i % 50 == 0 else f"n{i}"
        lines.append(f"{n},{score},{i * 3 - 100},{flag},{'lab' + str(i % 4)},{note}")
    lines += ["nobody_1,1.0,1,true,x,y", "nobody_2,,2,false,x,y"]
    csv = tmp_path / "t.csv"
    csv.write_text("\r\n".join(lines) + "\r\n")
    p = run("annotate", ds, csv)
    assert "200 of 300 cells annotated from 202 rows (5 columns added, 0 replaced)" in p.stdout, p.stdout
    assert "2 keys of" in p.stderr and "'nobody_1' (line 202)" in p.stderr, p.stderr
    verify_ok(ds)
    con = sqlite3.connect(ds)
    kinds = dict(con.execute("SELECT name, kind FROM cells_columns").fetchall())
    assert [kinds[c] for c in ("score", "count", "flag", "label", "note")] == ["real", "int", "bool", "category", "text"]
    rows = cells(ds, ["score", "count", "flag", "label", "note"])
    for i, (n, score, count, flag, label, note) in enumerate(rows):
        if i >= 200:
            assert (score, count, flag, label, note) == (None,) * 5
            continue
        assert score == (None if i % 10 == 0 else pytest.approx(round(i / 7, 6)))
        assert count == i * 3 - 100
        assert flag == (None if i % 13 == 0 else i % 2)
        assert label == f"lab{i % 4}"
        assert note == (f'a, quoted "{i}"' if i % 50 == 0 else f"n{i}")
    import deltacells
    c2 = deltacells.connect(str(ds))
    # filters on the new columns, against the values read back
    assert c2.execute("SELECT count(*) FROM cells WHERE count > 200").fetchone()[0] == sum(
        1 for r in rows if r[2] is not None and r[2] > 200)
    assert c2.execute("SELECT count(*) FROM cells WHERE label = 'lab2'").fetchone()[0] == 50
    assert c2.execute("SELECT count(*) FROM cells WHERE score IS NULL").fetchone()[0] == 100 + 20
    # the blocks carry the statistics the cells table prunes with
    mn, mx = con.execute("SELECT min, max FROM cells_blocks JOIN cells_columns USING (col) "
                         "WHERE cells_columns.name = 'count'").fetchone()
    assert (mn, mx) == (-100, 199 * 3 - 100)


def test_annotate_replaces_a_column_and_keys_by_cell_id(ds, tmp_path):
    con = sqlite3.connect(ds)
    before = con.execute("SELECT count(*) FROM cells_columns").fetchone()[0]
    csv = tmp_path / "t.csv"
    csv.write_text("cell_id,CELL_TYPE\n" + "".join(f"{i},t{i % 3}\n" for i in range(0, 300, 2)) + "999,x\n")
    p = run("annotate", ds, csv, "--key", "cell_id")
    assert "1 key of" in p.stderr and "'999'" in p.stderr
    assert "replaced" in p.stdout
    verify_ok(ds)
    assert con.execute("SELECT count(*) FROM cells_columns").fetchone()[0] == before
    rows = cells(ds, ["cell_type"])
    assert [r[1] for r in rows] == [f"t{i % 3}" if i % 2 == 0 else None for i in range(300)]


@pytest.mark.parametrize("text,opts,message", [
    ('name,a\nx,"unclosed\n', [], "line 2: a quoted field is not closed"),
    ("name,a,b\nx,1,2\ny,1\n", [], "line 3: 2 fields, the header has 3"),
    ("name,a\nCELL,1\ny,two\n", ["--type", "a=int"], "line 3: column 'a': 'two' is not an integer"),
    ("name,a\nCELL,1\nCELL,2\n", [], "line 3: key 'CELL' again (first on line 2)"),
    ("name,tile\nCELL,1\n", [], "column 'tile' is one of the cells table's own columns"),
    ("name,a,A\nCELL,1,2\n", [], "columns 'a' and 'A' have the same name"),
    ("name,a\nCELL,1\n", ["--type", "b=int"], "--type b=int: the table has no such column"),
    ("name\nx\n", [], "one column only"),
    ("", [], "empty"),
    ('name,a\nx,ab"c\n', [], "line 2: a quote inside an unquoted field"),
    # a NUL byte would end the field there unseen
    ("name,a\nCELL,x\0y\n", [], "line 2: field 2 holds a NUL byte"),
    ('name,a\nCELL,"x\0y"\n', [], "line 2: field 2 holds a NUL byte"),
    # no key matches a cell: the columns would only be replaced by NULLs
    ("name,age\n", [], "no rows under its header: nothing to annotate; nothing was changed"),
    ("name,age\nnobody,1\n", [], "no key of its 1 row matches a cell of"),
    ("name,age\n0,1\n1,2\n", [], "nothing was changed (the keys are integers: cell ids? --key cell_id"),
    ("cell_id,age\n300,1\n-1,2\n", ["--key", "cell_id"], "no key of its 2 rows matches a cell of"),
])
def test_bad_csv_names_line_and_reason_and_changes_nothing(ds, tmp_path, text, opts, message):
    names = [r[0] for r in cells(ds, ["age"])]
    csv = tmp_path / "bad.csv"
    csv.write_text(text.replace("CELL", names[0]))
    before = sha(ds)
    p = run("annotate", ds, csv, *opts, check=False)
    assert p.returncode in (1, 2)
    assert message.replace("CELL", names[0]) in p.stderr, p.stderr
    assert sha(ds) == before
    verify_ok(ds)


def test_csv_damaged_at_random_is_an_error_that_changes_nothing_or_an_annotation(ds, tmp_path):
    """A valid table damaged at random, 60 times (seeded: bytes changed, cut, put in, lines
    repeated, quotes and separators inserted, truncation): annotate either refuses it (exit 1,
    one line of text naming the table, the dataset's bytes unchanged) or annotates, and the
    dataset then verifies and still has every cell."""
    names = [r[0] for r in cells(ds, ["age"])]
    rows = ["name,score,label,flag"] + [f"{n},{i * 0.5},lab{i % 7},{'true' if i % 3 else 'false'}"
                                         for i, n in enumerate(names[:120])]
    clean = ("\n".join(rows) + "\n").encode()
    rng = np.random.default_rng(7)
    outcomes = {0: 0, 1: 0}
    for k in range(60):
        raw = clean
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(raw)))
            kind = int(rng.integers(6))
            if kind == 0:
                raw = raw[:i] + bytes([int(rng.choice(list(b'",\n\r\x00\xff\xc3 9-e')))]) + raw[i + 1:]
            elif kind == 1:
                raw = raw[:i] + raw[i + int(rng.integers(1, 30)):]
            elif kind == 2:
                raw = raw[:i] + bytes(rng.integers(0, 256, int(rng.integers(1, 8))).astype(np.uint8)) + raw[i:]
            elif kind == 3:
                lines = raw.split(b"\n")
                j = int(rng.integers(len(lines)))
                raw = b"\n".join(lines[:j + 1] + lines[j:])
            elif kind == 4:
                raw = raw[:i] + b'"' + raw[i:]
            else:
                raw = raw[:i]
        csv = tmp_path / f"t{k}.csv"
        csv.write_bytes(raw)
        before = sha(ds)
        p = run("annotate", ds, csv, check=False)
        assert p.returncode in (0, 1), (k, p.returncode, p.stderr[-2000:])
        outcomes[p.returncode] += 1
        if p.returncode == 1:
            assert p.stderr.startswith("deltacells: ") and p.stderr.count("\n") == 1, (k, p.stderr[-2000:])
            assert sha(ds) == before, k
        else:
            verify_ok(ds)
            assert [r[0] for r in cells(ds, ["age"])] == names
    assert outcomes[1] >= 20 and outcomes[0] >= 1, outcomes


def test_annotate_integer_out_of_int64_range_says_so(ds, tmp_path):
    """An integer beyond int64 in an int column was 'not an integer'; it is out of the signed
    64-bit range, and the message names the column, the line and key, and the value (as convert
    says it of such an obs column).  Nothing is changed."""
    names = [r[0] for r in cells(ds, ["age"])]
    before = sha(ds)
    for big in ("9223372036854775808", "-9223372036854775809", "99999999999999999999999"):
        csv = tmp_path / "big.csv"
        csv.write_text(f"name,a\n{names[0]},1\n{names[1]},{big}\n")
        p = run("annotate", ds, csv, "--type", "a=int", check=False)
        assert p.returncode == 1, p.stderr
        assert f"line 3 (name '{names[1]}'): column 'a': value {big} does not fit a signed 64-bit integer" in p.stderr, p.stderr
        assert "is not an integer" not in p.stderr, p.stderr
        assert sha(ds) == before
        # without --type the column was taken as real, rounding the value: now asked
        p = run("annotate", ds, csv, check=False)
        assert p.returncode == 1, p.stderr
        assert (f"line 3 (name '{names[1]}'): column 'a': value {big} is an integer that does not fit a signed 64-bit "
                "integer" in p.stderr and "--type a=text (exact) or --type a=real (rounded)" in p.stderr), p.stderr
        assert sha(ds) == before
    run("annotate", ds, csv, "--type", "a=text", "--quiet")     # kept exactly, as text
    assert [r[1] for r in cells(ds, ["a"])[:2]] == ["1", "99999999999999999999999"]
    # the largest and smallest int64 are stored
    csv.write_text(f"name,a\n{names[0]},9223372036854775807\n{names[1]},-9223372036854775808\n")
    run("annotate", ds, csv, "--type", "a=int", "--quiet")
    assert [r[1] for r in cells(ds, ["a"])[:2]] == [2**63 - 1, -2**63]
    verify_ok(ds)


def test_python_annotate_a_column_without_a_name_is_refused(ds):
    """A DataFrame (or dict) column named '' failed with the command's '--type =int: give
    COLUMN=KIND'; it is an error saying that an obs column needs a name, before anything is
    written."""
    import pandas as pd

    import deltacells
    names = [r[0] for r in cells(ds, ["age"])]
    before = sha(ds)
    df = pd.DataFrame({"ok": [1, 2], "": [3, 4]}, index=names[:2])
    for data in (df, {"name": names[:2], "": ["x", "y"]}):
        with pytest.raises(ValueError, match="an obs column needs a name: column [01] of the data is named ''"):
            deltacells.annotate(str(ds), data)
        assert sha(ds) == before


def test_python_annotate_a_nul_byte_in_a_string_is_refused(ds):
    """A string holding a NUL byte (a value, a category or a key) is a ValueError naming the
    column, the key (or row) and the value, before anything is written (the command would
    refuse the table with a line number in a temporary file)."""
    import pandas as pd

    import deltacells
    names = [r[0] for r in cells(ds, ["age"])]
    before = sha(ds)
    cases = [({"name": names[:2], "lab": ["x\0y", "ok"]}, rf"column 'lab', key '{re.escape(names[0])}': 'x\\x00y' holds a NUL byte"),
             (pd.DataFrame({"lab": pd.Categorical(["a", "b\0"])}, index=names[:2]),
              rf"column 'lab', key '{re.escape(names[1])}': 'b\\x00' holds a NUL byte"),
             ({"name": [names[0], "bad\0name"], "lab": ["x", "y"]}, r"key column 'name', row 1: 'bad\\x00name' holds a NUL byte")]
    for data, message in cases:
        with pytest.raises(ValueError, match=message):
            deltacells.annotate(str(ds), data)
        assert sha(ds) == before


def test_python_annotate_a_frame_keyed_by_its_default_index_changes_nothing(ds):
    """A DataFrame whose index is 0, 1, 2, ... (not the cell names) matches no cell by name: an
    error that suggests key='cell_id', and the column it would have emptied is kept."""
    import pandas as pd

    import deltacells
    before = sha(ds)
    with pytest.raises(RuntimeError, match="no key of its 2 rows matches .*key='cell_id'"):
        deltacells.annotate(str(ds), pd.DataFrame({"age": [1, 2]}))
    assert sha(ds) == before
    r = deltacells.annotate(str(ds), pd.DataFrame({"age": [1, 2]}), key="cell_id")
    assert r["unmatched_note"] == ""
    assert [a for _, a in cells(ds, ["age"])[:3]] == [1, 2, None]


def test_python_annotate_dataframe_and_dict(ds):
    import pandas as pd

    import deltacells
    names = [r[0] for r in cells(ds, ["age"])]
    n = 120
    df = pd.DataFrame({
        "n_umi": pd.array([i if i % 9 else None for i in range(n)], dtype="Int64"),
        "qc": np.where(np.arange(n) % 11 == 0, np.nan, np.arange(n) / 3.0),
        "keep": np.arange(n) % 2 == 0,
        "cluster": pd.Categorical([f"c{i % 5}" for i in range(n)], categories=[f"c{k}" for k in range(6)]),
        "comment": [None if i % 4 == 0 else f"text {i}, with comma" for i in range(n)],
    }, index=names[10:10 + n])
    r = deltacells.annotate(ds, df)
    assert r["unmatched_note"] == ""
    verify_ok(ds)
    ad = deltacells.to_anndata(str(ds))
    obs = ad.obs
    con = sqlite3.connect(ds)
    kinds = dict(con.execute("SELECT name, kind FROM cells_columns").fetchall())
    assert [kinds[c] for c in df.columns] == ["int", "real", "bool", "category", "text"]
    sub = obs.iloc[10:10 + n]
    assert [None if pd.isna(v) else int(v) for v in sub["n_umi"]] == [None if pd.isna(v) else int(v) for v in df["n_umi"]]
    assert np.allclose(sub["qc"].to_numpy(dtype=float), df["qc"].to_numpy(), equal_nan=True)
    assert list(sub["keep"].astype(bool)) == list(df["keep"])
    assert list(sub["cluster"].astype(str)) == list(df["cluster"].astype(str))
    assert [None if v is None else v for v in sub["comment"]] == list(df["comment"])
    assert obs["n_umi"].iloc[:10].isna().all() and obs["cluster"].iloc[200:].isna().all()
    # a dict keyed by cell_id, with a key that matches no cell
    r = deltacells.annotate(ds, {"cell_id": [0, 1, 2, 5000], "score": [0.5, None, 1.5, 2.0]}, key="cell_id")
    assert "1 key of" in r["unmatched_note"] and "'5000'" in r["unmatched_note"]
    got = [row[1] for row in cells(ds, ["score"])[:4]]
    assert got == [0.5, None, 1.5, None]
    with pytest.raises(RuntimeError, match=r"line 2: key .x. is not a cell_id"):
        deltacells.annotate(ds, {"cell_id": ["x"], "v": [1]}, key="cell_id")


def test_sigkill_during_annotate_leaves_the_old_dataset(tmp_path):
    """annotate is one transaction: killed inside it, the next reader rolls the journal back
    and sees the dataset as it was (verify passes, no column half added)."""
    import signal
    import subprocess
    import time
    from _converter_util import CONVERTER
    need_converter()
    a = write_h5ad(tmp_path / "a.h5ad", 20000, [f"G{i}" for i in range(40)], 5, density=0.05)
    ds = tmp_path / "a.dcdb"
    run("convert", a, "-o", ds, "--quiet")
    names = [r[0] for r in cells(ds, ["age"])]
    rng = np.random.default_rng(1)
    csv = tmp_path / "wide.csv"
    with open(csv, "w") as f:
        f.write("name," + ",".join(f"t{k}" for k in range(24)) + "\n")
        for n in names:
            f.write(n + "," + ",".join(f"v{rng.integers(0, 10**9)}" for _ in range(24)) + "\n")
    old_sha, old_cols = sha(ds), [r[0] for r in sqlite3.connect(ds).execute("SELECT name FROM cells_columns")]
    journal = str(ds) + "-journal"

    def hot():      # a journal SQLite would play back (a zeroed header: killed before it was complete)
        if not os.path.exists(journal):
            return False
        with open(journal, "rb") as f:
            return f.read(8).strip(b"\0") != b""
    mid = hot_kills = 0
    for attempt in range(6):
        proc = subprocess.Popen([str(CONVERTER), "annotate", str(ds), str(csv), "--quiet"])
        deadline = time.time() + 120
        killed = False
        while proc.poll() is None and time.time() < deadline:
            # even attempts: as soon as the journal has content (the database not yet written);
            # odd: once it is hot (synced, the database being written: the rollback restores it)
            if hot() if attempt % 2 else (os.path.exists(journal) and os.path.getsize(journal) > 0):
                proc.send_signal(signal.SIGKILL)
                killed = True
                hot_kills += hot()
                break
        proc.wait(timeout=60)
        verify_ok(ds)                              # plays a hot journal back, sees the old dataset
        assert not hot()
        cols = [r[0] for r in sqlite3.connect(ds).execute("SELECT name FROM cells_columns")]
        if killed and proc.returncode == -signal.SIGKILL and cols == old_cols:
            mid += 1
            assert sha(ds) == old_sha
            continue
        # the kill came after the commit: every column is there; start again from the old dataset
        assert cols == old_cols + [f"t{k}" for k in range(24)], cols
        run("convert", a, "-o", ds, "--quiet", "--force")
        old_sha = sha(ds)
    assert mid >= 2 and hot_kills >= 1, f"only {mid} kills landed inside the transaction ({hot_kills} with a hot journal)"
    run("annotate", ds, csv, "--quiet")
    verify_ok(ds)
    assert [r[0] for r in cells(ds, ["t23"])[:2]] == names[:2]


def test_python_annotate_keeps_strings_that_spell_missing(ds):
    import pandas as pd

    import deltacells
    names = [r[0] for r in cells(ds, ["age"])]
    words = ["NA", "None", "null", "NULL", "NaN", "nan", "<NA>", "", "x"]
    vals = words + [None, np.nan, pd.NA]
    n = len(vals) * 3
    want = [None if v is None or v is pd.NA or v is np.nan else v for v in vals] * 3
    df = pd.DataFrame({"label": pd.Categorical(vals * 3), "note": pd.array(vals * 3, dtype=object)},
                      index=names[:n])
    deltacells.annotate(ds, df)
    verify_ok(ds)
    got = cells(ds, ["label", "note"])[:n]
    assert [r[1] for r in got] == want
    assert [r[2] for r in got] == want


def test_python_annotate_keeps_pandas_types(ds, tmp_path):
    """deltacells.annotate keeps what a DataFrame's dtypes say beyond the kind (it wrote a CSV and
    lost them): a categorical's categories in their order, unused ones too, and its ordered
    flag; numeric categories; uint8 / int16 / float32 columns.  to_anndata and export give
    them back as convert's do (dc_meta obs_ordered, obs_dtypes, obs_cat_dtypes, through
    `annotate --schema`); replacing a column forgets the old types."""
    import anndata
    import pandas as pd

    import deltacells
    names = [r[0] for r in cells(ds, ["age"])]
    n = 60
    df = pd.DataFrame({
        "grade": pd.Categorical((["z", "m", "a"] * n)[:n], categories=["z", "m", "a", "unused"], ordered=True),
        "clust": pd.Categorical(([10, 2, 33] * n)[:n]),
        "dose": pd.Categorical(([0.5, 100.0] * n)[:n]),
        "flag": pd.Categorical(([True, False] * n)[:n]),
        "u8": np.arange(n, dtype=np.uint8),
        "i16": pd.array([None if i % 7 == 0 else -i for i in range(n)], dtype="Int16"),
        "f32": np.linspace(0, 1, n, dtype=np.float32),
    }, index=names[:n])
    deltacells.annotate(ds, df)
    verify_ok(ds)
    out = tmp_path / "e.h5ad"
    run("export", ds, "-o", out, "--quiet")
    for got in (deltacells.to_anndata(str(ds)).obs, anndata.read_h5ad(out).obs):
        g = got.iloc[:n]
        assert list(g.grade.cat.categories) == ["z", "m", "a", "unused"] and g.grade.cat.ordered
        assert list(g.grade) == list(df.grade)
        assert list(g.clust.cat.categories) == [2, 10, 33] and list(g.clust) == list(df.clust)
        assert list(g.dose.cat.categories) == [0.5, 100.0] and list(g.dose) == list(df.dose)
        assert list(g.flag.cat.categories) == [False, True] and list(g.flag) == list(df.flag)
        assert str(got.u8.dtype) == "UInt8" and list(g.u8) == list(df.u8)   # other cells: missing
        assert str(got.i16.dtype) == "Int16" and g.i16.isna().sum() == df.i16.isna().sum()
        assert got.f32.dtype == np.float32 and np.array_equal(g.f32.to_numpy(), df.f32.to_numpy())
    # replaced by plain values: the old types go
    deltacells.annotate(ds, pd.DataFrame({"grade": ["x"] * 5, "u8": [1.5] * 5}, index=names[:5]))
    got = deltacells.to_anndata(str(ds)).obs
    assert not getattr(got.grade.dtype, "ordered", False) and got.u8.dtype == np.float64
    # a value outside the categories the schema gives, or that its dtype cannot hold: an error
    bad = tmp_path / "bad.csv"
    bad.write_text("name,c,u\n" + f"{names[0]},q,300\n")
    (tmp_path / "s.json").write_text('{"c": {"categories": ["a", "b"]}}')
    p = run("annotate", ds, bad, "--schema", tmp_path / "s.json", check=False)
    assert p.returncode == 1 and "'q' is not one of its categories" in p.stderr, p.stderr
    tsv = tmp_path / "t.tsv"   # a tab-separated table: one column to a CSV reader, and said why
    tsv.write_text(f"name\tc\n{names[0]}\tx\n")
    p = run("annotate", ds, tsv, check=False)
    assert p.returncode == 1 and "one column only" in p.stderr and "separated by commas" in p.stderr, p.stderr
    (tmp_path / "s.json").write_text('{"u": {"dtype": "uint8"}}')
    p = run("annotate", ds, bad, "--schema", tmp_path / "s.json", check=False)
    assert p.returncode == 1 and "300 does not fit its dtype uint8" in p.stderr, p.stderr


def test_annotate_replaces_the_column_named_so_in_the_files_when_two_differ_in_case(tmp_path):
    """cellType and celltype in one file are stored as cellType and celltype_1; a table column
    'celltype' replaces the second (the file's celltype), keeps its stored name, and export gives
    both their file names back."""
    need_converter()
    import anndata
    import pandas as pd
    import scipy.sparse as sp
    n = 40
    x = sp.random(n, 12, density=0.3, format="csr", random_state=0, dtype=np.float32)
    x.data = np.ceil(x.data * 5)
    obs = pd.DataFrame({"cellType": pd.Categorical(["A"] * n), "celltype": pd.Categorical(["b"] * n)},
                       index=[f"c{i}" for i in range(n)])
    anndata.AnnData(X=x, obs=obs, var=pd.DataFrame(index=[f"G{i}" for i in range(12)])).write_h5ad(tmp_path / "x.h5ad")
    ds = tmp_path / "x.dcdb"
    run("convert", tmp_path / "x.h5ad", "-o", ds, "--quiet")
    csv = tmp_path / "t.csv"
    csv.write_text("name,celltype\n" + "".join(f"c{i},new{i % 2}\n" for i in range(n)))
    p = run("annotate", ds, csv)
    assert "column 'celltype' (stored as 'celltype_1') (category) replaced" in p.stdout, p.stdout
    verify_ok(ds)
    con = sqlite3.connect(ds)
    assert [r[0] for r in con.execute("SELECT name FROM cells_columns ORDER BY col")] == ["_index", "cellType", "celltype_1"]
    assert [(r[1], r[2]) for r in cells(ds, ["cellType", "celltype_1"])] == [("A", f"new{i % 2}") for i in range(n)]
    run("export", ds, "-o", tmp_path / "y.h5ad", "--quiet")
    back = anndata.read_h5ad(tmp_path / "y.h5ad")
    assert list(back.obs.columns) == ["cellType", "celltype"]
    assert list(back.obs["cellType"]) == ["A"] * n
    assert list(back.obs["celltype"]) == [f"new{i % 2}" for i in range(n)]
    # a name that matches the stored cellType only in case replaces it, under the table's name
    csv.write_text("name,CELLTYPE\n" + "".join(f"c{i},z\n" for i in range(n)))
    run("annotate", ds, csv, "--quiet")
    verify_ok(ds)
    assert [r[0] for r in con.execute("SELECT name FROM cells_columns ORDER BY col")] == ["_index", "CELLTYPE", "celltype_1"]
    assert [(r[1], r[2]) for r in cells(ds, ["CELLTYPE", "celltype_1"])] == [("z", f"new{i % 2}") for i in range(n)]
