//! Device memory from C: an instance of addresses only (GPU memory, a BAR, offsets), never
//! dereferenced, freed by address alone.

use std::alloc::Layout;
use std::ffi::c_void;
use std::ptr::{self, NonNull};

use buddyfree::heap::{DeviceHeap, HeldDevice};
use buddyfree::registry::DynAlloc;
use buddyfree::Error;

use super::held::{lent, run_held};
use super::{
    build, created, layout, named_entry, read_config, status, BuddyfreeConfig, BuddyfreeStatus,
    Refusal, Tables, UNSIZED_CONFIG,
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
    // SAFETY: the caller's contract on `config` and `out`; a configuration of the first
    // release's fields.
    unsafe { create(config, UNSIZED_CONFIG, base, Tables::Heap, out) }
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
    let tables = Tables::Caller(metadata, metadata_len);
    // SAFETY: the caller's contract on `config`, `metadata` and `out`; a configuration of
    // the first release's fields.
    unsafe { create(config, UNSIZED_CONFIG, base, tables, out) }
}

/// As `buddyfree_device_create` (`metadata` null) or
/// `buddyfree_device_create_with_metadata` (`metadata` not null), reading the first
/// `config_size` bytes of `*config` as `buddyfree_create_sized` does: pass
/// `sizeof(BuddyfreeConfig)`.
///
/// # Safety
/// As for `buddyfree_device_create_with_metadata`, and `config` must be null or valid for
/// reads of `config_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_create_sized(
    config: *const BuddyfreeConfig,
    config_size: usize,
    base: u64,
    metadata: *mut c_void,
    metadata_len: usize,
    out: *mut *mut BuddyfreeDevice,
) -> BuddyfreeStatus {
    let tables = match NonNull::new(metadata.cast()) {
        Some(metadata) => Tables::Caller(metadata, metadata_len),
        None => Tables::Heap,
    };
    // SAFETY: the caller's contract.
    unsafe { create(config, config_size, base, tables, out) }
}

/// # Safety
/// As for [`buddyfree_device_create_sized`], and for [`build`] on `tables`.
unsafe fn create(
    config: *const BuddyfreeConfig,
    config_size: usize,
    base: u64,
    tables: Tables,
    out: *mut *mut BuddyfreeDevice,
) -> BuddyfreeStatus {
    if config.is_null() || out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    let result = (|| -> Result<BuddyfreeDevice, Refusal> {
        // SAFETY: readable for `config_size` bytes by the caller's contract.
        let config = unsafe { read_config(config, config_size)? };
        // SAFETY: the caller's contract on `config.allocator`.
        let entry = unsafe { named_entry(&config)? };
        // SAFETY: the caller's contract on `tables`.
        let alloc = unsafe { build(entry, &config, config.units, tables)? };
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
/// (0 on failure). It and `buddyfree_device_free` run on the calling thread's core (one per
/// thread, as for `buddyfree_alloc`).
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
    // SAFETY: the caller's contract on `dev` and `out`.
    unsafe {
        alloc_into(out, size, align, device(dev), |d, l| {
            d.alloc(l, buddyfree::core_hint())
        })
    }
}

/// Like `buddyfree_device_alloc`, but never waits (for interrupt or signal context), as
/// `buddyfree_try_alloc`: `BUDDYFREE_STATUS_WOULD_BLOCK` where the allocator would wait,
/// `BUDDYFREE_STATUS_UNSUPPORTED` where it cannot promise not to.
///
/// # Safety
/// `dev` must be null or a live instance; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_try_alloc(
    dev: *const BuddyfreeDevice,
    size: usize,
    align: usize,
    out: *mut u64,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `dev` and `out`.
    unsafe {
        alloc_into(out, size, align, device(dev), |d, l| {
            d.try_alloc(l, buddyfree::core_hint())
        })
    }
}

/// Stores the address of a block of `size` bytes aligned to `align` from `alloc` on
/// `target` in `*out` (0 on failure): the body of both allocation calls.
///
/// # Safety
/// `out` must be null or writable.
unsafe fn alloc_into<T: MaxAlign>(
    out: *mut u64,
    size: usize,
    align: usize,
    target: Result<T, BuddyfreeStatus>,
    alloc: impl FnOnce(T, Layout) -> Result<u64, Error>,
) -> BuddyfreeStatus {
    if out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: `out` is writable by the caller's contract.
    unsafe { out.write(0) };
    let result = target.and_then(|t| {
        let layout = layout(size, align, t.max_align())?;
        Ok(alloc(t, layout)?)
    });
    // SAFETY: as above.
    unsafe { status(result, out) }
}

/// What a size and alignment are checked against: the largest alignment of the heap that
/// `alloc_into` allocates from.
trait MaxAlign {
    fn max_align(&self) -> usize;
}

impl MaxAlign for &DeviceHeap<DynAlloc> {
    fn max_align(&self) -> usize {
        DeviceHeap::max_align(self)
    }
}

impl MaxAlign for &mut HeldDevice<'_, DynAlloc> {
    fn max_align(&self) -> usize {
        HeldDevice::max_align(self)
    }
}

