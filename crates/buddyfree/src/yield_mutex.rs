//! A lock that spins briefly, then gives the processor away: the "mutex" side of the
//! parallel binary buddy's spinlock-vs-mutex comparison
//! ("Parallel Binary Buddy", see [References](crate#references)).
//!
//! `std::sync::Mutex` is not a `lock_api::RawMutex`, so this wraps the spinlock's raw lock and
//! changes only how a waiter waits: test-and-test-and-set for `SPINS` (64) rounds, then
//! `std::thread::yield_now()` between attempts (plain spinning in `no_std` builds, where there
//! is no scheduler to yield to).

use lock_api::{GuardSend, RawMutex};

/// Rounds a waiter spins before it starts yielding.
#[cfg(not(loom))]
const SPINS: u32 = 64;

/// A spin-then-yield raw mutex, usable as the `R` of [`lock_api::Mutex`] and
/// [`crate::Locked`].
pub struct YieldMutex(Inner);

/// The raw lock underneath: the spinlock's, or under loom one whose flag loom sees, so
/// that the protocols built on per-core caches can be model-checked.
#[cfg(not(loom))]
type Inner = spin::Mutex<()>;
#[cfg(loom)]
type Inner = loom_lock::LoomLock;

// SAFETY: every locking decision is delegated to the inner spinlock's `RawMutex`, which
// provides mutual exclusion; this type only adds waiting between failed attempts.
unsafe impl RawMutex for YieldMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = YieldMutex(<Inner as RawMutex>::INIT);
    type GuardMarker = GuardSend;

    #[inline]
    fn lock(&self) {
        if !self.try_lock() {
            self.wait_and_lock();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        RawMutex::try_lock(&self.0)
    }

    /// # Safety
    /// The contract of [`RawMutex::unlock`].
    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (this method's contract), i.e. the inner one.
        unsafe { RawMutex::unlock(&self.0) }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        RawMutex::is_locked(&self.0)
    }
}

impl YieldMutex {
    /// The contended path of `lock`, out of line so that the uncontended one stays a single
    /// compare-and-swap: test-and-test-and-set for [`SPINS`] rounds, then yielding between
    /// attempts. A thread that waits for a lock it holds through a pin panics then.
    #[cold]
    #[inline(never)]
    #[cfg(not(loom))]
    fn wait_and_lock(&self) {
        let mut round = 0;
        loop {
            if round < SPINS {
                core::hint::spin_loop();
            } else {
                if round == SPINS {
                    assert!(
                        !pins::held_here(self),
                        "buddyfree: this thread waits for a per-core cache that it holds itself (a \
                         call on the allocator inside its own `with_core` callback or pin): it \
                         would wait forever"
                    );
                }
                // Plain spinning without `std`: no scheduler to yield to.
                #[cfg(feature = "std")]
                std::thread::yield_now();
                #[cfg(not(feature = "std"))]
                core::hint::spin_loop();
            }
            round = round.saturating_add(1);
            if !self.is_locked() && self.try_lock() {
                return;
            }
        }
    }

    /// Under loom, the loom lock's own wait, which yields to the model between attempts
    /// (loom explores waits only where a waiter yields).
    #[cfg(loom)]
    fn wait_and_lock(&self) {
        RawMutex::lock(&self.0);
    }
}

/// Pins belong to the per-core caches: [`pin`](pins::pin) notes that this thread holds a
/// lock for a pin (a held core) until [`unpin`](pins::unpin); meanwhile its own wait for
/// the lock can only be a deadlock, which `lock` reports by panicking once it stops
/// spinning (with `std`; without it, nothing is noted).
///
/// The locks this thread holds for pins, by address. A fixed array, not a `Vec`: noting a
/// pin must not allocate, since the heap may be a global allocator over this very magazine.
/// Pins past the first [`NOTED`](pins::NOTED) at once go unnoted (their self-waits still
/// hang).
#[cfg(all(feature = "std", not(loom)))]
pub(crate) mod pins {
    use core::cell::Cell;

    use super::YieldMutex;

    /// Pins one thread can hold at once and have noted.
    pub(super) const NOTED: usize = 8;

    std::thread_local! {
        static HELD: Cell<[usize; NOTED]> = const { Cell::new([0; NOTED]) };
    }

    fn address(lock: &YieldMutex) -> usize {
        core::ptr::from_ref(lock) as usize
    }

    /// Replaces the first entry equal to `old` by `new`, if there is one.
    fn swap(old: usize, new: usize) {
        let mut held = HELD.get();
        if let Some(entry) = held.iter_mut().find(|a| **a == old) {
            *entry = new;
            HELD.set(held);
        }
    }

    pub(crate) fn pin(lock: &YieldMutex) {
        swap(0, address(lock));
    }

    pub(crate) fn unpin(lock: &YieldMutex) {
        swap(address(lock), 0);
    }

    pub(super) fn held_here(lock: &YieldMutex) -> bool {
        HELD.get().contains(&address(lock))
    }
}

/// Without thread-locals, nothing is noted.
#[cfg(not(all(feature = "std", not(loom))))]
pub(crate) mod pins {
    use super::YieldMutex;

    pub(crate) fn pin(_: &YieldMutex) {}

    pub(crate) fn unpin(_: &YieldMutex) {}

    #[cfg_attr(loom, allow(dead_code))]
    pub(super) fn held_here(_: &YieldMutex) -> bool {
        false
    }
}

/// A spinlock loom can see: its flag is a loom atomic, made on first use inside the model
/// (a `RawMutex` needs a `const` initialiser, which loom's atomics do not have). Made in
/// one thread before the model spawns others, the flags are ordered before them by the
/// spawn (`OnceLock` itself is invisible to loom).
#[cfg(loom)]
mod loom_lock {
    use lock_api::{GuardSend, RawMutex};
    use std::sync::OnceLock;

    use crate::sync::atomic::{AtomicBool, Ordering};

    pub(crate) struct LoomLock(OnceLock<AtomicBool>);

    impl LoomLock {
        fn flag(&self) -> &AtomicBool {
            self.0.get_or_init(|| AtomicBool::new(false))
        }
    }

    // SAFETY: the flag's acquire CAS and release store give mutual exclusion.
    unsafe impl RawMutex for LoomLock {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = LoomLock(OnceLock::new());
        type GuardMarker = GuardSend;

        fn lock(&self) {
            while !self.try_lock() {
                loom::thread::yield_now();
            }
        }

        fn try_lock(&self) -> bool {
            self.flag()
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }

        /// # Safety
        /// The contract of [`lock_api::RawMutex::unlock`].
        unsafe fn unlock(&self) {
            self.flag().store(false, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom), feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn excludes_across_threads() {
        let counter = lock_api::Mutex::<YieldMutex, u64>::new(0);
        // Explicit joins: ThreadSanitizer sees `pthread_join`, not the scope's own wait.
        std::thread::scope(|s| {
            let threads: std::vec::Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        for _ in 0..10_000 {
                            *counter.lock() += 1;
                        }
                    })
                })
                .collect();
            threads.into_iter().for_each(|t| t.join().unwrap());
        });
        assert_eq!(counter.into_inner(), 40_000);
    }
}
