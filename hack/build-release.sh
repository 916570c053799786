#!/usr/bin/env bash
# Builds a release binary the way the images do (Dockerfile): static
# (CGO_ENABLED=0), -trimpath, stripped, from the component's own module
# (GOWORK=off: its go.mod and go.sum alone pick every version).
#
# usage: hack/build-release.sh OUTDIR COMPONENT...   (controller agent)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$1; shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
for component in "$@"; do
  case "$component" in
    controller|agent) ;;
    *) echo "build-release: unknown component $component" >&2; exit 1 ;;
  esac
  (cd "$root/$component" &&
    CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags='-s -w -buildid=' \
      -o "$out/swh-$component" "./cmd/swh-$component")
done
