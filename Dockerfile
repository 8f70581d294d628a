# The platform image (one sless binary: operator, gateway, dispatcher) for those who build
# with Docker. `make image` builds the same binary without Docker, with ko; the e2e suite
# builds this file with the real kaniko (TestPlatformDockerfile) so it cannot rot.
#   docker build --build-arg VERSION=$(git describe --tags --always) -t sless .
# The base is the one .ko.yaml pins: static, CA certificates, time-zone data (cron triggers
# take IANA zones) and the non-root user 65532.
ARG GO_IMAGE=golang:1.26.8-alpine
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
FROM ${GO_IMAGE} AS build
# GOPROXY, when given, is where the modules come from (go's default otherwise).
ARG GOPROXY
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -trimpath"
WORKDIR /src
# The third-party packages of the binary (cmd/sless/deps.txt, kept by `make generate`) compile
# in a layer of their own, keyed on go.mod, go.sum and that list: a change to sless's own code
# reuses it from the layer cache (docker build; kaniko --cache) and compiles only sless.
COPY go.mod go.sum cmd/sless/deps.txt ./
RUN go build $(cat deps.txt)
# The whole checkout (.dockerignore keeps the rest out) rather than a list of packages, which
# would go stale. The build stage runs as root, so the context's modes do not matter.
COPY . .
ARG VERSION=dev
RUN go build -ldflags="-s -w -X main.version=${VERSION}" -o /out/sless ./cmd/sless

FROM ${BASE_IMAGE}
COPY --from=build /out/sless /usr/local/bin/sless
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sless"]