/// `buddyfree_capabilities` for a device instance.
///
/// # Safety
/// `dev` must be null or a live instance; `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_capabilities(
    dev: *const BuddyfreeDevice,
    out: *mut u32,
) -> BuddyfreeStatus {
    if out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: the caller's contract on `dev`.
    let result = unsafe { device(dev) }.map(|d| d.allocator().capabilities().bits());
    // SAFETY: `out` is non-null and writable by the caller's contract.
    unsafe { status(result, out) }
}

/// `buddyfree_drain` for a device instance.
///
/// # Safety
/// `dev` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_drain(dev: *const BuddyfreeDevice) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `dev`.
    let result = unsafe { device(dev) }.map(|d| d.allocator().drain());
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// `buddyfree_drain_core` for a device instance.
///
/// # Safety
/// `dev` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_drain_core(
    dev: *const BuddyfreeDevice,
    core: usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `dev`.
    let result = unsafe { device(dev) }.map(|d| d.allocator().drain_core(core));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
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
    let result = unsafe { device(dev) }.and_then(|d| Ok(d.free_at(addr, buddyfree::core_hint())?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// Like `buddyfree_device_free` with the block's `size` and `align` as allocated, but never
/// waits (for interrupt or signal context), as `buddyfree_try_free`:
/// `BUDDYFREE_STATUS_WOULD_BLOCK`, changing nothing, where the allocator would wait.
///
/// # Safety
/// `dev` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_try_free(
    dev: *const BuddyfreeDevice,
    addr: u64,
    size: usize,
    align: usize,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `dev`.
    let result = unsafe { device(dev) }.and_then(|d| {
        let layout = layout(size, align, d.max_align())?;
        Ok(d.try_free(addr, layout, buddyfree::core_hint())?)
    });
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// Like `buddyfree_device_free` (by address alone), but never waits: where finding the
/// block's size or freeing it would wait for a lock, returns `BUDDYFREE_STATUS_WOULD_BLOCK`
/// and changes nothing; allocators that cannot promise it return
/// `BUDDYFREE_STATUS_UNSUPPORTED`.
///
/// # Safety
/// `dev` must be null or a live instance.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_try_free_at(
    dev: *const BuddyfreeDevice,
    addr: u64,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `dev`.
    let result =
        unsafe { device(dev) }.and_then(|d| Ok(d.try_free_at(addr, buddyfree::core_hint())?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}

/// A core of a device instance held by `buddyfree_device_with_core` (opaque), valid only
/// inside its callback.
pub struct BuddyfreeDeviceCore {
    _opaque: [u8; 0],
}

/// The callback of `buddyfree_device_with_core`: the held core and the caller's `arg`
/// (`unsafe`: it is the caller's C code, which may use `held` only until it returns).
pub type BuddyfreeDeviceCoreFn =
    Option<unsafe extern "C" fn(core: *mut BuddyfreeDeviceCore, arg: *mut c_void)>;

/// `buddyfree_with_core` for a device instance: calls `f(held, arg)` once with core `core`
/// held for the caller; `buddyfree_device_core_alloc` and `buddyfree_device_core_free` on
/// `held` then take no lock over the `*-magazine` allocators. The same rules:
/// keep the callback short, call no other function on this instance inside it, and use
/// `held` only until it returns.
///
/// # Safety
/// `dev` must be null or a live instance; `f` must be null or a function that is safe to
/// call with `held` and `arg`.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_with_core(
    dev: *const BuddyfreeDevice,
    core: u32,
    f: BuddyfreeDeviceCoreFn,
    arg: *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `dev` and `f`.
    unsafe {
        run_held(device(dev), f, arg, |dev, call| {
            dev.with_core(core as usize, |held| call(ptr::from_mut(held).cast()))
        })
    }
}

/// The held core behind `core`.
///
/// # Safety
/// `core` must be null or the `held` of a running `buddyfree_device_with_core` callback.
unsafe fn held_device<'a>(
    core: *mut BuddyfreeDeviceCore,
) -> Result<&'a mut HeldDevice<'a, DynAlloc>, BuddyfreeStatus> {
    // SAFETY: the caller's contract on `core`; `buddyfree_device_with_core` lends a
    // `HeldDevice`.
    unsafe { lent(core) }
}

/// `buddyfree_device_alloc` on a held core.
///
/// # Safety
/// `core` must be null or the `held` of a running `buddyfree_device_with_core` callback;
/// `out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_core_alloc(
    core: *mut BuddyfreeDeviceCore,
    size: usize,
    align: usize,
    out: *mut u64,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `core` and `out`.
    unsafe { alloc_into(out, size, align, held_device(core), |h, l| h.alloc(l)) }
}

/// `buddyfree_device_free` on a held core: frees the block that starts at `addr` (allocated
/// on any core); a bad or double free returns its code and changes nothing.
///
/// # Safety
/// `core` must be null or the `held` of a running `buddyfree_device_with_core` callback.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_device_core_free(
    core: *mut BuddyfreeDeviceCore,
    addr: u64,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `core`.
    let result = unsafe { held_device(core) }.and_then(|h| Ok(h.free_at(addr)?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}
