#!/usr/bin/env bash
# make test: installs and builds what the tests need, runs the unit tests of
# every module, then the integration suites (real kube-apiserver, etcd,
# PostgreSQL and servers on pod addresses) inside a private network namespace.
# With CI=true a missing dependency fails the run instead of skipping tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export GOTOOLCHAIN=local
ci=${CI:-false}

step() { echo; echo ">> $*"; }

# What this script made and must remove, whatever way it ends.
own_policy=""
testbin=""
cleanup() {
  [ -n "$own_policy" ] && rm -f "$own_policy"
  [ -n "$testbin" ] && rm -rf "$testbin"
  own_policy="" testbin=""
}
trap cleanup EXIT

step "dependencies: PostgreSQL, Redis and MariaDB servers, iproute2, unshare, nftables and iptables (kube-proxy's modes in the e2e suite)"
missing=()
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || command -v postgres >/dev/null || missing+=(postgresql)
# The server and its plugins (the probes suite logs in with ed25519): the
# package mariadb-server, not mariadb-server-core alone.
{ command -v mariadbd >/dev/null && compgen -G "/usr/lib/mysql/plugin/auth_ed25519.so" >/dev/null; } || missing+=(mariadb-server)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v ip >/dev/null || missing+=(iproute2)
command -v unshare >/dev/null || missing+=(util-linux)
command -v nft >/dev/null || missing+=(nftables)
command -v iptables >/dev/null || missing+=(iptables)
command -v conntrack >/dev/null || missing+=(conntrack) # e2e: evidence when requests fail
command -v containerd >/dev/null || missing+=(containerd) # test/images, test/e2e/realnode
command -v runc >/dev/null || missing+=(runc) # test/e2e/realnode: the nodes' containers
[ -x /usr/lib/cni/ptp ] || [ -x /opt/cni/bin/ptp ] || missing+=(containernetworking-plugins) # test/e2e/realnode: pod networks
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} from Debian's packages"
    # Keep the package's own cluster from starting (the tests start theirs)
    # with a policy-rc.d, unless the machine has one already (Debian's
    # container images do): that one stays as it is.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      own_policy=/usr/sbin/policy-rc.d
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    cleanup
  else
    echo "missing: ${missing[*]}; install with: sudo apt-get install -y ${missing[*]}"
    if [ "$ci" = true ]; then exit 1; fi
  fi
fi

step "control plane, generators, helm, kube-controller-manager and promtool (bin/, built once from source)"
hack/build-tools.sh kube-apiserver etcd controller-gen helm kube-controller-manager promtool

step "downloading modules (the network namespace has no registry)"
# Module lists from versions.yaml; the unit tests are those of the released
# modules (test/ and test/peers run below). Two module graphs are built
# offline: the workspace's (go.work picks the highest version any module
# asks for) and each module's own (GOWORK=off: hack/build-release.sh, the
# images and the release suite build that way), whose versions can be lower.
# A warm machine's cache hides a missing one; hack/fresh-check.sh does not.
all_modules=$(hack/modules.sh list)
released_modules=$(hack/modules.sh list libraries binaries)
for m in $all_modules; do
  (cd "$m" && go mod download && GOWORK=off go mod download)
done

step "unit tests of every module"
for m in $released_modules; do
  (cd "$m" && go test -count=1 -race ./...)
done
# The project's own commands in hack/tools (crd-docs, modcheck); not the
# upstream programs it pins.
(cd hack/tools && GOWORK=off go test -count=1 ./cmd/...)

step "compiling the integration suites"
# Compile and link only: running them (even with -run '^$', TestMain runs)
# must happen inside the namespace.
testbin=$(mktemp -d)
(cd test && go vet ./... && go test -c -o "$testbin/" ./...)

step "integration suites inside a private network namespace"
# test/e2e runs below, once per kube-proxy mode (make e2e); test/release
# after these, alone: it compiles the agent as an outside user would (a few
# CPU-minutes), which must not starve the timing-sensitive suites.
hack/netns.sh env GOPROXY=off GOFLAGS=-mod=readonly bash -c 'cd test && go test -count=1 -timeout 30m $(go list ./... | grep -v -e "/test/e2e$" -e "/test/release$" -e "/test/e2e/realnode$")'
hack/netns.sh env GOPROXY=off GOFLAGS=-mod=readonly bash -c 'cd test && go test -count=1 -timeout 20m ./release/'
# test/peers is a module of its own (it needs k8s.io/kubernetes for kubelet's
# probers): a short run of the comparison, on its own loopback.
hack/netns.sh env GOPROXY=off GOFLAGS=-mod=readonly bash -c 'cd test/peers && go test -count=1 ./...'

step "end-to-end suite: upstream kube-proxy and kube-controller-manager carry real requests"
make --no-print-directory e2e

step "real-node suite: the chart on upstream kubelets with containerd and runc, and a 4-minute soak"
make --no-print-directory realnode REALNODE_SOAK=4m
