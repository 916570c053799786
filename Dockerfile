# syntax=docker/dockerfile:1
# The images of both binaries, from the repository root, for those who build
# with Docker:
#   docker build --build-arg COMPONENT=controller -t ghcr.io/swh-dev/swh-controller:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#   docker build --build-arg COMPONENT=agent ... (the same)
# `make images` builds the same layout without Docker or a registry (package
# test/images: OCI tarballs, FROM scratch with the base's users, CA bundle
# and /tmp). The binary is static (CGO_ENABLED=0) and built from its own
# module by hack/build-release.sh, the script `make verify` checks; the image
# holds nothing else but CA certificates and runs as the distroless nonroot
# user (65532).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG COMPONENT=controller
ARG TARGETOS=linux
ARG TARGETARCH
# The binaries' version stamp; empty: versions.yaml's (hack/build-release.sh).
ARG VERSION
ENV GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
WORKDIR /src
# The module files first, so the download layer survives source edits.
COPY api/go.mod api/go.sum api/
COPY probes/go.mod probes/go.sum probes/
COPY endpoints/go.mod endpoints/go.sum endpoints/
COPY ${COMPONENT}/go.mod ${COMPONENT}/go.sum ${COMPONENT}/
RUN --mount=type=cache,target=/go/pkg/mod cd ${COMPONENT} && GOWORK=off go mod download
COPY versions.yaml ./
COPY hack/build-release.sh hack/modules.sh hack/
COPY api/ api/
COPY probes/ probes/
COPY endpoints/ endpoints/
COPY ${COMPONENT}/ ${COMPONENT}/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    VERSION=${VERSION} GOOS=${TARGETOS} GOARCH=${TARGETARCH} hack/build-release.sh /out ${COMPONENT} && \
    mv /out/swh-${COMPONENT} /out/swh

# The multi-platform index of static-debian12:nonroot as Renovate recorded it
# on 2026-08-03 (bug-ops/zeph#6717); refresh with
#   crane digest gcr.io/distroless/static-debian12:nonroot
FROM gcr.io/distroless/static-debian12:nonroot@sha256:f5b485ea962d9bd1186b2f6b3a061191539b905b82ec395de78cbfae51f20e35
ARG COMPONENT=controller
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/swh-dev/swh" \
      org.opencontainers.image.title="swh-${COMPONENT}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/swh /swh
USER 65532:65532
ENTRYPOINT ["/swh"]
