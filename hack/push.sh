#!/usr/bin/env bash
# Publishes a release to a registry of your choosing: the controller and
# agent images (an image index per binary, linux/amd64 and linux/arm64 by
# default, built as `make images` builds them) to REPO/swh-controller and
# REPO/swh-agent, and the Helm chart as an OCI artifact to
# oci://REPO/charts/swh, its values pinned to the pushed images' digests,
# so that `helm install swh oci://REPO/charts/swh --version X` pulls exactly
# what was pushed.
#
# Credentials: the images use the Docker configuration (docker login, or
# crane auth login: ~/.docker/config.json), the chart Helm's
# (helm registry login REGISTRY).
#
# usage: [PLATFORMS=linux/amd64,linux/arm64] [PLAIN_HTTP=true] [VERSION=0.1.0] [CHART_VERSION=0.1.0] hack/push.sh REPO
#   VERSION is the images' tag and the binaries' version (default: the chart's
#   appVersion); CHART_VERSION the chart's (default: its version). Set both to
#   publish a version other than the checkout's, as the real-node suite does to
#   test an upgrade across versions.
#   REPO is REGISTRY[/PATH], e.g. registry.example.com/swh or localhost:5000/swh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
repo=${1:?usage: hack/push.sh REGISTRY[/PATH]}
repo=${repo%/}
platforms=${PLATFORMS:-linux/amd64,linux/arm64}
plain_http=${PLAIN_HTTP:-false}
chart=deploy/charts/swh
version=${VERSION:-$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' "$chart/Chart.yaml")}
chart_version=${CHART_VERSION:-$(awk '/^version:/ {print $2}' "$chart/Chart.yaml")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

hack/build-tools.sh helm
mkdir -p bin
(cd test && go build -o "$root/bin/swh-images" ./cmd/swh-images)
insecure=()
helm_http=()
if [ "$plain_http" = true ]; then
  insecure=(-insecure)
  helm_http=(--plain-http)
fi
echo ">> images to $repo ($platforms)"
bin/swh-images -push "$repo" -platforms "$platforms" -version "$version" -published "$work/published.txt" "${insecure[@]}"

# The chart, with its image defaults pointing at what was just pushed:
# repository and digest of each binary (the tag stays the appVersion).
cp -r "$chart" "$work/swh"
digest_of() { awk -v n="$1" '$1 == n {print $3}' "$work/published.txt"; }
controller_digest=$(digest_of swh-controller)
agent_digest=$(digest_of swh-agent)
awk -v crepo="$repo/swh-controller" -v cdig="$controller_digest" -v arepo="$repo/swh-agent" -v adig="$agent_digest" '
  /^    repository: .*\/swh-controller$/ { sub(/repository: .*/, "repository: " crepo); which = "c" }
  /^    repository: .*\/swh-agent$/      { sub(/repository: .*/, "repository: " arepo); which = "a" }
  /^    digest: / && which == "c"        { sub(/digest: .*/, "digest: \"" cdig "\""); which = "" }
  /^    digest: / && which == "a"        { sub(/digest: .*/, "digest: \"" adig "\""); which = "" }
  { print }' "$chart/values.yaml" > "$work/swh/values.yaml"
# Refuse to push a chart whose pods would not run the pushed images.
rendered=$(bin/helm template swh "$work/swh" --namespace swh-system)
for want in "$repo/swh-controller@$controller_digest" "$repo/swh-agent@$agent_digest"; do
  if ! grep -q "image: $want" <<< "$rendered"; then
    echo "push: the chart's values do not point at $want" >&2
    exit 1
  fi
done
bin/helm package "$work/swh" --destination "$work" --version "$chart_version" --app-version "$version" > /dev/null
package=$(ls "$work"/swh-*.tgz)
echo ">> chart to oci://$repo/charts"
bin/helm push "$package" "oci://$repo/charts" "${helm_http[@]}"
echo "install with: helm install swh oci://$repo/charts/swh --version $chart_version --namespace swh-system --create-namespace"
