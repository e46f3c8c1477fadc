"""deltacells.annotate: add or replace obs columns of a dataset from a pandas DataFrame or a dict.

It writes the table to a temporary CSV beside nothing of the dataset's (in the system's temp
directory) with each column's kind stated, and runs `deltacells annotate` (the converter), so the
columns are stored exactly as the converter stores obs columns: one transaction, pushed down in
the `cells` table.
"""
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def find_converter():
    """The `deltacells` command: $DELTACELLS_CONVERTER, else beside the extension library
    (build/deltacells next to build/deltacells.so), else on PATH."""
    env = os.environ.get("DELTACELLS_CONVERTER")
    if env:
        return env
    try:
        from ._connect import find_extension
        c = Path(find_extension()).with_name("deltacells")
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    except Exception:
        pass
    w = shutil.which("deltacells")
    if w:
        return w
    raise FileNotFoundError("the deltacells command was not found: run `make` (it builds build/deltacells), "
                            "or set DELTACELLS_CONVERTER to its path")


def _kind(values, dtype):
    """The stored kind of a column from its dtype (pandas) or its Python values."""
    name = str(dtype) if dtype is not None else ""
    if name == "category":
        return "category"
    if name in ("bool", "boolean"):
        return "bool"
    if name.startswith(("int", "uint", "Int", "UInt")):
        return "int"
    if name.startswith(("float", "Float")):
        return "real"
    vs = [v for v in values if not _is_null(v)]
    if vs and all(isinstance(v, bool) for v in vs):
        return "bool"
    if vs and all(isinstance(v, int) and not isinstance(v, bool) for v in vs):
        return "int"
    if vs and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vs):
        return "real"
    return "category" if name == "" else "text"


def _is_null(v):
    if v is None:
        return True
    try:
        import pandas as pd
        if v is pd.NA or v is pd.NaT:
            return True
    except ImportError:
        pass
    return isinstance(v, float) and math.isnan(v)


def _cell(v, kind):
    """The CSV field of value v of a column of `kind`.  A missing value is an empty field, and
    labels and text are quoted: an unquoted NA, NaN, null, None or empty field is NULL to the
    command, a quoted one is the text itself (a label "NA" stays "NA")."""
    if _is_null(v):
        return ""
    if kind == "bool":
        return "true" if bool(v) else "false"
    if kind == "int":
        return str(int(v))
    if kind == "real":
        return repr(float(v))
    return _quoted(_label(v) if kind == "category" else str(v))


def _quoted(s):
    return '"' + s.replace('"', '""') + '"'


def _label(x):
    """A category's label as the converter writes it from a file: numbers in their shortest
    form (100.0 is '100'), booleans True / False; anything else as str."""
    import numpy as np
    if isinstance(x, (bool, np.bool_)):
        return "True" if x else "False"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        s = repr(float(x))
        return s[:-2] if s.endswith(".0") else s
    return str(x)


def _schema(dtypes, kinds):
    """`deltacells annotate --schema`: what the kind alone loses of each column's pandas type
    (docs/format.md dc_meta obs_ordered, obs_dtypes, obs_cat_dtypes): a categorical's
    categories in order (unused ones too), whether they are ordered and their type; a number
    column's narrow dtype (uint8, float32, ...)."""
    from .anndata_io import _CAT_DTYPES, _NARROW
    out = {}
    for c, dt in dtypes.items():
        if dt is None:
            continue
        if str(dt) == "category":
            cats = dt.categories
            e = {"categories": [_label(x) for x in cats], "ordered": bool(dt.ordered)}
            ck = getattr(cats.dtype, "kind", "O")
            if ck in "iu" or ck == "f" or ck == "b":
                # their exact type (int16, uint64, float32, ...: docs/format.md obs_cat_dtypes)
                name = "float32" if str(cats.dtype) == "float16" else str(cats.dtype)
                e["categories_dtype"] = name if name in _CAT_DTYPES else {"i": "int64", "u": "uint64", "f": "float64", "b": "bool"}[ck]
            out[c] = e
        elif _NARROW.get(str(dt).lower()) == kinds[c]:   # pandas' UInt8 too
            out[c] = {"dtype": str(dt).lower()}
    return out


