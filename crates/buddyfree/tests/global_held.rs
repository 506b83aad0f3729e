//! A magazine behind `#[global_allocator]`, one core: holding that core
//! (`Heap::with_core`) allocates nothing itself, so it never waits for the core it holds.
//! (Noting a pin in a growable list once allocated on a thread's first pin, from this very
//! heap, on the held core: the thread waited for itself.)

use buddyfree::heap::GlobalHeap;
use buddyfree::registry::{self, DynAlloc};
use buddyfree::{Config, Error};

fn backend(config: Config) -> Result<DynAlloc, Error> {
    (registry::find("llfree-magazine").unwrap().build)(config, Default::default())
}

#[global_allocator]
static HEAP: GlobalHeap<DynAlloc> = GlobalHeap::new(64, Config::new(1 << 14, 10), backend);

fn main() {
    let heap = HEAP.heap().expect("the heap builds");
    // A fresh thread: its first pin is its first use of the notes of pins.
    let pair = std::thread::spawn(move || {
        heap.with_core(0, |core| -> Result<(), Error> {
            let (index, _) = core.alloc_index(0)?;
            core.free_index(index, 0)
        })
    });
    assert_eq!(pair.join().unwrap(), Ok(()));
    println!("global_held: a held core of the global heap: ok");
}
