#!/usr/bin/env bash
# Builds the kernel in crates/kernel and boots it on QEMU's riscv64 `virt` machine under
# OpenSBI: 4 harts, 512 MiB by default. It passes when the kernel reports `N passed, 0 failed`
# with every hart asked for running and some interrupt allocations, and QEMU exits 0, within
# the time limit (a hang, such as a deadlocked interrupt handler, fails).
#
#   scripts/kernel.sh [--fault NAME] [--smp N] [--timer-ns N] [--initrd] [--irq-above N]
#                     [--timeout SECONDS] [--quiet]
#   scripts/kernel.sh --bad-trees
#
# --fault NAME    boots a deliberately broken kernel instead (double-alloc, reserved, irq-waits
#                 or initrd; see crates/kernel/Cargo.toml) and passes only if that run fails:
#                 the proof that the checks can fail. `initrd` implies --initrd.
# --smp N         harts (OpenSBI picks the boot hart among them).
# --timer-ns N    the timer's period (the kernel's default is 10000 ns).
# --initrd        loads a 16 MiB pattern file as the initrd, which the kernel checks, keeps
#                 out of its allocators and then releases into them.
# --irq-above N   also requires more than N interrupt allocations.
# --quiet         prints the kernel's output only where the run did not go as required.
# --bad-trees     boots device trees whose ranges end past 2^64 (a memory node, a reserved
#                 child, a /memreserve/ entry), a backwards initrd and too little memory, and
#                 passes only if each fails with the error that names it.
# Prints `kernel.sh: passed: harts H, interrupt allocations I, S seconds` at the end.
# Installs what it needs (the riscv64 target, QEMU and OpenSBI) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

fault="" limit=150 smp=4 timer_ns="" initrd="" irq_above=0 quiet="" bad_trees=""
while [ $# -gt 0 ]; do
  case $1 in
    --fault) fault=$2; shift ;;
    --smp) smp=$2; shift ;;
    --timer-ns) timer_ns=$2; shift ;;
    --initrd) initrd=1 ;;
    --irq-above) irq_above=$2; shift ;;
    --timeout) limit=$2; shift ;;
    --quiet) quiet=1 ;;
    --bad-trees) bad_trees=1 ;;
    *) sed -n '7,24p' "$0" >&2; exit 2 ;;
  esac
  shift
done
[ "$fault" != initrd ] || initrd=1

target=riscv64gc-unknown-none-elf
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
if ! command -v qemu-system-riscv64 >/dev/null || ! ls /usr/lib/riscv64-linux-gnu/opensbi >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-misc opensbi >/dev/null
fi

if [ -n "$bad_trees" ] && ! command -v dtc >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq device-tree-compiler >/dev/null
fi

features=()
[ -z "$fault" ] || features=(--features "fault-$fault")
(cd crates/kernel && cargo build ${quiet:+-q} --release "${features[@]+"${features[@]}"}")

log=$(mktemp) pattern=$(mktemp) trees=$(mktemp -d)
trap 'rm -rf "$log" "$pattern" "$trees"' EXIT
kernel=crates/kernel/target/$target/release/kernel

