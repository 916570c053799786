#!/usr/bin/env bash
# The module lists of the build, read from versions.yaml, so that the
# Makefile and the hack scripts never keep a list of their own.
#
#   hack/modules.sh list [SET...]    module folders (api, probes, …), one a line
#   hack/modules.sh paths [SET...]   module paths (github.com/swh-dev/swh/api, …)
#   hack/modules.sh version SET      the version a module set is released at
#
# SET is a module set of versions.yaml (libraries, binaries) or "excluded";
# without one, every module, in the file's (dependency) order. The parser is
# a few lines of awk, so versions.yaml keeps a plain layout; modcheck (make
# verify) parses it as YAML and fails when the two readings differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=github.com/swh-dev/swh/

# entries FILE: "SET path" and "SET version=V" lines, SET "excluded" for
# excluded-modules.
entries() {
  awk '
    { sub(/[ \t]*#.*/, "") }
    /^[ \t]*$/ { next }
    /^[^ ]/ { top = $1; sub(/:$/, "", top); set = ""; if (top == "excluded-modules") set = "excluded"; next }
    top == "module-sets" && /^  [^ -][^ ]*:[ \t]*$/ { set = $1; sub(/:$/, "", set); next }
    set != "" && $1 == "version:" { print set, "version=" $2; next }
    set != "" && $1 == "-" { print set, $2 }
  ' "$root/versions.yaml"
}

usage() { echo "usage: hack/modules.sh list|paths [SET...] | version SET" >&2; exit 2; }

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
all=$(entries)
known=$(awk '{print $1}' <<<"$all" | sort -u)
for s in "$@"; do
  grep -qx -- "$s" <<<"$known" || { echo "hack/modules.sh: no module set \"$s\" in versions.yaml (have: $(echo $known))" >&2; exit 2; }
done

case $cmd in
  list | paths)
    # Sets in the order given (the file's order without any).
    sets=("$@")
    [ ${#sets[@]} -gt 0 ] || mapfile -t sets < <(awk '!seen[$1]++ {print $1}' <<<"$all")
    for s in "${sets[@]}"; do
      awk -v s="$s" '$1 == s && $2 !~ /^version=/ {print $2}' <<<"$all"
    done | if [ "$cmd" = list ]; then sed "s#^$prefix##"; else cat; fi
    ;;
  version)
    [ $# -eq 1 ] || usage
    v=$(awk -v s="$1" '$1 == s && $2 ~ /^version=/ {sub(/^version=/, "", $2); print $2}' <<<"$all")
    [ -n "$v" ] || { echo "hack/modules.sh: module set \"$1\" has no version" >&2; exit 2; }
    echo "$v"
    ;;
  *) usage ;;
esac
