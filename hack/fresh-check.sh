#!/usr/bin/env bash
# Runs the README's test command as a new user would: in a clean clone of
# the committed HEAD, with an empty Go module cache, an empty build cache,
# no bin/ and no _out/, with CI=true (a missing dependency fails). Prints the
# wall time of every step (each ">> " line the run prints starts one) and the
# total, and exits with the test command's status.
#
# A warm machine hides what only it has: a module version the suites need
# offline, a tool in bin/, an image. CI runs on the machine that submitted,
# so its green proves too little; run this before resolving anything that
# touches build, test, dependency or tool plumbing.
#
# What it cannot empty: packages installed system-wide (make test installs
# the ones it needs when missing) and the Go toolchain itself.
#
# usage: hack/fresh-check.sh [-k|--keep] [COMMAND...]   (default: make test)
#   --keep   leave the work folder (clone, caches, log) instead of removing it
# The work folder is under $FRESH_CHECK_DIR (default: /var/tmp), not /tmp,
# which may be a small tmpfs: the caches take several GiB.
# Example: make test-fresh   (or hack/fresh-check.sh --keep make run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

keep=false
if [ "${1:-}" = "-k" ] || [ "${1:-}" = "--keep" ]; then
  keep=true
  shift
fi
cmd=("$@")
[ ${#cmd[@]} -gt 0 ] || cmd=(make test)

if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-check: uncommitted changes are not checked (it clones HEAD $(git -C "$root" rev-parse --short HEAD))" >&2
fi

base=${FRESH_CHECK_DIR:-/var/tmp}
mkdir -p "$base"
work=$(mktemp -d "$base/swh-fresh-check.XXXXXX")
cleanup() {
  if [ "$keep" = true ]; then
    echo "fresh-check: kept $work"
  else
    # The module cache is read-only by design.
    chmod -R u+w "$work" 2>/dev/null || true
    rm -rf "$work"
  fi
}
trap cleanup EXIT

git clone --quiet --no-hardlinks "$root" "$work/swh"
commit=$(git -C "$work/swh" rev-parse --short HEAD)
# Readable by the unprivileged users the suites start (PostgreSQL).
chmod 755 "$work"
mkdir -p "$work/gomodcache" "$work/gocache"
log="$work/run.log"

echo ">> fresh check of $commit: ${cmd[*]} in $work/swh (empty GOMODCACHE, GOCACHE, bin/, _out/; CI=true)"
start=$(date +%s)
set +e
(
  cd "$work/swh"
  # Nothing from this shell's Go settings leaks in: the caches are empty
  # folders of this run, go env -w settings are ignored (GOENV=off), and
  # every other setting is Go's default. PATH is the system's and Go's
  # only: a tool installed earlier in ~/go/bin is not there.
  exec env -u GOFLAGS -u GOPROXY -u GONOSUMDB -u GOPRIVATE -u GOWORK -u GOTOOLCHAIN -u GOBIN -u SWH_BIN_DIR \
    PATH="$(dirname "$(command -v go)"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    CI=true GOENV=off GOMODCACHE="$work/gomodcache" GOCACHE="$work/gocache" \
    "${cmd[@]}" </dev/null
) 2>&1 | {
  name="" begun=$start
  while IFS= read -r line; do
    # A step starts at each ">> " line and ends at the next one.
    if [[ $line == ">> "* ]]; then
      t=$(date +%s)
      [ -n "$name" ] && printf '%d\t%s\n' $((t - begun)) "$name" >>"$work/steps"
      name=${line#>> } begun=$t
      printf '[%s +%ds] %s\n' "$(date +%H:%M:%S)" $((t - start)) "$line"
    else
      printf '%s\n' "$line"
    fi
  done
  [ -n "$name" ] && printf '%d\t%s\n' $(($(date +%s) - begun)) "$name" >>"$work/steps"
} | tee "$log"
rc=${PIPESTATUS[0]}
set -e
total=$(($(date +%s) - start))

echo
echo "fresh check of $commit: ${cmd[*]} $([ "$rc" = 0 ] && echo passed || echo "FAILED (exit $rc)") in $((total / 60)) min $((total % 60)) s"
echo "step times (wall clock, seconds):"
if [ -f "$work/steps" ]; then
  awk -F'\t' '{printf "  %6d  %s\n", $1, substr($2, 1, 110)}' "$work/steps"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$rc"
