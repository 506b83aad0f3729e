//! Knuth's buddy with Linux's grouping of pages by mobility: one set of free lists per
//! migrate type, pageblocks owned by a type, and Linux's fallback when a type runs out. The
//! baseline that allocators placing kinds of memory apart ([`Class`]) are compared with.
//!
//! The region is cut into *pageblocks* of `2^pageblock_order` units (order 9, Linux's
//! `pageblock_order` for 4 KiB pages with 2 MiB huge pages; lower where `max_order` is), each
//! owned by one [`MigrateType`]. Every pageblock starts movable, as Linux's do at boot.
//!
//! ```text
//! pageblocks [ M ][ M ][ U ][ M ] ... : the migrate type owning each pageblock
//! heads      movable:   [order 0][order 1]...[max_order]
//!            unmovable: [order 0][order 1]...[max_order]
//! tags, links, as Knuth's; live: the type each live block was allocated for
//! ```
//!
//! Invariants, between operations:
//! - a free block is on the list of its order and of the type of the pageblock it starts in;
//! - a free block of `pageblock_order` or more has that type in every pageblock it covers;
//! - `live[i]` is the type the block live at `i` was allocated for.
//!
//! An allocation for type `T` (`Class::UNMOVABLE` is unmovable, every other class movable):
//! 1. the smallest free block of order `k` or more on `T`'s lists, split down, the pieces on
//!    `T`'s lists (Linux's `__rmqueue_smallest`);
//! 2. else the *fallback* (`__rmqueue_fallback` and `steal_suitable_fallback`, Linux
//!    6.10–6.14, mm/page_alloc.c): the largest free block on the other type's lists. It may
//!    be *stolen* when it is a pageblock or more, when it is at least half a pageblock, or
//!    when `T` is unmovable; a movable request that may not steal takes the smallest free
//!    block of the other type instead, which fragments least. A stolen block of a pageblock or
//!    more becomes `T`'s, pageblocks and all. A smaller stolen block claims its whole
//!    pageblock for `T` when the free units there and the live units of `T`'s kind (movable
//!    ones for a movable request; for an unmovable one, every live unit not movable) make up
//!    half the pageblock or more: the pageblock's free blocks move to `T`'s lists and step 1
//!    serves the request. Otherwise the request takes the block and splits it on the other
//!    type's lists: the pageblock stays the other type's, now with a unit of `T`'s kind in it.
//!
//! A free returns the block to the lists of its pageblock's type, merging with free buddies
//! as Knuth's does; two buddies of a pageblock or more merge whatever their types, the buddy
//! taking the freed block's type (Linux's `__free_one_page`). So an allocation fails only when
//! no free aligned block of its order exists at all, as with Knuth's.
//!
//! Left out of Linux: the per-CPU lists, the reclaimable and high-atomic types, watermarks
//! and their boosting, and `ALLOC_NOFRAGMENT`, which keeps a zone's fallbacks to whole
//! pageblocks only while another zone of the node can serve the request.

use core::cell::Cell;

use alloc::boxed::Box;
use buddyfree::{Capabilities, Class, Config, Error, SeqBlockAlloc};

use crate::buddy::{buddy_of, carve, initial_blocks, Entries, Links, ListHead, Tag, Tags};
use crate::{check_block, filled};

/// The order of a pageblock where `max_order` allows: 2 MiB of 4 KiB units.
pub const PAGEBLOCK_ORDER: u32 = 9;

/// The kind of memory a pageblock holds, and a free list is for: Linux's `MIGRATE_MOVABLE`
/// and `MIGRATE_UNMOVABLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MigrateType {
    /// Memory the kernel can migrate: [`Class::MOVABLE`], [`Class::HUGE`] and every other
    /// class but unmovable (Linux's transparent huge pages are movable too).
    Movable = 0,
    /// Memory that stays where it is: [`Class::UNMOVABLE`].
    Unmovable = 1,
}

/// Migrate types, the lists per order.
const TYPES: usize = 2;

impl MigrateType {
    /// The type that requests of `class` take.
    #[must_use]
    pub fn of(class: Class) -> MigrateType {
        if class == Class::UNMOVABLE {
            MigrateType::Unmovable
        } else {
            MigrateType::Movable
        }
    }

