//! The C ABI of buddyfree: allocator instances configured at run time (unit size, units,
//! maximum order, which allocator) over a caller's region or an internal mapping.
//!
//! Every function is safe to call from several threads on one instance (except
//! `buddyfree_destroy`, which must be the last call on it). Bad input — null or foreign
//! pointers, double frees, zero sizes, sizes above the maximum, alignments the region cannot
//! honour — returns a status code and changes nothing; `buddyfree_last_error` then says which
//! rule a refused configuration broke. The header `include/buddyfree.h` is generated from
//! this file by cbindgen (see `tests/header.rs`).

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::{self, NonNull};
use std::slice;
use std::sync::OnceLock;

use buddyfree::heap::Heap;
use buddyfree::registry::{self, DynAlloc};
use buddyfree::{BlockAlloc, Capabilities, Class, Error};

mod create;
mod device;
mod held;

use create::{
    build, create_sized, created, metadata_size, named_entry, read_config, Tables, UNSIZED_CONFIG,
};
pub use device::*;
pub use held::*;

/// The allocator used when the configuration names none.
const DEFAULT_ALLOCATOR: &str = "nbbs4";

/// The result of every fallible call. The values are stable: new codes are only appended.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuddyfreeStatus {
    /// Success.
    Ok = 0,
    /// No free block of the needed order.
    OutOfMemory = 1,
    /// An order above the instance's maximum order.
    BadOrder = 2,
    /// A unit index past the end of the instance.
    OutOfRange = 3,
    /// An index or pointer not at the start of a block of that order.
    Misaligned = 4,
    /// No block is allocated there (never allocated, or freed already).
    NotAllocated = 5,
    /// A block is allocated there, but of another order (size).
    OrderMismatch = 6,
    /// The configuration cannot be built (unit size not a power of two, zero units, a
    /// maximum order larger than the units, too many cores, metadata that cannot be
    /// reserved, ...); `buddyfree_last_error` names the rule.
    InvalidConfig = 7,
    /// A request of zero bytes.
    ZeroSize = 8,
    /// A request larger than the largest block.
    TooLarge = 9,
    /// An alignment that is not a power of two, or larger than the region can honour.
    BadAlign = 10,
    /// A pointer outside the instance's memory.
    ForeignPointer = 11,
    /// A required pointer argument was null.
    NullArgument = 12,
    /// No allocator of that name.
    UnknownAllocator = 13,
    /// The caller's region is too small for the configuration, or the mapping was refused
    /// (`buddyfree_last_error` gives the OS error number).
    BadRegion = 14,
    /// A unit of the block asked for at a given position is not free.
    Occupied = 15,
    /// The allocator does not offer this operation.
    Unsupported = 16,
    /// The non-blocking call would have had to wait.
    WouldBlock = 17,
    /// The caller's metadata memory is smaller than the configuration needs.
    MetadataTooSmall = 18,
    /// The caller's metadata memory is not aligned as the configuration needs.
    MetadataMisaligned = 19,
    /// An error this version of the C ABI has no code for; `buddyfree_last_error` says it.
    Other = 20,
    /// A unit of the block is held by the boot reservation (`buddyfree_reserve_range`),
    /// which only `buddyfree_free_range` gives back: a free of firmware memory.
    Reserved = 21,
}

impl From<Error> for BuddyfreeStatus {
    fn from(e: Error) -> Self {
        match e {
            Error::OutOfMemory => BuddyfreeStatus::OutOfMemory,
            Error::BadOrder => BuddyfreeStatus::BadOrder,
            Error::OutOfRange => BuddyfreeStatus::OutOfRange,
            Error::Misaligned => BuddyfreeStatus::Misaligned,
            Error::NotAllocated => BuddyfreeStatus::NotAllocated,
            Error::OrderMismatch => BuddyfreeStatus::OrderMismatch,
            Error::InvalidConfig(_) => BuddyfreeStatus::InvalidConfig,
            Error::Occupied => BuddyfreeStatus::Occupied,
            Error::Unsupported => BuddyfreeStatus::Unsupported,
            Error::WouldBlock => BuddyfreeStatus::WouldBlock,
            Error::MetadataTooSmall => BuddyfreeStatus::MetadataTooSmall,
            Error::MetadataMisaligned => BuddyfreeStatus::MetadataMisaligned,
            Error::Reserved => BuddyfreeStatus::Reserved,
            // A heap's refusals.
            Error::ZeroSize => BuddyfreeStatus::ZeroSize,
            Error::TooLarge => BuddyfreeStatus::TooLarge,
            Error::BadAlign => BuddyfreeStatus::BadAlign,
            Error::Foreign => BuddyfreeStatus::ForeignPointer,
            Error::BadRegion | Error::Mmap(_) => BuddyfreeStatus::BadRegion,
            _ => BuddyfreeStatus::Other,
        }
    }
}

