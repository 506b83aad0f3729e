//! Metadata sizes in `const` context: static buffers of `metadata_bytes` (at alignment 1, as
//! a `[MaybeUninit<u8>; N]` is) hold every allocator that takes caller metadata, and the
//! constructors take exactly that many bytes at any offset.

mod metadata;

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use buddyfree::buddy::{Estranged, Knuth};
use buddyfree::llfree::LLFree;
use buddyfree::magazine::Magazine;
use buddyfree::{BlockAlloc, Config, Error, Locked, MetadataMemory, Nbbs, Nbbs4, SeqBlockAlloc};
use metadata::{each, CallerMetadata, Visit};

/// The adopter's kernel: 2^20 frames of 4 KiB (4 GiB), huge frames, four cores. It guessed
/// 256 KiB; the layout needs more.
const KERNEL: Config = Config::new(1 << 20, 9).with_cores(4);
const KERNEL_BYTES: usize = LLFree::metadata_bytes(KERNEL);
static mut KERNEL_META: [MaybeUninit<u8>; KERNEL_BYTES] = [MaybeUninit::uninit(); KERNEL_BYTES];

const SMALL: Config = Config::new(1 << 14, 10).with_cores(2);
const NBBS4_BYTES: usize = Nbbs4::metadata_bytes(SMALL);
static mut NBBS4_META: [MaybeUninit<u8>; NBBS4_BYTES] = [MaybeUninit::uninit(); NBBS4_BYTES];
const NBBS_BYTES: usize = Nbbs::metadata_bytes(SMALL);
static mut NBBS_META: [MaybeUninit<u8>; NBBS_BYTES] = [MaybeUninit::uninit(); NBBS_BYTES];
const KNUTH_BYTES: usize = Knuth::metadata_bytes(SMALL);
static mut KNUTH_META: [MaybeUninit<u8>; KNUTH_BYTES] = [MaybeUninit::uninit(); KNUTH_BYTES];
const ESTRANGED_BYTES: usize = Estranged::metadata_bytes(SMALL);
static mut ESTRANGED_META: [MaybeUninit<u8>; ESTRANGED_BYTES] =
    [MaybeUninit::uninit(); ESTRANGED_BYTES];

/// A magazine over LLFree, each in a static of its own.
const BACKEND_BYTES: usize = LLFree::metadata_bytes(SMALL);
static mut BACKEND_META: [MaybeUninit<u8>; BACKEND_BYTES] = [MaybeUninit::uninit(); BACKEND_BYTES];
const MAGAZINE_BYTES: usize = Magazine::<LLFree>::metadata_bytes(SMALL);
static mut MAGAZINE_META: [MaybeUninit<u8>; MAGAZINE_BYTES] =
    [MaybeUninit::uninit(); MAGAZINE_BYTES];

/// A magazine over LLFree in one static, cut in two by `MetadataMemory::take`.
const WHOLE_BYTES: usize = BACKEND_BYTES + MAGAZINE_BYTES;
static mut WHOLE_META: [MaybeUninit<u8>; WHOLE_BYTES] = [MaybeUninit::uninit(); WHOLE_BYTES];

/// The static `meta`, borrowed for good.
///
/// # Safety
/// Once per static in the test process.
unsafe fn take<const N: usize>(meta: *mut [MaybeUninit<u8>; N]) -> MetadataMemory {
    // SAFETY: the caller borrows each static once.
    MetadataMemory::from_static(unsafe { &mut *meta })
}

/// The `len` bytes at `base`, lent.
///
/// # Safety
/// As for `MetadataMemory::from_raw`.
unsafe fn lent(base: NonNull<u8>, len: usize) -> MetadataMemory {
    // SAFETY: passed on to our caller.
    unsafe { MetadataMemory::from_raw(base, len) }
}

/// An allocation of every order and its free.
fn each_order(a: &dyn BlockAlloc) {
    for order in 0..=a.max_order() {
        let block = a.alloc(order, 1).unwrap();
        a.free(block, order, 1).unwrap();
    }
    assert_eq!(a.free_units(), a.total_units());
}

#[test]
fn the_adopters_kernel_metadata_sized_at_compile_time() {
    // Above the kernel's guess, and at least the size it found at boot it needed.
    const { assert!(KERNEL_BYTES > 256 << 10 && KERNEL_BYTES >= 270_728) };
    // SAFETY: the one borrow of the static.
    let meta = unsafe { take(&raw mut KERNEL_META) };
    let a = LLFree::in_metadata(KERNEL, meta).unwrap();
    assert_eq!(a.total_units(), 1 << 20);
    each_order(&a);
}

