#!/usr/bin/env bash
# Runs every test binary of the workspace many times, to catch tests that fail only under some
# interleavings. A run that fails, or outlives its time limit (a hang), is counted and its output
# kept under target/flaky-hunt/.
#
#   scripts/flaky-hunt.sh RUNS SECONDS [--load] [--skip PATTERN]... [--only PATTERN]...
#
# RUNS     runs of each binary
# SECONDS  the time limit of one run
# --load   keeps every core busy meanwhile (one busy loop a core, stopped by pid at the end)
# --skip   leaves out binaries whose name contains PATTERN; --only keeps just those that do
#
# Binaries run as `cargo test` runs them: from their package's folder, all their tests at once.
# Exits non-zero if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '6,12p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
runs=$1 seconds=$2
shift 2
load=0 skips=() onlys=()
while [ $# -gt 0 ]; do
  case $1 in
    --load) load=1 ;;
    --skip) skips+=("$2"); shift ;;
    --only) onlys+=("$2"); shift ;;
    *) usage ;;
  esac
  shift
done

# "package folder<TAB>executable" for every test binary, from cargo's own build report.
list=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(os.path.dirname(m["manifest_path"]) + "\t" + m["executable"])
')

wanted() {
  local name=$1 p
  for p in "${skips[@]+"${skips[@]}"}"; do [[ $name == *"$p"* ]] && return 1; done
  [ ${#onlys[@]} -eq 0 ] && return 0
  for p in "${onlys[@]}"; do [[ $name == *"$p"* ]] && return 0; done
  return 1
}

busy=()
stop_load() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null || true; }
trap stop_load EXIT
if [ "$load" = 1 ]; then
  for _ in $(seq "$(nproc)"); do
    yes >/dev/null &
    busy+=($!)
  done
fi

# The binaries run from copies beside them (some find the libraries they test from their own
# path), so that a build meanwhile cannot swap one under a run.
logs=target/flaky-hunt
mkdir -p "$logs"
total_failed=0
printf '%-28s %6s %6s %8s\n' binary runs failed seconds
while IFS=$'\t' read -r dir exe; do
  name=$(basename "$exe" | sed 's/-[0-9a-f]*$//')
  wanted "$name" || continue
  cp "$exe" "$exe.hunted"
  exe=$exe.hunted
  failed=0 start=$SECONDS
  for run in $(seq "$runs"); do
    log="$logs/$name.$run.log"
    if (cd "$dir" && timeout "$seconds" "$exe" -q) >"$log" 2>&1; then
      rm -f "$log"
    else
      failed=$((failed + 1))
      echo "  $name run $run failed: $log" >&2
    fi
  done
  printf '%-28s %6d %6d %8d\n' "$name" "$runs" "$failed" $((SECONDS - start))
  total_failed=$((total_failed + failed))
done <<<"$list"
echo "load: $([ "$load" = 1 ] && echo "$(nproc) busy loops" || echo none); failed runs: $total_failed"
[ "$total_failed" -eq 0 ]
