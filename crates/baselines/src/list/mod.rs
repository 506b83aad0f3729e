//! The list allocators of the LLFree paper (§5.4), order 0 only: a free list of units behind
//! a spinlock ([`LockedList`]), a lock-free LIFO list with ABA protection ([`CasList`]), and
//! ideal per-core lists ([`PerCoreLists`]).
//!
//! All three are one allocator, [`ListAlloc`], over a different [`FreeStack`]: the stack only
//! keeps free units; the allocator checks every request and keeps one allocated bit per unit,
//! so that a double free or a free of a unit never allocated is reported exactly, and of two
//! racing frees of one unit exactly one succeeds (the one whose atomic bit-clear wins).
//!
//! Beside them, [`FirstFit`]: the real-time buddy paper's unstructured-list baseline, a
//! sequential first-fit allocator of any order over address-ordered free extents.
//!
//! Like the paper's lists they keep their next links in an array beside the managed memory
//! (Linux keeps them in `struct page`), not inside the free units.
//!
//! ```text
//!  ListAlloc
//!  ├── allocated: [u64 words]   bit u = unit u is handed out
//!  └── stack: FreeStack
//!        ├── head(s): unit | tag   (one per core for PerCoreLists)
//!        └── links: [u32]          links[u] = the unit after u, or NIL
//! ```
//!
//! These allocators only hand out single units: [`BlockAlloc::max_order`] is 0 and any
//! larger order gets [`Error::BadOrder`]. Their constructors accept any [`Config`] and ignore
//! its `max_order`, so they can be built from the same configuration as the buddies.

mod bits;
mod cas;
mod first_fit;
mod links;
mod locked;
mod percore;

pub use cas::CasStack;
pub use first_fit::FirstFit;
pub use locked::LockedStack;
pub use percore::PerCoreStacks;

use crate::{check_block, BlockAlloc, Capabilities, Config, ConfigRule, Error};
use bits::AllocBits;

/// A singly linked free list behind one spinlock (the paper's ListLocked; Windows, Darwin).
pub type LockedList = ListAlloc<LockedStack>;

/// A lock-free LIFO free list with a tagged head against ABA (the paper's ListCAS).
pub type CasList = ListAlloc<CasStack>;

/// One lock-free free list per core (the paper's ListLocal): a core allocates from its own
/// list, steals from the others when it is empty, and frees to its own.
pub type PerCoreLists = ListAlloc<PerCoreStacks>;

/// A unit managed by a list allocator. Units are limited to `u32` so that a list head and
/// its ABA tag fit one atomic word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit(u32);

impl Unit {
    /// The raw value of "no unit", ending a list.
    const NIL: u32 = u32::MAX;

    /// The unit's index.
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }

    /// The unit's raw value, as stored in links and heads.
    fn raw(self) -> u32 {
        self.0
    }

    /// The unit named by a raw link value, or `None` for [`Unit::NIL`].
    fn from_raw(raw: u32) -> Option<Unit> {
        (raw != Unit::NIL).then_some(Unit(raw))
    }
}

/// A set of free units that can be shared between threads.
pub trait FreeStack: Send + Sync + Sized {
    /// Whether `push` and `pop` are lock-free (never wait for another thread): then the
    /// allocator's `try_alloc` and `try_free` are its `alloc` and `free`.
    const LOCK_FREE: bool;

    /// A stack holding every unit of `0..units`, spread over `cores` cores where the stack
    /// has per-core parts. `units` is below [`u32::MAX`] and `cores` at least 1.
    /// Fails only when its memory cannot be reserved.
    fn full(units: u32, cores: usize) -> Result<Self, Error>;

    /// Adds a free unit, from core `core`. The unit must not be in the stack.
    fn push(&self, unit: Unit, core: usize);

    /// Takes a free unit for core `core`; `None` only if no unit was in the stack.
    fn pop(&self, core: usize) -> Option<Unit>;
}

/// An order-0 allocator over a [`FreeStack`], with exact bad-free detection.
pub struct ListAlloc<S> {
    stack: S,
    allocated: AllocBits,
    units: usize,
}

