#!/usr/bin/env bash
# ab.sh: this checkout's purgatory against an older commit's, run C and D
# alternated in one sitting: the way issue budgets "against <commit>" are
# measured (docs/benchmarks.md).
#
# Usage, from anywhere in the repository:
#   bash examples/purgatory_perf/ab.sh BASE [rounds]   # rounds defaults to 15
#
# It builds examples/purgatory_perf twice: from a `git worktree` of BASE and
# from this checkout (working tree included). Then, each round, it runs C
# once with each build, in an order that alternates between rounds, and
# does the same for D. Every run is a fresh process.
#
# What it prints:
#   - C: the median over rounds of this checkout's CPU per request over
#     BASE's in the same round, and likewise the rate. A 2-core VM drifts
#     by 20% within a minute; a round's two runs are seconds apart, so the
#     ratio of the pair cancels most of the drift, where a median of each
#     build's own runs mostly says which build ran in the slow minutes.
#   - D: each build's median expiry p99 (ms) over its runs, and the most
#     expired early in any run (must be 0).
set -u
base=${1:?usage: ab.sh BASE [rounds]}
rounds=${2:-15}
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1 || { echo "no commit $base" >&2; exit 1; }
(cd "$tmp/base/examples" && go build -o "$tmp/old" ./purgatory_perf) || exit 1
(cd examples && go build -o "$tmp/new" ./purgatory_perf) || exit 1
C="-num 1000000 -rate 0 -timeout 1000 -pct50 50 -pct75 75 -verbose=false"
D="-num 1000000 -rate 0 -timeout 200 -pct50 10000 -pct75 10000 -verbose=false"
# The perf tool's line: elapsed_ms target_rate rate cpu_ms cpu_us_per_req
# ... p99 (field 14) ... early (field 16).
for i in $(seq "$rounds"); do
  order="old new"; [ $((i % 2)) -eq 0 ] && order="new old"
  for run in C D; do
    for b in $order; do
      args=$C; [ "$run" = D ] && args=$D
      echo "$i $run $b $("$tmp/$b" -impl purgatory $args)"
    done
  done
done >"$tmp/out"
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
for f in 3 5; do # rate, CPU per request: the paired ratio of each round
  awk -v f=$((f + 3)) '$2=="C" {v[$1" "$3]=$f} END {for (k in v) {split(k, p, " "); if (p[2]=="new") print v[k] / v[p[1]" old"]}}' "$tmp/out" | median
done | paste -sd' ' | awk '{printf "C against %s: rate %.3fx, CPU per request %.3fx (medians of paired ratios)\n", b, $1, $2}' b="$base"
for b in old new; do
  p99=$(awk -v b=$b '$2=="D" && $3==b {print $17}' "$tmp/out" | median)
  early=$(awk -v b=$b '$2=="D" && $3==b {print $19}' "$tmp/out" | sort -g | tail -1)
  echo "D $b: expiry p99 $p99 ms (median run), most early $early"
done
