"""docs/guide.md cannot rot: every `sh` and `python` block of the guide runs, in order, on a
small generated stand-in for pbmc3k.h5ad (the same obs columns the guide uses, cell_type
with an 'NK' label and percent_mt, and genes named CD3E, MS4A1 and LYZ)."""
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from _python_data import PY, ROOT  # noqa: E402

GUIDE = os.path.join(ROOT, "docs", "guide.md")


def blocks(text):
    """(language, code) of each fenced block tagged sh or python, in document order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(sh|python)\n(.*?)^```$", text, re.M | re.S)]


def test_the_guide_has_blocks_of_both_kinds():
    b = blocks(open(GUIDE).read())
    kinds = [k for k, _ in b]
    assert kinds.count("sh") >= 3 and kinds.count("python") >= 4, kinds


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    d = tmp_path_factory.mktemp("guide")
    h5 = d / "gen.h5ad"
    subprocess.run([PY, "scripts/gen_h5ad.py", "--cells", "1500", "--genes", "3000", "--seed", "11",
                    "-o", str(h5)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    code = f"""
import anndata
a = anndata.read_h5ad({str(h5)!r})
names = list(a.var_names)
names[0], names[1], names[2] = "CD3E", "MS4A1", "LYZ"
a.var_names = names
assert "NK" in set(a.obs["cell_type"]) and "percent_mt" in a.obs
a.write_h5ad({str(d / 'pbmc3k.h5ad')!r})
"""
    subprocess.run([PY, "-c", code], check=True, capture_output=True, timeout=300)
    os.symlink(os.path.join(ROOT, "build"), d / "build")
    return d


def test_every_block_runs(standin):
    env = dict(os.environ, PATH=os.path.join(ROOT, "build") + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=os.path.join(ROOT, "python"))
    b = blocks(open(GUIDE).read())
    for i, (kind, code) in enumerate(b):
        if kind != "sh":
            continue
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=standin, env=env,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"sh block {i}:\n{code}\n{p.stdout}\n{p.stderr}"
    py = "\n".join(code for kind, code in b if kind == "python")
    p = subprocess.run([PY, "-c", py], cwd=standin, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"python blocks:\n{p.stdout}\n{p.stderr}"
    assert (standin / "nk.h5ad").exists()
