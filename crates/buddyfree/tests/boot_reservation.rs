//! The boot reservation: after `range::reserve_all` and a `free_range` of each usable range,
//! a free of any block that holds a unit the firmware keeps is refused with
//! `Error::Reserved` and changes nothing, at every order and on every allocator that serves
//! the boot sequence, while every usable unit stays allocatable and a reserved range that the
//! kernel releases later (an initrd) becomes allocatable through `free_range`, and only then.

use buddyfree::registry;
use buddyfree::zones::{Zone, Zones};
use buddyfree::{range, BlockAlloc, Config, Error};

/// The published allocators a kernel boots with, by registry name.
const BOOT_ALLOCATORS: &[&str] = &[
    "llfree",
    "llfree-classes",
    "llfree-magazine",
    "nbbs",
    "nbbs4",
    "nbbs-magazine",
    "nbbs4-magazine",
    "knuth-locked",
    "estranged-locked",
];

/// A real x86_64 bootloader's map under QEMU: frames `0x2c1..0x400` and `0x8ff..0x7fe0`.
const QEMU_UNITS: usize = 0x7fe0;
const QEMU_USABLE: &[(usize, usize)] = &[(0x2c1, 0x400), (0x8ff, 0x7fe0)];

/// Builds `name` over `units` with largest order `max_order`, booted over `usable`.
fn booted(
    name: &str,
    units: usize,
    max_order: u32,
    usable: &[(usize, usize)],
) -> Box<dyn BlockAlloc + Send> {
    let entry = registry::find(name).unwrap();
    let a = (entry.build)(
        Config::new(units, max_order).with_cores(2),
        Default::default(),
    )
    .unwrap();
    range::reserve_all(&*a).unwrap();
    for &(start, end) in usable {
        a.free_range(start, end - start, 1).unwrap();
    }
    a
}

/// Whether each unit is usable.
fn usable_map(units: usize, usable: &[(usize, usize)]) -> Vec<bool> {
    let mut map = vec![false; units];
    for &(start, end) in usable {
        map[start..end].fill(true);
    }
    map
}

/// Frees every aligned block of every order that holds a never-usable unit: each is refused
/// with `Error::Reserved` and nothing changes; then every usable unit is allocated, and
/// nothing else.
fn check(name: &str, a: &dyn BlockAlloc, usable: &[(usize, usize)]) {
    let units = a.total_units();
    let map = usable_map(units, usable);
    let free = a.free_units();
    assert_eq!(free, map.iter().filter(|&&u| u).count(), "{name}");
    for order in 0..=a.max_order() {
        for (i, block) in map.chunks_exact(1 << order).enumerate() {
            if block.iter().all(|&u| u) {
                continue;
            }
            let index = i << order;
            for core in [0, 1] {
                assert_eq!(
                    a.free(index, order, core),
                    Err(Error::Reserved),
                    "{name}: free({index:#x}, {order})"
                );
                if a.capabilities().contains(buddyfree::Capabilities::TRY_FREE) {
                    assert_eq!(
                        a.try_free(index, order, core),
                        Err(Error::Reserved),
                        "{name}"
                    );
                }
            }
            assert_eq!(
                a.free_bulk(&[index], order, 0),
                Err((0, Error::Reserved)),
                "{name}"
            );
            assert_eq!(
                a.free_units(),
                free,
                "{name}: free({index:#x}, {order}) changed it"
            );
        }
    }
    let mut got = 0;
    while let Ok(unit) = a.alloc(0, got % 2) {
        assert!(map[unit], "{name}: handed out never-usable unit {unit:#x}");
        got += 1;
    }
    assert_eq!(got, free, "{name}: usable units left unallocatable");
}

#[test]
fn the_firmware_frames_of_a_qemu_map_cannot_be_freed() {
    for &name in BOOT_ALLOCATORS {
        let a = booted(name, QEMU_UNITS, 9, QEMU_USABLE);
        check(name, &*a, QEMU_USABLE);
    }
}

/// xorshift64*: the same maps on every run.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn random_maps_with_ragged_edges() {
    let mut rng = 0x9e37_79b9_7f4a_7c15;
    for round in 0..6 {
        let units = 4096 + (next(&mut rng) % 4096) as usize;
        let mut usable = Vec::new();
        let mut at = (next(&mut rng) % 300) as usize;
        while at < units {
            let len = 1 + (next(&mut rng) % 700) as usize;
            let end = (at + len).min(units);
            usable.push((at, end));
            at = end + 1 + (next(&mut rng) % 200) as usize;
        }
        for &name in BOOT_ALLOCATORS {
            let a = booted(name, units, 6, &usable);
            check(&format!("{name} (round {round})"), &*a, &usable);
        }
    }
}

#[test]
fn a_released_initrd_becomes_allocatable_and_only_then() {
    let initrd = (0x1000, 0x1800);
    for &name in BOOT_ALLOCATORS {
        let a = booted(name, QEMU_UNITS, 9, QEMU_USABLE);
        // Held back at boot, as the kernel guide says, then checked and released.
        a.reserve_range(initrd.0, initrd.1 - initrd.0, 0).unwrap();
        assert_eq!(a.free(initrd.0, 9, 0), Err(Error::Reserved), "{name}");
        assert_eq!(a.free(initrd.0 + 7, 0, 0), Err(Error::Reserved), "{name}");
        let before = a.free_units();
        a.free_range(initrd.0, initrd.1 - initrd.0, 0).unwrap();
        assert_eq!(a.free_units(), before + 0x800, "{name}");
        assert_eq!(a.alloc_at(initrd.0, 9, 0), Ok(()), "{name}");
        assert_eq!(
            a.free(initrd.0, 9, 0),
            Ok(()),
            "{name}: an allocated block of it frees"
        );
        // The rest of the map is still held.
        assert_eq!(a.free(0x2c0, 0, 0), Err(Error::Reserved), "{name}");
    }
}

#[test]
fn zones_refuse_what_their_members_hold() {
    let build = |units| {
        registry::find("llfree")
            .map(|e| (e.build)(Config::new(units, 9), Default::default()).unwrap())
    };
    let zones = Zones::new([
        Zone::new(0, build(0x4000).unwrap()),
        Zone::new(0x4000, build(0x3fe0).unwrap()),
    ])
    .unwrap();
    range::reserve_all(&zones).unwrap();
    for &(start, end) in QEMU_USABLE {
        zones.free_range(start, end - start, 0).unwrap();
    }
    check("zones", &zones, QEMU_USABLE);
}

#[test]
fn caches_built_over_a_reserved_allocator_never_free_its_reserved_units() {
    use buddyfree::llfree::LLFree;
    use buddyfree::magazine::Magazine;
    let config = Config::new(QEMU_UNITS, 9);
    let inner = LLFree::new(config).unwrap();
    range::reserve_all(&inner).unwrap();
    for &(start, end) in QEMU_USABLE {
        inner.free_range(start, end - start, 0).unwrap();
    }
    let usable = inner.free_units();
    let caches = Magazine::new(config.with_cores(2), inner).unwrap();
    // Adopted as a caller's blocks, the firmware's may be taken back by the caches, but the
    // backend keeps them: they are never handed out.
    for unit in 0x2a0..0x2c1 {
        let _ = caches.free(unit, 0, 0);
    }
    caches.drain();
    let mut got = 0;
    while let Ok(unit) = caches.alloc(0, 0) {
        assert!(
            QEMU_USABLE.iter().any(|&(s, e)| (s..e).contains(&unit)),
            "{unit:#x}"
        );
        got += 1;
    }
    assert_eq!(got, usable);
}