#[test]
fn static_buffers_of_metadata_bytes_hold_each_allocator() {
    // SAFETY: the one borrow of each static.
    unsafe {
        each_order(&Nbbs4::in_metadata(SMALL, take(&raw mut NBBS4_META)).unwrap());
        each_order(&Nbbs::in_metadata(SMALL, take(&raw mut NBBS_META)).unwrap());
        let mut knuth = Knuth::in_metadata(SMALL, take(&raw mut KNUTH_META)).unwrap();
        let block = knuth.alloc(10).unwrap();
        knuth.free(block, 10).unwrap();
        each_order(&Locked::<Knuth>::new(knuth));
        let estranged = Estranged::in_metadata(SMALL, take(&raw mut ESTRANGED_META)).unwrap();
        each_order(&Locked::<Estranged>::new(estranged));
    }
}

#[test]
fn a_magazine_over_llfree_in_static_buffers() {
    // SAFETY: the one borrow of each static.
    let (backend, magazines) =
        unsafe { (take(&raw mut BACKEND_META), take(&raw mut MAGAZINE_META)) };
    let backend = LLFree::in_metadata(SMALL, backend).unwrap();
    let fast = Magazine::in_metadata(SMALL, backend, magazines).unwrap();
    each_order(&fast);

    // SAFETY: the one borrow of the static.
    let (backend, magazines) = unsafe { take(&raw mut WHOLE_META) }.take(BACKEND_BYTES);
    let backend = LLFree::in_metadata(SMALL, backend).unwrap();
    let fast = Magazine::in_metadata(SMALL, backend, magazines).unwrap();
    each_order(&fast);
}

/// `metadata_bytes` is the layout's size with room to align it, and the constructors take
/// exactly that many bytes at every offset from an aligned address; a byte less is refused
/// at the offset that needs all the padding.
struct ExactAtEveryOffset(Config);

impl Visit for ExactAtEveryOffset {
    fn visit<A: CallerMetadata>(&mut self) {
        let config = self.0;
        let layout = A::metadata_layout(config).unwrap();
        let bytes = A::metadata_bytes(config);
        assert_eq!(bytes, layout.size() + layout.align() - 1, "{}", A::NAME);
        let align = layout.align();
        let memory = metadata::leaked(bytes + align, align);
        let base = NonNull::from(&mut *memory).cast::<u8>();
        for offset in 0..align {
            // SAFETY: `offset + bytes` lies in `memory`, leaked; each allocator is dropped
            // before the next takes the memory.
            unsafe {
                let at = base.add(offset);
                let a = A::in_metadata(config, lent(at, bytes)).unwrap().shared();
                each_order(&a);
                drop(a);
                // One byte past an aligned address needs all `align - 1` bytes of padding.
                let short = A::in_metadata(config, lent(at, bytes - 1)).err();
                let needs_all = offset == 1;
                let expected = needs_all.then_some(Error::MetadataMisaligned);
                assert_eq!(short, expected, "{} at {offset}", A::NAME);
                let below = A::in_metadata(config, lent(at, layout.size() - 1)).err();
                assert_eq!(below, Some(Error::MetadataTooSmall), "{}", A::NAME);
            }
        }
    }
}

#[test]
fn metadata_bytes_is_exactly_enough_at_every_offset() {
    each(&mut ExactAtEveryOffset(
        Config::new(1 << 12, 9).with_cores(3),
    ));
    each(&mut ExactAtEveryOffset(
        Config::new(3 << 11, 10).with_cores(1),
    ));
}

#[test]
fn magazine_bytes_are_exactly_enough_at_every_offset() {
    let config = Config::new(1 << 12, 9).with_cores(2);
    let layout = Magazine::<LLFree>::metadata_layout(config).unwrap();
    let bytes = Magazine::<LLFree>::metadata_bytes(config);
    assert_eq!(bytes, layout.size() + layout.align() - 1);
    let memory = metadata::leaked(bytes + layout.align(), layout.align());
    let base = NonNull::from(&mut *memory).cast::<u8>();
    for offset in 0..layout.align() {
        let inner = LLFree::new(config).unwrap();
        // SAFETY: `offset + bytes` lies in `memory`, leaked; each magazine is dropped before
        // the next takes the memory.
        let memory = unsafe { lent(base.add(offset), bytes) };
        let fast = Magazine::in_metadata(config, inner, memory).unwrap();
        each_order(&fast);
    }
}
