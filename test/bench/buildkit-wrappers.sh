#!/usr/bin/env bash
# Warm-invocation throughput of each runtime wrapper (Go, Python, Node) vs a bare HTTP server
# in the same language returning the same JSON (test/bench/buildkit/bare*), measured in one
# run with interleaved rounds (SLESS_BENCH_ROUNDS). Prints medians of wall time per request
# and of the server process's CPU time per request, and their ratios (target >= 0.8).
set -euo pipefail
cd "$(dirname "$0")/../.."
COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-2s}
SLESS_BENCH_ROUNDS="$COUNT" go test ./buildkit -run '^$' -bench '^BenchmarkWrapper$' -benchtime "$BENCHTIME" -timeout 30m 2>/dev/null |
  tee /dev/stderr | awk '
    /^BenchmarkWrapper\// { name=$1; sub(/-[0-9]+$/, "", name); sub(/#[0-9]+$/, "", name); sub(/^BenchmarkWrapper\//, "", name); v[name]=v[name] " " $3; c[name]=c[name] " " $5 }
    function median(s,   a, n, i, j, t) {
      n = split(s, a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      split("go python node", langs, " ")
      for (i = 1; i <= 3; i++) {
        l = langs[i]; bare = median(v[l "/bare"]); bcpu = median(c[l "/bare"])
        for (t = 0; t <= 30; t += 30) {
          w = median(v[l "/wrapper/timeout=" t]); wcpu = median(c[l "/wrapper/timeout=" t])
          printf "%-6s timeout=%-2d wall: wrapper %7.0f, bare %7.0f ns/op, throughput ratio %.2f | server CPU: wrapper %7.0f, bare %7.0f ns/op, ratio %.2f\n", l, t, w, bare, bare / w, wcpu, bcpu, bcpu / wcpu
        }
      }
    }'
