//! A held core from C: a callback that allocates and frees on one core without taking its
//! lock each time (`BlockAlloc::with_core`; over a magazine, the pinned fast path).

use std::ffi::c_void;
use std::ptr;

use buddyfree::heap::HeldHeap;
use buddyfree::registry::DynAlloc;

use super::{instance, status, write_pair, Buddyfree, BuddyfreeStatus};

/// A core held by `buddyfree_with_core` (opaque), valid only inside its callback.
pub struct BuddyfreeCore {
    _opaque: [u8; 0],
}

/// The callback of `buddyfree_with_core`: the held core and the caller's `arg` (`unsafe`:
/// it is the caller's C code, which may use `held` only until it returns).
pub type BuddyfreeCoreFn = Option<unsafe extern "C" fn(core: *mut BuddyfreeCore, arg: *mut c_void)>;

/// Calls `f(held, arg)` once with core `core` of the instance held for the caller (any value;
/// it is reduced modulo the configured cores): `buddyfree_core_alloc_order` and
/// `buddyfree_core_free_order` on `held` then take no lock. Over the `*-magazine` allocators
/// that is the core's cache, held for the whole callback, as a kernel holds its
/// per-CPU lists with preemption off; other allocators run the plain calls on `core`. Keep
/// the callback short: other threads that need that core's cache wait until it returns.
///
/// Inside the callback, call no other function on this instance (those that reach the held
/// core, `buddyfree_alloc` from this thread among them, would wait for the callback forever:
/// the process aborts with a message saying so instead);
/// `held` is invalid once it returns. Bad frees through `held` get the same codes as
/// `buddyfree_free_order`.
///
/// # Safety
/// `bf` must be null or a live instance; `f` must be null or a function that is safe to call
/// with `held` and `arg`.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_with_core(
    bf: *const Buddyfree,
    core: u32,
    f: BuddyfreeCoreFn,
    arg: *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `bf` and `f`.
    unsafe {
        run_held(instance(bf), f, arg, |bf, call| {
            bf.heap
                .with_core(core as usize, |held| call(ptr::from_mut(held).cast()))
        })
    }
}

/// The body of both `*_with_core` calls: C's callback `f` with `arg` and the held core that
/// `hold` lends `target`'s core as (a pointer to the Rust type that [`lent`] turns it back
/// into); `NullArgument` without a target or a callback.
///
/// # Safety
/// `f` must be null or a function that is safe to call with the held core and `arg`.
pub(crate) unsafe fn run_held<T, C>(
    target: Result<&T, BuddyfreeStatus>,
    f: Option<unsafe extern "C" fn(*mut C, *mut c_void)>,
    arg: *mut c_void,
    hold: impl FnOnce(&T, &mut dyn FnMut(*mut C)),
) -> BuddyfreeStatus {
    let target = match target {
        Ok(target) => target,
        Err(code) => return code,
    };
    let Some(f) = f else {
        return BuddyfreeStatus::NullArgument;
    };
    // SAFETY: `f` is safe to call by the caller's contract; the held core stays valid for
    // the call.
    hold(target, &mut |held| unsafe { f(held, arg) });
    BuddyfreeStatus::Ok
}

/// The held core of type `H` behind the opaque `core` a callback got from [`run_held`].
///
/// # Safety
/// `core` must be null or the `held` of a running callback, lent as an `H`.
pub(crate) unsafe fn lent<'a, H, C>(core: *mut C) -> Result<&'a mut H, BuddyfreeStatus> {
    // SAFETY: by the contract, an `H` that the `*_with_core` call keeps alive and lends to no
    // one else during the callback.
    unsafe { core.cast::<H>().as_mut() }.ok_or(BuddyfreeStatus::NullArgument)
}

/// The held core behind `core`.
///
/// # Safety
/// `core` must be null or the `held` of a running `buddyfree_with_core` callback.
unsafe fn held_core<'a>(
    core: *mut BuddyfreeCore,
) -> Result<&'a mut HeldHeap<'a, DynAlloc>, BuddyfreeStatus> {
    // SAFETY: the caller's contract on `core`; `buddyfree_with_core` lends a `HeldHeap`.
    unsafe { lent(core) }
}

/// `buddyfree_alloc_order` on a held core: a block of `2^order` units; stores its unit index
/// in `*index_out` and its address in `*ptr_out` (either may be NULL).
///
/// # Safety
/// `core` must be null or the `held` of a running `buddyfree_with_core` callback;
/// `index_out` and `ptr_out` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_core_alloc_order(
    core: *mut BuddyfreeCore,
    order: u32,
    index_out: *mut usize,
    ptr_out: *mut *mut c_void,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `core`.
    let result = unsafe { held_core(core) }.and_then(|held| Ok(held.alloc_index(order)?));
    // SAFETY: the caller's contract on the outputs.
    unsafe { write_pair(result, index_out, ptr_out) }
}

/// `buddyfree_free_order` on a held core: frees the block of `2^order` units starting at
/// unit `index` (allocated on any core); a bad or double free returns its code and changes
/// nothing.
///
/// # Safety
/// `core` must be null or the `held` of a running `buddyfree_with_core` callback.
#[no_mangle]
pub unsafe extern "C" fn buddyfree_core_free_order(
    core: *mut BuddyfreeCore,
    index: usize,
    order: u32,
) -> BuddyfreeStatus {
    // SAFETY: the caller's contract on `core`.
    let result = unsafe { held_core(core) }.and_then(|held| Ok(held.free_index(index, order)?));
    // SAFETY: a null `out` is allowed.
    unsafe { status(result, ptr::null_mut()) }
}
