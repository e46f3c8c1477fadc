#!/usr/bin/env bash
# SQL-file tests. Each sql/tests/NAME.sql runs through the sqlite3 shell (-batch -bail) against
# the fixture dataset build/fixtures/small.dcdb (from the repo root; the file starts with
# `.load build/deltacells`), and
#   - its stdout must equal NAME.expected;
#   - its stderr must equal NAME.error, or be empty when there is no NAME.error;
#   - its exit status must be 1 when NAME.error exists (-bail stops at that error, which must be
#     the file's last statement), else 0: a crash, a sanitizer report or a stray error fails.
# The expected values do not come from the program alone. build/fixtures/small.oracle.db is made
# by sql/tests/oracle.py from the fixture's h5ad with anndata and numpy: native tables named and
# shaped like the dataset's (cells, tiles, genes, expression, expression_long, dc_meta).
#   - A file with the line "-- oracle: same output" runs against the oracle too (without the
#     extension: its .load line is dropped); that output must equal NAME.expected as well.
#   - Other files (plans, errors, dc_batch) ATTACH the oracle as `o` and compare with it in SQL.
# Prints "ok NAME" or "FAIL NAME" with the reason and a diff.
# DC_EXT=PATH runs the files with another build of the extension (their `.load build/deltacells`
# line becomes `.load PATH`; make test uses it for the ASan+UBSan build, with libasan preloaded).
#   sql/tests/run.sh --update   rewrites NAME.expected (from the oracle for oracle files) and
#                               NAME.error from the current output (review the diff!)
set -u
cd "$(dirname "$0")/../.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}
FIX=build/fixtures/small.dcdb
H5=build/fixtures/small.h5ad
ORACLE=build/fixtures/small.oracle.db
TILE_CELLS=1000
if [ ! -s "$FIX" ] || [ ! -s "$H5" ] || [ build/deltacells -nt "$FIX" ] || [ scripts/gen_h5ad.py -nt "$FIX" ]; then
  mkdir -p build/fixtures
  "$PYTHON" scripts/gen_h5ad.py --cells 3000 --genes 2000 --seed 1 -o "$H5" >/dev/null &&
  build/deltacells convert "$H5" -o "$FIX" --tile-cells "$TILE_CELLS" --quiet --force ||
  { echo "FAIL fixture: could not make $FIX"; exit 1; }
fi
if [ ! -s "$ORACLE" ] || [ "$H5" -nt "$ORACLE" ] || [ sql/tests/oracle.py -nt "$ORACLE" ]; then
  "$PYTHON" sql/tests/oracle.py "$H5" "$TILE_CELLS" "$ORACLE" ||
  { echo "FAIL fixture: could not make $ORACLE"; exit 1; }
fi
update=0; [ "${1:-}" = "--update" ] && update=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rc=0

# $1 = label, $2 = the file it must equal ("" or absent: must be empty), $3 = what came out;
# prints the difference and returns 0 when they differ
differs() {
  if [ -n "$2" ] && [ -f "$2" ]; then diff "$3" "$2" >/dev/null && return 1; echo "  $1 differs from $2:"; diff "$3" "$2" | head -20 | sed 's/^/    /'
  else [ -s "$3" ] || return 1; echo "  $1 is not empty${2:+ and there is no $2}:"; head -20 "$3" | sed 's/^/    /'; fi
  return 0
}

for f in sql/tests/*.sql; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .sql); exp=sql/tests/$name.expected; experr=sql/tests/$name.error
  sed "s|^\.load build/deltacells\$|.load ${DC_EXT:-build/deltacells}|" "$f" |
    sqlite3 -batch -bail "$FIX" >"$tmp/out" 2>"$tmp/err"; st=$?
  oracle=0; grep -qx -- '-- oracle: same output' "$f" && oracle=1
  if [ "$oracle" = 1 ]; then
    sed '/^\.load /d' "$f" | sqlite3 -batch -bail -readonly "$ORACLE" >"$tmp/oout" 2>"$tmp/oerr"; ost=$?
  fi
  if [ "$update" = 1 ]; then
    if [ "$oracle" = 1 ]; then
      cp "$tmp/oout" "$exp"
      [ "$ost" -eq 0 ] && [ ! -s "$tmp/oerr" ] || echo "  oracle run of $name: exit status $ost, $(head -1 "$tmp/oerr")"
    else cp "$tmp/out" "$exp"; fi
    if [ -s "$tmp/err" ]; then cp "$tmp/err" "$experr"; else rm -f "$experr"; fi
    echo "ok $name (updated)"; continue
  fi
  msg=$(
    want=0; [ -f "$experr" ] && want=1
    [ "$st" -eq "$want" ] || echo "  exit status $st, expected $want"
    differs stdout "$exp" "$tmp/out"
    differs stderr "$experr" "$tmp/err"
    if [ "$oracle" = 1 ]; then
      [ "$ost" -eq 0 ] || echo "  the oracle run: exit status $ost, expected 0"
      differs "the oracle's stdout" "$exp" "$tmp/oout"
      differs "the oracle's stderr" "" "$tmp/oerr"
    fi
  )
  if [ -z "$msg" ]; then
    echo "ok $name$([ "$oracle" = 1 ] && echo ' (equal to the oracle)')"
  else
    echo "FAIL $name"; echo "$msg"; rc=1
  fi
done
exit $rc
