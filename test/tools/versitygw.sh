#!/usr/bin/env bash
# The versitygw S3 gateway (Apache-2.0) built from source and cached (goinstall.sh); prints
# its path.
exec bash "$(dirname "$0")/goinstall.sh" versitygw github.com/versity/versitygw/cmd/versitygw "${VERSITYGW_VERSION:-v1.8.0}"