    /// The type a request falls back to (Linux's `fallbacks[]` with two types).
    fn other(self) -> MigrateType {
        match self {
            MigrateType::Movable => MigrateType::Unmovable,
            MigrateType::Unmovable => MigrateType::Movable,
        }
    }

    fn from_byte(byte: u8) -> MigrateType {
        if byte == MigrateType::Unmovable as u8 {
            MigrateType::Unmovable
        } else {
            MigrateType::Movable
        }
    }
}

/// Counters of the fallback path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrateStats {
    /// Allocations that found no block on their own type's lists and took one of the other
    /// type's (Linux's `extfrag` events).
    pub fallbacks: u64,
    /// Pageblocks a fallback made its request's type's: whole ones it took, and those whose
    /// free and like units made up half or more.
    pub claimed: u64,
    /// Allocations that failed with `OutOfMemory`.
    pub failed: u64,
}

/// The pageblock order of a buddy of `max_order`.
const fn pageblock_order(max_order: u32) -> u32 {
    if max_order < PAGEBLOCK_ORDER {
        max_order
    } else {
        PAGEBLOCK_ORDER
    }
}

/// Knuth's buddy with a free list per migrate type and order, pageblocks and Linux's fallback
/// (see the [module](self)). Sequential; [`Locked`](buddyfree::Locked) lifts it into a
/// [`BlockAlloc`](buddyfree::BlockAlloc), whose
/// [`alloc_class`](buddyfree::BlockAlloc::alloc_class) names the type.
pub struct MigrateBuddy {
    links: Links<Cell<usize>>,
    tags: Tags<Cell<u8>>,
    heads: [Box<[ListHead]>; TYPES],
    /// Per type, bit `k` set iff its list of order `k` is non-empty.
    nonempty: [u64; TYPES],
    /// The type owning each pageblock.
    pageblocks: Box<[Cell<u8>]>,
    /// The type of the live block starting at each unit.
    live: Box<[Cell<u8>]>,
    free_units: usize,
    total_units: usize,
    max_order: u32,
    pageblock_order: u32,
    stats: MigrateStats,
}

