#!/usr/bin/env bash
# make demo: a small generated dataset, SQL on it, and an epoch through the PyTorch loader.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
D=build/demo; mkdir -p "$D"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. generate a synthetic h5ad (20,000 cells x 4,000 genes, reference-tile-like counts)"
"$PYTHON" scripts/gen_h5ad.py --cells 20000 --genes 4000 --seed 7 -o "$D/demo.h5ad"
ls -l "$D/demo.h5ad"

step "2. convert it into a deltacells dataset"
build/deltacells convert "$D/demo.h5ad" -o "$D/demo.dcdb" --force
build/deltacells info "$D/demo.dcdb"
build/deltacells obs info "$D/demo.dcdb"
build/deltacells verify "$D/demo.dcdb"

step "3. plain SQL through the extension (sql/examples.sql)"
sqlite3 -echo "$D/demo.dcdb" < sql/examples.sql

step "4. one epoch of the PyTorch loader (deltacells.CellDataset)"
PYTHONPATH=python "$PYTHON" scripts/demo_epoch.py "$D/demo.dcdb"
