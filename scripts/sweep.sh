#!/usr/bin/env bash
# The thread sweep of the scalable allocators (issue 14): linux-scalability, thread-test and
# constant occupancy at 4K, 32K and 256K over one 16 GiB heap, every scalable allocator with
# and without magazines beside the ticket-locked Knuth buddy, at 1, 2, 4, 8, 12 and 16
# threads (those up to the core count). Meant for a many-core machine in one call (at 1 and
# 2 threads it takes 13 s on 2 cores). It prints buddybench's table, then Mops/s by thread
# count.
#
#   scripts/sweep.sh            the sweep (buddybench built in release first)
#   scripts/sweep.sh --quick    a smoke run of a few seconds (tiny heap and work, 1-2 threads)
#
# BUDDYBENCH names a binary built beforehand, for a machine without cargo or the crates (the
# device tool: carry target/release/buddybench and set BUDDYBENCH=target/release/buddybench).
# SWEEP_THREADS (e.g. 1,4,16) overrides the thread counts, SWEEP_REPS (default 5) the
# repetitions. Where $OUT is set (the device tool's output folder), the run's CSV and JSON, the
# printed tables and the plots (sweep-plots.tar.gz) are copied there.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=${BUDDYBENCH:-target/release/buddybench}
[[ -n ${BUDDYBENCH:-} ]] || cargo build --release -p buddybench
cores=$(nproc)
# --quick picks its own threads (1 and 2) and repetitions unless told; the sweep, every
# count up to the cores and 5.
args=() threads='' reps=''
if [[ ${1:-} == --quick ]]; then
  args=(--quick)
else
  threads=1 reps=5
  for t in 2 4 8 12 16; do
    if ((t <= cores)); then threads+=",$t"; fi
  done
fi
threads=${SWEEP_THREADS:-$threads} reps=${SWEEP_REPS:-$reps}
[[ -z $threads ]] || args+=(--threads "$threads")
[[ -z $reps ]] || args+=(--reps "$reps")
# A fresh folder for this sweep's run, so that its `latest` is this run.
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT

echo "machine: $(uname -srm), $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
"$bench" "${args[@]}" \
  --workload linux-scalability,thread-test,constant-occupancy \
  --alloc knuth-locked,nbbs,nbbs4,nbbs-magazine,nbbs4-magazine,llfree,llfree-magazine \
  --size 4K,32K,256K --out "$runs" |
  tee "$runs/table.txt"

csv=$runs/latest/buddybench.csv
# Mops/s (median) with one column per thread count, a row per workload, size and allocator.
awk -F, '
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
  {
    row = sprintf("%-18s %-4s %-15s", $col["workload"], $col["size"], $col["alloc"])
    if (!(row in seen)) { seen[row] = 1; rows[++nrows] = row }
    t = $col["threads"]
    if (!(t in tseen)) { tseen[t] = 1; ts[++nts] = t }
    mops[row, t] = $col["mops_median"]
  }
  END {
    printf "\nMops/s (median) by threads\n%-18s %-4s %-15s", "workload", "size", "allocator"
    for (j = 1; j <= nts; j++) printf " %8s", ts[j] " thr"
    printf "\n"
    for (i = 1; i <= nrows; i++) {
      printf "%s", rows[i]
      for (j = 1; j <= nts; j++) {
        if (mops[rows[i], ts[j]] !~ /^[0-9]+(\.[0-9]+)?$/) missing = 1
        printf " %8s", mops[rows[i], ts[j]]
      }
      printf "\n"
    }
    if (nrows == 0 || missing) { print "sweep: cases missing or not numbers in " FILENAME > "/dev/stderr"; exit 1 }
  }' "$csv" | tee "$runs/mops.txt"

if [[ -n ${OUT:-} ]]; then
  cp "$csv" "$runs/latest/buddybench.json" "$runs/table.txt" "$runs/mops.txt" "$OUT/"
  tar czf "$OUT/sweep-plots.tar.gz" -C "$runs/latest" plots
fi
