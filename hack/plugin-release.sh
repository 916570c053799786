#!/usr/bin/env bash
# Builds the kubectl plugin's release archives and its krew manifest:
# kubectl-swh_<version>_<os>_<arch>.tar.gz (the static binary and the
# LICENSE) for every platform, and kubectl-swh.krew.yaml, the plugin
# manifest for krew (https://krew.sigs.k8s.io) with each archive's URL and
# sha256, to submit to the krew index or install from directly:
#   kubectl krew install --manifest=kubectl-swh.krew.yaml --archive=kubectl-swh_..._linux_amd64.tar.gz
#
# usage: [VERSION=v0.1.0] [PLATFORMS="linux/amd64 ..."] hack/plugin-release.sh OUTDIR
# The archives are reproducible: the same sources give the same bytes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${VERSION:-$("$root/hack/modules.sh" version binaries)}
version=v${version#v}
# Comma- or space-separated, as hack/push.sh takes them.
platforms=${PLATFORMS:-linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64}
platforms=${platforms//,/ }
# Where the release's archives are downloaded from: the GitHub release of
# the binaries' tag.
base_url=${RELEASE_URL:-https://github.com/swh-dev/swh/releases/download/controller%2F$version}
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

manifest="$out/kubectl-swh.krew.yaml"
cat > "$manifest" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: swh
spec:
  version: $version
  homepage: https://github.com/swh-dev/swh
  shortDescription: Why a ServiceWithHealthchecks sends traffic where it does
  description: |
    Tells which pod receives traffic on which port of a ServiceWithHealthchecks
    (swh: Services whose endpoints are the pods that pass active TCP, HTTP and
    PostgreSQL probes), and why not: the failing probe, its reason and since
    when, a node or an agent that is down. Read access only.
  platforms:
YAML
for platform in $platforms; do
  os=${platform%/*} arch=${platform#*/}
  bin=kubectl-swh
  [ "$os" = windows ] && bin=kubectl-swh.exe
  name="kubectl-swh_${version}_${os}_${arch}"
  mkdir -p "$work/$name"
  (cd "$root/controller" &&
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOWORK=off go build -trimpath -buildvcs=false \
      -ldflags="-s -w -buildid= -X github.com/swh-dev/swh/controller/internal/version.version=$version" \
      -o "$work/$name/$bin" ./cmd/kubectl-swh)
  cp "$root/LICENSE" "$work/$name/LICENSE"
  # Fixed owners, modes and times, sorted names, no VCS stamp in the
  # binary: the same bytes on any machine, from a clone or a tarball.
  chmod 0755 "$work/$name/$bin"
  chmod 0644 "$work/$name/LICENSE"
  touch -d @0 "$work/$name/$bin" "$work/$name/LICENSE"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/$name" -cf - LICENSE "$bin" |
    gzip -n > "$out/$name.tar.gz"
  sum=$(sha256sum "$out/$name.tar.gz" | cut -d' ' -f1)
  cat >> "$manifest" <<YAML
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $base_url/$name.tar.gz
    sha256: $sum
    bin: $bin
YAML
  echo "$name.tar.gz $sum"
done
echo "wrote $manifest"
