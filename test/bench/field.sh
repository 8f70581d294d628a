#!/usr/bin/env bash
# The field's own published benchmarks against sless, side by side in one run, on the e2e
# ground (real kube-apiserver, KEDA, the HTTP add-on, three process-kubelet nodes; loopback
# only, needs root like make test-e2e): the KEDA HTTP add-on's CI thresholds (cold start,
# p99 at 1,000 req/s, max req/s, 200 routes; through the gateway and the interceptor alone),
# Fission's smoke profile and Knative's 100 ms data-plane probe (test/e2e/field_bench_test.go).
# Prints a Markdown table (also written to FIELD_OUT). Bounded: about 20 minutes with the
# defaults. SECONDS_AT_1000 sets the 1,000 req/s runs' length, ROUTES the route count (1000 is
# the opt-in size).
set -euo pipefail
cd "$(dirname "$0")/../.."
export SLESS_FIELD_SECONDS=${SECONDS_AT_1000:-60}
export SLESS_FIELD_ROUTES=${ROUTES:-200}
export SLESS_FIELD_OUT=${FIELD_OUT:-$PWD/bin/field-benchmarks.md}
mkdir -p "$(dirname "$SLESS_FIELD_OUT")"
bash test/tools/deps.sh
go test -tags e2e -count=1 -timeout 60m -run '^$' -bench '^BenchmarkField$' -benchtime 1x -v ./test/e2e/
echo "== table written to $SLESS_FIELD_OUT"
