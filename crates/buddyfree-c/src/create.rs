//! From a C configuration to an instance: the configuration read at the size the caller
//! was built with ([`read_config`]), the allocator it names built from the registry with its
//! tables on the heap or in the caller's memory ([`build`]), then the heap over the caller's
//! region or a mapping ([`create`]). The exported calls in `lib.rs` (and `device.rs`) are
//! thin shells over these; a refusal names its rule in the thread's last error.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{self, NonNull};
use std::slice;

use buddyfree::heap::{block_bytes, Heap, Region};
use buddyfree::magazine::Settings;
use buddyfree::registry::{self, DynAlloc};
use buddyfree::{Config, ConfigRule, Error, MetadataMemory};

use super::{
    set_last_error, status, Buddyfree, BuddyfreeConfig, BuddyfreeStatus, Refusal, DEFAULT_ALLOCATOR,
};

/// The body of every create call: the first `config_size` bytes of `*config` read as
/// [`read_config`] says, the instance built as [`create`] does, and the answer stored.
///
/// # Safety
/// As for [`buddyfree_create_sized`](super::buddyfree_create_sized), with `tables` for its `metadata`.
pub(crate) unsafe fn create_sized(
    config: *const BuddyfreeConfig,
    config_size: usize,
    region: *mut c_void,
    region_len: usize,
    tables: Tables,
    out: *mut *mut Buddyfree,
) -> BuddyfreeStatus {
    if config.is_null() || out.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    // SAFETY: `config` is readable for `config_size` bytes, its `allocator` null or a
    // NUL-terminated string, `region` and `tables` valid, by the caller's contract.
    let result = unsafe {
        read_config(config, config_size)
            .and_then(|config| create(config, region.cast(), region_len, tables))
    };
    // SAFETY: `out` is non-null and writable by the caller's contract.
    unsafe { created(result, out) }
}

/// The body of both metadata size calls.
///
/// # Safety
/// As for [`buddyfree_metadata_size_sized`](super::buddyfree_metadata_size_sized).
pub(crate) unsafe fn metadata_size(
    config: *const BuddyfreeConfig,
    config_size: usize,
    size: *mut usize,
    align: *mut usize,
) -> BuddyfreeStatus {
    if config.is_null() || size.is_null() || align.is_null() {
        return BuddyfreeStatus::NullArgument;
    }
    let layout = (|| {
        // SAFETY: readable for `config_size` bytes by the caller's contract.
        let config = unsafe { read_config(config, config_size) }.map_err(|r| r.status)?;
        // SAFETY: the caller's contract on `config.allocator`.
        let entry = unsafe { named_entry(&config)? };
        let caller = entry.metadata.ok_or(BuddyfreeStatus::Unsupported)?;
        Ok((caller.layout)(config_of(&config, config.units))?)
    })();
    // SAFETY: `size` and `align` are non-null and writable by the caller's contract.
    unsafe {
        status(
            layout.map(|l| {
                align.write(l.align());
                l.size()
            }),
            size,
        )
    }
}

/// Where an allocator's own tables (its metadata) live.
#[derive(Clone, Copy)]
pub(crate) enum Tables {
    /// On the heap.
    Heap,
    /// In the caller's `len` bytes at the pointer.
    Caller(NonNull<u8>, usize),
}

/// The bytes of a [`BuddyfreeConfig`] that the calls without a `config_size` read: the
/// fields up to `interrupt_safe_frees`, the last of the first release, whatever is
/// appended later (a caller built against that header passes no more).
pub(crate) const UNSIZED_CONFIG: usize =
    std::mem::offset_of!(BuddyfreeConfig, interrupt_safe_frees) + std::mem::size_of::<u32>();