/// The names `buddyfree_strerror` gives, indexed by status value.
const STATUS_NAMES: [&CStr; 22] = [
    c"ok",
    c"out of memory",
    c"order above the maximum order",
    c"index out of range",
    c"index or pointer not aligned to the block",
    c"block not allocated",
    c"block allocated with another order",
    c"invalid configuration",
    c"zero-sized request",
    c"request larger than the largest block",
    c"alignment not a power of two or larger than the region can honour",
    c"pointer outside the instance",
    c"null argument",
    c"unknown allocator",
    c"region too small or mapping refused",
    c"a unit of the block is not free",
    c"operation not supported by this allocator",
    c"the call would have had to wait",
    c"metadata memory too small",
    c"metadata memory misaligned",
    c"error without a status code of its own",
    c"a unit of the block is reserved (release it with buddyfree_free_range)",
];

/// Why a call failed: its status and, for `buddyfree_last_error`, the full description.
struct Refusal {
    status: BuddyfreeStatus,
    detail: String,
}

impl From<BuddyfreeStatus> for Refusal {
    fn from(status: BuddyfreeStatus) -> Self {
        let detail = STATUS_NAMES[status as usize].to_string_lossy().into_owned();
        Refusal { status, detail }
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal {
            status: e.into(),
            detail: e.to_string(),
        }
    }
}

thread_local! {
    /// The description `buddyfree_last_error` returns on this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `detail` as this thread's last error (an interior NUL, which no message of ours
/// has, would end it early rather than lose it).
fn set_last_error(detail: &str) {
    let bytes: Vec<u8> = detail.bytes().take_while(|&b| b != 0).collect();
    let detail = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = detail);
}

/// How to build an instance. Fields added later are appended and take 0 for their default,
/// so zero-initialise it or use designated initialisers.
///
/// Versions: the calls that take a `config_size` beside it (`buddyfree_create_sized`,
/// `buddyfree_metadata_size_sized`, `buddyfree_device_create_sized`) read only the first
/// `config_size` bytes, so pass `sizeof(BuddyfreeConfig)` as your header has it. A library
/// newer than the caller's header gives the fields the caller does not know their default
/// (0); a library older than the caller's header accepts fields it does not know only if
/// they are 0, and otherwise answers `BUDDYFREE_STATUS_INVALID_CONFIG` (a setting it
/// cannot honour is never dropped silently). `config_size` must reach at least past
/// `allocator` and must not end inside a field. New fields start past the previous
/// version's `sizeof` (never in its trailing padding), so that sizes tell versions apart.
/// The calls without a size (`buddyfree_create`, `buddyfree_create_with_metadata`,
/// `buddyfree_metadata_size`, `buddyfree_device_create`,
/// `buddyfree_device_create_with_metadata`) read the fields up to `interrupt_safe_frees`
/// and no further, in this version and every later one: callers built against this
/// header keep working with later libraries, but fields appended later are read only by
/// the sized calls.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BuddyfreeConfig {
    /// Bytes per unit, a power of two.
    pub unit_size: usize,
    /// Units to manage. With a caller's region, 0 means as many as fit; with an internal
    /// mapping it must be given.
    pub units: usize,
    /// The largest order: blocks have at most `unit_size << max_order` bytes.
    pub max_order: u32,
    /// Threads or cores expected to share the instance (sizes per-core state); 0 means 1.
    pub cores: u32,
    /// The allocator's name (see `buddyfree_allocator_name`), NUL-terminated; NULL for the
    /// default, `nbbs4`.
    pub allocator: *const c_char,
    /// The most units each core's magazine may park (the `*-magazine` allocators; the others
    /// ignore it): the longest lists within it, the shortest if none is. 0 for the default,
    /// lists that follow the units per core; `SIZE_MAX` for the longest whatever the units.
    pub parking_limit: usize,
    /// Nonzero: the per-core caches (the `*-magazine` allocators; the others ignore
    /// it) decide every free by a compare-and-swap on the block's state, never under the
    /// lock of the cache that handed the block out, so that `buddyfree_try_free` and
    /// `buddyfree_try_free_order` from an interrupt handler never answer
    /// `BUDDYFREE_STATUS_WOULD_BLOCK` because that cache is held, at one more locked
    /// instruction per free. 0 for the default: frees under the holder's lock.
    pub interrupt_safe_frees: u32,
}

/// A snapshot of an instance's counters.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BuddyfreeStats {
    /// Units not handed out.
    pub free_units: usize,
    /// Units managed.
    pub total_units: usize,
    /// Bytes per unit.
    pub unit_size: usize,
    /// The largest order.
    pub max_order: u32,
    /// The largest alignment a request may ask for.
    pub max_align: usize,
    /// The address of unit 0.
    pub base: *mut c_void,
}

impl Default for BuddyfreeConfig {
    fn default() -> Self {
        BuddyfreeConfig {
            unit_size: 0,
            units: 0,
            max_order: 0,
            cores: 0,
            allocator: ptr::null(),
            parking_limit: 0,
            interrupt_safe_frees: 0,
        }
    }
}

/// An allocator instance (opaque).
pub struct Buddyfree {
    heap: Heap<DynAlloc>,
}

/// Builds an instance and stores it in `*out`.
///
/// With `region` non-null the instance manages the caller's `region_len` bytes there (from
/// the first `unit_size`-aligned address; alignments above the region's own are refused);
/// the caller keeps owning them and must keep them alive until `buddyfree_destroy`. With
/// `region` null it maps `units * unit_size` bytes itself, aligned to the largest block.
///
/// # Safety
/// `config` must be null or point to a valid configuration whose `allocator` is null or a
/// NUL-terminated string; `out` must be null or writable; a non-null `region` must be valid
/// for reads and writes of `region_len` bytes and used by nothing else.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_create(
    config: *const BuddyfreeConfig,
    region: *mut c_void,
    region_len: usize,
    out: *mut *mut Buddyfree,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract; a configuration of the first release's fields.
    unsafe {
        create_sized(
            config,
            UNSIZED_CONFIG,
            region,
            region_len,
            Tables::Heap,
            out,
        )
    }
}