impl<S: FreeStack> ListAlloc<S> {
    /// An allocator of `config.units` free units with `config.cores` cores. List allocators
    /// only hand out order 0, so `config.max_order` must be 0. Fails with
    /// [`Error::InvalidConfig`] for a larger maximum order, zero units, cores outside
    /// `1..=MAX_CORES`, or `u32::MAX` units or more.
    ///
    /// ```
    /// use buddyfree_baselines::list::CasList;
    /// use buddyfree::{BlockAlloc, Config};
    ///
    /// // Order 0 only: one unit per block.
    /// let frames = CasList::new(Config::new(4096, 0).with_cores(2))?;
    /// let frame = frames.alloc(0, 1)?;
    /// frames.free(frame, 0, 0)?;
    /// assert!(CasList::new(Config::new(4096, 1)).is_err());
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        if config.max_order != 0 {
            return Err(ConfigRule::OrderAboveAllocator.into());
        }
        let units = u32::try_from(config.units)
            .ok()
            .filter(|&u| u < Unit::NIL)
            .ok_or(ConfigRule::TooManyUnits)?;
        Ok(ListAlloc {
            stack: S::full(units, config.cores)?,
            allocated: AllocBits::new(config.units)?,
            units: config.units,
        })
    }
}

impl<S: FreeStack> BlockAlloc for ListAlloc<S> {
    fn alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        if order > 0 {
            return Err(Error::BadOrder);
        }
        let unit = self.stack.pop(core).ok_or(Error::OutOfMemory)?;
        // The unit left the stack, so its free cleared the bit before pushing it (and that
        // push happened before this pop): no one else can have set it.
        let was_allocated = self.allocated.set(unit.as_usize());
        debug_assert!(!was_allocated, "unit {unit:?} was free and allocated");
        Ok(unit.as_usize())
    }

    fn free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        check_block(index, order, 0, self.units)?;
        // Clearing the bit decides the free: of racing double frees only one sees it set,
        // and only that one pushes, so the unit enters the stack once.
        if !self.allocated.clear(index) {
            return Err(Error::NotAllocated);
        }
        // `check_block` bounded `index` by `units`, which is below `u32::MAX`.
        self.stack.push(Unit(index as u32), core);
        Ok(())
    }

    /// `block_of` from the allocated bits; no `alloc_at` (a unit deep in a stack cannot be
    /// taken out of it); `try_alloc` and `try_free` where the stack is lock-free.
    fn capabilities(&self) -> Capabilities {
        let bits = Capabilities::BLOCK_OF.union(Capabilities::TRY_BLOCK_OF);
        match S::LOCK_FREE {
            true => bits
                .union(Capabilities::TRY_ALLOC)
                .union(Capabilities::TRY_FREE),
            false => bits,
        }
    }

    fn try_alloc(&self, order: u32, core: usize) -> Result<usize, Error> {
        if !S::LOCK_FREE {
            return Err(Error::Unsupported);
        }
        self.alloc(order, core)
    }

    fn try_free(&self, index: usize, order: u32, core: usize) -> Result<(), Error> {
        if !S::LOCK_FREE {
            return Err(Error::Unsupported);
        }
        self.free(index, order, core)
    }

    fn free_units(&self) -> usize {
        self.units - self.allocated.count()
    }

    fn total_units(&self) -> usize {
        self.units
    }

    fn max_order(&self) -> u32 {
        0
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        if index >= self.units {
            return Err(Error::OutOfRange);
        }
        Ok(self
            .allocated
            .next_set(index, index + 1)
            .map(|unit| (unit, 0)))
    }

    /// The same as `block_of`, which reads the allocated bits without waiting.
    fn try_block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        self.block_of(index)
    }

    /// One read of the allocated bits per 64 units.
    fn next_block(&self, from: usize) -> Result<Option<(usize, u32)>, Error> {
        Ok(self
            .allocated
            .next_set(from, self.units)
            .map(|unit| (unit, 0)))
    }
}
