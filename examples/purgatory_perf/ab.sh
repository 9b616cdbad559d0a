#!/usr/bin/env bash
# ab.sh: this checkout's purgatory against an older commit's, runs
# alternated in one sitting: the way issue budgets "against <commit>" are
# measured (docs/benchmarks.md).
#
# Usage, from anywhere in the repository:
#   bash examples/purgatory_perf/ab.sh BASE [rounds]   # rounds defaults to 15
#   RUNS="C floor D E1M E4M" bash examples/purgatory_perf/ab.sh BASE 10
#
# It builds examples/purgatory_perf twice: from a `git worktree` of BASE and
# from this checkout (working tree included). Then, each round, it runs
# each of RUNS (default "C floor D") once with each build, in an order
# that alternates between rounds. Every run is a fresh process.
#
#   C      1M requests, 1 s timeouts, completed at 50/75 ms (log-normal)
#   floor  C's workload without a purgatory (-impl floor), with this
#          checkout's build: what the workload costs by itself
#   D      1M requests, 200 ms timeouts, every one expires
#   E1M    1M requests parked for 30 s at once; E4M the same with 4M
#          (about 35 s each, and 0.7 GiB of memory for E4M)
#
# What it prints: every run's figures, one line each (round, run, build,
# then rate, CPU per request in µs, peak RSS in MiB, expiry lateness p99
# and max in ms, expired early), and then:
#   - C: the median over rounds of this checkout's rate, CPU per request,
#     and CPU per request less the floor's (the purgatory's own share),
#     each over BASE's in the same round. A 2-core VM drifts by 20%
#     within a minute; a round's runs are seconds apart, so the ratio of
#     the pair cancels most of the drift, where a median of each build's
#     own runs mostly says which build ran in the slow minutes.
#   - D: each build's median expiry p99 and worst max, and the most
#     expired early in any run (must be 0).
#   - E1M, E4M: each build's parking rate and worst lateness, every run,
#     and the median ratio of rates and of peak RSS.
set -u
base=${1:?usage: ab.sh BASE [rounds]}
rounds=${2:-15}
runs=${RUNS:-C floor D}
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1 || { echo "no commit $base" >&2; exit 1; }
(cd "$tmp/base/examples" && go build -o "$tmp/old" ./purgatory_perf) || exit 1
(cd examples && go build -o "$tmp/new" ./purgatory_perf) || exit 1
flags() {
  case $1 in
    C | floor) echo "-num 1000000 -rate 0 -timeout 1000 -pct50 50 -pct75 75" ;;
    D) echo "-num 1000000 -rate 0 -timeout 200 -pct50 10000 -pct75 10000" ;;
    E1M) echo "-num 1000000 -rate 0 -timeout 30000 -pct50 100000 -pct75 100000" ;;
    E4M) echo "-num 4000000 -rate 0 -timeout 30000 -pct50 100000 -pct75 100000" ;;
  esac
}
# The perf tool's line: elapsed_ms target_rate rate cpu_ms cpu_us_per_req
# gc_count gc_pause_ms peak_rss_mib peak_pending heap_B_per_pending completed
# expired late_p50_ms late_p99_ms late_max_ms early.
for i in $(seq "$rounds"); do
  order="old new"; [ $((i % 2)) -eq 0 ] && order="new old"
  for run in $runs; do
    if [ "$run" = floor ]; then
      set -- $("$tmp/new" -impl floor $(flags floor) -verbose=false)
      echo "$i floor new $3 $5 $8 - - -"
      continue
    fi
    for b in $order; do
      set -- $("$tmp/$b" -impl purgatory $(flags "$run") -verbose=false)
      echo "$i $run $b $3 $5 $8 ${14} ${15} ${16}"
    done
  done
done >"$tmp/out"
echo "round run build rate cpu_us_per_req peak_rss_mib late_p99_ms late_max_ms early"
cat "$tmp/out"
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
# paired RUN COLUMN [floor]: the ratio new/old of COLUMN in each round, less
# the round's floor first with floor.
paired() {
  awk -v r="$1" -v f="$2" -v fl="${3:-}" '
    $2=="floor" {floor[$1]=$5}
    $2==r {v[$1" "$3]=$f}
    END {for (k in v) {split(k, p, " "); if (p[2]=="new" && (p[1]" old") in v) {
      n=v[k]; o=v[p[1]" old"]; if (fl != "") {n-=floor[p[1]]; o-=floor[p[1]]}
      if (o > 0) print n/o}}}' "$tmp/out" | median
}
echo
if [[ " $runs " == *" C "* ]]; then
  printf 'C against %s: rate %.3fx, CPU per request %.3fx' "$base" "$(paired C 4)" "$(paired C 5)"
  if [[ " $runs " == *" floor "* ]]; then
    printf ', CPU per request less the floor %.3fx (floor %s µs, median)' "$(paired C 5 floor)" \
      "$(awk '$2=="floor" {print $5}' "$tmp/out" | median)"
  fi
  echo " (medians of paired ratios)"
fi
if [[ " $runs " == *" D "* ]]; then
  for b in old new; do
    p99=$(awk -v b=$b '$2=="D" && $3==b {print $7}' "$tmp/out" | median)
    mx=$(awk -v b=$b '$2=="D" && $3==b {print $8}' "$tmp/out" | sort -g | tail -1)
    early=$(awk -v b=$b '$2=="D" && $3==b {print $9}' "$tmp/out" | sort -g | tail -1)
    echo "D $b: expiry p99 $p99 ms (median run), worst max $mx ms, most early $early"
  done
fi
for run in E1M E4M; do
  [[ " $runs " == *" $run "* ]] || continue
  for b in old new; do
    echo "$run $b: rates $(awk -v r=$run -v b=$b '$2==r && $3==b {printf "%.2f ", $4/1e6}' "$tmp/out")M/s;" \
      "worst lateness $(awk -v r=$run -v b=$b '$2==r && $3==b {printf "%s ", $8}' "$tmp/out")ms;" \
      "peak RSS $(awk -v r=$run -v b=$b '$2==r && $3==b {printf "%s ", $6}' "$tmp/out")MiB"
  done
  printf '%s against %s: rate %.3fx, peak RSS %.3fx (medians of paired ratios)\n' "$run" "$base" \
    "$(paired "$run" 4)" "$(paired "$run" 6)"
done