impl MigrateBuddy {
    /// An allocator of `config.units` free units, every pageblock movable, its metadata on
    /// the heap.
    ///
    /// ```
    /// use buddyfree::{BlockAlloc, Class, Config, Locked};
    /// use buddyfree_baselines::migrate::{MigrateBuddy, MigrateType};
    ///
    /// let linux = Locked::<MigrateBuddy>::new(MigrateBuddy::new(Config::new(4 << 9, 10))?);
    /// let table = linux.alloc_class(0, Class::UNMOVABLE, 0)?;
    /// let page = linux.alloc_class(0, Class::MOVABLE, 0)?;
    /// // The unmovable page claimed a whole pageblock, away from the movable one.
    /// linux.with(|b| assert_eq!(b.pageblock_type(table), MigrateType::Unmovable));
    /// assert_ne!(table >> 9, page >> 9);
    /// # Ok::<(), buddyfree::Error>(())
    /// ```
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        let lists = config.max_order as usize + 1;
        let pageblock_order = pageblock_order(config.max_order);
        let movable = MigrateType::Movable as u8;
        let mut buddy = MigrateBuddy {
            links: Links::new(config.units)?,
            tags: Tags::new(config.units)?,
            heads: [
                filled(lists, |_| ListHead::EMPTY)?,
                filled(lists, |_| ListHead::EMPTY)?,
            ],
            nonempty: [0; TYPES],
            pageblocks: filled(config.units.div_ceil(1 << pageblock_order), |_| {
                Cell::new(movable)
            })?,
            live: filled(config.units, |_| Cell::new(movable))?,
            free_units: config.units,
            total_units: config.units,
            max_order: config.max_order,
            pageblock_order,
            stats: MigrateStats::default(),
        };
        for (index, order) in initial_blocks(config.units, config.max_order) {
            buddy.push(index, order);
        }
        Ok(buddy)
    }

    /// The counters since creation (or the last [`MigrateBuddy::reset_stats`]).
    pub fn stats(&self) -> MigrateStats {
        self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = MigrateStats::default();
    }

    /// The order of its pageblocks: [`PAGEBLOCK_ORDER`], or `max_order` if that is lower.
    pub fn pageblock_order(&self) -> u32 {
        self.pageblock_order
    }

    /// The type owning the pageblock of unit `index` (which must be below the total).
    pub fn pageblock_type(&self, index: usize) -> MigrateType {
        MigrateType::from_byte(self.pageblocks[index >> self.pageblock_order].get())
    }

    /// Free blocks on the list of type `t` and order `order`.
    pub fn free_blocks(&self, t: MigrateType, order: u32) -> usize {
        self.heads[t as usize]
            .get(order as usize)
            .map_or(0, ListHead::len)
    }

    /// Gives the pageblocks of the block `(index, order)` to type `t`.
    fn set_pageblocks(&self, index: usize, order: u32, t: MigrateType) {
        let first = index >> self.pageblock_order;
        let count = 1 << order.saturating_sub(self.pageblock_order);
        let last = (first + count).min(self.pageblocks.len());
        for pageblock in &self.pageblocks[first..last] {
            pageblock.set(t as u8);
        }
    }

    /// Puts the free block `(index, order)` on the list of type `t`.
    fn push_to(&mut self, t: MigrateType, index: usize, order: u32) {
        self.links
            .push(&mut self.heads[t as usize][order as usize], index);
        self.tags.set(index, Tag::free(order));
        self.nonempty[t as usize] |= 1 << order;
    }

    /// Takes the free block `(index, order)` off the list of type `t`, which holds it.
    fn remove_from(&mut self, t: MigrateType, index: usize, order: u32) {
        let head = &mut self.heads[t as usize][order as usize];
        self.links.remove(head, index);
        if head.is_empty() {
            self.nonempty[t as usize] &= !(1 << order);
        }
        self.tags.set(index, Tag::NONE);
    }

    /// Puts the free block `(index, order)` on the list of its pageblock's type.
    fn push(&mut self, index: usize, order: u32) {
        self.push_to(self.pageblock_type(index), index, order);
    }

    /// Takes the free block `(index, order)` off the list of its pageblock's type.
    fn unlink(&mut self, index: usize, order: u32) {
        self.remove_from(self.pageblock_type(index), index, order);
    }

    /// Hands out the block `(index, order)` inside the free block `(start, from)` for type
    /// `t`, pushing the pieces split off around it onto the lists of their pageblocks' type.
    fn take(&mut self, start: usize, from: u32, index: usize, order: u32, t: MigrateType) {
        self.unlink(start, from);
        self.split_out(start, from, index, order, t);
    }

    /// [`MigrateBuddy::take`] of a block already off its list.
    fn split_out(&mut self, start: usize, from: u32, index: usize, order: u32, t: MigrateType) {
        carve(start, from, index, order, |piece, k| self.push(piece, k));
        self.set_used(index, order);
        self.live[index].set(t as u8);
    }

    /// The first block of the lowest non-empty list of type `t` at order `order` or above.
    fn smallest(&self, t: MigrateType, order: u32) -> Option<(usize, u32)> {
        let from = order + (self.nonempty[t as usize] >> order).trailing_zeros();
        let index = self.heads[t as usize].get(from as usize)?.first()?;
        Some((index, from))
    }

    /// The first block of the highest non-empty list of type `t`, if that is at order `order`
    /// or above.
    fn largest(&self, t: MigrateType, order: u32) -> Option<(usize, u32)> {
        let lists = self.nonempty[t as usize];
        let from = lists.checked_ilog2()?;
        if from < order {
            return None;
        }
        let index = self.heads[t as usize][from as usize].first()?;
        Some((index, from))
    }

    /// Whether a request of type `t` may steal a free block of order `from` of the other type
    /// (Linux's `can_steal_fallback`).
    fn can_steal(&self, from: u32, t: MigrateType) -> bool {
        from >= self.pageblock_order / 2 || t == MigrateType::Unmovable
    }

    /// Free units and live movable units of the pageblock that starts at `first` (Linux's
    /// `prep_move_freepages_block`). Every unit of it lies in a block that starts in it:
    /// the pageblock holds a free block below its own size, so no larger block covers it.
    fn census(&self, first: usize) -> (usize, usize) {
        let end = (first + (1 << self.pageblock_order)).min(self.total_units);
        let (mut free, mut movable) = (0, 0);
        let mut unit = first;
        while unit < end {
            let tag = self.tags.get(unit);
            let size = if let Some(k) = tag.free_order() {
                free += 1 << k;
                1 << k
            } else if let Some(k) = tag.used_order() {
                if MigrateType::from_byte(self.live[unit].get()) == MigrateType::Movable {
                    movable += 1 << k;
                }
                1 << k
            } else {
                debug_assert!(false, "unit {unit} starts no block in a pageblock");
                1
            };
            unit += size;
        }
        (free, movable)
    }

    /// Moves the free blocks of the pageblock starting at `first` from `from`'s lists to
    /// `to`'s and gives the pageblock to `to` (Linux's `__move_freepages_block`).
    fn move_pageblock(&mut self, first: usize, from: MigrateType, to: MigrateType) {
        let end = (first + (1 << self.pageblock_order)).min(self.total_units);
        let mut unit = first;
        while unit < end {
            let tag = self.tags.get(unit);
            let size = match (tag.free_order(), tag.used_order()) {
                (Some(k), _) => {
                    self.remove_from(from, unit, k);
                    self.push_to(to, unit, k);
                    1 << k
                }
                (None, Some(k)) => 1 << k,
                (None, None) => 1,
            };
            unit += size;
        }
        self.set_pageblocks(first, 0, to);
        self.stats.claimed += 1;
    }

    /// Serves a request of `order` for type `t` from the other type's lists, which hold a
    /// block of `order` or more (see the [module](self)).
    fn fallback(&mut self, order: u32, t: MigrateType) -> Result<usize, Error> {
        let other = t.other();
        let Some((mut start, mut from)) = self.largest(other, order) else {
            self.stats.failed += 1;
            return Err(Error::OutOfMemory);
        };
        self.stats.fallbacks += 1;
        let steal = self.can_steal(from, t);
        if !steal && t == MigrateType::Movable && from > order {
            (start, from) = self.smallest(other, order).expect("a larger one is listed");
        }
        if steal && from >= self.pageblock_order {
            self.unlink(start, from);
            self.set_pageblocks(start, from, t);
            self.stats.claimed += 1 << (from - self.pageblock_order);
            self.split_out(start, from, start, order, t);
            return Ok(start);
        }
        if steal {
            let first = start & !((1 << self.pageblock_order) - 1);
            let (free, movable) = self.census(first);
            let live = (self.total_units - first).min(1 << self.pageblock_order) - free;
            let alike = match t {
                MigrateType::Movable => movable,
                MigrateType::Unmovable => live - movable,
            };
            if 2 * (free + alike) >= 1 << self.pageblock_order {
                self.move_pageblock(first, other, t);
                let (index, from) = self.smallest(t, order).expect("the claimed block");
                self.take(index, from, index, order, t);
                return Ok(index);
            }
        }
        self.take(start, from, start, order, t);
        Ok(start)
    }

    /// Returns the block at `index` to the lists, merging it with free buddies; buddies of a
    /// pageblock or more take its type.
    fn release(&mut self, mut index: usize, mut order: u32) {
        self.tags.set(index, Tag::NONE);
        self.free_units += 1 << order;
        let t = self.pageblock_type(index);
        while order < self.max_order {
            let buddy = buddy_of(index, order);
            if !self.tags.is_free(buddy, order) {
                break;
            }
            self.unlink(buddy, order);
            if order >= self.pageblock_order {
                self.set_pageblocks(buddy, order, t);
            }
            index = index.min(buddy);
            order += 1;
        }
        self.push(index, order);
    }
}