/// Where each field of [`BuddyfreeConfig`] ends, in order: the `config_size`s that end no
/// field half-way, from the shortest accepted (the first version's fields, to `allocator`)
/// on. Sizes past the whole struct are accepted too (a newer caller's).
const CONFIG_FIELD_ENDS: [usize; 3] = [
    std::mem::offset_of!(BuddyfreeConfig, allocator) + std::mem::size_of::<*const c_char>(),
    std::mem::offset_of!(BuddyfreeConfig, parking_limit) + std::mem::size_of::<usize>(),
    UNSIZED_CONFIG,
];

/// The caller's configuration of `size` bytes at `config`, read as [`BuddyfreeConfig`]
/// says: the fields within `size` from the caller, the rest their defaults (0); a larger
/// `size` (a newer header's) only with every byte this version does not know 0.
///
/// # Safety
/// `config` must be null or valid for reads of `size` bytes.
pub(crate) unsafe fn read_config(
    config: *const BuddyfreeConfig,
    size: usize,
) -> Result<BuddyfreeConfig, Refusal> {
    if config.is_null() {
        return Err(BuddyfreeStatus::NullArgument.into());
    }
    let whole = std::mem::size_of::<BuddyfreeConfig>();
    let refused = |detail: String| Refusal {
        status: BuddyfreeStatus::InvalidConfig,
        detail: format!("invalid configuration: {detail}"),
    };
    if size < CONFIG_FIELD_ENDS[0] {
        return Err(refused(format!(
            "config_size {size} is smaller than the first BuddyfreeConfig ({} bytes, to `allocator`)",
            CONFIG_FIELD_ENDS[0]
        )));
    }
    if size < whole && !CONFIG_FIELD_ENDS.contains(&size) {
        return Err(refused(format!(
            "config_size {size} ends inside a field of BuddyfreeConfig (fields end at {CONFIG_FIELD_ENDS:?})"
        )));
    }
    let bytes = config.cast::<u8>();
    if size > whole {
        // SAFETY: `size` readable bytes at `config`, by the caller's contract.
        let newer = unsafe { slice::from_raw_parts(bytes.add(whole), size - whole) };
        if let Some(at) = newer.iter().position(|&b| b != 0) {
            return Err(refused(format!(
                "byte {} of the {size} given is set, in a field this library ({whole} bytes of \
                 BuddyfreeConfig) does not know",
                whole + at
            )));
        }
    }
    let mut read = BuddyfreeConfig::default();
    // SAFETY: `size.min(whole)` bytes, readable at `config` by the caller's contract and
    // writable in `read`; byte copies, so the caller's struct need not be aligned, and every
    // field of `BuddyfreeConfig` takes any bytes (integers and a raw pointer).
    unsafe {
        ptr::copy_nonoverlapping(
            bytes,
            ptr::from_mut(&mut read).cast::<u8>(),
            size.min(whole),
        );
    }
    Ok(read)
}

/// The library's configuration of `units` units from C's.
pub(crate) fn config_of(config: &BuddyfreeConfig, units: usize) -> Config {
    let cores = (config.cores as usize).max(1);
    Config::new(units, config.max_order).with_cores(cores)
}

/// The per-core caches' settings from C's configuration.
pub(crate) fn settings_of(config: &BuddyfreeConfig) -> Settings {
    let settings = match config.parking_limit {
        0 => Settings::new(),
        limit => Settings::new().with_parking_limit(limit),
    };
    match config.interrupt_safe_frees {
        0 => settings,
        _ => settings.with_interrupt_safe_frees(),
    }
}

/// Builds `entry` over C's `config` of `units` units with its tables where `tables` says.
///
/// # Safety
/// Caller tables must be valid for reads and writes, used by nothing else, and outlive the
/// allocator.
pub(crate) unsafe fn build(
    entry: &registry::Entry,
    config: &BuddyfreeConfig,
    units: usize,
    tables: Tables,
) -> Result<DynAlloc, Refusal> {
    let (settings, config) = (settings_of(config), config_of(config, units));
    match tables {
        Tables::Heap => Ok((entry.build)(config, settings)?),
        Tables::Caller(meta, len) => {
            let caller = entry.metadata.ok_or_else(|| Refusal {
                status: BuddyfreeStatus::Unsupported,
                detail: format!("{} cannot keep its metadata in caller memory", entry.name),
            })?;
            // SAFETY: the caller's contract: the memory is lent to the allocator.
            let meta = unsafe { MetadataMemory::from_raw(meta, len) };
            Ok((caller.build_in)(config, settings, meta)?)
        }
    }
}