/// As `buddyfree_create` (`metadata` null) or `buddyfree_create_with_metadata` (`metadata`
/// not null; `metadata_len` is ignored when it is), reading the first `config_size` bytes
/// of `*config`: pass `sizeof(BuddyfreeConfig)`. See `BuddyfreeConfig` for how sizes of
/// older and newer headers are read; a size this library refuses is
/// `BUDDYFREE_STATUS_INVALID_CONFIG`, and `buddyfree_last_error` says why.
///
/// # Safety
/// As for `buddyfree_create_with_metadata`, and `config` must be null or valid for reads of
/// `config_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_create_sized(
    config: *const BuddyfreeConfig,
    config_size: usize,
    region: *mut c_void,
    region_len: usize,
    metadata: *mut c_void,
    metadata_len: usize,
    out: *mut *mut Buddyfree,
) -> BuddyfreeStatus {
    let tables = match NonNull::new(metadata.cast()) {
        Some(metadata) => Tables::Caller(metadata, metadata_len),
        None => Tables::Heap,
    };
    // SAFETY: the caller's contract.
    unsafe { create_sized(config, config_size, region, region_len, tables, out) }
}

/// Stores in `*size` and `*align` the bytes and alignment of the metadata that the allocator
/// `config` names needs for `config` (`units` must be given), for
/// `buddyfree_create_with_metadata` and `buddyfree_device_create_with_metadata`. Allocators
/// that cannot keep their metadata in the caller's memory (only `nbbs`, `nbbs4`, `llfree`,
/// `knuth-locked`, `estranged-locked` and the three `*-magazine` allocators can) answer
/// `BUDDYFREE_STATUS_UNSUPPORTED`.
///
/// # Safety
/// `config` must be null or point to a valid configuration whose `allocator` is null or a
/// NUL-terminated string; `size` and `align` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_metadata_size(
    config: *const BuddyfreeConfig,
    size: *mut usize,
    align: *mut usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract; a configuration of the first release's fields.
    unsafe { metadata_size(config, UNSIZED_CONFIG, size, align) }
}

/// As `buddyfree_metadata_size`, reading the first `config_size` bytes of `*config` as
/// `buddyfree_create_sized` does.
///
/// # Safety
/// As for `buddyfree_metadata_size`, and `config` must be null or valid for reads of
/// `config_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_metadata_size_sized(
    config: *const BuddyfreeConfig,
    config_size: usize,
    size: *mut usize,
    align: *mut usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract.
    unsafe { metadata_size(config, config_size, size, align) }
}

/// As `buddyfree_create`, with the allocator's metadata (its tables) in the caller's
/// `metadata_len` bytes at `metadata` (at least `buddyfree_metadata_size`'s bytes at its
/// alignment), not on the heap; only the small instance handle is. The caller keeps owning
/// that memory and must keep it alive, untouched, until `buddyfree_destroy`. Too little or
/// misaligned memory is `BUDDYFREE_STATUS_METADATA_TOO_SMALL` or
/// `BUDDYFREE_STATUS_METADATA_MISALIGNED`; an allocator that cannot do this is
/// `BUDDYFREE_STATUS_UNSUPPORTED`.
///
/// # Safety
/// As for `buddyfree_create`; and `metadata` must be null or valid for reads and writes of
/// `metadata_len` bytes and used by nothing else while the instance lives.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_create_with_metadata(
    config: *const BuddyfreeConfig,
    region: *mut c_void,
    region_len: usize,
    metadata: *mut c_void,
    metadata_len: usize,
    out: *mut *mut Buddyfree,
) -> BuddyfreeStatus {
    let Some(metadata) = NonNull::new(metadata.cast()) else {
        return BuddyfreeStatus::NullArgument;
    };
    let tables = Tables::Caller(metadata, metadata_len);
    // SAFETY: the caller's contract; a configuration of the first release's fields.
    unsafe { create_sized(config, UNSIZED_CONFIG, region, region_len, tables, out) }
}

/// A NUL-terminated description of why the last `buddyfree_create` or
/// `buddyfree_device_create` on the calling thread failed, naming the rule a refused
/// configuration broke (e.g. "invalid configuration: more cores than MAX_CORES (4096)") or
/// the OS error of a refused mapping; empty after a success or before any call. Never NULL;
/// valid until the next create call on this thread.
#[no_mangle]
pub extern "C" fn buddyfree_last_error() -> *const c_char {
    // The string lives in this thread's slot until the next `set_last_error` replaces it.
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Destroys an instance (null is ignored). Blocks still allocated are released with it; a
/// caller's region is not freed.
///
/// # Safety
/// `bf` must be null or an instance from `buddyfree_create` not destroyed yet, with no other
/// call on it running or following.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_destroy(bf: *mut Buddyfree) {
    if !bf.is_null() {
        // SAFETY: made by `Box::into_raw` in `buddyfree_create`, destroyed once.
        drop(unsafe { Box::from_raw(bf) });
    }
}

