#!/usr/bin/env bash
# make release-plan VERSION=vX.Y.Z [SET=libraries]: a dry run of releasing a
# module set of versions.yaml. Prints the tags it would create (path-prefixed,
# VERSIONING.md) and the edits it would make first: the requirements of the
# other modules' go.mod files, versions.yaml, the changelogs. Creates no tag
# and writes nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export GOTOOLCHAIN=local GOWORK=off

version=${1:-}
set=${2:-libraries}
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release-plan: VERSION=\"$version\" is not vMAJOR.MINOR.PATCH; e.g. make release-plan VERSION=v0.1.0" >&2
  exit 2
fi
if ! [[ $version =~ ^v[01]\. ]]; then
  echo "release-plan: $version is a major version above 1, whose module paths need a /vN suffix; plan that by hand" >&2
  exit 2
fi
paths=$(hack/modules.sh paths "$set")
dirs=$(hack/modules.sh list "$set")
current=$(hack/modules.sh version "$set")
all=$(hack/modules.sh list)
problems=0

echo "release plan: module set $set at $version (dry run: nothing is tagged or written)"
echo
echo "tags to create, at the commit that holds the edits below:"
for d in $dirs; do
  tag=$d/$version
  if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
    echo "  $tag   EXISTS ALREADY: a version is released once"; problems=1
  else
    echo "  $tag"
  fi
done

echo
echo "go.mod requirements to bump:"
bumps=0
for m in $all; do
  # go mod edit -print writes go.mod in its canonical form: one requirement
  # a line, inside or outside a require block.
  while read -r path old; do
    echo "  $m/go.mod: require $path $old → $version"
    bumps=$((bumps + 1))
  done < <(go mod edit -print "$m/go.mod" | awk -v want="$paths" '
    BEGIN { n = split(want, w, "\n"); for (i = 1; i <= n; i++) released[w[i]] = 1 }
    /^require \($/ { block = 1; next }
    block && /^\)$/ { block = 0; next }
    block { if ($1 in released) print $1, $2; next }
    /^require / { if ($2 in released) print $2, $3 }
  ')
done
[ $bumps -gt 0 ] || echo "  (no module requires them)"

# Requirements name released versions; a replace of a sibling module only
# lets the repository build a binary against the untagged libraries with
# GOWORK=off. The go command ignores a dependency's replace directives and
# refuses `go install …@version` of a module that has any, so a library has
# none, and the binaries are tagged at a commit without theirs (as gopls is).
echo
echo "replace directives:"
replaces=0
for d in $dirs; do
  for r in $(go mod edit -print "$d/go.mod" | awk '
    /^replace \($/ { block = 1; next }
    block && /^\)$/ { block = 0; next }
    block { print $1; next }
    /^replace / { print $2 }
  '); do
    replaces=$((replaces + 1))
    if [ "$set" = binaries ]; then
      echo "  $d/go.mod: drop replace $r in the tagged commit (restore it in the next one),"
      echo "    then, the libraries' tags pushed: (cd $d && GOWORK=off go mod tidy) for their go.sum"
    else
      echo "  $d/go.mod: replace $r MUST GO: a released library builds alone"; problems=1
    fi
  done
done
[ $replaces -gt 0 ] || echo "  (none)"

echo
echo "other edits:"
if [ "$current" != "$version" ]; then
  echo "  versions.yaml: module set $set version $current → $version"
else
  echo "  versions.yaml: module set $set is at $version already"
fi
# The binaries and the chart share the root changelog; a library has its own.
if [ "$set" = binaries ]; then
  logs=CHANGELOG.md
  chart=deploy/charts/swh/Chart.yaml
  echo "  $chart: version and appVersion $(awk '$1 == "version:" {print $2}' "$chart") → ${version#v}"
else
  logs=$(for d in $dirs; do echo "$d/CHANGELOG.md"; done)
fi
for log in $logs; do
  if [ -f "$log" ] && grep -q '^## \[Unreleased\]' "$log"; then
    echo "  $log: ## [Unreleased] → ## [${version#v}] - $(date -u +%Y-%m-%d), and a new empty [Unreleased]"
  else
    echo "  $log: MISSING an \"## [Unreleased]\" section"; problems=1
  fi
done

if [ $problems -ne 0 ]; then
  echo; echo "release-plan: the plan has problems (above)" >&2
  exit 1
fi