impl SeqBlockAlloc for MigrateBuddy {
    fn alloc(&mut self, order: u32) -> Result<usize, Error> {
        self.alloc_class(order, Class::MOVABLE)
    }

    fn alloc_class(&mut self, order: u32, class: Class) -> Result<usize, Error> {
        if order > self.max_order {
            return Err(Error::BadOrder);
        }
        let t = MigrateType::of(class);
        match self.smallest(t, order) {
            Some((index, from)) => {
                self.take(index, from, index, order, t);
                Ok(index)
            }
            None => self.fallback(order, t),
        }
    }

    fn free(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.total_units)?;
        self.tags.get(index).check_free(order)?;
        self.release(index, order);
        Ok(())
    }

    fn free_units(&self) -> usize {
        self.free_units
    }

    fn total_units(&self) -> usize {
        self.total_units
    }

    fn max_order(&self) -> u32 {
        self.max_order
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALLOC_AT.union(Capabilities::BLOCK_OF)
    }

    /// Takes the block as a movable one, as a request with no class would.
    fn alloc_at(&mut self, index: usize, order: u32) -> Result<(), Error> {
        check_block(index, order, self.max_order, self.total_units)?;
        crate::buddy::claim(self, index, order)
    }

    fn block_of(&self, index: usize) -> Result<Option<(usize, u32)>, Error> {
        crate::buddy::block_of(&self.tags, index, self.max_order, self.total_units)
    }
}

