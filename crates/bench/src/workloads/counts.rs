//! Counting a thread's allocator calls, and the [`Recorder`] the workloads make them through.

use buddyfree::{BlockAlloc, Error};

/// Operation counts of one thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Allocations attempted.
    pub allocs: u64,
    /// Frees done.
    pub frees: u64,
    /// Allocations that failed.
    pub failures: u64,
    /// Frees rejected.
    pub bad_frees: u64,
}

/// Makes allocator calls and records them: [`Counts`] counts them, the real-time suite's
/// recorder also times each one. The workloads shared by both are generic over it.
pub trait Recorder: Send {
    /// Allocates one block; `None` when the allocator failed.
    fn alloc(&mut self, a: &dyn BlockAlloc, order: u32, core: usize) -> Option<usize>;
    /// Frees one block.
    fn free(&mut self, a: &dyn BlockAlloc, index: usize, order: u32, core: usize);
    /// The calls made so far.
    fn counts(&self) -> Counts;
}

impl Recorder for Counts {
    #[inline(always)]
    fn alloc(&mut self, a: &dyn BlockAlloc, order: u32, core: usize) -> Option<usize> {
        Counts::alloc(self, a, order, core)
    }

    #[inline(always)]
    fn free(&mut self, a: &dyn BlockAlloc, index: usize, order: u32, core: usize) {
        Counts::free(self, a, index, order, core)
    }

    fn counts(&self) -> Counts {
        *self
    }
}

impl Counts {
    /// Allocates one block, counting it; `None` when the allocator failed.
    #[inline(always)]
    pub fn alloc(&mut self, a: &dyn BlockAlloc, order: u32, core: usize) -> Option<usize> {
        self.allocated(a.alloc(order, core))
    }

    /// Frees one block, counting it.
    #[inline(always)]
    pub fn free(&mut self, a: &dyn BlockAlloc, index: usize, order: u32, core: usize) {
        self.freed(a.free(index, order, core));
    }

    /// Counts the allocation that answered `answer`; the block, if there is one.
    #[inline(always)]
    pub fn allocated(&mut self, answer: Result<usize, Error>) -> Option<usize> {
        self.allocs += 1;
        answer.inspect_err(|_| self.failures += 1).ok()
    }

    /// Counts the free that answered `answer`.
    #[inline(always)]
    pub fn freed(&mut self, answer: Result<(), Error>) {
        self.frees += 1;
        if answer.is_err() {
            self.bad_frees += 1;
        }
    }

    /// Operations attempted.
    pub fn ops(&self) -> u64 {
        self.allocs + self.frees
    }

    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Counts) {
        self.allocs += o.allocs;
        self.frees += o.frees;
        self.failures += o.failures;
        self.bad_frees += o.bad_frees;
    }
}