/// The instance behind a handle, or `NullArgument`.
///
/// # Safety
/// `bf` must be null or a live instance.
unsafe fn instance<'a>(bf: *const Buddyfree) -> Result<&'a Buddyfree, BuddyfreeStatus> {
    // SAFETY: null or live by the caller's contract.
    unsafe { bf.as_ref() }.ok_or(BuddyfreeStatus::NullArgument)
}

/// Turns a result into a status, writing the value through `out` on success.
///
/// # Safety
/// `out` must be null (the value is dropped) or writable.
unsafe fn status<T>(result: Result<T, BuddyfreeStatus>, out: *mut T) -> BuddyfreeStatus {
    match result {
        Ok(value) => {
            if !out.is_null() {
                // SAFETY: writable by the caller's contract.
                unsafe { out.write(value) };
            }
            BuddyfreeStatus::Ok
        }
        Err(status) => status,
    }
}

/// A layout from C's size and alignment (0 means none), for an instance whose blocks are
/// aligned to at most `max_align` bytes. What the header promises: an alignment that is not
/// a power of two is `BadAlign`, and so is one above `max_align`; a size no block can hold
/// is `TooLarge`. A pair that `Layout` cannot hold (the size rounded up to the alignment
/// past `isize::MAX`) gets the answer the heap gives a request it could hold: `BadAlign`
/// for an alignment above `max_align` (the heap's first check), else `TooLarge` (the
/// largest block of a heap in memory is at most 2^62 bytes, far below such a size).
fn layout(
    size: usize,
    align: usize,
    max_align: usize,
) -> Result<std::alloc::Layout, BuddyfreeStatus> {
    let align = align.max(1);
    if !align.is_power_of_two() {
        return Err(BuddyfreeStatus::BadAlign);
    }
    std::alloc::Layout::from_size_align(size, align).map_err(|_| match align > max_align {
        true => BuddyfreeStatus::BadAlign,
        false => BuddyfreeStatus::TooLarge,
    })
}

/// Allocates at least `size` bytes aligned to `align` (0 for no requirement) and stores the
/// address in `*out` (set to NULL on failure). Every call that takes a size and an
/// alignment checks them in this order: an alignment that is not a power of two is
/// `BUDDYFREE_STATUS_BAD_ALIGN`; a size of 0 `BUDDYFREE_STATUS_ZERO_SIZE`; an alignment
/// above the instance's `max_align` (`buddyfree_stats`) `BUDDYFREE_STATUS_BAD_ALIGN`; more
/// bytes than the largest block (`unit_size << max_order`) `BUDDYFREE_STATUS_TOO_LARGE`.
///
/// # Safety
/// `bf` must be null or a live instance; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_alloc(
    bf: *const Buddyfree,
    size: usize,
    align: usize,
    out: *mut *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf` and `out`.
    unsafe { alloc_ptr(bf, size, align, out, Heap::alloc) }
}

/// Like `buddyfree_alloc`, but never waits (for interrupt or signal context): where the
/// allocator would wait for a lock or another thread, returns `BUDDYFREE_STATUS_WOULD_BLOCK`;
/// allocators without that guarantee return `BUDDYFREE_STATUS_UNSUPPORTED`. Of the blocks
/// parked in per-core caches it gives back only those of caches whose locks are free at
/// once (see `buddyfree_drain`).
///
/// # Safety
/// `bf` must be null or a live instance; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_try_alloc(
    bf: *const Buddyfree,
    size: usize,
    align: usize,
    out: *mut *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf` and `out`.
    unsafe { alloc_ptr(bf, size, align, out, Heap::try_alloc) }
}

/// Stores in `*out` the address of the block `alloc` gets from `bf`'s heap for `size` and
/// `align` (NULL on failure): the body of both allocations by size.
///
/// # Safety
/// `bf` must be null or a live instance; `out` must be null or writable.
unsafe fn alloc_ptr(
    bf: *const Buddyfree,
    size: usize,
    align: usize,
    out: *mut *mut c_void,
    alloc: impl FnOnce(&Heap<DynAlloc>, std::alloc::Layout) -> Result<NonNull<u8>, Error>,
) -> BuddyfreeStatus {
    if out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: `out` is writable by the caller's contract.
    unsafe { out.write(ptr::null_mut()) };
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| {
        let p = alloc(&bf.heap, layout(size, align, bf.heap.max_align())?)?;
        Ok(p.as_ptr().cast())
    });
    // SAFETY: as above.
    unsafe { status(result, out) }
}

/// Frees the block at `ptr` allocated with this `size` and `align`. A null or foreign
/// pointer, a pointer not at the start of a block, a size of another order or a double free
/// returns an error code and changes nothing.
///
/// # Safety
/// `bf` must be null or a live instance. `ptr` is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_free(
    bf: *const Buddyfree,
    ptr: *mut c_void,
    size: usize,
    align: usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { free_ptr(bf, ptr, size, align, Heap::free) }
}