impl Entries for MigrateBuddy {
    fn entry_at(&self, index: usize) -> Option<(usize, u32)> {
        crate::buddy::free_entry_at(&self.tags, index, self.max_order)
    }

    fn unlink_entry(&mut self, start: usize, order: u32) {
        self.unlink(start, order);
    }

    fn push_piece(&mut self, index: usize, order: u32) {
        self.push(index, order);
    }

    fn set_used(&mut self, index: usize, order: u32) {
        self.tags.set(index, Tag::used(order));
        self.live[index].set(MigrateType::Movable as u8);
        self.free_units -= 1 << order;
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    const P: usize = 1 << PAGEBLOCK_ORDER;

    fn alloc_n(b: &mut MigrateBuddy, n: usize, class: Class) -> Vec<usize> {
        (0..n).map(|_| b.alloc_class(0, class).unwrap()).collect()
    }

    /// The pageblocks holding one of `blocks` (of order 0).
    fn pageblocks_of(blocks: &[usize]) -> Vec<usize> {
        let mut p: Vec<usize> = blocks.iter().map(|&i| i / P).collect();
        p.sort_unstable();
        p.dedup();
        p
    }

    /// Checks the invariants of the module docs, as far as counts tell: each list holds as
    /// many blocks as are free at its order in pageblocks of its type, a free block of a
    /// pageblock or more has one type throughout, and the free units add up.
    fn check(b: &MigrateBuddy) {
        let mut counts = [[0usize; 64]; TYPES];
        let mut free = 0;
        for unit in 0..b.total_units {
            if let Some(k) = b.tags.get(unit).free_order() {
                let t = b.pageblock_type(unit);
                counts[t as usize][k as usize] += 1;
                free += 1 << k;
                let last = (unit + (1 << k) - 1).min(b.total_units - 1);
                assert_eq!(b.pageblock_type(last), t, "free block {unit} of order {k}");
            }
        }
        for t in [MigrateType::Movable, MigrateType::Unmovable] {
            for k in 0..=b.max_order {
                assert_eq!(
                    b.free_blocks(t, k),
                    counts[t as usize][k as usize],
                    "{t:?} {k}"
                );
                let listed = b.nonempty[t as usize] & (1 << k) != 0;
                assert_eq!(listed, b.free_blocks(t, k) > 0, "{t:?} {k}");
            }
        }
        assert_eq!(free, b.free_units);
    }

    /// Random mixed requests and frees over a ragged region, the invariants checked after
    /// every step, and everything merged back at the end.
    #[test]
    fn random_mixed_requests_keep_the_invariants() {
        for (units, max_order) in [(3 * P + 100, 10), (2 * P, 9), (300, 6)] {
            let mut b = MigrateBuddy::new(Config::new(units, max_order)).unwrap();
            let mut live: Vec<(usize, u32)> = Vec::new();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..4000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let order = (x >> 8) as u32 % (max_order + 1) / 3;
                if x % 5 < 3 {
                    if let Ok(i) = b.alloc_class(order, Class::new((x >> 20) as u8 % 3)) {
                        live.push((i, order));
                    }
                } else if !live.is_empty() {
                    let (i, o) = live.swap_remove((x >> 32) as usize % live.len());
                    b.free(i, o).unwrap();
                }
                check(&b);
            }
            for (i, o) in live {
                b.free(i, o).unwrap();
            }
            check(&b);
            assert_eq!(b.free_units(), units);
        }
    }

