//! LLFree over a lower level in memory the caller owns (`Builder::kept`, with the upper
//! level on the heap or in caller memory, with classes of trees or without): every `Init`, recovery of what an earlier allocator left (blocks of
//! every order, spans of whole frames among them), refused memory, damaged memory. Small
//! heaps, so that Miri runs these (scripts/miri.sh).

mod common;

use std::ptr::NonNull;

use buddyfree::llfree::{Builder, Init, Kept, LLFree, Options, Policy, RecoverError};
use buddyfree::{BlockAlloc, Class, Config, Error, MetadataMemory};

/// Memory for a lower level: cache lines, so 64-aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Memory for an upper level: as aligned as its per-core lines (128 on x86_64).
#[derive(Clone, Copy)]
#[repr(C, align(128))]
struct Wide([u8; 128]);

struct Memory(Vec<Line>);

impl Memory {
    fn for_config(config: Config) -> Memory {
        let layout = LLFree::lower_layout(config).unwrap();
        assert_eq!(layout.align(), 64);
        Memory(vec![Line([0xA5; 64]); layout.size().div_ceil(64)])
    }

    fn bytes(&self) -> usize {
        self.0.len() * 64
    }

    fn ptr(&mut self) -> NonNull<u8> {
        NonNull::from(&mut self.0[..]).cast()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.0.iter().flat_map(|l| l.0).collect()
    }

    /// LLFree over this memory, taken as `init` says, its upper level on the heap.
    fn build(
        &mut self,
        config: Config,
        options: Options,
        init: Init,
    ) -> Result<LLFree, RecoverError> {
        kept(config, options, init, self.ptr(), self.bytes()).build()
    }
}

/// The builder of LLFree over `config` tuned by `options`, over the `len` bytes at `lower`
/// taken as `init` says.
fn kept(
    config: Config,
    options: Options,
    init: Init,
    lower: NonNull<u8>,
    len: usize,
) -> Builder<Kept> {
    // SAFETY: every caller's `len` bytes at `lower` lie in a vector of initialised bytes that
    // outlives every allocator the tests build over it, and which nothing else touches
    // while one lives.
    unsafe {
        let lower = MetadataMemory::from_raw(lower, len);
        LLFree::builder(config).options(options).kept(lower, init)
    }
}

/// Trees of 4 frames: orders up to 11 (a whole tree).
fn options() -> Options {
    Options::default().with_tree_children(4)
}

/// 9 huge frames and a part of a tenth: three trees, the last one partial.
fn config() -> Config {
    Config::new(9 * 512 + 300, 11).with_cores(2)
}

/// Allocates blocks of every order from 0 to 11 (spans of whole frames included).
fn allocate_some(alloc: &LLFree) -> Vec<(usize, u32)> {
    let mut blocks: Vec<(usize, u32)> = [11, 10, 9, 8, 7, 6, 5, 3, 1, 0, 0, 4]
        .into_iter()
        .map(|order| (alloc.alloc(order, order as usize % 2).unwrap(), order))
        .collect();
    blocks.sort_unstable();
    blocks
}

/// An allocator dropped without freeing (as a crash or a reboot leaves the memory) is
/// rebuilt by `Init::Recover` with every block and its order, the same free count, and
/// the blocks free exactly once; then it is whole. A second recovery of a whole lower
/// level changes no byte.
#[test]
fn recovery_finds_every_block_an_earlier_allocator_left() {
    let config = config();
    let mut memory = Memory::for_config(config);
    let alloc = memory.build(config, options(), Init::Free).unwrap();
    assert_eq!(alloc.free_units(), config.units);
    let blocks = allocate_some(&alloc);
    let free = alloc.free_units();
    drop(alloc);
    let alloc = memory.build(config, options(), Init::Recover).unwrap();
    assert_eq!(alloc.blocks(), blocks);
    assert_eq!(alloc.free_units(), free);
    for &(index, order) in &blocks {
        assert_eq!(
            alloc.block_of(index + (1 << order) - 1),
            Ok(Some((index, order)))
        );
        assert!(alloc.free(index, order + 1, 0).is_err());
        assert_eq!(alloc.free_units(), free);
    }
    for &(index, order) in &blocks {
        alloc.free(index, order, 0).unwrap();
        assert_eq!(alloc.free(index, order, 1), Err(Error::NotAllocated));
    }
    common::assert_whole(&alloc);
    drop(alloc);
    let whole = memory.snapshot();
    let alloc = memory.build(config, options(), Init::Recover).unwrap();
    assert_eq!(alloc.free_units(), config.units);
    drop(alloc);
    assert_eq!(
        memory.snapshot(),
        whole,
        "recovery of a whole level changed it"
    );
}