def annotate(path, data, key="name", quiet=True):
    """Add (or replace, by name: the column of that name in the input files, else the one of
    that name in another case) obs columns of the dataset at `path`.

    data: a pandas DataFrame, or a dict of columns (equal-length sequences).  The key column is
          `key` ('name': cell names, the obs index; 'cell_id': cell ids) if data has it, else a
          DataFrame's index.  Every other column becomes an obs column: category (pandas
          categorical, or strings in a dict), text (object/string dtype), int, real or bool,
          as its dtype says; NaN / None / pd.NA are NULL.  Cells the table lacks get NULL.
    Returns the command's report: {"stdout", "unmatched_note"} (keys that match no cell are
    reported there, how many and the first few; when none matches, an error: the columns would
    only have been replaced by NULLs).  Raises RuntimeError with the command's message
    on any error (the dataset is then unchanged); a string that holds a NUL byte (text
    cannot) is a ValueError naming its column and key, before anything is written.
    """
    if key not in ("name", "cell_id"):
        raise ValueError("key must be 'name' or 'cell_id'")
    cols, dtypes = {}, {}
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None and isinstance(data, pd.DataFrame):
        if key in data.columns:
            keys = list(data[key])
            names = [c for c in data.columns if c != key]
        else:
            keys = list(data.index)
            names = list(data.columns)
        for c in names:
            cols[str(c)] = list(data[c].astype(object))
            dtypes[str(c)] = data[c].dtype
    elif isinstance(data, dict):
        if key not in data:
            raise ValueError(f"the dict has no key column {key!r}")
        keys = list(data[key])
        for c, vs in data.items():
            if c == key:
                continue
            cols[str(c)] = list(vs)
            dt = getattr(vs, "dtype", None)
            dtypes[str(c)] = dt
    else:
        raise TypeError("data must be a pandas DataFrame or a dict of columns")
    if not cols:
        raise ValueError("no columns to add")
    if "" in cols:   # the command would take '' for a missing name (--type =int: give COLUMN=KIND)
        raise ValueError(f"an obs column needs a name: column {list(cols).index('')} of the data is named '' "
                         "(rename it; nothing was written)")
    for c, vs in cols.items():
        if len(vs) != len(keys):
            raise ValueError(f"column {c!r} has {len(vs)} values for {len(keys)} keys")
    kinds = {c: _kind(vs, dtypes.get(c)) for c, vs in cols.items()}
    # text cannot hold a NUL byte (the command refuses one in its table: it would end the value)
    for what, vs in [(f"key column {key!r}", keys)] + [(f"column {c!r}", vs) for c, vs in cols.items()]:
        for i, v in enumerate(vs):
            if isinstance(v, str) and "\0" in v:
                where = f"row {i}" if what.startswith("key") else f"key {keys[i]!r}"
                raise ValueError(f"{what}, {where}: {v!r} holds a NUL byte, which text cannot hold "
                                 "(nothing was written)")
    conv = find_converter()
    schema = _schema(dtypes, kinds)
    fd, tmp = tempfile.mkstemp(suffix=".csv", prefix="deltacells-annotate-")
    sfd, stmp = tempfile.mkstemp(suffix=".json", prefix="deltacells-annotate-")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            f.write(",".join(map(_quoted, [key] + list(cols))) + "\n")
            for i, k in enumerate(keys):
                f.write(",".join([_quoted(str(k))] + [_cell(cols[c][i], kinds[c]) for c in cols]) + "\n")
        with os.fdopen(sfd, "w", encoding="utf-8") as f:
            json.dump(schema, f)
        args = [conv, "annotate", os.fspath(path), tmp, "--key", key, "--schema", stmp]
        for c, k in kinds.items():
            args += ["--type", f"{c}={k}"]
        if quiet:
            args.append("--quiet")
        p = subprocess.run(args, capture_output=True, text=True)
    finally:
        os.unlink(tmp)
        os.unlink(stmp)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().replace(tmp, "<table>").replace(stmp, "<schema>"))
    return {"stdout": p.stdout, "unmatched_note": p.stderr.strip().replace(tmp, "<table>")}
