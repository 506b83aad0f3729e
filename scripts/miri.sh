#!/usr/bin/env bash
# Miri (nightly) over the tests of the unsafe code it can run, in a few minutes on 2 cores:
# caller-memory tables (table), the per-core caches' fixed lists and one-byte state table
# (cached, magazine), every allocator built in caller memory by name
# (registry), StaticHeap, Region::from_box, LLFree over a lower level in caller memory
# (every Init, recovery, damaged memory: llfree_caller), and the C ABI's status names and
# instances over the caller's region. Installs Miri into the nightly toolchain if it is missing.
#
#   scripts/miri.sh
#
# Not run, and why:
# - global_alloc: a harness-free program whose global heap serves every allocation of the
#   run; far too slow under Miri, and global_held covers the same adapter.
# - In tests/heap.rs and buddyfree-c's tests/abi.rs, the tests that spawn a process (a held
#   core's abort), map more than Miri can allocate, or take minutes (every parking limit,
#   threads sharing an instance, every allocator's size and alignment errors).
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

# Miri ignores the test profile's opt-level, and warns of it at every run.
export CARGO_PROFILE_TEST_OPT_LEVEL=0

# Slow under Miri (20-45 s each), and their unsafe paths are those of the tests that run:
# give-backs across whole small heaps, every parking limit, every registry entry built on
# the heap (the caller-memory builds run); and a four-thread refusal stress (loom models it).
slow=(
  cached::tests::try_alloc_gives_back_the_blocks_of_caches_it_can_take
  magazine::tests::a_configured_parking_limit_chooses_the_lists
  magazine::tests::concurrent_refusals_find_every_frame_freed_before_them
  magazine::tests::drain_returns_everything
  magazine::tests::each_order_parks_at_most_its_watermark
  magazine::tests::lists_scale_with_the_heap_per_core
  registry::tests::names_are_unique_and_every_entry_builds
)
cargo +nightly miri test -p buddyfree --lib -- \
  table:: cached:: magazine:: registry:: "${slow[@]/#/--skip=}"
cargo +nightly miri test -p buddyfree --test static_heap --test global_held
cargo +nightly miri test -p buddyfree-baselines --test llfree_caller
cargo +nightly miri test -p buddyfree-baselines --test heap -- \
  --skip every_block_honours_its_alignment_and_stays_in_the_region
cargo +nightly miri test -p buddyfree-c --lib --test abi -- \
  --skip a_call_that_waits_for_its_own_held_core_aborts_with_the_cause \
  --skip a_refused_configuration_names_the_rule_it_broke \
  --skip the_parking_limit_chooses_what_a_core_parks \
  --skip threads_share_an_instance \
  --skip size_and_alignment_errors_answer_what_the_header_promises
