# tests/counting.sh: sourced by tests/run_all.sh and scripts/cross-test.sh (bash).  The counts of
# a test run, how one test binary's output is counted, and the run's last lines.
pass=0; fail=0; skip=0; failed_names=(); skip_why=()

count_lines() {  # $1 = output of a C test binary or sql/tests/run.sh, $2 = its exit status, $3 = label
  local out=$1 rc=$2 label=$3 p f s
  p=$(grep -c '^ok ' <<<"$out"); f=$(grep -c '^FAIL ' <<<"$out"); s=$(grep -c '^skip ' <<<"$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    if [ "$rc" -eq 124 ]; then echo "  [$label] timed out:"; else echo "  [$label] exit status $rc:"; fi
    tail -20 <<<"$out"
  fi
  grep '^FAIL ' <<<"$out" | sed "s|^|  [$label] |"
  while IFS= read -r l; do [ -n "$l" ] && skip_why+=("[$label] ${l#skip }"); done < <(grep '^skip ' <<<"$out")
  [ "$f" -gt 0 ] && failed_names+=("$label")
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  echo "[$label] $p passed, $f failed, $s skipped"
}

finish() {  # every skip with its reason, what failed, "N passed, N failed, N skipped"; status 1 on a failure
  if [ "${#skip_why[@]}" -gt 0 ]; then
    echo "skipped (how many: why (where)):"
    printf '  %s\n' "${skip_why[@]}"
  fi
  [ "${#failed_names[@]}" -gt 0 ] && echo "failed: ${failed_names[*]}"
  echo "$pass passed, $fail failed, $skip skipped"
  [ "$fail" -eq 0 ]
}
