//! The C ABI's inputs: any configuration (unit size, units, order, cores, allocator name,
//! parking limit, interrupt-safe frees, the caller's region and its misalignment, the
//! `config_size` of the sized create) and any sequence of calls with any arguments (sizes,
//! alignments, pointers, indices, orders, status codes, null handles) returns a status and
//! never misbehaves: blocks are aligned, inside the instance and disjoint, a size or
//! alignment the instance cannot serve gets the status the header promises, the capability
//! bits are the allocator's, and freeing everything leaves every unit free.
//!
//! Input: 12 bytes of configuration, then 4 bytes per call.

#![no_main]

use std::collections::BTreeMap;
use std::ffi::{c_void, CStr};
use std::ptr;

use buddyfree_c::*;
use libfuzzer_sys::fuzz_target;

/// An instance of `config` over `region` (none if empty): through `buddyfree_create`, or
/// through `buddyfree_create_sized` with `size` bytes of a config followed by zeros (a
/// newer caller's fields, all default) when `size` is given.
fn create(
    config: &BuddyfreeConfig,
    size: Option<usize>,
    region: &mut [u8],
) -> Option<*mut Buddyfree> {
    let mut bf = ptr::null_mut();
    let (base, len) = if region.is_empty() {
        (ptr::null_mut(), 0)
    } else {
        (region.as_mut_ptr().cast(), region.len())
    };
    let whole = std::mem::size_of::<BuddyfreeConfig>();
    // The config, then zeros: 8-byte words, aligned for it.
    let mut words = vec![0u64; whole.div_ceil(8) + 4];
    // SAFETY: a `BuddyfreeConfig` fits at the start of `words`, aligned (8 bytes).
    unsafe { words.as_mut_ptr().cast::<BuddyfreeConfig>().write(*config) };
    let sized = words.as_ptr().cast::<BuddyfreeConfig>();
    // SAFETY: a valid configuration whose name is null or NUL-terminated (readable for
    // `size` bytes, at most `words`' length), a writable out pointer, and a region that is
    // null or ours for the instance's lifetime.
    let status = unsafe {
        match size {
            None => buddyfree_create(config, base, len, &mut bf),
            Some(size) => {
                let size = size.min(words.len() * 8);
                let status =
                    buddyfree_create_sized(sized, size, base, len, ptr::null_mut(), 0, &mut bf);
                if size < whole && status == BuddyfreeStatus::InvalidConfig {
                    // A size before `allocator`'s end, or inside a field: refused as such.
                    let why = CStr::from_ptr(buddyfree_last_error()).to_string_lossy();
                    if why.contains("config_size") {
                        return None;
                    }
                }
                status
            }
        }
    };
    (status == BuddyfreeStatus::Ok).then_some(bf)
}

/// What the header promises a request of `size` bytes aligned to `align` on an instance
/// whose blocks are aligned to at most `max_align` and hold at most `largest` bytes: the
/// status of the first rule broken, `None` where it can be served.
fn layout_answer(
    size: usize,
    align: usize,
    max_align: usize,
    largest: usize,
) -> Option<BuddyfreeStatus> {
    let align = align.max(1);
    if !align.is_power_of_two() {
        Some(BuddyfreeStatus::BadAlign)
    } else if size == 0 {
        Some(BuddyfreeStatus::ZeroSize)
    } else if align > max_align {
        Some(BuddyfreeStatus::BadAlign)
    } else if size > largest {
        Some(BuddyfreeStatus::TooLarge)
    } else {
        None
    }
}