    #[test]
    fn unmovable_requests_fill_a_pageblock_of_their_own() {
        let mut b = MigrateBuddy::new(Config::new(4 * P, 9)).unwrap();
        let movable = alloc_n(&mut b, 3, Class::MOVABLE);
        let unmovable = alloc_n(&mut b, P, Class::UNMOVABLE);
        let [pageblock] = pageblocks_of(&unmovable)[..] else {
            panic!("unmovable frames over several pageblocks");
        };
        assert!(pageblocks_of(&movable).iter().all(|&p| p != pageblock));
        assert_eq!(b.pageblock_type(pageblock * P), MigrateType::Unmovable);
        let s = b.stats();
        assert_eq!((s.fallbacks, s.claimed), (1, 1));
        // The next one falls back again and claims another whole pageblock.
        let next = b.alloc_class(0, Class::UNMOVABLE).unwrap();
        assert_ne!(next / P, pageblock);
        assert_eq!(b.stats().claimed, 2);
        assert_eq!(
            b.alloc_class(0, Class::HUGE).map(|i| i / P == pageblock),
            Ok(false)
        );
    }

    #[test]
    fn a_stolen_block_of_a_pageblock_or_more_takes_its_pageblocks_and_frees_back_whole() {
        let mut b = MigrateBuddy::new(Config::new(2 * P, 10)).unwrap();
        let table = b.alloc_class(0, Class::UNMOVABLE).unwrap();
        assert_eq!(b.pageblock_type(0), MigrateType::Unmovable);
        assert_eq!(b.pageblock_type(P), MigrateType::Unmovable);
        assert_eq!(b.stats().claimed, 2);
        b.free(table, 0).unwrap();
        assert_eq!(b.free_blocks(MigrateType::Unmovable, 10), 1);
        let page = b.alloc(0).unwrap();
        assert_eq!(b.pageblock_type(page), MigrateType::Movable);
        assert_eq!(b.pageblock_type(page ^ P), MigrateType::Movable);
        b.free(page, 0).unwrap();
        assert_eq!(b.free_blocks(MigrateType::Movable, 10), 1);
        assert_eq!(b.free_units(), 2 * P);
    }

    #[test]
    fn buddies_of_a_pageblock_merge_across_types_into_the_freed_ones() {
        let mut b = MigrateBuddy::new(Config::new(2 * P, 10)).unwrap();
        let big = b.alloc(9).unwrap();
        let table = b.alloc_class(0, Class::UNMOVABLE).unwrap();
        assert_eq!(big / P + table / P, 1, "one pageblock each");
        assert_eq!(b.pageblock_type(table), MigrateType::Unmovable);
        b.free(big, 9).unwrap();
        b.free(table, 0).unwrap();
        // The unmovable pageblock was freed last: the merged block is unmovable.
        assert_eq!(b.free_blocks(MigrateType::Unmovable, 10), 1);
        assert_eq!(b.pageblock_type(big), MigrateType::Unmovable);
    }

    /// A movable request that may not steal (the other type's largest free block is below
    /// half a pageblock) takes the smallest one and leaves its pageblock unmovable.
    #[test]
    fn a_movable_fallback_without_steal_takes_the_smallest_block() {
        let mut b = MigrateBuddy::new(Config::new(2 * P, 9)).unwrap();
        let unmovable = alloc_n(&mut b, P, Class::UNMOVABLE);
        let _movable = alloc_n(&mut b, P, Class::MOVABLE);
        let base = unmovable[0] & !(P - 1);
        for i in [base, base + 2, base + 8, base + 9] {
            b.free(i, 0).unwrap();
        }
        assert_eq!(b.free_blocks(MigrateType::Unmovable, 1), 1);
        let before = b.stats();
        let page = b.alloc(0).unwrap();
        assert!(page == base || page == base + 2, "{page}");
        assert_eq!(b.pageblock_type(base), MigrateType::Unmovable);
        assert_eq!(b.stats().fallbacks, before.fallbacks + 1);
        assert_eq!(b.stats().claimed, before.claimed);
        assert_eq!(b.free_blocks(MigrateType::Unmovable, 1), 1);
    }

