terraform {
  required_providers {
    sless = {
      source = "sless.dev/sless/sless"
    }
  }
}

# endpoint and token default to SLESS_ENDPOINT and SLESS_TOKEN, which `sless dev` prints.
provider "sless" {}
