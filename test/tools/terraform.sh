#!/usr/bin/env bash
# HashiCorp Terraform (MPL-2.0; the last release before the BUSL change) built from source
# and cached (goinstall.sh); prints its path, for TF_ACC_TERRAFORM_PATH.
exec bash "$(dirname "$0")/goinstall.sh" terraform github.com/hashicorp/terraform "${TERRAFORM_VERSION:-v1.5.7}"
