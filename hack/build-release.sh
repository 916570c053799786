#!/usr/bin/env bash
# Builds a release binary the way the images do (Dockerfile): static
# (CGO_ENABLED=0), -trimpath, stripped, from the component's own module
# (GOWORK=off: its go.mod and go.sum alone pick every version).
#
# The binaries report their version (--version, the agent probes'
# User-Agent): $VERSION, else the binaries' release version in versions.yaml,
# which make verify keeps equal to the chart's appVersion. Not `git describe`:
# the tags are the libraries' (probes/v0.1.0), and a binary must not change
# with every commit (the images are reproducible).
#
# usage: [VERSION=v0.1.0] hack/build-release.sh OUTDIR COMPONENT...   (controller agent)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${VERSION:-$("$root/hack/modules.sh" version binaries)}
version=v${version#v}
out=$1; shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
for component in "$@"; do
  case "$component" in
    controller|agent) ;;
    *) echo "build-release: unknown component $component" >&2; exit 1 ;;
  esac
  (cd "$root/$component" &&
    CGO_ENABLED=0 GOWORK=off go build -trimpath \
      -ldflags="-s -w -buildid= -X github.com/swh-dev/swh/$component/internal/version.version=$version" \
      -o "$out/swh-$component" "./cmd/swh-$component")
done
