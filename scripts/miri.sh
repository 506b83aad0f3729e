#!/usr/bin/env bash
# Miri (nightly) over the tests of the unsafe code it can run, in a few minutes on 2 cores:
# caller-memory tables (table), the per-core caches' fixed lists and one-byte state table
# (cached, magazine, locked::percpu), every allocator built in caller memory by name
# (registry), StaticHeap, Region::from_box, and the C ABI's status names and instances over
# the caller's region. Installs Miri into the nightly toolchain if it is missing.
#
#   scripts/miri.sh
#
# Not run, and why:
# - Region::mmap (the rest of tests/heap.rs and of buddyfree-c's tests/abi.rs, global_alloc,
#   global_held): it maps with MAP_NORESERVE, and Miri's mmap takes MAP_PRIVATE|MAP_ANONYMOUS
#   alone.
# - Persistent zones (tests/persist.rs, llfree::persist): file mappings, flock and killed
#   worker processes; extreme_configs: child processes under an address-space limit; the C
#   program (gcc, FFI to a C library); the header check (cbindgen parsing, no unsafe).
# - Whole-allocator batteries and stress (the proptest model runs, stress_large, pinned,
#   zones, caller_metadata's 5000-step churns, the lock-free designs' own tests): hours under
#   Miri, and they reach the unsafe code above through the same paths. loom models them.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup component list --toolchain nightly --installed | grep -q '^miri' ||
  rustup component add --toolchain nightly miri rust-src

# Miri runs no cpuid, so portable-atomic would call 128-bit atomics not lock-free and Nbbs4
# would be refused (NoDoubleWidthCas); assuming cmpxchg16b models an x86_64 CPU that has it.
# Miri builds in target/miri, so this does not rebuild the rest.
export RUSTFLAGS="-C target-feature=+cmpxchg16b"

# Miri ignores the test profile's opt-level, and warns of it at every run.
export CARGO_PROFILE_TEST_OPT_LEVEL=0

# Slow under Miri (20-45 s each), and their unsafe paths are those of the tests that run:
# give-backs across whole small heaps, every parking limit, every registry entry built on
# the heap (the caller-memory builds run).
slow=(
  cached::tests::try_alloc_gives_back_the_blocks_of_caches_it_can_take
  locked::percpu::tests::refills_one_batch_and_spills_above_the_watermark
  magazine::tests::a_configured_parking_limit_chooses_the_lists
  magazine::tests::drain_returns_everything
  magazine::tests::each_order_parks_at_most_its_watermark
  magazine::tests::lists_scale_with_the_heap_per_core
  registry::tests::names_are_unique_and_every_entry_builds
)
cargo +nightly miri test -p buddyfree --lib -- \
  table:: cached:: magazine:: locked::percpu:: registry:: "${slow[@]/#/--skip=}"
cargo +nightly miri test -p buddyfree --test static_heap
# The one heap test over memory that is not mapped (a boxed slice).
cargo +nightly miri test -p buddyfree --test heap -- --exact box_regions_start_at_the_first_unit_boundary
cargo +nightly miri test -p buddyfree-c --lib --test abi -- \
  every_status_has_a_name status_codes_are_stable_and_named caller_regions_are_used_in_place
