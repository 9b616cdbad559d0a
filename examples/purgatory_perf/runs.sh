#!/usr/bin/env bash
# Runs C, D and E of docs/benchmarks.md, three times for each implementation,
# each run in a fresh process, and prints the median of each column.
# Usage: examples/purgatory_perf/runs.sh [reps]
set -euo pipefail
reps=${1:-3}
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)/purgatory_perf
(cd examples && go build -o "$bin" ./purgatory_perf)
declare -A args=(
  [C]="-num 1000000 -rate 0 -timeout 1000 -pct50 50 -pct75 75"
  [D]="-num 1000000 -rate 0 -timeout 200 -pct50 10000 -pct75 10000"
  [E]="-num 1000000 -rate 0 -timeout 30000 -pct50 100000 -pct75 100000"
)
header="elapsed_ms target_rate actual_rate cpu_ms cpu_us_per_req gc_count gc_pause_ms peak_rss_mib peak_pending heap_B_per_pending completed expired late_p50_ms late_p99_ms late_max_ms early"
echo "run impl $header"
for run in C D E; do
  for impl in purgatory naive; do
    out=$(for _ in $(seq "$reps"); do "$bin" -impl "$impl" ${args[$run]} -verbose=false; done)
    # Median of each column over the runs (plain awk and sort: no gawk needed).
    cols=$(echo "$out" | head -1 | awk '{print NF}')
    med=""
    for i in $(seq "$cols"); do
      med+="$(echo "$out" | awk -v c="$i" '{print $c}' | sort -g | sed -n "$(( (reps + 1) / 2 ))p") "
    done
    echo "$run $impl $med"
  done
done
