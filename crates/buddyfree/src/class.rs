//! The kind of memory a request asks for, for allocators that sort allocations by kind.
//!
//! Memory that can be moved (user pages a kernel can migrate) and memory that cannot (kernel
//! objects, page tables) fragment a heap differently: one unmovable frame pins the huge frame
//! around it against compaction. Allocators that place each kind apart (LLFree with classes
//! of trees, a free list per migrate type in Linux) take a [`Class`] with each request
//! ([`BlockAlloc::alloc_class`](crate::BlockAlloc::alloc_class)); the rest ignore it.
//! Frees never name a class: the allocator knows where the block lies.

/// The kind of memory a request asks for. A small number; what each value means is up to the
/// allocator's placement policy. The named classes are those of the ready policies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class(u8);

impl Class {
    /// Memory the owner can move or reclaim (user pages, page cache). The default.
    pub const MOVABLE: Class = Class(0);
    /// Memory that stays where it is until freed (kernel objects, page tables, DMA buffers).
    pub const UNMOVABLE: Class = Class(1);
    /// Huge frames, kept apart from small blocks so that freeing them leaves whole huge
    /// frames.
    pub const HUGE: Class = Class(2);

    /// The class numbered `number`.
    #[must_use]
    pub const fn new(number: u8) -> Class {
        Class(number)
    }

    /// This class's number.
    #[must_use]
    pub const fn number(self) -> u8 {
        self.0
    }
}
