#!/usr/bin/env bash
# Builds the kernel in crates/kernel and boots it on QEMU's riscv64 `virt` machine under
# OpenSBI: 4 harts, 512 MiB. It passes when the kernel reports `N passed, 0 failed` with 4 or
# more harts and some interrupt allocations, and QEMU exits 0, within the time limit (a hang,
# such as a deadlocked interrupt handler, fails).
#
#   scripts/kernel.sh [--fault NAME] [--timeout SECONDS]
#
# --fault NAME  boots a deliberately broken kernel instead (double-alloc, reserved or
#               irq-waits; see crates/kernel/Cargo.toml) and passes only if that run fails:
#               the proof that the checks can fail.
# Installs what it needs (the riscv64 target, QEMU and OpenSBI) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

fault="" limit=150
while [ $# -gt 0 ]; do
  case $1 in
    --fault) fault=$2; shift ;;
    --timeout) limit=$2; shift ;;
    *) sed -n '7,12p' "$0" >&2; exit 2 ;;
  esac
  shift
done

target=riscv64gc-unknown-none-elf
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
if ! command -v qemu-system-riscv64 >/dev/null || ! ls /usr/lib/riscv64-linux-gnu/opensbi >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-misc opensbi >/dev/null
fi

features=()
[ -z "$fault" ] || features=(--features "fault-$fault")
(cd crates/kernel && cargo build --release "${features[@]+"${features[@]}"}")

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
timeout "$limit" qemu-system-riscv64 -M virt -smp 4 -m 512M -bios default -nographic -no-reboot \
  -kernel "crates/kernel/target/$target/release/kernel" </dev/null | tee "$log" || status=$?

passed=0
if [ "$status" -eq 0 ] && grep -Eq '^[0-9]+ passed, 0 failed' "$log" &&
  grep -Eq '^harts: ([4-9]|[1-9][0-9]+), interrupt allocations: [1-9][0-9]*, ' "$log"; then
  passed=1
fi
[ "$status" -ne 124 ] || echo "kernel.sh: no end within ${limit}s (a hang)" >&2
if [ -z "$fault" ]; then
  [ "$passed" = 1 ] || { echo "kernel.sh: the kernel failed (QEMU exit status $status)" >&2; exit 1; }
else
  [ "$passed" = 0 ] || { echo "kernel.sh: the kernel broken by '$fault' passed: a check that cannot fail" >&2; exit 1; }
  echo "kernel.sh: the kernel broken by '$fault' failed, as it must (QEMU exit status $status)"
fi