/// Like `buddyfree_free`, but never waits (for interrupt or signal context, where the
/// interrupted code may hold the lock a free would wait for): where the allocator would
/// wait, returns `BUDDYFREE_STATUS_WOULD_BLOCK` and changes nothing; allocators without that
/// guarantee return `BUDDYFREE_STATUS_UNSUPPORTED` (as `buddyfree_try_free_order`).
///
/// # Safety
/// `bf` must be null or a live instance. `ptr` is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_try_free(
    bf: *const Buddyfree,
    ptr: *mut c_void,
    size: usize,
    align: usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { free_ptr(bf, ptr, size, align, Heap::try_free) }
}

/// Frees `ptr` of `size` and `align` from `bf`'s heap with `free`: the body of both frees
/// by size.
///
/// # Safety
/// `bf` must be null or a live instance.
unsafe fn free_ptr(
    bf: *const Buddyfree,
    ptr: *mut c_void,
    size: usize,
    align: usize,
    free: impl FnOnce(&Heap<DynAlloc>, *mut u8, std::alloc::Layout) -> Result<(), Error>,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| {
        if ptr.is_null() {
            return Err(BuddyfreeStatus::NullArgument);
        }
        Ok(free(
            &bf.heap,
            ptr.cast(),
            layout(size, align, bf.heap.max_align())?,
        )?)
    });
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// Allocates a block of `2^order` units; stores its unit index in `*index_out` and its
/// address in `*ptr_out` (either may be NULL).
///
/// # Safety
/// `bf` must be null or a live instance; `index_out` and `ptr_out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_alloc_order(
    bf: *const Buddyfree,
    order: u32,
    index_out: *mut usize,
    ptr_out: *mut *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| Ok(bf.heap.alloc_index(order)?));
    // SAFETY: the caller's contract on the outputs.
    unsafe { write_pair(result, index_out, ptr_out) }
}

/// Class of memory the owner can move or reclaim (user pages, page cache): the default
/// (Rust's `Class::MOVABLE`).
pub const BUDDYFREE_CLASS_MOVABLE: u8 = 0;
/// Class of memory that stays where it is until freed (kernel objects, page tables, DMA
/// buffers; `Class::UNMOVABLE`).
pub const BUDDYFREE_CLASS_UNMOVABLE: u8 = 1;
/// Class of huge frames, kept apart from small blocks (`Class::HUGE`).
pub const BUDDYFREE_CLASS_HUGE: u8 = 2;

/// Like `buddyfree_alloc_order`, for memory of kind `class` (`BUDDYFREE_CLASS_*`, or another
/// number the allocator's placement policy knows): allocators that place kinds apart
/// (`llfree-classes`: unmovable, movable and huge requests in trees of their own) use it to
/// keep them apart; the others ignore it. Frees do not name the class.
///
/// # Safety
/// `bf` must be null or a live instance; `index_out` and `ptr_out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_alloc_class(
    bf: *const Buddyfree,
    order: u32,
    class: u8,
    index_out: *mut usize,
    ptr_out: *mut *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }
        .and_then(|bf| Ok(bf.heap.alloc_index_class(order, Class::new(class))?));
    // SAFETY: the caller's contract on the outputs.
    unsafe { write_pair(result, index_out, ptr_out) }
}

/// Frees the block of `2^order` units starting at unit `index`.
///
/// # Safety
/// `bf` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_free_order(
    bf: *const Buddyfree,
    index: usize,
    order: u32,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| Ok(bf.heap.free_index(index, order)?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// Allocates up to `n` blocks of `2^order` units in one call and stores their unit indices
/// in `indices[0 .. *got_out]`: fewer than `n` only where a further allocation would fail
/// (LLFree claims the free blocks of one bit-field word with one compare-and-swap). Where
/// not even one block can be had, returns that error (`BUDDYFREE_STATUS_OUT_OF_MEMORY`,
/// `BUDDYFREE_STATUS_BAD_ORDER`) with `*got_out` 0. `got_out` may be NULL.
///
/// # Safety
/// `bf` must be null or a live instance; `indices` must be null or writable for `n`
/// entries; `got_out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_alloc_bulk(
    bf: *const Buddyfree,
    order: u32,
    indices: *mut usize,
    n: usize,
    got_out: *mut usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| {
        if indices.is_null() {
            return Err(BuddyfreeStatus::NullArgument);
        }
        // SAFETY: not null, and writable for `n` entries by the caller's contract.
        let out = unsafe { slice::from_raw_parts_mut(indices, n) };
        Ok(bf.heap.alloc_bulk(order, out)?)
    });
    // SAFETY: the caller's contract on `got_out`.
    unsafe { counted(result.map_err(|e| (0, e)), got_out) }
}

/// Frees the `n` blocks of `2^order` units whose unit indices are `indices[0 .. n]`, in that
/// order, with the checks of `buddyfree_free_order`, stopping at the first one refused: its
/// status is returned, `*done_out` gets its position, and it and the blocks after it stay
/// allocated. On success `*done_out` is `n`. `done_out` may be NULL.
///
/// # Safety
/// `bf` must be null or a live instance; `indices` must be null or readable for `n` entries;
/// `done_out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_free_bulk(
    bf: *const Buddyfree,
    indices: *const usize,
    n: usize,
    order: u32,
    done_out: *mut usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = match unsafe { instance(bf) } {
        Err(e) => Err((0, e)),
        Ok(_) if indices.is_null() => Err((0, BuddyfreeStatus::NullArgument)),
        Ok(bf) => {
            // SAFETY: not null, and readable for `n` entries by the caller's contract.
            let blocks = unsafe { slice::from_raw_parts(indices, n) };
            bf.heap
                .free_bulk(blocks, order)
                .map(|()| n)
                .map_err(|(k, e)| (k, e.into()))
        }
    };
    // SAFETY: the caller's contract on `done_out`.
    unsafe { counted(result, done_out) }
}