if [ -n "$bad_trees" ]; then
  # QEMU's own tree for this machine, edited one way per case.
  qemu-system-riscv64 -M virt,dumpdtb="$trees/virt.dtb" -smp 2 -m 512M -nographic >/dev/null 2>&1
  dtc -q -I dtb -O dts "$trees/virt.dtb" -o "$trees/virt.dts"
  memory=$'\tmemory@80000000 {'
  cases=(
    "memory|memory node memory@fffffffff0000000: 0xfffffffff0000000 + 0x20000000 bytes ends past 2^64"
    "reserved|reserved-memory node bad@fffffffffffff000: 0xfffffffffffff000 + 0x2000 bytes ends past 2^64"
    "memreserve|/memreserve/ entry: 0xfffffffffffff000 + 0x2000 bytes ends past 2^64"
    "initrd|/chosen: linux,initrd-end 0x80000000 is below linux,initrd-start 0x90000000"
    "small|carve: the kernel heap needs 4194304 bytes aligned to 0x40000; the largest usable range left has"
  )
  failed=0
  for case in "${cases[@]}"; do
    name=${case%%|*} want=${case#*|} dts=$(cat "$trees/virt.dts") mem=512M
    case $name in
      memory) dts=${dts/"$memory"/$'\tmemory@fffffffff0000000 {\n\t\tdevice_type = "memory";\n\t\treg = <0xffffffff 0xf0000000 0x00 0x20000000>;\n\t};\n'"$memory"} ;;
      reserved) dts=${dts/"$memory"/$'\treserved-memory {\n\t\t#address-cells = <0x02>;\n\t\t#size-cells = <0x02>;\n\t\tranges;\n\t\tbad@fffffffffffff000 {\n\t\t\treg = <0xffffffff 0xfffff000 0x00 0x2000>;\n\t\t};\n\t};\n'"$memory"} ;;
      memreserve) dts=${dts/"/ {"/$'/memreserve/ 0xfffffffffffff000 0x2000;\n/ {'} ;;
      initrd) dts=${dts/$'\tchosen {'/$'\tchosen {\n\t\tlinux,initrd-start = <0x00 0x90000000>;\n\t\tlinux,initrd-end = <0x00 0x80000000>;'} ;;
      small) mem=8M ;;
    esac
    printf '%s\n' "$dts" >"$trees/$name.dts"
    dtc -q -I dts -O dtb "$trees/$name.dts" -o "$trees/$name.dtb"
    dtb=(-dtb "$trees/$name.dtb")
    [ "$name" != small ] || dtb=()
    status=0
    timeout 30 qemu-system-riscv64 -M virt -smp 2 -m "$mem" -bios default -nographic -no-reboot \
      -kernel "$kernel" "${dtb[@]+"${dtb[@]}"}" </dev/null >"$log" 2>&1 || status=$?
    if [ "$status" -ne 0 ] && grep -qF "$want" "$log"; then
      echo "kernel.sh: bad tree '$name' refused: $want"
    else
      echo "kernel.sh: bad tree '$name' not refused with \"$want\" (QEMU exit status $status):" >&2
      tail -n 8 "$log" >&2
      failed=1
    fi
  done
  exit "$failed"
fi

qemu_args=() append=()
[ -z "$timer_ns" ] || append+=("timer-ns=$timer_ns")
if [ -n "$initrd" ]; then
  # Word i (little endian) is ((i + 1) * 0x9E3779B97F4A7C15 mod 2^64) ^ 0x14172D0000000000,
  # as the kernel's `initrd_word` computes it.
  python3 - "$pattern" <<'EOF'
import array, sys
words = (16 << 20) // 8
pattern = array.array("Q", (((i + 1) * 0x9E3779B97F4A7C15) & (2**64 - 1) ^ 0x14172D0000000000
                            for i in range(words)))
assert pattern.itemsize == 8 and sys.byteorder == "little"
with open(sys.argv[1], "wb") as f:
    pattern.tofile(f)
EOF
  qemu_args+=(-initrd "$pattern")
  append+=(initrd-pattern)
fi
[ ${#append[@]} -eq 0 ] || qemu_args+=(-append "${append[*]}")

status=0
start=$(date +%s%N)
timeout "$limit" qemu-system-riscv64 -M virt -smp "$smp" -m 512M -bios default -nographic -no-reboot \
  -kernel "$kernel" "${qemu_args[@]+"${qemu_args[@]}"}" \
  </dev/null | if [ -n "$quiet" ]; then cat >"$log"; else tee "$log"; fi || status=$?
ms=$((($(date +%s%N) - start) / 1000000))
seconds=$(printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)))

summary=$(sed -n 's/^harts: \([0-9]*\), interrupt allocations: \([0-9]*\), .*/\1 \2/p' "$log")
read -r harts irq_allocs <<<"${summary:-0 0}"
passed=0
if [ "$status" -eq 0 ] && grep -Eq '^[0-9]+ passed, 0 failed' "$log" &&
  [ "$harts" -eq "$smp" ] && [ "$irq_allocs" -gt 0 ] && [ "$irq_allocs" -gt "$irq_above" ]; then
  passed=1
fi
[ "$status" -ne 124 ] || echo "kernel.sh: no end within ${limit}s (a hang)" >&2
# As required: passed for the kernel, failed for a broken one.
required=1
[ -z "$fault" ] || required=0
if [ -n "$quiet" ] && [ "$passed" != "$required" ]; then
  tail -n 40 "$log" >&2
fi
if [ -z "$fault" ]; then
  if [ "$passed" != 1 ]; then
    echo "kernel.sh: the kernel failed (QEMU exit status $status; harts $harts of $smp, interrupt allocations $irq_allocs, needed above $irq_above)" >&2
    exit 1
  fi
  echo "kernel.sh: passed: harts $harts, interrupt allocations $irq_allocs, $seconds seconds"
else
  [ "$passed" = 0 ] || { echo "kernel.sh: the kernel broken by '$fault' passed: a check that cannot fail" >&2; exit 1; }
  echo "kernel.sh: the kernel broken by '$fault' failed, as it must (QEMU exit status $status)"
fi
