#!/usr/bin/env bash
# make coverage: line and branch coverage (gcc --coverage, reported by gcovr) of every C file of
# ext/ (ext/codec, ext/obs included) and converter/, over the C tests, the SQL-file tests and the
# Python tests run against an instrumented build of the extension and the converter.
#
# The working tree (tracked and untracked files, not the ignored ones) is copied into
# build-cov/src and built there with the Makefile, CFLAGS="-O1 -g --coverage": build/ and its
# normal and sanitizer builds stay untouched, and every test finds the instrumented build where it
# looks for build/ (build-cov/src/build); -DDC_COVERAGE makes forked C-test children write their
# counters (tests/c/dctest.h). The real PBMC files are passed on as $DC_REAL_DATA
# (default ../shared/data/real of this tree). The copy is kept, so a rerun rebuilds what changed.
#
# Prints one row per file: lines covered/total and %, branches covered/total and %, and "<85%"
# where the line coverage is below the target. Also writes build-cov/coverage.txt (the table),
# build-cov/summary.json (gcovr's) and build-cov/html/index.html (per line).
# Exit status 1 if a test failed (the table is still printed).
#   COV_PYTEST_ARGS  more pytest arguments (e.g. "-k converter" for a quick partial run)
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
PYTHON=${PYTHON:-/usr/bin/python3}
COV=build-cov
SRC=$COV/src
LOG=$COV/logs
REAL=${DC_REAL_DATA-$ROOT/../shared/data/real}
[ -n "$REAL" ] && REAL=$(cd "$REAL" 2>/dev/null && pwd || echo "$REAL")
mkdir -p "$SRC" "$LOG"

echo "== copying the working tree into $SRC"
git ls-files -z -c -o --exclude-standard | tar -cf - --null -T - | tar -xf - -C "$SRC" || exit 1
find "$COV" -name '*.gcda' -delete

echo "== building with --coverage (make -j2 in $SRC)"
LIBS="$(pkg-config --libs libzstd libxxhash) -lpthread -lm --coverage"
make --no-print-directory -C "$SRC" -j2 CFLAGS="-O1 -g --coverage -fprofile-update=atomic -DDC_COVERAGE" \
  LDLIBS_CORE="$LIBS" all >"$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; echo "coverage: build failed"; exit 1; }

failed=()
echo "== C tests"
for t in "$SRC"/build/tests/test_*; do
  [ -x "$t" ] || continue
  (cd "$SRC" && "build/tests/$(basename "$t")") >"$LOG/$(basename "$t").log" 2>&1 || failed+=("$(basename "$t")")
  echo "  $(basename "$t"): $(grep -c '^ok ' "$LOG/$(basename "$t").log") ok, $(grep -c '^FAIL ' "$LOG/$(basename "$t").log") FAIL"
done
echo "== SQL-file tests"
(cd "$SRC" && PYTHON=$PYTHON bash sql/tests/run.sh) >"$LOG/sql.log" 2>&1 || failed+=(sql)
echo "  $(grep -c '^ok ' "$LOG/sql.log") ok, $(grep -c '^FAIL ' "$LOG/sql.log") FAIL"
echo "== Python tests (DC_REAL_DATA=$REAL)"
# shellcheck disable=SC2086
(cd "$SRC" && DC_REAL_DATA=$REAL DC_CORELIB_LDFLAGS=--coverage PYTHONPATH=python \
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/python ${COV_PYTEST_ARGS:-}) >"$LOG/pytest.log" 2>&1 || failed+=(pytest)
echo "  $(tail -1 "$LOG/pytest.log")"

echo "== coverage (gcovr $(gcovr --version | head -1 | awk '{print $2}'))"
mkdir -p "$COV/html"
(cd "$SRC" && gcovr -r . --filter 'ext/' --filter 'converter/' --exclude-unreachable-branches \
  --json-summary "$ROOT/$COV/summary.json" --html-details "$ROOT/$COV/html/index.html") \
  >"$LOG/gcovr.log" 2>&1 || { cat "$LOG/gcovr.log"; exit 1; }
"$PYTHON" - "$COV/summary.json" <<'EOF' | tee "$COV/coverage.txt"
import json, sys
s = json.load(open(sys.argv[1]))
def pct(c, t):
    return f"{100.0 * c / t:5.1f}%" if t else "    -"
print(f"| file | lines | line % | branches | branch % |")
print(f"|---|---:|---:|---:|---:|")
below = []
for f in sorted(s["files"], key=lambda f: f["filename"]):
    lc, lt, bc, bt = f["line_covered"], f["line_total"], f["branch_covered"], f["branch_total"]
    mark = " (<85%)" if lt and lc < 0.85 * lt else ""
    if mark:
        below.append(f["filename"])
    print(f"| {f['filename']} | {lc}/{lt} | {pct(lc, lt)}{mark} | {bc}/{bt} | {pct(bc, bt)} |")
print(f"| all | {s['line_covered']}/{s['line_total']} | {pct(s['line_covered'], s['line_total'])} "
      f"| {s['branch_covered']}/{s['branch_total']} | {pct(s['branch_covered'], s['branch_total'])} |")
print(f"{len(below)} of {len(s['files'])} files below 85% of lines" + (": " + ", ".join(below) if below else ""))
EOF
if [ "${#failed[@]}" -gt 0 ]; then echo "coverage: tests failed: ${failed[*]} (logs in $LOG)"; exit 1; fi