fn stats(bf: *const Buddyfree) -> BuddyfreeStats {
    let mut s = std::mem::MaybeUninit::uninit();
    // SAFETY: a live instance and a writable out pointer.
    let status = unsafe { buddyfree_stats(bf, s.as_mut_ptr()) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    // SAFETY: written on success.
    unsafe { s.assume_init() }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let (head, calls) = data.split_at(12);
    // Names: every registered one, the default (null) and one that is not registered.
    let count = buddyfree_allocator_count();
    let pick = usize::from(head[0]) % (count + 2);
    let name = match pick {
        i if i < count => buddyfree_allocator_name(i),
        i if i == count => ptr::null(),
        _ => c"no-such-allocator".as_ptr(),
    };
    let unit_size = if head[1] & 0x80 != 0 {
        usize::from(head[1])
    } else {
        1 << (head[1] % 13)
    };
    let units = usize::from(u16::from_le_bytes([head[2], head[3]])) % 8193;
    let config = BuddyfreeConfig {
        unit_size,
        units,
        max_order: u32::from(head[4] % 24),
        cores: u32::from(head[5] % 5),
        allocator: name,
        // The default, the longest lists, or a limit between the steps' (in units).
        parking_limit: match head[9] {
            255 => usize::MAX,
            n => usize::from(n) << 6,
        },
        // Any value: nonzero asks for interrupt-safe frees.
        interrupt_safe_frees: u32::from(head[10]),
    };
    // With a caller's region: up to 256 KiB, starting at a fuzzed misalignment.
    let mut storage = vec![
        0u8;
        if head[6] & 1 != 0 {
            usize::from(head[7]) << 10
        } else {
            0
        }
    ];
    let skip = usize::from(head[8]).min(storage.len());
    let region = &mut storage[skip..];
    // The plain create, the sized one with the whole struct, or with any size.
    let size = match head[11] % 4 {
        0 => None,
        1 => Some(std::mem::size_of::<BuddyfreeConfig>()),
        _ => Some(usize::from(head[11] >> 2)),
    };
    let Some(bf) = create(&config, size, region) else {
        return;
    };
    let s = stats(bf);
    assert_eq!(s.free_units, s.total_units);
    let unit = s.unit_size;
    let largest = unit.checked_shl(s.max_order).unwrap_or(usize::MAX);
    let mut caps = 0;
    // SAFETY: a live instance and a writable out.
    assert_eq!(
        unsafe { buddyfree_capabilities(bf, &mut caps) },
        BuddyfreeStatus::Ok
    );
    if pick < count {
        let mut by_index = 0;
        // SAFETY: a writable out.
        let status = unsafe { buddyfree_allocator_capabilities(pick, &mut by_index) };
        assert_eq!((status, by_index), (BuddyfreeStatus::Ok, caps));
    }
    let mut spans = Spans::default();
    // Blocks from `buddyfree_alloc`: address -> requested (size, alignment).
    let mut sized: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    // Blocks from `buddyfree_alloc_order`: index -> (order, address).
    let mut ordered: BTreeMap<usize, (u32, usize)> = BTreeMap::new();
    for c in calls.chunks_exact(4) {
        let wide = usize::from(u16::from_le_bytes([c[1], c[2]]));
        match c[0] % 10 {
            0..=2 => {
                // Alignments: powers of two, and one less (not a power of two, or 0); up to
                // 2^63 where the call's first byte asks for the upper half of the shifts.
                let size = wide >> (c[3] & 7);
                let shift = u32::from(c[3] >> 3) + if c[0] / 10 >= 20 { 32 } else { 0 };
                let align = (1usize << shift) - usize::from(c[3] & 1);
                let mut p = ptr::dangling_mut::<c_void>();
                // SAFETY: a live instance and a writable out pointer.
                let status = unsafe { buddyfree_alloc(bf, size, align, &mut p) };
                match layout_answer(size, align, s.max_align, largest) {
                    Some(promised) => {
                        assert_eq!(status, promised, "{size} bytes aligned to {align}")
                    }
                    None => assert!(
                        matches!(status, BuddyfreeStatus::Ok | BuddyfreeStatus::OutOfMemory),
                        "{size} bytes aligned to {align}: {status:?}"
                    ),
                }
                if status == BuddyfreeStatus::Ok {
                    assert_eq!(p as usize % align.max(1), 0, "misaligned");
                    spans.insert(p as usize, size.max(1));
                    sized.insert(p as usize, (size, align));
                } else {
                    assert!(p.is_null(), "out is not NULL on failure");
                }
            }
            3 | 4 => {
                let Some((&a, &(size, align))) = sized.iter().nth(wide % sized.len().max(1)) else {
                    continue;
                };
                sized.remove(&a);
                spans.remove(a);
                // SAFETY: `bf` is live; the pointer is never dereferenced.
                let status = unsafe { buddyfree_free(bf, a as *mut c_void, size, align) };
                assert_eq!(status, BuddyfreeStatus::Ok);
            }
            5 => {
                let (mut index, mut p) = (usize::MAX, ptr::null_mut());
                let order = u32::from(c[3] % 24);
                // SAFETY: a live instance and writable out pointers.
                let status = unsafe { buddyfree_alloc_order(bf, order, &mut index, &mut p) };
                if status == BuddyfreeStatus::Ok {
                    assert_eq!(index % (1 << order), 0, "misaligned index");
                    spans.insert(p as usize, unit << order);
                    ordered.insert(index, (order, p as usize));
                }
            }
            6 => {
                let Some((&index, &(order, a))) = ordered.iter().nth(wide % ordered.len().max(1))
                else {
                    continue;
                };
                ordered.remove(&index);
                spans.remove(a);
                // SAFETY: a live instance.
                let status = unsafe { buddyfree_free_order(bf, index, order) };
                assert_eq!(status, BuddyfreeStatus::Ok);
            }
            7 => {
                // Frees of what we do not hold: a status, never a success or a crash.
                let addr = wide.wrapping_mul(unit).wrapping_add(usize::from(c[3]));
                if !spans.starts(addr) {
                    // SAFETY: `bf` is live; the pointer is never dereferenced.
                    let status =
                        unsafe { buddyfree_free(bf, addr as *mut c_void, wide, usize::from(c[3])) };
                    assert_ne!(status, BuddyfreeStatus::Ok, "foreign free accepted");
                }
                if spans.is_empty() {
                    // SAFETY: a live instance.
                    let status = unsafe { buddyfree_free_order(bf, wide, u32::from(c[3] % 24)) };
                    assert_ne!(status, BuddyfreeStatus::Ok, "free_order with nothing live");
                }
            }
            8 => {
                // SAFETY: null handles and out pointers are answered with a status.
                unsafe {
                    let mut p = ptr::null_mut();
                    let st = buddyfree_alloc(ptr::null(), wide, 0, &mut p);
                    assert_eq!(st, BuddyfreeStatus::NullArgument);
                    let st = buddyfree_alloc(bf, wide, 0, ptr::null_mut());
                    assert_eq!(st, BuddyfreeStatus::NullArgument);
                    let st = buddyfree_free(bf, ptr::null_mut(), wide, 0);
                    assert_eq!(st, BuddyfreeStatus::NullArgument);
                    let st = buddyfree_stats(bf, ptr::null_mut());
                    assert_eq!(st, BuddyfreeStatus::NullArgument);
                }
            }
            _ => {
                let code = i32::from_le_bytes([c[1], c[2], c[3], c[0]]);
                // SAFETY: a static NUL-terminated string for every code.
                let text = unsafe { CStr::from_ptr(buddyfree_strerror(code)) };
                assert!(!text.to_bytes().is_empty());
                let i = wide % (count + 2);
                assert_eq!(buddyfree_allocator_name(i).is_null(), i >= count);
                assert_eq!(buddyfree_allocator_max_order(i) < 0, i >= count);
            }
        }
        let s = stats(bf);
        assert!(s.free_units <= s.total_units);
    }
    for (&a, &(size, align)) in &sized {
        // SAFETY: `bf` is live; the pointer is never dereferenced.
        let status = unsafe { buddyfree_free(bf, a as *mut c_void, size, align) };
        assert_eq!(status, BuddyfreeStatus::Ok);
    }
    for (&index, &(order, _)) in &ordered {
        // SAFETY: a live instance.
        let status = unsafe { buddyfree_free_order(bf, index, order) };
        assert_eq!(status, BuddyfreeStatus::Ok);
    }
    let s = stats(bf);
    assert_eq!(s.free_units, s.total_units, "units lost");
    // SAFETY: created above and destroyed once; the region outlives it.
    unsafe { buddyfree_destroy(bf) };
    drop(storage);
});

/// The live blocks' byte ranges: address -> length. Inserting one that overlaps another
/// fails: a block handed out twice.
#[derive(Default)]
struct Spans(BTreeMap<usize, usize>);

impl Spans {
    fn insert(&mut self, at: usize, len: usize) {
        if let Some((&below, &n)) = self.0.range(..=at).next_back() {
            assert!(
                below + n <= at,
                "overlap: {at:#x} inside the block at {below:#x}"
            );
        }
        if let Some((&above, _)) = self.0.range(at..).next() {
            assert!(
                at + len <= above,
                "overlap: the block at {above:#x} inside {at:#x}"
            );
        }
        self.0.insert(at, len);
    }

    fn remove(&mut self, at: usize) {
        self.0.remove(&at);
    }

    fn starts(&self, at: usize) -> bool {
        self.0.contains_key(&at)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
