//! Where the workbench takes its atomics from, as buddyfree does: `core`'s normally, loom's
//! under `cfg(loom)`, so the lock-free baselines can be model-checked with buddyfree.

#[cfg(not(loom))]
pub use core::sync::atomic;
#[cfg(loom)]
pub use loom::sync::atomic;

pub use crossbeam_utils::CachePadded;

/// Backs off inside a retry loop. Under loom it yields, so that the model checker can run the
/// thread being waited for.
#[inline]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}
