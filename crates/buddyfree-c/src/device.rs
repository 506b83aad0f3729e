//! Device memory from C: an instance of addresses only (GPU memory, a BAR, offsets), never
//! dereferenced, freed by address alone.

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use buddyfree::heap::DeviceHeap;
use buddyfree::registry::DynAlloc;

use super::{
    build, config_of, created, layout, named_entry, status, BuddyfreeConfig, BuddyfreeStatus,
    Refusal, Tables,
};

/// A device-memory instance (opaque).
pub struct BuddyfreeDevice {
    heap: DeviceHeap<DynAlloc>,
}

/// Builds a device-memory instance of `config.units` units (which must be given) of
/// `config.unit_size` bytes from address `base` (a multiple of the unit size) and stores it
/// in `*out`. Nothing is ever read or written at these addresses. On failure
/// `buddyfree_last_error` says why.
///
/// # Safety
/// `config` must be null or point to a valid configuration whose `allocator` is null or a
/// NUL-terminated string; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_create(
    config: *const BuddyfreeConfig,
    base: u64,
    out: *mut *mut BuddyfreeDevice,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `config` and `out`.
    unsafe { create(config, base, Tables::Heap, out) }
}

/// As `buddyfree_device_create`, with the allocator's metadata in the caller's
/// `metadata_len` bytes at `metadata`, as `buddyfree_create_with_metadata` describes.
///
/// # Safety
/// As for `buddyfree_device_create`; and `metadata` must be null or valid for reads and
/// writes of `metadata_len` bytes and used by nothing else while the instance lives.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_create_with_metadata(
    config: *const BuddyfreeConfig,
    base: u64,
    metadata: *mut c_void,
    metadata_len: usize,
    out: *mut *mut BuddyfreeDevice,
) -> BuddyfreeStatus {
    let Some(metadata) = NonNull::new(metadata.cast()) else {
        return BuddyfreeStatus::NullArgument;
    };
    // SAFETY: the caller's contract on `config`, `metadata` and `out`.
    unsafe { create(config, base, Tables::Caller(metadata, metadata_len), out) }
}

/// # Safety
/// As for [`buddyfree_device_create`], and for [`build`] on `tables`.
unsafe fn create(
    config: *const BuddyfreeConfig,
    base: u64,
    tables: Tables,
    out: *mut *mut BuddyfreeDevice,
) -> BuddyfreeStatus {
    if config.is_null() || out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: non-null and valid by the caller's contract.
    let config = unsafe { *config };
    let result = (|| -> Result<BuddyfreeDevice, Refusal> {
        // SAFETY: the caller's contract on `config.allocator`.
        let entry = unsafe { named_entry(&config)? };
        // SAFETY: the caller's contract on `tables`.
        let alloc = unsafe { build(entry, config_of(&config, config.units), tables)? };
        let heap = DeviceHeap::new(base, config.unit_size, alloc)?;
        Ok(BuddyfreeDevice { heap })
    })();
    // SAFETY: `out` is non-null and writable by the caller's contract.
    unsafe { created(result, out) }
}

/// Destroys a device-memory instance (null is ignored).
///
/// # Safety
/// `dev` must be null or an instance from `buddyfree_device_create` not destroyed yet, with no
/// other call on it running or following.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_destroy(dev: *mut BuddyfreeDevice) {
    if !dev.is_null() {
        // SAFETY: made by `Box::into_raw` in `buddyfree_device_create`, destroyed once.
        drop(unsafe { Box::from_raw(dev) });
    }
}

/// The instance behind a handle, or `NullArgument`.
///
/// # Safety
/// `dev` must be null or a live instance.
unsafe fn device<'a>(
    dev: *const BuddyfreeDevice,
) -> Result<&'a DeviceHeap<DynAlloc>, BuddyfreeStatus> {
    // SAFETY: null or live by the caller's contract.
    unsafe { dev.as_ref() }
        .map(|d| &d.heap)
        .ok_or(BuddyfreeStatus::NullArgument)
}

/// Allocates `size` bytes aligned to `align` (0 for none) and stores the address in `*out`
/// (0 on failure).
///
/// # Safety
/// `dev` must be null or a live instance; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_alloc(
    dev: *const BuddyfreeDevice,
    size: usize,
    align: usize,
    out: *mut u64,
) -> BuddyfreeStatus {
    if out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: `out` is writable by the caller's contract.
    unsafe { out.write(0) };
    // SAFETY: the caller's contract on `dev`.
    let result = unsafe { device(dev) }.and_then(|d| Ok(d.alloc(layout(size, align)?, 0)?));
    // SAFETY: as above.
    unsafe { status(result, out) }
}

/// Frees the block that starts at `addr`, whatever its size.
///
/// # Safety
/// `dev` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_free(
    dev: *const BuddyfreeDevice,
    addr: u64,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `dev`.
    let result = unsafe { device(dev) }.and_then(|d| Ok(d.free_at(addr, 0)?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}
