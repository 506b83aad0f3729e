//! Every allocator, registered once by name, so the benchmark tool, the C ABI and the tests
//! can build any of them from a [`Config`].

use alloc::boxed::Box;

use crate::model::Model;
use crate::{BlockAlloc, Config, Error, Locked, Nbbs, Nbbs4};

/// A boxed allocator that can move between threads.
pub type DynAlloc = Box<dyn BlockAlloc + Send>;

/// One registered allocator.
pub struct Entry {
    /// The name users select it by.
    pub name: &'static str,
    /// One line saying what it is.
    pub about: &'static str,
    /// Builds it over a configuration.
    pub build: fn(Config) -> Result<DynAlloc, Error>,
}

/// All registered allocators.
pub fn entries() -> &'static [Entry] {
    ENTRIES
}

/// The entry named `name`, if any.
pub fn find(name: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.name == name)
}

const ENTRIES: &[Entry] = &[
    Entry {
        name: "model",
        about:
            "the reference model (first-fit unit map) behind a spinlock; O(units) per allocation",
        build: |c| Ok(Box::new(Locked::<Model>::new(Model::new(c)?))),
    },
    Entry {
        name: "nbbs",
        about:
            "NBBS, the non-blocking buddy system: 1-level tree, one byte per node, per-core hints",
        build: |c| Ok(Box::new(Nbbs::new(c)?)),
    },
    Entry {
        name: "nbbs4",
        about: "NBBS with 4-level bunches: 15 nodes per 64-bit word, one CAS per 4 levels",
        build: |c| Ok(Box::new(Nbbs4::new(c)?)),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_entry_builds() {
        for (i, e) in entries().iter().enumerate() {
            assert!(
                entries()[..i].iter().all(|o| o.name != e.name),
                "{} twice",
                e.name
            );
            let a = (e.build)(Config::new(1 << 12, 9).with_cores(2)).unwrap();
            assert_eq!(a.total_units(), 1 << 12, "{}", e.name);
            assert!(find(e.name).is_some());
        }
        assert!(find("no such allocator").is_none());
    }
}
