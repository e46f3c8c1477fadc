#!/usr/bin/env bash
# Runs every test of deltacells and ends with one line "N passed, N failed, N skipped".
#   C tests (build/tests/*), the same under ASan+UBSan (build/asan/tests/*), the pool test
#   under ThreadSanitizer (build/tsan/tests/*) and concurrent dc_batch calls under it (build/tsan/tsan_batch),
#   the dchttp VFS's prefetch threads and their users under it (build/tsan/tsan_vfs),
#   the committed fuzz regression inputs (tests/fuzz/corpus/), the libFuzzer targets for a bounded time,
#   the SQL-file tests (sql/tests/*.sql), the Python tests (pytest tests/python), a
#   check that the Python suite holds up with the real data hidden (DC_REAL_DATA=''), and the
#   SQL-file tests and a pytest subset again with the extension and converter built with
#   ASan+UBSan (build/asan/deltacells.so, build/asan/deltacells).
# Each C test function, each fuzz target, each SQL file and each pytest test counts once;
# the hidden-data check counts once. Every skip is listed with its reason before the last line.
#
# The real PBMC files are looked up in ../shared/data/real, or in $DC_REAL_DATA when it is set
# (set it empty to hide them: every real-data test then skips, as on a fresh clone).
set -u
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-/usr/bin/python3}
FUZZ_TEST_SECONDS=${FUZZ_TEST_SECONDS:-20}
# shellcheck source=tests/counting.sh
. tests/counting.sh
log=build/test-logs; mkdir -p "$log"

count_c() {  # $1 = binary, $2 = label
  local out rc
  out=$("$1" 2>&1); rc=$?
  count_lines "$out" "$rc" "$2"
}

echo "== C tests"
for t in build/tests/test_*; do [ -x "$t" ] && count_c "$t" "$(basename "$t")"; done
echo "== C tests under ASan+UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in build/asan/tests/test_*; do [ -x "$t" ] && count_c "$t" "asan/$(basename "$t")"; done
echo "== C tests under ThreadSanitizer (the pool shared by two threads, concurrent dc_batch calls, the dchttp VFS)"
for t in build/tsan/tests/test_*; do [ -x "$t" ] && TSAN_OPTIONS=halt_on_error=1:exitcode=66 count_c "$t" "tsan/$(basename "$t")"; done
# concurrent dc_batch / expression / cells calls on four connections, over make fuzz's small dataset
if [ -x build/tsan/tsan_batch ] && [ -f build/fuzz/fuzz_sql.dcdb ]; then
  out=$(TSAN_OPTIONS=halt_on_error=1:exitcode=66 timeout 600 build/tsan/tsan_batch build/fuzz/fuzz_sql.dcdb 2>&1); rc=$?
  count_lines "$out" "$rc" "tsan/tsan_batch"
else
  fail=$((fail + 1)); failed_names+=("tsan/tsan_batch"); echo "[tsan/tsan_batch] FAIL: build/tsan/tsan_batch or build/fuzz/fuzz_sql.dcdb missing (make sanitize fuzz)"
fi
# the dchttp VFS: prefetch threads, close during transfers, threads sharing the block caches, SQL
# over HTTP on three connections at once (an HTTP range server inside the program, on 127.0.0.1)
if [ -x build/tsan/tsan_vfs ] && [ -f build/tsan/tsan_vfs.dcdb ]; then
  out=$(TSAN_OPTIONS=halt_on_error=1:exitcode=66 timeout 300 build/tsan/tsan_vfs build/tsan/tsan_vfs.dcdb 2>&1); rc=$?
  count_lines "$out" "$rc" "tsan/tsan_vfs"
else
  fail=$((fail + 1)); failed_names+=("tsan/tsan_vfs"); echo "[tsan/tsan_vfs] FAIL: build/tsan/tsan_vfs or build/tsan/tsan_vfs.dcdb missing (make sanitize)"
fi