/// Turns a count, or an error and the count before it, into a status, writing the count
/// through `out` where it is not null.
///
/// # Safety
/// `out` must be null or writable.
unsafe fn counted(
    result: Result<usize, (usize, BuddyfreeStatus)>,
    out: *mut usize,
) -> BuddyfreeStatus {
    let (count, code) = match result {
        Ok(n) => (n, BuddyfreeStatus::Ok),
        Err(failed) => failed,
    };
    if !out.is_null() {
        // SAFETY: writable by the caller's contract.
        unsafe { out.write(count) };
    }
    code
}

/// Runs `f` on a live instance's block allocator and turns its answer into a status.
///
/// # Safety
/// `bf` must be null or a live instance.
unsafe fn on_blocks(
    bf: *const Buddyfree,
    f: impl FnOnce(&DynAlloc) -> Result<(), Error>,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| Ok(f(bf.heap.allocator())?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// Like `buddyfree_alloc_order` (on the calling thread's core), but never waits (for
/// interrupt or signal context): where the allocator would wait for a lock or another
/// thread, returns `BUDDYFREE_STATUS_WOULD_BLOCK`; allocators without that guarantee return
/// `BUDDYFREE_STATUS_UNSUPPORTED`.
///
/// # Safety
/// `bf` must be null or a live instance; `index_out` and `ptr_out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_try_alloc_order(
    bf: *const Buddyfree,
    order: u32,
    index_out: *mut usize,
    ptr_out: *mut *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| Ok(bf.heap.try_alloc_index(order)?));
    // SAFETY: the caller's contract on the outputs.
    unsafe { write_pair(result, index_out, ptr_out) }
}

/// Like `buddyfree_free_order`, but never waits (for interrupt or signal context, where the
/// interrupted code may hold the lock a free would wait for): where the allocator would
/// wait, returns `BUDDYFREE_STATUS_WOULD_BLOCK` and changes nothing; allocators without that
/// guarantee return `BUDDYFREE_STATUS_UNSUPPORTED`. Over the `*-magazine` allocators, a
/// block whose cache (the one that handed it out) is held answers
/// `BUDDYFREE_STATUS_WOULD_BLOCK` (unless the instance was built with
/// `interrupt_safe_frees`), and one that its cache cannot take without a spill goes
/// straight back to the allocator behind it.
///
/// # Safety
/// `bf` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_try_free_order(
    bf: *const Buddyfree,
    index: usize,
    order: u32,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { on_blocks(bf, |a| a.try_free(index, order, buddyfree::core_hint())) }
}

/// Gives every block parked in per-core caches (the `*-magazine` allocators) back
/// to the allocator, so that they can merge into larger blocks again. An allocation that
/// finds no block drains by itself; `buddyfree_try_alloc_order` and `buddyfree_try_alloc`
/// give back only the blocks of the caches whose locks are free at once (a drain may wait):
/// drain before a burst of those that needs large blocks (`buddyfree_drain_core` when one
/// core goes offline). Allocators without caches do nothing.
///
/// # Safety
/// `bf` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_drain(bf: *const Buddyfree) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe {
        on_blocks(bf, |a| {
            a.drain();
            Ok(())
        })
    }
}

/// Gives back what core `core` alone holds (its per-core cache; with LLFree, its reserved
/// tree), and nothing of the other cores': for a core that goes offline. Waits, like
/// `buddyfree_drain`, if another thread holds that core (`buddyfree_with_core`). `core` is
/// reduced modulo the instance's cores, as in every call. Allocators whose caches are not
/// per core drain them all; allocators without caches do nothing.
///
/// # Safety
/// `bf` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_drain_core(
    bf: *const Buddyfree,
    core: usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe {
        on_blocks(bf, |a| {
            a.drain_core(core);
            Ok(())
        })
    }
}

/// Allocates the block of `2^order` units at unit `index` if all its units are free
/// (`BUDDYFREE_STATUS_OCCUPIED` otherwise, changing nothing).
///
/// # Safety
/// `bf` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_alloc_at(
    bf: *const Buddyfree,
    index: usize,
    order: u32,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { on_blocks(bf, |a| a.alloc_at(index, order, 0)) }
}

/// Allocates every unit of `start .. start + len` (unit indices), as the largest aligned
/// blocks: a hole or reserved range of a memory map. If one is not free, nothing changes.
///
/// # Safety
/// `bf` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_reserve_range(
    bf: *const Buddyfree,
    start: usize,
    len: usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { on_blocks(bf, |a| a.reserve_range(start, len, 0)) }
}

