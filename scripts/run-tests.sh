#!/usr/bin/env bash
# Builds mtc (installing what is missing) and runs every test: the lit suite
# (dialect, passes, import, codegen, driver, end-to-end against PyTorch,
# finite-difference gradient checks) and the runtime's unit tests.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MTC_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh" || exit 1

lit=/usr/lib/llvm-19/build/utils/lit/lit.py
status=0
log="$build/lit-results.txt"
echo "mtc tests: lit suite"
/usr/bin/python3 "$lit" -v --time-tests "$build/test" 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "mtc tests: runtime unit tests"
ctest --test-dir "$build" --output-on-failure -j 2 2>&1 | tee "$build/ctest-results.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# One summary line for both runners.
lit_passed=$(awk -F: '/^ *Passed *:/ {print $2+0}' "$log" | head -1)
lit_failed=$(awk -F: '/^ *(Failed|Unresolved|Timed Out) *:/ {n += $2+0} END {print n+0}' "$log")
ctest_line=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$build/ctest-results.txt" | tail -1)
ctest_failed=$(echo "$ctest_line" | grep -oE '[0-9]+ tests failed' | grep -oE '[0-9]+')
ctest_total=$(echo "$ctest_line" | grep -oE 'out of [0-9]+' | grep -oE '[0-9]+')
passed=$(( ${lit_passed:-0} + ${ctest_total:-0} - ${ctest_failed:-0} ))
failed=$(( ${lit_failed:-0} + ${ctest_failed:-0} ))
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "$passed passed, $failed failed"
exit $status
