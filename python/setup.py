"""Installs the deltacells Python package, offline, with the system's setuptools:

    make                                   # builds build/deltacells.so first
    /usr/bin/python3 -m pip install ./python   (in a venv; on Debian's system Python
                                                add --break-system-packages)

No pyproject.toml on purpose: without one pip builds with the setuptools already
installed instead of fetching a build environment from PyPI.

If build/deltacells.so exists it is copied into the package (deltacells/_lib/), so
the installed package finds the extension without the source tree.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
EXT = os.path.join(HERE, os.pardir, "build", "deltacells.so")


class build_py_with_extension(build_py):
    def run(self):
        super().run()
        src = os.environ.get("DELTACELLS_EXTENSION") or EXT
        if os.path.isfile(src):
            dst = os.path.join(self.build_lib, "deltacells", "_lib")
            os.makedirs(dst, exist_ok=True)
            shutil.copy2(src, os.path.join(dst, "deltacells.so"))
        else:
            print(f"deltacells: {src} not built; the installed package will look for "
                  "DELTACELLS_EXTENSION at run time (run `make` first to bundle it)")


setup(
    name="deltacells",
    version="0.1.0",
    description="Single-cell count matrices in one SQLite file, served to PyTorch",
    packages=["deltacells"],
    python_requires=">=3.9",
    install_requires=[],      # numpy, scipy, pandas, anndata, torch: from the system (Debian)
    cmdclass={"build_py": build_py_with_extension},
    zip_safe=False,
)
