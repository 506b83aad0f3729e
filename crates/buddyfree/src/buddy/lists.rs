//! Doubly linked free lists threaded through index arrays (Knuth's segregated free lists,
//! [Donahue et al. 2001](crate#references) §2.4): `next[i]`/`prev[i]` link the block starting at unit `i`
//! into the one list it is on, so insertion, removal of a known block and pop are O(1) and
//! no operation allocates.
//! The links are `Cell`s: the tables may lie in caller memory, seen only through `&`.

use core::cell::Cell;

use crate::table::{Metadata, Part, Table};
use crate::Error;

/// "No element": the end of a list.
pub(crate) const NIL: usize = usize::MAX;

/// The head of one free list: its first block and its length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListHead {
    first: usize,
    len: usize,
}

impl ListHead {
    pub(crate) const EMPTY: ListHead = ListHead { first: NIL, len: 0 };

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn first(&self) -> Option<usize> {
        (self.first != NIL).then_some(self.first)
    }
}

/// The `next`/`prev` links of every unit.
pub(crate) struct Links {
    next: Table<Cell<usize>>,
    prev: Table<Cell<usize>>,
}

impl Links {
    /// The links at `parts` of `meta`, every unit on no list.
    pub(crate) fn new(
        meta: &Metadata,
        [next, prev]: [Part<Cell<usize>>; 2],
    ) -> Result<Self, Error> {
        Ok(Links {
            next: meta.table(next, |_| Cell::new(NIL))?,
            prev: meta.table(prev, |_| Cell::new(NIL))?,
        })
    }

    /// The links of `units` units, on the heap.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn on_heap(units: usize) -> Result<Self, Error> {
        let mut plan = crate::table::Plan::new();
        Links::new(&Metadata::heap(), [plan.add(units)?, plan.add(units)?])
    }

    /// Puts `index` at the front of `head`'s list. It must be on no list.
    #[inline(always)]
    pub(crate) fn push(&self, head: &mut ListHead, index: usize) {
        self.prev[index].set(NIL);
        self.next[index].set(head.first);
        if head.first != NIL {
            self.prev[head.first].set(index);
        }
        head.first = index;
        head.len += 1;
    }

    /// Unlinks `index`, which must be on `head`'s list.
    #[inline(always)]
    pub(crate) fn remove(&self, head: &mut ListHead, index: usize) {
        let (prev, next) = (self.prev[index].get(), self.next[index].get());
        if prev == NIL {
            head.first = next;
        } else {
            self.next[prev].set(next);
        }
        if next != NIL {
            self.prev[next].set(prev);
        }
        head.len -= 1;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn push_remove_pop_keep_the_list_consistent() {
        let links = Links::on_heap(8).unwrap();
        let mut head = ListHead::EMPTY;
        for i in [1, 3, 5, 7] {
            links.push(&mut head, i);
        }
        links.remove(&mut head, 3);
        links.remove(&mut head, 7);
        assert_eq!(head.len(), 2);
        assert_eq!(head.first(), Some(5));
        links.remove(&mut head, 5);
        links.remove(&mut head, 1);
        assert_eq!(head.len(), 0);
    }
}
