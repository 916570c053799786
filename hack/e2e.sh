#!/usr/bin/env bash
# Runs the compiled e2e suite once per kube-proxy mode, each in a fresh
# private network namespace (hack/netns.sh). Every mode runs even when an
# earlier one failed, and the script fails if any did. A failed run prints
# every component's last log lines, which would bury why it failed: the
# failed tests' messages and the suite's verdict are repeated at the very end.
#
# usage: hack/e2e.sh E2E_TEST_BINARY MODE... [-- EXTRA_FLAGS...]
set -uo pipefail
cd "$(dirname "$0")/.."

bin=$1
shift
modes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  modes+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
extra=("$@")

logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
failed=()
for mode in "${modes[@]}"; do
  echo ">> e2e suite, kube-proxy in $mode mode"
  log="$logdir/$mode.log"
  hack/netns.sh bash -c 'cd test/e2e && exec "$0" "$@"' "$bin" \
    -test.count=1 -test.timeout=15m -proxy-mode="$mode" "${extra[@]}" 2>&1 | tee "$log"
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    failed+=("$mode")
  fi
done

for mode in "${failed[@]}"; do
  echo
  echo ">> why the e2e suite failed in $mode mode"
  # A failed test's own lines: its name, then its indented messages.
  awk '/^--- FAIL/ {show=1; print; next} /^(=== |--- |PASS|FAIL|ok )/ {show=0} show && /^ / {print}' "$logdir/$mode.log" | head -60
  # The suite's verdicts that are not tests: refusals, leftovers, startup.
  grep -E '^(writes the API server refused|  .*(forbidden|denied)|the controller or an agent was refused|starting the e2e cluster|leftovers after|stopping the e2e cluster|removing the suite|panic:|FAIL$|ok )' "$logdir/$mode.log" | cut -c1-400 | tail -20
done
if [ ${#failed[@]} -gt 0 ]; then
  echo ">> e2e suite failed in: ${failed[*]}"
  exit 1
fi