# The committed regression inputs, each run once: tests/fuzz/corpus/fuzz_NAME/* through
# build/fuzz/fuzz_NAME, and the files directly in tests/fuzz/corpus/ through fuzz_decode (the
# tile decoder's finds). Each input counts once.
echo "== fuzz regression inputs (tests/fuzz/corpus)"
replay() {  # $1 = fuzz binary, $2 = input file
  local out rc label
  label="fuzz/$(basename "$1")/$(basename "$2")"
  out=$("$1" -rss_limit_mb=2048 -timeout=60 "$2" 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && grep -qF "Executed $2" <<<"$out"; then pass=$((pass + 1)); echo "[fuzz] ok replay $label"
  else fail=$((fail + 1)); failed_names+=("$label"); echo "[fuzz] FAIL replay $label (exit status $rc)"; tail -30 <<<"$out"; fi
}
for input in tests/fuzz/corpus/*; do
  if [ -f "$input" ]; then
    replay build/fuzz/fuzz_decode "$input"
  elif [ -d "$input" ]; then
    target=build/fuzz/$(basename "$input")
    if [ ! -x "$target" ]; then fail=$((fail + 1)); failed_names+=("fuzz/$(basename "$input")")
      echo "[fuzz] FAIL $input: no fuzz target $target"; continue; fi
    for g in "$input"/*; do [ -f "$g" ] && replay "$target" "$g"; done
  fi
done

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
  grep -E '^(ok|FAIL|skip|  )' <<<"$out" || true
  count_lines "$out" "$rc" "sql"
fi

# pytest's last line, e.g. "200 passed, 35 skipped in 612.30s (0:10:12)", as "passed failed skipped"
pytest_counts() {
  local summary p f s
  summary=$(grep -E '^=* ?[0-9]+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b.* in [0-9.]+s' "$1" | tail -1)
  [ -z "$summary" ] && { echo "- - -"; return; }
  p=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+'); f=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" | awk '{s+=$1} END{print s+0}')
  s=$(grep -oE '[0-9]+ skipped' <<<"$summary" | grep -oE '[0-9]+')
  echo "${p:-0} ${f:-0} ${s:-0}"
}

# pytest's "SKIPPED [N] file:line: reason" lines, one per reason: "N: reason (files)"
skip_reasons() {
  sed -n 's/^SKIPPED \[\([0-9]*\)\] \([^:]*\):[0-9]*: /\1\t\2\t/p' "$1" | awk -F'\t' '
    { n[$3] += $1; f = $2; sub(/.*\//, "", f); if (index(" " fs[$3] " ", " " f " ") == 0) fs[$3] = fs[$3] (fs[$3] ? " " : "") f
      if (!($3 in seen)) { seen[$3] = 1; order[++k] = $3 } }
    END { for (i = 1; i <= k; i++) printf "%d: %s (%s)\n", n[order[i]], order[i], fs[order[i]] }'
}

echo "== Python tests"
if ls tests/python/test_*.py >/dev/null 2>&1; then
  PYTHONPATH=python "$PYTHON" -m pytest -q -p no:cacheprovider -rfEs tests/python >"$log/pytest.log" 2>&1
  read -r p f s < <(pytest_counts "$log/pytest.log")
  # the whole log on a failure (warnings included), else the progress and the summary line
  if [ "$p" = "-" ] || [ "$f" != 0 ]; then grep -v '^SKIPPED ' "$log/pytest.log" | tail -80
  else grep -E '^[.sFEx]+ +\[ *[0-9]+%\]$|^[0-9]+ passed' "$log/pytest.log"; fi
  if [ "$p" = "-" ]; then p=0; f=1; s=0; failed_names+=("pytest (no summary line)"); fi
  [ "$f" -gt 0 ] && failed_names+=("pytest")
  while IFS= read -r l; do skip_why+=("[pytest] $l"); done < <(skip_reasons "$log/pytest.log")
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))

  # The same suite on a fresh clone (no ../shared): it must collect the same tests with the data
  # hidden, and every real-data test (tests/python/test_*_real.py) must skip, none pass or fail.
  # Only the real-data files run here, so this costs seconds, not a second run of the suite.
  echo "== Python tests with the real data hidden (DC_REAL_DATA='')"
  hid_fail=
  PYTHONPATH=python "$PYTHON" -m pytest -q -p no:cacheprovider --collect-only tests/python >"$log/collect.log" 2>&1 ||
    hid_fail="collection with the data visible failed"
  DC_REAL_DATA='' PYTHONPATH=python "$PYTHON" -m pytest -q -p no:cacheprovider --collect-only tests/python \
    >"$log/collect-hidden.log" 2>&1 || hid_fail="${hid_fail:+$hid_fail; }collection with the data hidden failed"
  ids=$(grep '::' "$log/collect.log" | sort); ids_hidden=$(grep '::' "$log/collect-hidden.log" | sort)
  n_ids=$(grep -c . <<<"$ids")
  if [ "$ids" != "$ids_hidden" ]; then
    hid_fail="${hid_fail:+$hid_fail; }the tests collected differ with the data hidden"
    diff <(echo "$ids") <(echo "$ids_hidden") | head -10 | sed 's/^/  /'
  fi
  real_tests=(tests/python/test_*_real.py)
  if [ -f "${real_tests[0]}" ]; then
    n_real=$(grep -c -F -f <(printf '%s::\n' "${real_tests[@]}") <<<"$ids")
    DC_REAL_DATA='' PYTHONPATH=python "$PYTHON" -m pytest -q -p no:cacheprovider -rs "${real_tests[@]}" >"$log/pytest-hidden.log" 2>&1
    read -r hp hf hs < <(pytest_counts "$log/pytest-hidden.log")
    if [ "$hp" != 0 ] || [ "$hf" != 0 ] || [ "$hs" != "$n_real" ]; then
      hid_fail="${hid_fail:+$hid_fail; }real-data tests with the data hidden: $hp passed, $hf failed, $hs skipped of $n_real (want all skipped)"
      grep -v '^SKIPPED ' "$log/pytest-hidden.log" | tail -30
    fi
  fi
  if [ -z "$hid_fail" ]; then
    pass=$((pass + 1))
    echo "[hidden-data] ok: $n_ids tests collected either way; all ${n_real:-0} real-data tests skip:"
    skip_reasons "$log/pytest-hidden.log" | sed 's/^/  /'
  else
    fail=$((fail + 1)); failed_names+=("hidden-data"); echo "[hidden-data] FAIL: $hid_fail (logs: $log/collect*.log, $log/pytest-hidden.log)"
  fi
fi

# The extension and the converter built with ASan+UBSan (build/asan/deltacells.so and
# build/asan/deltacells): the SQL-file tests, then a subset of pytest (the damage, verify, limits
# and dc_batch error tests, the loader's hand-off, tickets, placing and workers' lanes; the 10x/loom readers and unsorted rows;
# merge's tiles encoded again on threads; a full disk under append, annotate, merge and export; tiles skipped by their gene maps;
# annotate and its CSV reader, also on tables damaged at random) against them.  A process that loads the library must have libasan
# first (LD_PRELOAD); leak checks are off there (Python itself keeps memory at exit).
echo "== SQL-file tests and a pytest subset with the extension and converter built with ASan+UBSan"
asan_lib=$(${CC:-gcc} -print-file-name=libasan.so)
if [ -x build/asan/deltacells ] && [ -f build/asan/deltacells.so ] && [ -f "$asan_lib" ]; then
  san_env=(env LD_PRELOAD="$asan_lib" ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
  out=$("${san_env[@]}" DC_EXT=build/asan/deltacells bash sql/tests/run.sh 2>&1); rc=$?
  grep -E '^(FAIL|  )' <<<"$out" || true
  count_lines "$out" "$rc" "asan/sql"
  asan_tests=(tests/python/test_integrity.py tests/python/test_verify.py tests/python/test_batch_limits.py
              tests/python/test_cells_corrupt.py tests/python/test_batch_errors.py tests/python/test_export.py
              tests/python/test_converter_tenx.py tests/python/test_converter_unsorted.py
              tests/python/test_python_obs_batch.py tests/python/test_python_handoff.py tests/python/test_remote.py
              tests/python/test_remote_prefetch.py tests/python/test_place.py tests/python/test_python_workers.py
              tests/python/test_merge_copy.py tests/python/test_full_disk.py tests/python/test_large_counts.py
              tests/python/test_expression_gene_skip.py tests/python/test_annotate.py
              tests/python/test_expression_partial.py)
  "${san_env[@]}" DC_BUILD=build/asan DELTACELLS_CONVERTER=build/asan/deltacells \
    DELTACELLS_EXTENSION="$PWD/build/asan/deltacells.so" PYTHONPATH=python \
    "$PYTHON" -m pytest -q -p no:cacheprovider -rfEs "${asan_tests[@]}" >"$log/pytest-asan.log" 2>&1
  read -r p f s < <(pytest_counts "$log/pytest-asan.log")
  if [ "$p" = "-" ] || [ "$f" != 0 ]; then grep -v '^SKIPPED ' "$log/pytest-asan.log" | tail -60; fi
  if [ "$p" = "-" ]; then p=0; f=1; s=0; failed_names+=("asan/pytest (no summary line: a sanitizer report?)"); fi
  [ "$f" -gt 0 ] && failed_names+=("asan/pytest")
  while IFS= read -r l; do skip_why+=("[asan/pytest] $l"); done < <(skip_reasons "$log/pytest-asan.log")
  echo "[asan/pytest] $p passed, $f failed, $s skipped ($(basename -a "${asan_tests[@]}" | tr '\n' ' '))"
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
else
  fail=$((fail + 1)); failed_names+=("asan build"); echo "FAIL: build/asan/deltacells(.so) or $asan_lib is missing (make sanitize)"
fi

finish
