"""build/deltacells.so exports its entry point and the one function the Python package calls
through ctypes, nothing else (ext/deltacells.map)."""
import shutil
import subprocess

import pytest

from _batch_util import EXTENSION, need_build


def test_exported_symbols():
    need_build()
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", str(EXTENSION)], capture_output=True, text=True,
                         check=True).stdout
    names = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    assert names == ["deltacells_slot_cas", "deltacells_ticket_place", "deltacells_ticket_take",
                     "sqlite3_deltacells_init"]
