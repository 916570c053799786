#!/usr/bin/env bash
# The checks CI runs before the tests; each failure says how to fix it.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export GOTOOLCHAIN=local

# The module lists come from versions.yaml (hack/modules.sh).
mapfile -t modules < <(hack/modules.sh list) && [ ${#modules[@]} -gt 0 ] || exit 1
mapfile -t libraries < <(hack/modules.sh list libraries) && [ ${#libraries[@]} -gt 0 ] || exit 1
failed=()
check() { # check NAME COMMAND...: run, remember the failure, go on
  local name=$1; shift
  echo ">> verify: $name"
  if ! "$@"; then failed+=("$name"); fi
}

generated() {
  sha256sum api/v1alpha1/zz_generated.deepcopy.go api/crd/bases/*.yaml docs/api-reference.md \
    deploy/charts/swh/crds/*.yaml deploy/charts/swh/files/rbac/*/*.yaml deploy/manifests/*.yaml 2>/dev/null
}
stale_generated() {
  local before after
  before=$(generated)
  make -s generate >/dev/null || return 1
  after=$(generated)
  if [ "$before" != "$after" ]; then
    echo "generated code was stale (make generate has now rewritten it; commit the result)"
    return 1
  fi
}
gofmt_clean() {
  local out
  out=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
  [ -z "$out" ] || { echo "gofmt would change (run make fmt):"; echo "$out"; return 1; }
}
vet_all() {
  local m ok=0
  for m in "${modules[@]}"; do (cd "$m" && go vet ./...) || ok=1; done
  return $ok
}
# staticcheck at a pinned version, fetched through the module proxy on
# first use (go run caches it): kept out of hack/tools, whose go.sum
# stamps the control-plane builds. Its default checks; the deliberate
# exceptions carry a //lint:ignore with their reason.
staticcheck_version=v0.8.2
lint_all() {
  local m ok=0
  for m in "${modules[@]}"; do
    (cd "$m" && go run "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version" ./...) || ok=1
  done
  return $ok
}
tidy_all() {
  local m ok=0
  for m in "${modules[@]}"; do
    (cd "$m" && GOWORK=off go mod tidy -diff) || { echo "$m: go.mod/go.sum not tidy (run make tidy)"; ok=1; }
  done
  return $ok
}
helm_chart() {
  # Lint with the defaults and with every optional part on; render those too.
  hack/build-tools.sh helm >/dev/null &&
    bin/helm lint --strict deploy/charts/swh &&
    bin/helm lint --strict deploy/charts/swh --set serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true,agent.hostNetwork=true,createNamespace=true &&
    bin/helm template swh deploy/charts/swh --namespace swh-system \
      --set serviceMonitor.enabled=true,agent.hostNetwork=true,createNamespace=true,controller.replicas=1 >/dev/null
}
static_binaries() {
  # The images' build (Dockerfile runs hack/build-release.sh): static, no cgo.
  local out c ok=0
  out=$(mktemp -d)
  VERSION= hack/build-release.sh "$out" controller agent || { rm -rf "$out"; return 1; }
  for c in controller agent; do
    # A dynamically linked ELF names its loader in a PT_INTERP header.
    if ! LC_ALL=C readelf -lW "$out/swh-$c" >"$out/headers"; then
      echo "readelf (binutils) could not read swh-$c"; ok=1
    elif grep -q 'INTERP' "$out/headers"; then
      echo "swh-$c is not statically linked"; ok=1
    fi
    go version -m "$out/swh-$c" | grep -q 'CGO_ENABLED=0' || { echo "swh-$c was built with cgo"; ok=1; }
    # The version stamp (-X) reaches the binary: versions.yaml's, the chart's appVersion.
    "$out/swh-$c" --version | grep -q "^swh-$c $(hack/modules.sh version binaries) " ||
      { echo "swh-$c --version does not print versions.yaml's binaries version"; ok=1; }
  done
  rm -rf "$out"
  return $ok
}
# Package probes (TCP, HTTP, scheduler) must import the standard library
# only: lib/pq's init registers the "postgres" database/sql driver in every
# program that links it, so the PostgreSQL prober lives in probes/postgresql
# and only its importers pay for it.
probes_stdlib_only() {
  local deps
  deps=$(cd probes && GOWORK=off go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' .) || return 1
  deps=$(grep -vx 'github.com/swh-dev/swh/probes' <<<"$deps")
  [ -z "$deps" ] && return 0
  echo "package github.com/swh-dev/swh/probes imports more than the standard library (keep such code in a subpackage, as probes/postgresql):"
  echo "$deps"
  return 1
}
libraries_standalone() {
  local m ok=0
  for m in "${libraries[@]}"; do
    (cd "$m" && GOWORK=off go build ./... && GOWORK=off go test -count=1 ./...) ||
      { echo "$m does not build and test on its own (GOWORK=off)"; ok=1; }
  done
  return $ok
}

check "generated code is current" stale_generated
check "gofmt" gofmt_clean
check "go vet" vet_all
check "staticcheck" lint_all
check "go mod tidy" tidy_all
check "versions.yaml lists every module; module rules and shared versions" bash -c "cd hack/tools && go run ./cmd/modcheck '$root'"
check "package probes imports the standard library only (no lib/pq)" probes_stdlib_only
check "library modules build and test alone" libraries_standalone
check "library API compatible with the last release (apidiff)" hack/apidiff.sh
check "docs name what the code has (metrics, flags, reasons, examples, links, snippets)" bash -c "cd test && go test -count=1 ./docs/"
check "helm chart lints and renders" helm_chart
check "release binaries are static and report their version" static_binaries

if [ ${#failed[@]} -gt 0 ]; then
  printf 'verify failed: %s\n' "${failed[@]}"
  exit 1
fi
echo "verify: all checks passed"