/// `Init::Allocated`: every unit an order-0 block, whatever the memory held; freed in bulk
/// (a bit-field word at a time) it is whole. `Init::Free` over a level full of blocks
/// forgets them.
#[test]
fn all_allocated_frees_unit_by_unit_and_all_free_forgets() {
    let config = config();
    let mut memory = Memory::for_config(config);
    let alloc = memory.build(config, options(), Init::Free).unwrap();
    allocate_some(&alloc);
    drop(alloc);
    let alloc = memory.build(config, options(), Init::Allocated).unwrap();
    assert_eq!(alloc.free_units(), 0);
    assert_eq!(alloc.alloc(0, 0), Err(Error::OutOfMemory));
    let units: Vec<usize> = (0..config.units).collect();
    assert_eq!(
        alloc.blocks(),
        units.iter().map(|&u| (u, 0)).collect::<Vec<_>>()
    );
    assert_eq!(alloc.free(0, 1, 0), Err(Error::OrderMismatch));
    alloc.free_bulk(&units, 0, 0).unwrap();
    common::assert_whole(&alloc);
    allocate_some(&alloc);
    drop(alloc);
    let alloc = memory.build(config, options(), Init::Free).unwrap();
    assert_eq!(alloc.free_units(), config.units);
    assert!(alloc.blocks().is_empty());
    common::assert_whole(&alloc);
}

/// The upper level in caller memory too: no heap for the allocator's tables. Too little or
/// misaligned memory, for either level, is refused with the memory untouched.
#[test]
fn both_levels_in_caller_memory_and_bad_memory_is_refused() {
    let config = config();
    let mut lower = Memory::for_config(config);
    let upper_layout = kept(config, options(), Init::Free, lower.ptr(), lower.bytes())
        .metadata_layout()
        .unwrap();
    let mut upper = vec![Wide([0; 128]); upper_layout.size().div_ceil(128)];
    assert!(upper_layout.align() <= 128);
    let upper_ptr = NonNull::from(&mut upper[..]).cast::<u8>();
    let before = lower.snapshot();
    let (lower_ptr, lower_len) = (lower.ptr(), lower.bytes());
    let build_as = |init, lower: NonNull<u8>, lower_len: usize, upper_len: usize| {
        // SAFETY: the vector outlives every allocator built here and is used by nothing
        // else meanwhile; the length is at most its.
        let upper = unsafe { MetadataMemory::from_raw(upper_ptr, upper_len) };
        kept(config, options(), init, lower, lower_len).build_in(upper)
    };
    let build = |lower, lower_len, upper_len| build_as(Init::Free, lower, lower_len, upper_len);
    let refused = |e: Error| Err::<(), _>(RecoverError::Config(e));
    assert_eq!(
        build(lower_ptr, lower_len - 64, upper_layout.size()).map(drop),
        refused(Error::MetadataTooSmall)
    );
    // SAFETY: one byte into the vector, still inside it.
    let odd = unsafe { lower_ptr.add(8) };
    assert_eq!(
        build(odd, lower_len - 64, upper_layout.size()).map(drop),
        refused(Error::MetadataMisaligned)
    );
    assert_eq!(
        build(lower_ptr, lower_len, upper_layout.size() - 1).map(drop),
        refused(Error::MetadataTooSmall)
    );
    assert_eq!(lower.snapshot(), before, "a refused build wrote");
    let alloc = build(lower_ptr, lower_len, upper_layout.size()).unwrap();
    let blocks = allocate_some(&alloc);
    drop(alloc);
    let alloc = build_as(Init::Recover, lower_ptr, lower_len, upper_layout.size()).unwrap();
    assert_eq!(alloc.blocks(), blocks);
    for (index, order) in blocks {
        alloc.free(index, order, 0).unwrap();
    }
    common::assert_whole(&alloc);
}

