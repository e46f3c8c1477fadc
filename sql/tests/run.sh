#!/usr/bin/env bash
# SQL-file tests: each sql/tests/NAME.sql runs through the sqlite3 shell against the fixture
# dataset build/fixtures/small.dcdb (from the repo root; the file starts with `.load build/deltacells`)
# and its stdout+stderr must equal sql/tests/NAME.expected.  Prints "ok NAME" or "FAIL NAME" + a diff.
#   sql/tests/run.sh --update   rewrites the .expected files from the current output (review the diff!)
set -u
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/usr/bin/python3}
FIX=build/fixtures/small.dcdb
if [ ! -s "$FIX" ] || [ build/deltacells -nt "$FIX" ] || [ scripts/gen_h5ad.py -nt "$FIX" ]; then
  mkdir -p build/fixtures
  "$PYTHON" scripts/gen_h5ad.py --cells 3000 --genes 2000 --seed 1 -o build/fixtures/small.h5ad >/dev/null &&
  build/deltacells convert build/fixtures/small.h5ad -o "$FIX" --tile-cells 1000 --quiet --force ||
  { echo "FAIL fixture: could not make $FIX"; exit 1; }
fi
rc=0
for f in sql/tests/*.sql; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .sql); exp=sql/tests/$name.expected
  out=$(sqlite3 -batch -bail "$FIX" < "$f" 2>&1)
  if [ "${1:-}" = "--update" ]; then printf '%s\n' "$out" > "$exp"; echo "ok $name (updated)"; continue; fi
  if [ -f "$exp" ] && [ "$out" == "$(cat "$exp")" ]; then
    echo "ok $name"
  else
    echo "FAIL $name"; rc=1
    if [ -f "$exp" ]; then diff <(printf '%s\n' "$out") "$exp" | head -20 | sed 's/^/  /'; else echo "  missing $exp"; fi
  fi
done
exit $rc
