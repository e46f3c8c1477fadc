"""expression and expression_long against a native SQLite table of the same nonzeros: every
constraint value compares as it does on a native INTEGER column (SQLite's affinity rules:
whitespace, reals, text, blobs, NULL, IN lists, ranges), also under a non-C LC_NUMERIC."""
import os
import shutil
import subprocess
import textwrap

import pytest

from _batch_util import PY, ROOT, connect, generated

# values a user may compare an id with; each is checked with =, IN, <, <=, >, >=
VALUES = ["5", "5.0", "'5'", "' 5 '", "char(53,11)", "char(9,53,12)", "char(53,13,10)", "'5.0'",
          "'5e0'", "'+5'", "'05'", "'5.5'", "5.5", "'abc'", "''", "NULL", "x'35'", "'0x5'",
          "-0.0", "'-0'", "0", "4.999999999", "1e300", "-1e300", "9223372036854775807",
          "'9223372036854775807'", "'5 5'", "char(53,0)", "'1999'", "1999.0", "'  1999.0  '"]


@pytest.fixture(scope="module")
def db_native(tmp_path_factory):
    d = tmp_path_factory.mktemp("exprdiff")
    _, db = generated(d, 2000, 300, 7, 700)
    con = connect(db)
    con.execute("CREATE TEMP TABLE nz(cell_id INTEGER, gene_id INTEGER, count INTEGER)")
    con.execute("INSERT INTO nz SELECT cell_id, gene_id, count FROM expression_long")
    con.execute("CREATE TEMP TABLE cl(cell_id INTEGER PRIMARY KEY, n INTEGER)")
    con.execute("INSERT INTO cl SELECT cell_id, length(genes) / 4 FROM expression")
    assert con.execute("SELECT count(*) FROM temp.nz").fetchone()[0] > 10000
    return db, con


@pytest.mark.parametrize("value", VALUES)
def test_expression_long_cell_and_gene(db_native, value):
    _, con = db_native
    for col in ("cell_id", "gene_id"):
        for op in ("=", "<", "<=", ">", ">="):
            where = f"{col} {op} {value}"
            a = con.execute(f"SELECT cell_id, gene_id, count FROM expression_long WHERE {where} ORDER BY 1, 2").fetchall()
            b = con.execute(f"SELECT cell_id, gene_id, count FROM temp.nz WHERE {where} ORDER BY 1, 2").fetchall()
            assert a == b, where
        where = f"{col} IN ({value}, 17, '18', 19.0)"
        a = con.execute(f"SELECT cell_id, gene_id, count FROM expression_long WHERE {where} ORDER BY 1, 2").fetchall()
        b = con.execute(f"SELECT cell_id, gene_id, count FROM temp.nz WHERE {where} ORDER BY 1, 2").fetchall()
        assert a == b, where


@pytest.mark.parametrize("value", VALUES)
def test_expression_cell(db_native, value):
    _, con = db_native
    for op in ("=", "<", "<=", ">", ">="):
        where = f"cell_id {op} {value}"
        a = con.execute(f"SELECT cell_id, length(genes) / 4 FROM expression WHERE {where} ORDER BY 1").fetchall()
        b = con.execute(f"SELECT cell_id, n FROM temp.cl WHERE {where} ORDER BY 1").fetchall()
        assert a == b, where
    where = f"cell_id IN ({value}, 1500, '1501')"
    a = con.execute(f"SELECT cell_id, length(genes) / 4 FROM expression WHERE {where} ORDER BY 1").fetchall()
    b = con.execute(f"SELECT cell_id, n FROM temp.cl WHERE {where} ORDER BY 1").fetchall()
    assert a == b, where


def test_char_53_11_finds_the_cell(db_native):
    """the case the issue reported: '5' followed by a vertical tab equals 5 on a native table"""
    _, con = db_native
    n_native = con.execute("SELECT count(*) FROM temp.nz WHERE cell_id = char(53,11)").fetchone()[0]
    n = con.execute("SELECT count(*) FROM expression_long WHERE cell_id = char(53,11)").fetchone()[0]
    assert n_native > 0 and n == n_native


def _de_locale(tmp):
    """a de_DE.UTF-8 locale (decimal comma) compiled into tmp with localedef; None if unavailable"""
    if not shutil.which("localedef") or not os.path.isdir("/usr/share/i18n/locales"):
        return None
    out = tmp / "loc"
    out.mkdir(exist_ok=True)
    r = subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", str(out / "de_DE.UTF-8")],
                       capture_output=True, text=True, timeout=120)
    return out if (out / "de_DE.UTF-8").exists() else None


def test_non_c_locale(db_native, tmp_path):
    """under LC_NUMERIC=de_DE (decimal comma) '5.0' still equals 5: no strtod in the comparison"""
    db, con = db_native
    loc = _de_locale(tmp_path)
    if loc is None:
        pytest.skip("no de_DE locale can be built here (localedef or /usr/share/i18n/locales missing: "
                    "Debian package locales)")
    wheres = ["cell_id = '5.0'", "cell_id = '  7.0 '", "gene_id = '3.0'", "cell_id IN ('5.0', '6.00')",
              "cell_id BETWEEN '5.0' AND '9.5'"]
    want = [con.execute("SELECT count(*) FROM temp.nz WHERE " + w).fetchone()[0] for w in wheres]
    assert all(n > 0 for n in want)
    script = textwrap.dedent(f"""
        import locale, sys
        sys.path.insert(0, {str(ROOT / 'tests' / 'python')!r})
        locale.setlocale(locale.LC_NUMERIC, "de_DE.UTF-8")
        assert locale.localeconv()["decimal_point"] == ","
        from _batch_util import connect
        con = connect({str(db)!r})
        print([con.execute("SELECT count(*) FROM expression_long WHERE " + w).fetchone()[0]
               for w in {wheres!r}])
    """)
    env = dict(os.environ, LOCPATH=str(loc))
    r = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert eval(r.stdout.strip()) == want
