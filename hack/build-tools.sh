#!/usr/bin/env bash
# Builds upstream programs pinned in hack/tools/go.mod (helm: hack/helm/go.mod)
# into bin/, from source through the Go module proxy. A program is rebuilt only
# when its module's go.sum changed since it was built, so warm runs take a second.
#
# usage: hack/build-tools.sh NAME...   (kube-apiserver etcd controller-gen kube-proxy kube-controller-manager helm)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin"

pkg_of() {
  case "$1" in
    kube-apiserver) echo k8s.io/kubernetes/cmd/kube-apiserver ;;
    kube-proxy) echo k8s.io/kubernetes/cmd/kube-proxy ;;
    kube-controller-manager) echo k8s.io/kubernetes/cmd/kube-controller-manager ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    controller-gen) echo sigs.k8s.io/controller-tools/cmd/controller-gen ;;
    helm) echo helm.sh/helm/v4/cmd/helm ;;
    *) echo "build-tools: unknown program $1" >&2; return 1 ;;
  esac
}

# Helm has a module of its own: its k8s.io versions differ from the control
# plane's, and a change to it must not rebuild kube-apiserver.
module_of() {
  case "$1" in
    helm) echo "$root/hack/helm" ;;
    *) echo "$root/hack/tools" ;;
  esac
}

for name in "$@"; do
  pkg=$(pkg_of "$name")
  mod=$(module_of "$name")
  stamp=$(sha256sum "$mod/go.sum" | cut -c1-16)
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    continue
  fi
  echo ">> building $name from $pkg (pinned in ${mod#"$root/"}/go.mod; a cold build takes minutes)"
  start=$(date +%s)
  # -v lists packages as they compile; print a progress line every 100.
  ldflags=""
  if [[ $pkg == k8s.io/kubernetes/* ]]; then
    # Stamp the version a release build would carry, so /version and
    # clients' skew warnings tell the truth.
    v=$(cd "$root/hack/tools" && GOWORK=off go list -m -f '{{.Version}}' k8s.io/kubernetes)
    minor=${v#v1.}; minor=${minor%%.*}
    ldflags="-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  fi
  if ! (cd "$mod" && GOWORK=off go build -v -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg") 2>&1 |
    awk '/^(#|go: |[^ ]+\.go:)/ {print; next} {n++; if (n % 100 == 0) {printf "   ... %d packages compiled\n", n; fflush()}}' ||
    [ ! -x "$bin/$name.tmp" ]; then
    echo "build-tools: building $name failed" >&2
    exit 1
  fi
  mv "$bin/$name.tmp" "$bin/$name"
  echo "$stamp" > "$bin/.$name.stamp"
  echo ">> built bin/$name in $(( $(date +%s) - start ))s"
done
