#!/usr/bin/env bash
# icount.sh: the instructions per iteration of the hot paths' benchmarks,
# counted by valgrind's callgrind, checked against icount.txt.
#
#   bash scripts/icount.sh          count every row of icount.txt and fail if
#                                   one counts more than 3% above its row
#   bash scripts/icount.sh -write   count every row and write the counts
#                                   into icount.txt (commit it, and say why
#                                   each row moved)
#   bash scripts/icount.sh -only PATTERN [-write]
#                                   only the rows whose benchmark matches
#
# A count is of a whole test binary run with -test.benchtime Nx and with
# 2Nx (N is the row's), one goroutine, no asynchronous preemption and no
# garbage collection (its work is concurrent and paced by time); the
# difference over N is one iteration's instructions, its setup cancelled.
# The count repeats to a few parts in ten thousand whatever else the
# machine does, so a 1-2% change is seen in one run, where a timed
# benchmark on a shared machine drifts by 20%. Instructions are not
# cycles: cache misses, contention and the collector's work on other
# threads are not in it (docs/benchmarks.md has the timed runs).
set -euo pipefail
cd "$(dirname "$0")/.."
write=0 only=""
while [ $# -gt 0 ]; do
  case $1 in
    -write) write=1; shift ;;
    -only) only=$2; shift 2 ;;
    *) sed -n '2,21p' "$0" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "icount: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
limit=1.03
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# instructions BINARY BENCH N: prints the instructions of one run.
instructions() {
  local out ran
  out=$(GOGC=off GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOMAXPROCS=1 valgrind --tool=callgrind \
    --callgrind-out-file=/dev/null "$1" -test.run '^$' -test.bench "$2" \
    -test.benchtime "${3}x" -test.cpu 1 -test.count 1 2>&1) || { echo "$out" >&2; return 1; }
  ran=$(grep -c '^Benchmark' <<<"$out" || true)
  if [ "$ran" -ne 1 ]; then
    echo "icount: '$2' ran $ran benchmarks; a row must match exactly one" >&2
    return 1
  fi
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out"
}

fail=0
new=$tmp/icount.txt
while IFS= read -r line; do
  case $line in ''|'#'*) echo "$line" >>"$new"; continue ;; esac
  read -r pkg bench n old _ <<<"$line"
  if [ -n "$only" ] && ! grep -qE -- "$only" <<<"$bench"; then
    echo "$line" >>"$new"; continue
  fi
  bin=$tmp/$(echo "$pkg" | tr -c 'a-zA-Z0-9\n' _).test
  [ -x "$bin" ] || go test -c -o "$bin" "$pkg"
  a=$(instructions "$bin" "$bench" "$n")
  b=$(instructions "$bin" "$bench" $((2 * n)))
  per=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }')
  verdict=$(awk -v p="$per" -v o="$old" -v l="$limit" 'BEGIN {
    if (o == "-" || o == 0) { print "new"; exit }
    r = p / o; s = sprintf("%.3fx", r)
    if (r > l) print s " ABOVE"; else if (r < 2 - l) print s " below: lower the row"; else print s }')
  printf '%-12s %-34s %10s  (icount.txt %s: %s)\n' "$pkg" "$bench" "$per" "$old" "$verdict"
  case $verdict in *ABOVE*) fail=1 ;; esac
  printf '%-12s %-34s %6s %10s\n' "$pkg" "$bench" "$n" "$per" >>"$new"
done <icount.txt
if [ $write -eq 1 ]; then
  cp "$new" icount.txt
  echo "icount: icount.txt rewritten"
elif [ $fail -eq 1 ]; then
  echo "icount: a hot path counts more than $(awk -v l=$limit 'BEGIN{printf "%d", (l-1)*100+0.5}')% above icount.txt: make it cheaper, or update the row in the same commit and say why" >&2
  exit 1
fi