/// Frees every unit of `start .. start + len` (unit indices), which must all be allocated,
/// as the largest aligned blocks, ragged ends included: a usable range of a memory map on an
/// instance whose units were all reserved first (`buddyfree_reserve_range(bf, 0, units)`).
/// Where an end cuts a block, it must not race with allocations (see the Rust docs of
/// `buddyfree::range`).
///
/// # Safety
/// `bf` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_free_range(
    bf: *const Buddyfree,
    start: usize,
    len: usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { on_blocks(bf, |a| a.free_range(start, len, 0)) }
}

/// Stores in `*order_out` the order of the live block that starts at `ptr`.
///
/// # Safety
/// `bf` must be null or a live instance; `order_out` must be null or writable. `ptr` is
/// never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_order_at(
    bf: *const Buddyfree,
    ptr: *const c_void,
    order_out: *mut u32,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| {
        let index = bf.heap.index_of(ptr.cast())?;
        Ok(bf.heap.allocator().order_at(index)?)
    });
    // SAFETY: the caller's contract on `order_out`.
    unsafe { status(result, order_out) }
}

/// Frees the block that starts at `ptr`, whatever its size (the allocator knows its order).
///
/// # Safety
/// `bf` must be null or a live instance. `ptr` is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_free_at(
    bf: *const Buddyfree,
    ptr: *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { free_at_ptr(bf, ptr, Heap::free_at) }
}

/// Like `buddyfree_free_at`, but never waits (for interrupt or signal context): where
/// finding the block's size or freeing it would wait for a lock, returns
/// `BUDDYFREE_STATUS_WOULD_BLOCK` and changes nothing; allocators that cannot promise it
/// return `BUDDYFREE_STATUS_UNSUPPORTED`.
///
/// # Safety
/// `bf` must be null or a live instance. `ptr` is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_try_free_at(
    bf: *const Buddyfree,
    ptr: *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    unsafe { free_at_ptr(bf, ptr, Heap::try_free_at) }
}

/// Frees the block at `ptr` of `bf`'s heap, whatever its size, with `free`: the body of both
/// frees by address alone.
///
/// # Safety
/// `bf` must be null or a live instance.
unsafe fn free_at_ptr(
    bf: *const Buddyfree,
    ptr: *mut c_void,
    free: impl FnOnce(&Heap<DynAlloc>, *mut u8) -> Result<(), Error>,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.and_then(|bf| Ok(free(&bf.heap, ptr.cast())?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// Writes an index and an address to the outputs that are not null (0 and NULL on failure).
///
/// # Safety
/// `index_out` and `ptr_out` must be null or writable.
unsafe fn write_pair(
    result: Result<(usize, NonNull<u8>), BuddyfreeStatus>,
    index_out: *mut usize,
    ptr_out: *mut *mut c_void,
) -> BuddyfreeStatus {
    let mut pair = (0, ptr::null_mut());
    let result = result.map(|(index, p)| (index, p.as_ptr().cast::<c_void>()));
    // SAFETY: `pair` is a local.
    let code = unsafe { status(result, &mut pair) };
    // SAFETY: null or writable by the caller's contract.
    unsafe {
        if !index_out.is_null() {
            index_out.write(pair.0);
        }
        if !ptr_out.is_null() {
            ptr_out.write(pair.1);
        }
    }
    code
}

/// Fills `*out` with the instance's counters.
///
/// # Safety
/// `bf` must be null or a live instance; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_stats(
    bf: *const Buddyfree,
    out: *mut BuddyfreeStats,
) -> BuddyfreeStatus {
    if out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.map(|bf| {
        let heap = &bf.heap;
        BuddyfreeStats {
            free_units: heap.allocator().free_units(),
            total_units: heap.allocator().total_units(),
            unit_size: heap.unit(),
            max_order: heap.allocator().max_order(),
            max_align: heap.max_align(),
            base: heap.base().as_ptr().cast(),
        }
    });
    // SAFETY: `out` is non-null and writable by the caller's contract.
    unsafe { status(result, out) }
}

/// A static, NUL-terminated description of a status code; unknown codes get
/// "unknown status code". Never NULL.
#[no_mangle]
pub extern "C" fn buddyfree_strerror(code: i32) -> *const c_char {
    let name = usize::try_from(code)
        .ok()
        .and_then(|i| STATUS_NAMES.get(i))
        .copied()
        .unwrap_or(c"unknown status code");
    name.as_ptr()
}

/// The number of allocators that can be named in a configuration.
#[no_mangle]
pub extern "C" fn buddyfree_allocator_count() -> usize {
    registry::entries().len()
}

/// The name of allocator `i` (static, NUL-terminated), or NULL if `i` is out of range.
#[no_mangle]
pub extern "C" fn buddyfree_allocator_name(i: usize) -> *const c_char {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        registry::entries()
            .iter()
            .filter_map(|e| CString::new(e.name).ok())
            .collect()
    });
    names.get(i).map_or(ptr::null(), |n| n.as_ptr())
}

/// The largest `max_order` allocator `i` accepts in a [`BuddyfreeConfig`] (0 for allocators
/// that serve single units only), or -1 if `i` is out of range.
#[no_mangle]
pub extern "C" fn buddyfree_allocator_max_order(i: usize) -> i32 {
    registry::entries()
        .get(i)
        .map_or(-1, |e| i32::try_from(e.max_order).unwrap_or(i32::MAX))
}

