#!/usr/bin/env bash
# The API-compatibility check of the library modules (make verify), with
# golang.org/x/exp/cmd/apidiff pinned in hack/tools/go.mod. For each library
# it compares the working tree with the module's last release tag
# (<dir>/vX.Y.Z), or, before the first tag, with the merge base of
# origin/main; it prints the report always and fails only on an incompatible
# change that VERSIONING.md does not allow in the release versions.yaml
# plans: any, in a patch release (v0: a minor may break).
#
# usage: hack/apidiff.sh                          check every library module
#        hack/apidiff.sh compare OLD NEW PATH     report OLD → NEW of module PATH (folders);
#                                                 exit 3 on an incompatible change
#        hack/apidiff.sh may-break LAST NEXT      exit 0 when going LAST → NEXT may break
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export GOTOOLCHAIN=local GOWORK=off

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

apidiff() {
  if [ ! -x "$tmp/apidiff" ]; then
    (cd "$root/hack/tools" && go build -o "$tmp/apidiff" golang.org/x/exp/cmd/apidiff) || return 1
  fi
  "$tmp/apidiff" "$@"
}

# compare OLD NEW PATH: the export data of OLD, compared with NEW.
compare() {
  local old=$1 new=$2 path=$3 out
  (cd "$old" && apidiff -m -w "$tmp/old.export" "$path") || return 1
  out=$(cd "$new" && apidiff -m "$tmp/old.export" "$path") || return 1
  echo "${out:-no API changes}"
  # apidiff prints this heading only when there is such a change.
  if grep -q '^Incompatible changes:' <<<"$out"; then return 3; fi
}

# may_break LAST NEXT: v0.X → v0.Y (Y > X) and vX → vY (Y > X) may break.
may_break() {
  local a b
  IFS=. read -r -a a <<<"${1#v}"
  IFS=. read -r -a b <<<"${2#v}"
  if [ "${a[0]}" = 0 ] && [ "${b[0]}" = 0 ]; then
    [ "${b[1]}" -gt "${a[1]}" ]
  else
    [ "${b[0]}" -gt "${a[0]}" ]
  fi
}

case "${1:-}" in
  compare) shift; compare "$@"; exit $? ;;
  may-break) shift; may_break "$@"; exit $? ;;
  "") ;;
  *) echo "usage: hack/apidiff.sh [compare OLD NEW PATH | may-break LAST NEXT]" >&2; exit 2 ;;
esac

cd "$root"
next=$(hack/modules.sh version libraries) || exit 1
failed=0
for d in $(hack/modules.sh list libraries); do
  path=$(cd "$d" && go list -m)
  last=$(git tag -l "$d/v*" --sort=-v:refname | head -n 1)
  if [ -n "$last" ]; then
    base=$last
  elif base=$(git merge-base HEAD origin/main 2>/dev/null); then
    last=
  else
    echo "$path: no release yet: nothing to compare"
    continue
  fi
  rm -rf "$tmp/old" && mkdir "$tmp/old"
  git archive "$base" "$d" | tar -x -C "$tmp/old" || { failed=1; continue; }
  echo "$path: API changes since $base"
  compare "$tmp/old/$d" "$d" "$path" | sed 's/^/  /'
  case ${PIPESTATUS[0]} in
    0) ;;
    3)
      if [ -z "$last" ] || may_break "${last#"$d"/}" "$next"; then
        echo "  (allowed: the next release, $next, may break; list them in $d/CHANGELOG.md)"
      else
        echo "  $path: incompatible changes in a patch release ($last → $next): undo them, or set"
        echo "  the libraries' version in versions.yaml to the next minor version (VERSIONING.md)"
        failed=1
      fi
      ;;
    *) echo "  $path: apidiff failed"; failed=1 ;;
  esac
done
exit $failed
