#!/usr/bin/env bash
# Runs every test of deltacells and ends with one line "N passed, N failed".
#   C tests (build/tests/*), the same under ASan+UBSan (build/asan/tests/*),
#   the libFuzzer targets for a bounded time, the SQL-file tests (sql/tests/*.sql),
#   and the Python tests (pytest tests/python).
# Each C test function, each fuzz target, each SQL file and each pytest test counts once.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
FUZZ_TEST_SECONDS=${FUZZ_TEST_SECONDS:-20}
pass=0; fail=0; failed_names=()
log=build/test-logs; mkdir -p "$log"

count_c() {  # $1 = binary, $2 = label
  local out rc
  out=$("$1" 2>&1); rc=$?
  local p f
  p=$(grep -c '^ok ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; grep '' <<<"$out" | tail -20; fi
  grep '^FAIL ' <<<"$out" | sed "s|^|  [$2] |"
  [ "$f" -gt 0 ] && failed_names+=("$2")
  pass=$((pass + p)); fail=$((fail + f))
  echo "[$2] $p passed, $f failed"
}

echo "== C tests"
for t in build/tests/test_*; do [ -x "$t" ] && count_c "$t" "$(basename "$t")"; done
echo "== C tests under ASan+UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in build/asan/tests/test_*; do [ -x "$t" ] && count_c "$t" "asan/$(basename "$t")"; done

echo "== fuzz targets (${FUZZ_TEST_SECONDS}s each)"
for f in build/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f"); corpus=build/corpus/$name; mkdir -p "$corpus"
  if "$f" -max_total_time="$FUZZ_TEST_SECONDS" -rss_limit_mb=2048 -print_final_stats=1 "$corpus" >"$log/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "[fuzz] ok $name ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$log/$name.log" | tail -1))"
  else
    fail=$((fail + 1)); failed_names+=("fuzz/$name"); echo "[fuzz] FAIL $name"; tail -30 "$log/$name.log"
  fi
done

echo "== SQL-file tests"
if [ -x sql/tests/run.sh ]; then
  out=$(bash sql/tests/run.sh 2>&1); rc=$?
  echo "$out" | grep -E '^(ok|FAIL|  )' || true
  p=$(grep -c '^ok ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "$out" | tail -20; fi
  pass=$((pass + p)); fail=$((fail + f))
fi

echo "== Python tests"
if ls tests/python/test_*.py >/dev/null 2>&1; then
  PYTHONPATH=python "$PYTHON" -m pytest -q -p no:cacheprovider tests/python 2>&1 | tee "$log/pytest.log" | tail -40
  summary=$(grep -E '[0-9]+ (passed|failed|errors?).* in [0-9.]+s' "$log/pytest.log" | tail -1)
  p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" | awk '{s+=$1} END{print s+0}')
  [ -z "$summary" ] && f=$((f + 1))
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
fi

[ "${#failed_names[@]}" -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