/// Recovery of memory that holds no lower level of this size, or one with a block above the
/// largest order: `Corrupt`, with the memory untouched; garbage is never memory-unsafe, and
/// where it happens to read as a lower level the allocator is consistent.
#[test]
fn damaged_memory_is_refused_untouched_or_consistent() {
    let config = config();
    let mut memory = Memory::for_config(config);
    let alloc = memory.build(config, options(), Init::Free).unwrap();
    let span = alloc.alloc(11, 0).unwrap();
    drop(alloc);
    let before = memory.snapshot();
    let smaller = Config::new(config.units, 10).with_cores(2);
    let got = memory.build(smaller, options(), Init::Recover).map(drop);
    assert!(
        matches!(
            got,
            Err(RecoverError::Corrupt {
                what: "a block above the largest order",
                ..
            })
        ),
        "{got:?}"
    );
    assert_eq!(memory.snapshot(), before);
    let alloc = memory.build(config, options(), Init::Recover).unwrap();
    alloc.free(span, 11, 0).unwrap();
    drop(alloc);
    // Whole frames only, so that no padding makes every noisy level damaged.
    let config = Config::new(8 * 512, 11).with_cores(2);
    let mut seed = 0x1234_5678_9ABC_DEF1u64;
    let mut opened = 0;
    for round in 0..8 {
        let mut memory = Memory::for_config(config);
        for line in &mut memory.0 {
            for b in &mut line.0 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // Mostly zeros (free units, empty child entries), some noise.
                *b = if seed.is_multiple_of(8) {
                    seed as u8
                } else {
                    0
                };
            }
        }
        let before = memory.snapshot();
        match memory.build(config, options(), Init::Recover) {
            Err(RecoverError::Corrupt { .. }) => {
                assert_eq!(memory.snapshot(), before, "round {round}")
            }
            Err(e) => panic!("round {round}: {e}"),
            Ok(alloc) => {
                opened += 1;
                let blocks = alloc.blocks();
                let taken: usize = blocks.iter().map(|&(_, o)| 1usize << o).sum();
                assert_eq!(alloc.free_units() + taken, config.units, "round {round}");
                for (index, order) in blocks {
                    alloc.free(index, order, 0).unwrap();
                }
                common::assert_whole(&alloc);
            }
        }
    }
    // Not about the allocator: the noise must leave some levels to recover.
    eprintln!("{opened} of 8 noisy levels recovered");
}

/// Classes of trees over a kept lower level: requests of each class land in trees of their
/// own, and a recovery with the same policy finds every block and serves the classes.
#[test]
fn a_kept_lower_level_takes_a_policy() {
    let config = Config::new(16 * 512, 10).with_cores(2);
    let mut lower = Memory::for_config(config);
    let options = Options::for_config(config).with_tree_children(4);
    let policy = Policy::unmovable_movable_huge();
    let (ptr, len) = (lower.ptr(), lower.bytes());
    let classed = |init| {
        // SAFETY: as in `kept`: `lower` outlives every allocator built here.
        let memory = unsafe { MetadataMemory::from_raw(ptr, len) };
        let builder = LLFree::builder(config).options(options).policy(policy);
        // SAFETY: `lower`'s bytes are initialised (its vector's).
        unsafe { builder.kept(memory, init) }.build()
    };
    let alloc = classed(Init::Free).unwrap();
    let pinned = alloc.alloc_class(0, Class::UNMOVABLE, 0).unwrap();
    let user = alloc.alloc(0, 0).unwrap();
    assert_ne!(pinned / (4 * 512), user / (4 * 512), "one tree per class");
    assert_eq!(alloc.free_units_of(Class::UNMOVABLE), 4 * 512 - 1);
    drop(alloc);
    let alloc = classed(Init::Recover).unwrap();
    assert_eq!(alloc.blocks(), {
        let mut blocks = vec![(pinned, 0), (user, 0)];
        blocks.sort_unstable();
        blocks
    });
    let again = alloc.alloc_class(0, Class::UNMOVABLE, 0).unwrap();
    for index in [pinned, user, again] {
        alloc.free(index, 0, 0).unwrap();
    }
    common::assert_whole(&alloc);
}
