#!/usr/bin/env bash
# Builds upstream programs pinned in hack/tools/go.mod (helm: HELM_VERSION below)
# into bin/, from source through the Go module proxy. A program is rebuilt only
# when its pin changed since it was built, so warm runs take a second.
#
# usage: hack/build-tools.sh NAME...   (kube-apiserver etcd controller-gen kube-proxy
#        kube-controller-manager kube-scheduler kubelet helm)
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
    *) echo "build-tools: unknown program $1" >&2; return 1 ;;
  esac
}

# Helm is built from its own module at a pinned version (`go install
# pkg@version`: its go.mod alone decides its dependencies, checked against the
# checksum database), so its k8s.io versions never meet the control plane's,
# the workspace's or hack/tools' (whose go.sum stamps the kube-apiserver build).
HELM_VERSION=v4.3.2

stamp_of() {
  case "$1" in
    helm) echo "helm.sh/helm/v4@$HELM_VERSION" ;;
    *) sha256sum "$root/hack/tools/go.sum" | cut -c1-16 ;;
  esac
}

# compile NAME PKG OUT LDFLAGS builds one program, listing packages as -v
# prints them.
compile() {
  case "$1" in
    helm)
      local gobin
      gobin=$(mktemp -d)
      GOWORK=off GOBIN="$gobin" go install -v -ldflags "$4" "$2@$HELM_VERSION" && mv "$gobin/helm" "$3"
      local rc=$?
      rm -rf "$gobin"
      return $rc
      ;;
    *) (cd "$root/hack/tools" && GOWORK=off go build -v -ldflags "$4" -o "$3" "$2") ;;
  esac
}

for name in "$@"; do
  pkg=$(pkg_of "$name")
  stamp=$(stamp_of "$name")
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    continue
  fi
  pin="pinned in hack/tools/go.mod"
  [ "$name" = helm ] && pin=$stamp
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
