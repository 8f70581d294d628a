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
ARG VERSION=dev
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# The whole checkout (.dockerignore keeps the rest out): a list of packages here went stale the
# day a package was added. The build stage runs as root, so the context's modes do not matter.
COPY . .
RUN go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/sless ./cmd/sless

FROM ${BASE_IMAGE}
COPY --from=build /out/sless /usr/local/bin/sless
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sless"]