/// Ends a create call: on success the instance goes into `*out`, boxed, and this thread's
/// last error is cleared; on failure the last error says why. Either way, the status.
///
/// # Safety
/// `out` must be writable.
pub(crate) unsafe fn created<T>(result: Result<T, Refusal>, out: *mut *mut T) -> BuddyfreeStatus {
    match result {
        Ok(instance) => {
            set_last_error("");
            // SAFETY: writable by the caller's contract.
            unsafe { out.write(Box::into_raw(Box::new(instance))) };
            BuddyfreeStatus::Ok
        }
        Err(refusal) => {
            set_last_error(&refusal.detail);
            refusal.status
        }
    }
}

/// The registry entry `config.allocator` names (the default one for null).
///
/// # Safety
/// `config.allocator` must be null or a NUL-terminated string.
pub(crate) unsafe fn named_entry(
    config: &BuddyfreeConfig,
) -> Result<&'static registry::Entry, BuddyfreeStatus> {
    let name = if config.allocator.is_null() {
        DEFAULT_ALLOCATOR
    } else {
        // SAFETY: a NUL-terminated string by the caller's contract.
        let name = unsafe { CStr::from_ptr(config.allocator) };
        name.to_str()
            .map_err(|_| BuddyfreeStatus::UnknownAllocator)?
    };
    registry::find(name).ok_or(BuddyfreeStatus::UnknownAllocator)
}

/// Where an instance's memory comes from.
enum Memory {
    /// The caller's region.
    Given(Region),
    /// A mapping of `bytes`, aligned to the largest block, made once the allocator is built.
    ToMap { bytes: usize, largest: usize },
}

/// # Safety
/// As for [`buddyfree_create`](super::buddyfree_create), and for [`build`] on `tables`.
pub(crate) unsafe fn create(
    config: BuddyfreeConfig,
    region: *mut u8,
    region_len: usize,
    tables: Tables,
) -> Result<Buddyfree, Refusal> {
    // SAFETY: the caller's contract on `config.allocator`.
    let entry = unsafe { named_entry(&config)? };
    let unit = config.unit_size;
    if !unit.is_power_of_two() {
        return Err(Error::InvalidConfig(ConfigRule::NotPowerOfTwo).into());
    }
    let memory = match NonNull::new(region) {
        // SAFETY: valid, exclusive and kept alive by the caller's contract.
        Some(ptr) => Memory::Given(unsafe { Region::from_raw(ptr, region_len) }),
        None => match (
            config.units.checked_mul(unit),
            block_bytes(unit, config.max_order),
        ) {
            (Some(bytes), Some(largest)) => Memory::ToMap { bytes, largest },
            _ => return Err(Error::InvalidConfig(ConfigRule::RegionLength).into()),
        },
    };
    let units = match (&memory, config.units) {
        (Memory::Given(region), 0) => Heap::<DynAlloc>::units_fitting(region, unit).unwrap_or(0),
        (_, n) => n,
    };
    // Built before anything is mapped: a refused configuration is reported by the rule it
    // breaks, not as a mapping of a bad size.
    // SAFETY: the caller's contract on `tables`.
    let alloc = unsafe { build(entry, &config, units, tables)? };
    let region = match memory {
        Memory::Given(region) => region,
        Memory::ToMap { bytes, largest } => Region::mmap(bytes, largest)?,
    };
    let heap = Heap::new(region, unit, alloc)?;
    Ok(Buddyfree { heap })
}
