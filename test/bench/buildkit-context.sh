#!/usr/bin/env bash
# Context preparation throughput (validate + deterministic tar.gz + hash) for a ~20 MiB source
# zip vs a plain unzip+tar.gz copy of the same bytes (same gzip level), measured in one run
# of COUNT alternating rounds. Prints medians of wall and CPU time per op and their ratios
# (target >= 0.8).
set -euo pipefail
cd "$(dirname "$0")/../.."
COUNT=${COUNT:-6}
for _ in $(seq "$COUNT"); do # one process per round: sless and baseline alternate
  go test ./buildkit -run '^$' -bench '^(BenchmarkPrepareContext|BenchmarkUnzipTarBaseline)$' -benchtime 3x -count 1
done | tee /dev/stderr | awk '
    /^Benchmark/ { name=$1; sub(/-[0-9]+$/, "", name); v[name]=v[name] " " $3; c[name]=c[name] " " $7 }
    function median(s,   a, n, i, j, t) {
      n = split(s, a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      s = median(v["BenchmarkPrepareContext"]); b = median(v["BenchmarkUnzipTarBaseline"])
      sc = median(c["BenchmarkPrepareContext"]); bc = median(c["BenchmarkUnzipTarBaseline"])
      printf "wall ns/op: sless %.0f, baseline %.0f, throughput ratio %.2f | CPU ns/op: sless %.0f, baseline %.0f, ratio %.2f\n", s, b, b / s, sc, bc, bc / sc
    }'
