#!/usr/bin/env bash
# Builds upstream programs pinned in hack/tools/go.mod (helm: HELM_VERSION below)
# into bin/, from source through the Go module proxy. A program is rebuilt only
# when its pin changed since it was built, so warm runs take a second.
#
# usage: hack/build-tools.sh NAME...   (kube-apiserver etcd controller-gen kube-proxy
#        kube-controller-manager kube-scheduler kubelet helm promtool registry)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin"

pkg_of() {
  case "$1" in
    kube-apiserver) echo k8s.io/kubernetes/cmd/kube-apiserver ;;
    kube-proxy) echo k8s.io/kubernetes/cmd/kube-proxy ;;
    kube-controller-manager) echo k8s.io/kubernetes/cmd/kube-controller-manager ;;
    kube-scheduler) echo k8s.io/kubernetes/cmd/kube-scheduler ;;
    kubelet) echo k8s.io/kubernetes/cmd/kubelet ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    controller-gen) echo sigs.k8s.io/controller-tools/cmd/controller-gen ;;
    helm) echo helm.sh/helm/v4/cmd/helm ;;
    promtool) echo github.com/prometheus/prometheus/cmd/promtool ;;
    registry) echo github.com/distribution/distribution/v3/cmd/registry ;;
    *) echo "build-tools: unknown program $1" >&2; return 1 ;;
  esac
}

# Helm, promtool and the registry (distribution's, the OCI registry the
# real-node suite pushes the images and the chart to) are built from their
# own modules at pinned versions (`go
# install pkg@version`: its go.mod alone decides its dependencies, checked
# against the checksum database), so their k8s.io versions never meet the
# control plane's, the workspace's or hack/tools' (whose go.sum stamps the
# kube-apiserver build).
HELM_VERSION=v4.3.2
PROMETHEUS_VERSION=v0.316.0 # promtool; Prometheus v3.16's Go module version
DISTRIBUTION_VERSION=v3.1.2

# own_module NAME prints the module and pinned version of a program built
# from its own module, nothing for those pinned in hack/tools/go.mod.
own_module() {
  case "$1" in
    helm) echo "helm.sh/helm/v4@$HELM_VERSION" ;;
    promtool) echo "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" ;;
    registry) echo "github.com/distribution/distribution/v3@$DISTRIBUTION_VERSION" ;;
  esac
}
own_version() { local m; m=$(own_module "$1"); echo "${m#*@}"; }

# own_tags NAME prints the build tags of a program built from its own module:
# promtool without Prometheus' service discoveries (the cloud SDKs are most of
# its build, and unit tests of rules use none).
own_tags() {
  case "$1" in
    promtool) echo remove_all_sd ;;
  esac
}

stamp_of() {
  local m
  m=$(own_module "$1")
  if [ -n "$m" ]; then echo "$m$(own_tags "$1" | sed 's/^./ tags &/')"; else sha256sum "$root/hack/tools/go.sum" | cut -c1-16; fi
}

# compile NAME PKG OUT LDFLAGS builds one program, listing packages as -v
# prints them.
compile() {
  local v
  v=$(own_version "$1")
  if [ -n "$v" ]; then
    local gobin rc=0
    gobin=$(mktemp -d)
    GOWORK=off GOBIN="$gobin" go install -v -tags "$(own_tags "$1")" -ldflags "$4" "$2@$v" && mv "$gobin/$1" "$3" || rc=$?
    rm -rf "$gobin"
    return $rc
  fi
  (cd "$root/hack/tools" && GOWORK=off go build -v -ldflags "$4" -o "$3" "$2")
}

for name in "$@"; do
  pkg=$(pkg_of "$name")
  stamp=$(stamp_of "$name")
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    continue
  fi
  pin="pinned in hack/tools/go.mod"
  [ -n "$(own_version "$name")" ] && pin=$stamp
  echo ">> building $name from $pkg ($pin; a cold build takes minutes)"
  start=$(date +%s)
  # -v lists packages as they compile; print a progress line every 100.
  ldflags=""
  if [[ $pkg == k8s.io/kubernetes/* ]]; then
    # Stamp the version a release build would carry, so /version and
    # clients' skew warnings tell the truth.
    v=$(cd "$root/hack/tools" && GOWORK=off go list -m -f '{{.Version}}' k8s.io/kubernetes)
    minor=${v#v1.}; minor=${minor%%.*}
    ldflags="-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  elif [ "$name" = helm ]; then
    ldflags="-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
  elif [ "$name" = promtool ]; then
    v=${PROMETHEUS_VERSION#v0.} # v0.316.0 is Prometheus 3.16.0
    ldflags="-X github.com/prometheus/common/version.Version=${v:0:1}.${v:1}"
  fi
  if ! compile "$name" "$pkg" "$bin/$name.tmp" "$ldflags" 2>&1 |
    awk '/^(#|go: |[^ ]+\.go:)/ {print; next} {n++; if (n % 100 == 0) {printf "   ... %d packages compiled\n", n; fflush()}}' ||
    [ ! -x "$bin/$name.tmp" ]; then
    echo "build-tools: building $name failed" >&2
    exit 1
  fi
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$stamp" > "$bin/.$name.stamp"
  echo ">> built bin/$name in $(( $(date +%s) - start ))s"
done
