#!/usr/bin/env bash
# ko (github.com/google/ko, Apache-2.0), the Knative/Kubernetes tool that builds Go images
# without Docker, built from source and cached (goinstall.sh); prints its path. `make image`
# uses it.
exec bash "$(dirname "$0")/goinstall.sh" ko github.com/google/ko "${KO_VERSION:-v0.19.1}"