/// Capability bit: `buddyfree_try_alloc`, `buddyfree_try_alloc_order` and
/// `buddyfree_device_try_alloc` never answer `BUDDYFREE_STATUS_UNSUPPORTED` (Rust's
/// `Capabilities::TRY_ALLOC`).
pub const BUDDYFREE_CAP_TRY_ALLOC: u32 = 1;
/// Capability bit: `buddyfree_try_free`, `buddyfree_try_free_order` and
/// `buddyfree_device_try_free` never answer `BUDDYFREE_STATUS_UNSUPPORTED`
/// (`Capabilities::TRY_FREE`).
pub const BUDDYFREE_CAP_TRY_FREE: u32 = 2;
/// Capability bit: `buddyfree_alloc_at` and `buddyfree_reserve_range` never answer
/// `BUDDYFREE_STATUS_UNSUPPORTED`, nor does `buddyfree_free_range` (with
/// `BUDDYFREE_CAP_ORDER_AT`) where an end of its range cuts a live block
/// (`Capabilities::ALLOC_AT`).
pub const BUDDYFREE_CAP_ALLOC_AT: u32 = 4;
/// Capability bit: the allocator knows the block at a unit, so `buddyfree_order_at`,
/// `buddyfree_free_at`, `buddyfree_device_free`, `buddyfree_device_core_free` and
/// `buddyfree_free_range` (see `BUDDYFREE_CAP_ALLOC_AT`) never answer
/// `BUDDYFREE_STATUS_UNSUPPORTED` (`Capabilities::BLOCK_OF`).
pub const BUDDYFREE_CAP_ORDER_AT: u32 = 8;
/// Capability bit: it knows it without waiting, so `buddyfree_try_free_at` and
/// `buddyfree_device_try_free_at` (with `BUDDYFREE_CAP_TRY_FREE`) never answer
/// `BUDDYFREE_STATUS_UNSUPPORTED` (`Capabilities::TRY_BLOCK_OF`).
pub const BUDDYFREE_CAP_TRY_ORDER_AT: u32 = 16;

/// Stores in `*out` the `BUDDYFREE_CAP_*` bits of the operations the instance's allocator
/// offers: a call whose bit is set never answers `BUDDYFREE_STATUS_UNSUPPORTED`, and one
/// whose bit is clear does (per-core caches in front of an allocator that lacks it may
/// still serve some calls themselves; do not rely on those). The same for the instance's
/// whole life; bits this version does not know stay 0.
///
/// # Safety
/// `bf` must be null or a live instance; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_capabilities(
    bf: *const Buddyfree,
    out: *mut u32,
) -> BuddyfreeStatus {
    if out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: the caller's contract on `bf`.
    let result = unsafe { instance(bf) }.map(|bf| bf.heap.allocator().capabilities().bits());
    // SAFETY: `out` is non-null and writable by the caller's contract.
    unsafe { status(result, out) }
}

/// Stores in `*out` the `BUDDYFREE_CAP_*` bits of allocator `i` (see
/// `buddyfree_allocator_name`), as `buddyfree_capabilities` gives them for every instance of
/// it, without building one; `BUDDYFREE_STATUS_OUT_OF_RANGE` if `i` is out of range.
///
/// # Safety
/// `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_allocator_capabilities(
    i: usize,
    out: *mut u32,
) -> BuddyfreeStatus {
    if out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    let result = registry::entries()
        .get(i)
        .map(|e| e.capabilities.bits())
        .ok_or(BuddyfreeStatus::OutOfRange);
    // SAFETY: `out` is non-null and writable by the caller's contract.
    unsafe { status(result, out) }
}

/// The C bits of `Capabilities` are its own, flag by flag.
const _: () = {
    assert!(BUDDYFREE_CAP_TRY_ALLOC == Capabilities::TRY_ALLOC.bits());
    assert!(BUDDYFREE_CAP_TRY_FREE == Capabilities::TRY_FREE.bits());
    assert!(BUDDYFREE_CAP_ALLOC_AT == Capabilities::ALLOC_AT.bits());
    assert!(BUDDYFREE_CAP_ORDER_AT == Capabilities::BLOCK_OF.bits());
    assert!(BUDDYFREE_CAP_TRY_ORDER_AT == Capabilities::TRY_BLOCK_OF.bits());
    let all = BUDDYFREE_CAP_TRY_ALLOC
        | BUDDYFREE_CAP_TRY_FREE
        | BUDDYFREE_CAP_ALLOC_AT
        | BUDDYFREE_CAP_ORDER_AT
        | BUDDYFREE_CAP_TRY_ORDER_AT;
    assert!(all == Capabilities::ALL.bits(), "a flag without a C bit");
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_name_and_unknown_codes_are_named() {
        for code in 0..STATUS_NAMES.len() as i32 {
            // SAFETY: `buddyfree_strerror` returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(buddyfree_strerror(code)) };
            assert!(!s.is_empty());
        }
        // The last status indexes the last name.
        assert_eq!(BuddyfreeStatus::Reserved as usize, STATUS_NAMES.len() - 1);
        for code in [-1, 22, i32::MAX, i32::MIN] {
            // SAFETY: as above.
            let s = unsafe { CStr::from_ptr(buddyfree_strerror(code)) };
            assert_eq!(s, c"unknown status code");
        }
    }
}