    /// A fallback that finds half a pageblock or more free claims the pageblock; one that
    /// finds it mostly taken by the other kind takes one block and leaves it.
    #[test]
    fn a_fallback_claims_the_pageblock_only_when_half_of_it_is_free_or_alike() {
        let mut b = MigrateBuddy::new(Config::new(2 * P, 9)).unwrap();
        let unmovable = alloc_n(&mut b, 1, Class::UNMOVABLE);
        let movable = alloc_n(&mut b, P, Class::MOVABLE);
        let a = unmovable[0] & !(P - 1);
        // 511 free units in the unmovable pageblock: a movable request claims it back.
        let page = b.alloc(0).unwrap();
        assert_eq!(page & !(P - 1), a);
        assert_eq!(b.pageblock_type(a), MigrateType::Movable);
        // Fill it with movable units, then free 32 in the other, full, movable pageblock:
        // an unmovable request falls back to a pageblock of 480 live movable units, too few
        // free or unmovable ones to claim.
        let rest = b.free_units();
        let more = alloc_n(&mut b, rest, Class::MOVABLE);
        assert!(more.iter().all(|&i| i & !(P - 1) == a));
        let m = movable[0] & !(P - 1);
        for &i in movable.iter().filter(|&&i| i % 16 == 0) {
            b.free(i, 0).unwrap();
        }
        assert_eq!(b.free_units(), 32);
        let claimed = b.stats().claimed;
        let table = b.alloc_class(0, Class::UNMOVABLE).unwrap();
        assert_eq!(table & !(P - 1), m);
        assert_eq!(b.pageblock_type(m), MigrateType::Movable);
        assert_eq!(b.stats().claimed, claimed);
    }

    #[test]
    fn bad_frees_get_exact_answers_and_change_nothing() {
        let mut b = MigrateBuddy::new(Config::new(P + 100, 9)).unwrap();
        let table = b.alloc_class(2, Class::UNMOVABLE).unwrap();
        let free = b.free_units();
        assert_eq!(b.free(table, 1), Err(Error::OrderMismatch));
        assert_eq!(b.free(table + 1, 0), Err(Error::NotAllocated));
        assert_eq!(b.free(table + 2, 1), Err(Error::NotAllocated));
        assert_eq!(b.free(table + 1, 2), Err(Error::Misaligned));
        assert_eq!(b.free(P + 100, 0), Err(Error::OutOfRange));
        assert_eq!(b.free(0, 10), Err(Error::BadOrder));
        assert_eq!(b.free_units(), free);
        b.free(table, 2).unwrap();
        assert_eq!(b.free(table, 2), Err(Error::NotAllocated));
        assert_eq!(b.free_units(), P + 100);
        assert_eq!(b.alloc_class(10, Class::UNMOVABLE), Err(Error::BadOrder));
    }

    #[test]
    fn fails_only_when_no_block_of_the_order_is_free() {
        let mut b = MigrateBuddy::new(Config::new(2 * P, 9)).unwrap();
        let mut held = Vec::new();
        let mut k = 0;
        while let Ok(i) = b.alloc_class(0, Class::new((k % 3) as u8)) {
            held.push(i);
            k += 1;
        }
        assert_eq!(held.len(), 2 * P);
        assert_eq!(b.free_units(), 0);
        for i in held {
            b.free(i, 0).unwrap();
        }
        assert_eq!(b.free_units(), 2 * P);
        assert_eq!(
            b.free_blocks(MigrateType::Movable, 9) + b.free_blocks(MigrateType::Unmovable, 9),
            2
        );
    }
}
