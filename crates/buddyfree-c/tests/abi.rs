//! The C ABI called from Rust: configurations, every bad request, and the status codes.

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use buddyfree_c::*;

const UNIT: usize = 64;
const UNITS: usize = 512;
const MAX_ORDER: u32 = 5;

fn config(name: &CStr) -> BuddyfreeConfig {
    BuddyfreeConfig {
        unit_size: UNIT,
        units: UNITS,
        max_order: MAX_ORDER,
        cores: 2,
        allocator: name.as_ptr(),
        parking_limit: 0,
        interrupt_safe_frees: 0,
    }
}

/// Every registered allocator's name that serves blocks up to `MAX_ORDER`, through the ABI.
fn names() -> Vec<&'static CStr> {
    assert_eq!(
        buddyfree_allocator_max_order(buddyfree_allocator_count()),
        -1
    );
    (0..buddyfree_allocator_count())
        .filter(|&i| buddyfree_allocator_max_order(i) >= MAX_ORDER as i32)
        .map(|i| {
            let p = buddyfree_allocator_name(i);
            assert!(!p.is_null());
            // SAFETY: a static NUL-terminated name.
            unsafe { CStr::from_ptr(p) }
        })
        .collect()
}

fn create(
    c: &BuddyfreeConfig,
    region: *mut c_void,
    len: usize,
) -> Result<*mut Buddyfree, BuddyfreeStatus> {
    let mut bf = ptr::null_mut();
    // SAFETY: a valid config and out pointer; `region` is null or valid (by each caller).
    match unsafe { buddyfree_create(c, region, len, &mut bf) } {
        BuddyfreeStatus::Ok => Ok(bf),
        e => Err(e),
    }
}

fn stats(bf: *const Buddyfree) -> BuddyfreeStats {
    let mut s = std::mem::MaybeUninit::uninit();
    // SAFETY: a live instance and a writable out pointer.
    let status = unsafe { buddyfree_stats(bf, s.as_mut_ptr()) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    // SAFETY: written on success.
    unsafe { s.assume_init() }
}

fn alloc(bf: *const Buddyfree, size: usize, align: usize) -> Result<*mut c_void, BuddyfreeStatus> {
    let mut p = ptr::dangling_mut::<c_void>();
    // SAFETY: `bf` is null or live (each caller), `p` writable.
    let st = unsafe { buddyfree_alloc(bf, size, align, &mut p) };
    if st == BuddyfreeStatus::Ok {
        Ok(p)
    } else {
        assert!(p.is_null(), "out is NULL on failure");
        Err(st)
    }
}

fn free(bf: *const Buddyfree, p: *mut c_void, size: usize, align: usize) -> BuddyfreeStatus {
    // SAFETY: `bf` is null or live; `p` is never dereferenced.
    unsafe { buddyfree_free(bf, p, size, align) }
}

fn free_order(bf: *const Buddyfree, index: usize, order: u32) -> BuddyfreeStatus {
    // SAFETY: `bf` is null or live.
    unsafe { buddyfree_free_order(bf, index, order) }
}

fn alloc_order(bf: *const Buddyfree, order: u32) -> Result<(usize, *mut c_void), BuddyfreeStatus> {
    let (mut i, mut p) = (usize::MAX, ptr::dangling_mut::<c_void>());
    // SAFETY: `bf` is null or live, outputs writable.
    match unsafe { buddyfree_alloc_order(bf, order, &mut i, &mut p) } {
        BuddyfreeStatus::Ok => Ok((i, p)),
        e => Err(e),
    }
}

fn destroy(bf: *mut Buddyfree) {
    // SAFETY: made by `create`, destroyed once.
    unsafe { buddyfree_destroy(bf) };
}

#[test]
fn bad_configurations_are_refused() {
    let name = names()[0];
    let mut out = ptr::dangling_mut::<Buddyfree>();
    // SAFETY: null arguments are the point; nothing is dereferenced.
    unsafe {
        assert_eq!(
            buddyfree_create(ptr::null(), ptr::null_mut(), 0, &mut out),
            BuddyfreeStatus::NullArgument
        );
        assert_eq!(
            buddyfree_create(&config(name), ptr::null_mut(), 0, ptr::null_mut()),
            BuddyfreeStatus::NullArgument
        );
    }
    assert_eq!(
        out,
        ptr::dangling_mut::<Buddyfree>(),
        "untouched on failure"
    );
    let cases = [
        (
            BuddyfreeConfig {
                unit_size: 0,
                ..config(name)
            },
            BuddyfreeStatus::InvalidConfig,
        ),
        (
            BuddyfreeConfig {
                unit_size: 96,
                ..config(name)
            },
            BuddyfreeStatus::InvalidConfig,
        ),
        (
            BuddyfreeConfig {
                units: 0,
                ..config(name)
            },
            BuddyfreeStatus::InvalidConfig,
        ),
        (
            BuddyfreeConfig {
                max_order: 10,
                ..config(name)
            },
            BuddyfreeStatus::InvalidConfig,
        ),
        (
            BuddyfreeConfig {
                max_order: 200,
                ..config(name)
            },
            BuddyfreeStatus::InvalidConfig,
        ),
        (
            // The largest block's size overflows.
            BuddyfreeConfig {
                unit_size: 1 << 20,
                max_order: 50,
                ..config(name)
            },
            BuddyfreeStatus::InvalidConfig,
        ),
        (
            BuddyfreeConfig {
                units: usize::MAX,
                ..config(name)
            },
            BuddyfreeStatus::InvalidConfig,
        ),
        (
            config(c"no such allocator"),
            BuddyfreeStatus::UnknownAllocator,
        ),
        (config(c"\xff\xfe"), BuddyfreeStatus::UnknownAllocator),
    ];
    for (c, want) in cases {
        assert_eq!(create(&c, ptr::null_mut(), 0).err(), Some(want), "{c:?}");
    }
    // A caller's region too small for the units asked for.
    let mut small = vec![0u8; UNIT * 10];
    assert_eq!(
        create(&config(name), small.as_mut_ptr().cast(), small.len()).err(),
        Some(BuddyfreeStatus::BadRegion)
    );
    // NULL names the default allocator.
    let bf = create(
        &BuddyfreeConfig {
            allocator: ptr::null(),
            ..config(name)
        },
        ptr::null_mut(),
        0,
    )
    .unwrap();
    destroy(bf);
    destroy(ptr::null_mut());
}

/// This thread's `buddyfree_last_error`.
fn last_error() -> String {
    // SAFETY: never null, NUL-terminated, valid until the next create on this thread.
    unsafe { CStr::from_ptr(buddyfree_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_refused_configuration_names_the_rule_it_broke() {
    let name = names()[0];
    let cases = [
        (
            BuddyfreeConfig {
                unit_size: 96,
                ..config(name)
            },
            "invalid configuration: alignment or unit size not a power of two",
        ),
        (
            BuddyfreeConfig {
                units: 0,
                ..config(name)
            },
            "invalid configuration: zero units",
        ),
        (
            BuddyfreeConfig {
                cores: u32::MAX,
                ..config(name)
            },
            "invalid configuration: more cores than MAX_CORES (4096)",
        ),
        (
            BuddyfreeConfig {
                max_order: 10,
                ..config(name)
            },
            "invalid configuration: a block of the largest order is larger than the units",
        ),
        (
            BuddyfreeConfig {
                units: usize::MAX,
                ..config(name)
            },
            "invalid configuration: a region of zero bytes, or too large to map",
        ),
    ];
    for (c, want) in cases {
        assert_eq!(
            create(&c, ptr::null_mut(), 0).err(),
            Some(BuddyfreeStatus::InvalidConfig)
        );
        assert_eq!(last_error(), want, "{c:?}");
    }
    // A mapping the system refuses keeps its errno.
    let huge = BuddyfreeConfig {
        unit_size: 1 << 40,
        units: 1 << 10,
        max_order: 0,
        ..config(name)
    };
    assert_eq!(
        create(&huge, ptr::null_mut(), 0).err(),
        Some(BuddyfreeStatus::BadRegion)
    );
    assert!(last_error().contains("errno"), "{}", last_error());
    // A success clears it.
    destroy(create(&config(name), ptr::null_mut(), 0).unwrap());
    assert_eq!(last_error(), "");
    // A device instance's create says why too.
    let mut dev = ptr::null_mut();
    let many_cores = BuddyfreeConfig {
        cores: u32::MAX,
        ..config(name)
    };
    // SAFETY: a valid configuration and out pointer.
    let status = unsafe { buddyfree_device_create(&many_cores, 1 << 32, &mut dev) };
    assert_eq!(status, BuddyfreeStatus::InvalidConfig);
    assert!(dev.is_null());
    assert_eq!(
        last_error(),
        "invalid configuration: more cores than MAX_CORES (4096)"
    );
    // SAFETY: as above.
    let status = unsafe { buddyfree_device_create(&config(name), 1 << 32, &mut dev) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    assert_eq!(last_error(), "");
    // SAFETY: created above, destroyed once.
    unsafe { buddyfree_device_destroy(dev) };
}

#[test]
fn every_bad_request_is_an_error_and_changes_nothing() {
    for name in names() {
        let bf = create(&config(name), ptr::null_mut(), 0).unwrap();
        let s = stats(bf);
        assert_eq!(
            (s.free_units, s.total_units, s.unit_size, s.max_order),
            (UNITS, UNITS, UNIT, MAX_ORDER)
        );
        assert!(s.max_align >= UNIT << MAX_ORDER);
        let max = UNIT << MAX_ORDER;
        assert_eq!(alloc(ptr::null(), 8, 0), Err(BuddyfreeStatus::NullArgument));
        assert_eq!(alloc(bf, 0, 0), Err(BuddyfreeStatus::ZeroSize));
        assert_eq!(alloc(bf, max + 1, 0), Err(BuddyfreeStatus::TooLarge));
        assert_eq!(alloc(bf, usize::MAX, 0), Err(BuddyfreeStatus::TooLarge));
        assert_eq!(alloc(bf, 8, 6), Err(BuddyfreeStatus::BadAlign));
        assert_eq!(alloc(bf, 8, 1 << 40), Err(BuddyfreeStatus::BadAlign));
        assert_eq!(
            alloc_order(bf, MAX_ORDER + 1),
            Err(BuddyfreeStatus::BadOrder)
        );
        assert_eq!(
            alloc_order(ptr::null(), 0),
            Err(BuddyfreeStatus::NullArgument)
        );
        // SAFETY: null out pointers are refused, not written.
        unsafe {
            assert_eq!(
                buddyfree_alloc(bf, 8, 0, ptr::null_mut()),
                BuddyfreeStatus::NullArgument
            );
            assert_eq!(
                buddyfree_stats(bf, ptr::null_mut()),
                BuddyfreeStatus::NullArgument
            );
            assert_eq!(
                buddyfree_stats(ptr::null(), ptr::null_mut()),
                BuddyfreeStatus::NullArgument
            );
        }
        assert_eq!(stats(bf).free_units, UNITS);

        let p = alloc(bf, 200, 16).unwrap(); // order 2
        assert_eq!(p as usize % 16, 0);
        let local = 0u8;
        let foreign = &local as *const u8 as *mut c_void;
        let bad = [
            (ptr::null_mut(), 200, 16, BuddyfreeStatus::NullArgument),
            (foreign, 200, 16, BuddyfreeStatus::ForeignPointer),
            (
                p.wrapping_byte_add(UNIT * UNITS),
                200,
                16,
                BuddyfreeStatus::ForeignPointer,
            ),
            (p.wrapping_byte_add(3), 200, 16, BuddyfreeStatus::Misaligned),
            (
                p.wrapping_byte_add(UNIT),
                200,
                16,
                BuddyfreeStatus::Misaligned,
            ),
            (p, 64, 16, BuddyfreeStatus::OrderMismatch),
            (p, 0, 16, BuddyfreeStatus::ZeroSize),
            (p, max * 2, 16, BuddyfreeStatus::TooLarge),
            (p, 200, 12, BuddyfreeStatus::BadAlign),
        ];
        for (q, size, align, want) in bad {
            assert_eq!(
                free(bf, q, size, align),
                want,
                "{name:?} {q:?} {size} {align}"
            );
        }
        assert_eq!(free(ptr::null(), p, 200, 16), BuddyfreeStatus::NullArgument);
        assert_eq!(stats(bf).free_units, UNITS - 4);
        assert_eq!(free(bf, p, 200, 16), BuddyfreeStatus::Ok);
        assert_eq!(free(bf, p, 200, 16), BuddyfreeStatus::NotAllocated);

        let (i, q) = alloc_order(bf, 3).unwrap();
        assert_eq!(q as usize, s.base as usize + i * UNIT);
        assert_eq!(free_order(ptr::null(), i, 3), BuddyfreeStatus::NullArgument);
        assert_eq!(free_order(bf, i, 2), BuddyfreeStatus::OrderMismatch);
        assert_eq!(free_order(bf, i + 4, 3), BuddyfreeStatus::Misaligned);
        assert_eq!(free_order(bf, UNITS, 0), BuddyfreeStatus::OutOfRange);
        assert_eq!(free_order(bf, i, MAX_ORDER + 1), BuddyfreeStatus::BadOrder);
        assert_eq!(free_order(bf, i, 3), BuddyfreeStatus::Ok);
        assert_eq!(free_order(bf, i, 3), BuddyfreeStatus::NotAllocated);

        // Exhaustion.
        let blocks: Vec<_> = (0..UNITS >> MAX_ORDER)
            .map(|_| alloc(bf, max, max).unwrap())
            .collect();
        assert_eq!(alloc(bf, 1, 0), Err(BuddyfreeStatus::OutOfMemory));
        assert_eq!(alloc_order(bf, 0), Err(BuddyfreeStatus::OutOfMemory));
        for b in blocks {
            assert_eq!(b as usize % max, 0);
            assert_eq!(free(bf, b, max, max), BuddyfreeStatus::Ok);
        }
        assert_eq!(stats(bf).free_units, UNITS);
        destroy(bf);
    }
}

#[test]
fn caller_regions_are_used_in_place_and_limit_alignment() {
    let name = names()[0];
    // A region starting 64 bytes past a 4096 boundary: units fit from there, alignment 64.
    let mut buf = vec![0u8; 4096 * 10];
    let start = buf
        .as_mut_ptr()
        .wrapping_add(buf.as_ptr().align_offset(4096) + 64);
    let c = BuddyfreeConfig {
        units: 0,
        max_order: 3,
        ..config(name)
    };
    let bf = create(&c, start.cast(), 4096 * 8).unwrap();
    let s = stats(bf);
    assert_eq!(s.base as usize, start as usize);
    assert_eq!(s.total_units, 4096 * 8 / UNIT);
    assert_eq!(s.max_align, 64);
    assert_eq!(alloc(bf, 8, 128), Err(BuddyfreeStatus::BadAlign));
    let p = alloc(bf, 512, 64).unwrap();
    // SAFETY: a fresh block of 512 bytes inside `buf`.
    unsafe { p.cast::<u8>().write_bytes(0xab, 512) };
    assert_eq!(free(bf, p, 512, 64), BuddyfreeStatus::Ok);
    destroy(bf);
    assert!(buf.contains(&0xab), "the caller's memory was used");
}

#[test]
fn status_codes_are_stable_and_named() {
    let codes = [
        (BuddyfreeStatus::Ok, 0, "ok"),
        (BuddyfreeStatus::OutOfMemory, 1, "out of memory"),
        (BuddyfreeStatus::NotAllocated, 5, "block not allocated"),
        (BuddyfreeStatus::InvalidConfig, 7, "invalid configuration"),
        (BuddyfreeStatus::NullArgument, 12, "null argument"),
        (
            BuddyfreeStatus::BadRegion,
            14,
            "region too small or mapping refused",
        ),
        (
            BuddyfreeStatus::Occupied,
            15,
            "a unit of the block is not free",
        ),
        (
            BuddyfreeStatus::Unsupported,
            16,
            "operation not supported by this allocator",
        ),
        (
            BuddyfreeStatus::WouldBlock,
            17,
            "the call would have had to wait",
        ),
        (
            BuddyfreeStatus::MetadataTooSmall,
            18,
            "metadata memory too small",
        ),
        (
            BuddyfreeStatus::MetadataMisaligned,
            19,
            "metadata memory misaligned",
        ),
        (
            BuddyfreeStatus::Other,
            20,
            "error without a status code of its own",
        ),
    ];
    for (status, value, text) in codes {
        assert_eq!(status as i32, value);
        // SAFETY: static NUL-terminated strings.
        let s = unsafe { CStr::from_ptr(buddyfree_strerror(value)) };
        assert_eq!(s.to_str().unwrap(), text);
    }
    assert!(buddyfree_allocator_name(buddyfree_allocator_count()).is_null());
    assert!(names().iter().any(|n| n.to_bytes() == b"nbbs"));
    // Only the published allocators: the baselines stay in the workbench.
    assert!(!names().iter().any(|n| n.to_bytes() == b"model"));
}

#[test]
fn threads_share_an_instance() {
    for name in names() {
        let bf = create(&config(name), ptr::null_mut(), 0).unwrap() as usize;
        std::thread::scope(|s| {
            for t in 0..4u8 {
                s.spawn(move || {
                    let bf = bf as *const Buddyfree;
                    for i in 0..300usize {
                        let size = 1 + (i * 37 + t as usize * 11) % 700;
                        let Ok(p) = alloc(bf, size, 8) else { continue };
                        let p = p.cast::<u8>();
                        // SAFETY: a fresh block of `size` bytes, ours until freed.
                        let ok = unsafe {
                            p.write_bytes(t, size);
                            std::slice::from_raw_parts(p, size).iter().all(|&b| b == t)
                        };
                        assert!(ok, "block overwritten");
                        assert_eq!(free(bf, p.cast(), size, 8), BuddyfreeStatus::Ok);
                    }
                });
            }
        });
        assert_eq!(stats(bf as *const Buddyfree).free_units, UNITS);
        destroy(bf as *mut Buddyfree);
    }
}

/// What the callbacks of `a_held_core_is_held_until_the_callback_returns` share (shared
/// references only, so every field is atomic or locked).
struct Hold {
    /// The instance, as an address (sent to another thread).
    bf: usize,
    /// Set by the second holder's callback.
    second_ran: AtomicBool,
    /// Whether the second holder had run while the first still held the core.
    second_ran_while_held: AtomicBool,
    /// The first holder's block.
    block: AtomicUsize,
    /// The second holder's thread, joined by the test.
    second: Mutex<Option<std::thread::JoinHandle<BuddyfreeStatus>>>,
}

/// The second holder: marks that it got the core.
///
/// # Safety
/// `arg` must be the test's `Hold`, alive until this holder is joined.
unsafe extern "C" fn mark(_core: *mut BuddyfreeCore, arg: *mut c_void) {
    // SAFETY: `arg` is the test's `Hold`, alive until the second holder is joined.
    let hold = unsafe { &*arg.cast::<Hold>() };
    hold.second_ran.store(true, Ordering::Release);
}

/// The first holder: allocates through the held core, starts a second holder of the same
/// core on another thread, gives it 100 ms, and notes whether it got through meanwhile.
///
/// # Safety
/// `core` must be the callback's held core and `arg` the test's `Hold`, alive until both
/// holders returned.
unsafe extern "C" fn hold_and_wait(core: *mut BuddyfreeCore, arg: *mut c_void) {
    // SAFETY: as in `mark`.
    let hold = unsafe { &*arg.cast::<Hold>() };
    let mut index = usize::MAX;
    // SAFETY: `core` is held for this callback; `index` is writable.
    let status = unsafe { buddyfree_core_alloc_order(core, 0, &mut index, ptr::null_mut()) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    hold.block.store(index, Ordering::Relaxed);
    let (bf, arg) = (hold.bf, arg as usize);
    let second = std::thread::spawn(move || {
        // SAFETY: a live instance and a callback that is safe with its argument.
        unsafe { buddyfree_with_core(bf as *const Buddyfree, 1, Some(mark), arg as *mut c_void) }
    });
    *hold.second.lock().unwrap() = Some(second);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let ran = hold.second_ran.load(Ordering::Acquire);
    hold.second_ran_while_held.store(ran, Ordering::Relaxed);
}

/// `buddyfree_with_core` holds the core for the whole callback over the magazines (a
/// second holder of that core waits), and its blocks are ordinary blocks after.
#[test]
fn a_held_core_is_held_until_the_callback_returns() {
    for name in [c"llfree-magazine", c"nbbs4-magazine", c"nbbs-magazine"] {
        let bf = create(&config(name), ptr::null_mut(), 0).unwrap();
        let hold = Hold {
            bf: bf as usize,
            second_ran: AtomicBool::new(false),
            second_ran_while_held: AtomicBool::new(false),
            block: AtomicUsize::new(usize::MAX),
            second: Mutex::new(None),
        };
        let arg = ptr::from_ref(&hold).cast_mut().cast::<c_void>();
        // SAFETY: a live instance; the callback is safe with `arg`, which outlives both holders.
        let status = unsafe { buddyfree_with_core(bf, 1, Some(hold_and_wait), arg) };
        assert_eq!(status, BuddyfreeStatus::Ok);
        let second = hold.second.lock().unwrap().take().unwrap();
        assert_eq!(second.join().unwrap(), BuddyfreeStatus::Ok);
        assert!(hold.second_ran.load(Ordering::Acquire));
        assert!(
            !hold.second_ran_while_held.load(Ordering::Relaxed),
            "{name:?}: core 1 was not held"
        );
        let block = hold.block.load(Ordering::Relaxed);
        assert_eq!(free_order(bf, block, 0), BuddyfreeStatus::Ok);
        assert_eq!(free_order(bf, block, 0), BuddyfreeStatus::NotAllocated);
        assert_eq!(stats(bf).free_units, UNITS);
        destroy(bf);
    }
}

/// Allocates through the plain path from inside a held core (`arg`: the instance, which has
/// one core, so the plain call needs the held cache).
///
/// # Safety
/// `arg` must be a live instance.
unsafe extern "C" fn alloc_inside(_core: *mut BuddyfreeCore, arg: *mut c_void) {
    let _ = alloc_order(arg.cast_const().cast(), 0);
}

/// A call inside a held core's callback that needs that core would wait forever; the
/// process aborts instead, saying why. Run in a child process of this test binary (the
/// abort ends it); the parent checks its end and its message.
#[test]
fn a_call_that_waits_for_its_own_held_core_aborts_with_the_cause() {
    const CHILD: &str = "BUDDYFREE_TEST_SELF_WAIT";
    if std::env::var_os(CHILD).is_some() {
        let one_core = BuddyfreeConfig {
            cores: 1,
            ..config(c"llfree-magazine")
        };
        let bf = create(&one_core, ptr::null_mut(), 0).unwrap();
        // SAFETY: a live instance; the callback is safe with it as `arg`.
        unsafe { buddyfree_with_core(bf, 0, Some(alloc_inside), bf.cast()) };
        return; // Not reached: the allocation inside aborts.
    }
    let name = "a_call_that_waits_for_its_own_held_core_aborts_with_the_cause";
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the child still waits for itself after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let child = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(
        !child.status.success(),
        "the child ended normally: {stderr}"
    );
    assert!(stderr.contains("holds itself"), "{stderr}");
}

/// What `park_and_count` shares with its test: the instance (as an address, sent to another
/// thread) and the blocks another thread got while core 0 was held.
struct Parking {
    bf: usize,
    got: Mutex<Vec<usize>>,
}

/// Allocates 64 order-0 blocks on the held core and frees them there (its magazine parks
/// what its lists let it keep), then lets another thread take every block it can get without
/// waiting while the core is still held: all but those parked in it.
///
/// # Safety
/// `core` must be the callback's held core and `arg` the test's `Parking`, alive until it
/// returns.
unsafe extern "C" fn park_and_count(core: *mut BuddyfreeCore, arg: *mut c_void) {
    // SAFETY: `arg` is the test's `Parking`, alive for the callback.
    let parking = unsafe { &*arg.cast::<Parking>() };
    let mut blocks = [0usize; 64];
    for block in &mut blocks {
        // SAFETY: the held core, and a writable index.
        let status = unsafe { buddyfree_core_alloc_order(core, 0, block, ptr::null_mut()) };
        assert_eq!(status, BuddyfreeStatus::Ok);
    }
    for &block in &blocks {
        // SAFETY: the held core.
        let status = unsafe { buddyfree_core_free_order(core, block, 0) };
        assert_eq!(status, BuddyfreeStatus::Ok);
    }
    let bf = parking.bf;
    let got = std::thread::spawn(move || {
        let mut got = Vec::new();
        loop {
            let mut index = 0;
            // SAFETY: a live instance and a writable index; a try never waits for the
            // core this thread's caller holds.
            let status = unsafe {
                buddyfree_try_alloc_order(bf as *const Buddyfree, 0, &mut index, ptr::null_mut())
            };
            if status != BuddyfreeStatus::Ok {
                assert_eq!(status, BuddyfreeStatus::WouldBlock);
                return got;
            }
            got.push(index);
        }
    });
    *parking.got.lock().unwrap() = got.join().unwrap();
}

/// `parking_limit` chooses how much a core's magazine keeps: this instance has 256 units per
/// core, so by default (0) the shortest lists (order 0 spills above 16 units); 3000 gives
/// the third step's (above 32), `SIZE_MAX` the longest (above 128). Seen from another
/// thread, which gets every unit but those parked on the held core.
#[test]
fn the_parking_limit_chooses_what_a_core_parks() {
    for name in [c"llfree-magazine", c"nbbs4-magazine", c"nbbs-magazine"] {
        for (limit, parked) in [(0, 9..=16), (3000, 17..=32), (usize::MAX, 64..=64)] {
            let c = BuddyfreeConfig {
                parking_limit: limit,
                ..config(name)
            };
            // Its tables in caller memory: the setting reaches those magazines too.
            let (mut size, mut align) = (0, 0);
            // SAFETY: a valid configuration and writable outputs.
            let got = unsafe { buddyfree_metadata_size(&c, &mut size, &mut align) };
            assert_eq!(got, BuddyfreeStatus::Ok);
            let mut meta = vec![0u8; size + align];
            let at = meta.as_ptr().align_offset(align);
            let mut in_caller = ptr::null_mut();
            // SAFETY: `size` bytes at `align` inside `meta`, which outlives the instance.
            let got = unsafe {
                buddyfree_create_with_metadata(
                    &c,
                    ptr::null_mut(),
                    0,
                    meta.as_mut_ptr().add(at).cast(),
                    size,
                    &mut in_caller,
                )
            };
            assert_eq!(got, BuddyfreeStatus::Ok);
            assert!(
                parked.contains(&parked_units(in_caller)),
                "{name:?} in caller memory with parking_limit {limit}"
            );
            destroy(in_caller);
            drop(meta);
            let bf = create(&c, ptr::null_mut(), 0).unwrap();
            let parking = Parking {
                bf: bf as usize,
                got: Mutex::new(Vec::new()),
            };
            let arg = ptr::from_ref(&parking).cast_mut().cast::<c_void>();
            // SAFETY: a live instance; the callback is safe with `arg`, which outlives it.
            let status = unsafe { buddyfree_with_core(bf, 0, Some(park_and_count), arg) };
            assert_eq!(status, BuddyfreeStatus::Ok);
            let got = parking.got.into_inner().unwrap();
            assert!(
                parked.contains(&(UNITS - got.len())),
                "{name:?} with parking_limit {limit}: {} units parked",
                UNITS - got.len()
            );
            for index in got {
                assert_eq!(free_order(bf, index, 0), BuddyfreeStatus::Ok);
            }
            assert_eq!(stats(bf).free_units, UNITS);
            destroy(bf);
        }
    }
}

/// `buddyfree_try_alloc_order` serves the calling thread's core, as `buddyfree_alloc_order`
/// does: on threads with consecutive core hints (so on both cores), a block just freed into
/// the thread's own cache is the one a try-allocation takes back.
#[test]
fn a_try_allocation_takes_from_the_calling_cores_cache() {
    for name in [c"llfree-magazine", c"nbbs4-magazine", c"nbbs-magazine"] {
        let bf = create(&config(name), ptr::null_mut(), 0).unwrap() as usize;
        for _ in 0..4 {
            std::thread::spawn(move || {
                let bf = bf as *const Buddyfree;
                let (index, _) = alloc_order(bf, 0).unwrap();
                assert_eq!(free_order(bf, index, 0), BuddyfreeStatus::Ok);
                let mut again = usize::MAX;
                // SAFETY: a live instance and a writable index.
                let status =
                    unsafe { buddyfree_try_alloc_order(bf, 0, &mut again, ptr::null_mut()) };
                assert_eq!(status, BuddyfreeStatus::Ok);
                assert_eq!(again, index, "{name:?}: not from this core's cache");
                assert_eq!(free_order(bf, again, 0), BuddyfreeStatus::Ok);
            })
            .join()
            .unwrap();
        }
        destroy(bf as *mut Buddyfree);
    }
}

/// What `try_free_own_block` saw.
struct Interrupted {
    bf: usize,
    status: Mutex<Option<BuddyfreeStatus>>,
}

/// Allocates a block on the held core, then frees it as an interrupt handler on that core
/// would while the interrupted code holds the core: `buddyfree_try_free_order`.
///
/// # Safety
/// `core` must be the callback's held core and `arg` the test's `Interrupted`, alive until
/// it returns.
unsafe extern "C" fn try_free_own_block(core: *mut BuddyfreeCore, arg: *mut c_void) {
    // SAFETY: `arg` is the test's `Interrupted`, alive for the callback.
    let interrupted = unsafe { &*arg.cast::<Interrupted>() };
    let mut index = 0;
    // SAFETY: the held core, and a writable index.
    let status = unsafe { buddyfree_core_alloc_order(core, 0, &mut index, ptr::null_mut()) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    // SAFETY: a live instance; a try never waits, not even for the core this thread holds.
    let status = unsafe { buddyfree_try_free_order(interrupted.bf as *const Buddyfree, index, 0) };
    *interrupted.status.lock().unwrap() = Some(status);
    if status != BuddyfreeStatus::Ok {
        // SAFETY: the held core; the block is still allocated.
        let status = unsafe { buddyfree_core_free_order(core, index, 0) };
        assert_eq!(status, BuddyfreeStatus::Ok);
    }
}

/// `interrupt_safe_frees` lets a handler's `buddyfree_try_free_order` through while the
/// cache that handed the block out is held; by default it answers
/// `BUDDYFREE_STATUS_WOULD_BLOCK`, changing nothing.
#[test]
fn interrupt_safe_frees_let_a_try_free_through_a_held_cache() {
    for name in [c"llfree-magazine", c"nbbs4-magazine", c"nbbs-magazine"] {
        for (safe, expected) in [(0, BuddyfreeStatus::WouldBlock), (1, BuddyfreeStatus::Ok)] {
            let c = BuddyfreeConfig {
                interrupt_safe_frees: safe,
                ..config(name)
            };
            let bf = create(&c, ptr::null_mut(), 0).unwrap();
            let interrupted = Interrupted {
                bf: bf as usize,
                status: Mutex::new(None),
            };
            let arg = ptr::from_ref(&interrupted).cast_mut().cast::<c_void>();
            // SAFETY: a live instance; the callback is safe with `arg`, which outlives it.
            let status = unsafe { buddyfree_with_core(bf, 0, Some(try_free_own_block), arg) };
            assert_eq!(status, BuddyfreeStatus::Ok);
            assert_eq!(
                interrupted.status.into_inner().unwrap(),
                Some(expected),
                "{name:?} with interrupt_safe_frees {safe}"
            );
            // SAFETY: a live instance.
            assert_eq!(unsafe { buddyfree_drain(bf) }, BuddyfreeStatus::Ok);
            assert_eq!(stats(bf).free_units, UNITS);
            destroy(bf);
        }
    }
}

/// Every allocator, by index, with the largest order up to `MAX_ORDER` it accepts.
fn every_allocator() -> Vec<(usize, &'static CStr, u32)> {
    (0..buddyfree_allocator_count())
        .map(|i| {
            // SAFETY: a static NUL-terminated name, for `i` in range.
            let name = unsafe { CStr::from_ptr(buddyfree_allocator_name(i)) };
            let max_order = u32::try_from(buddyfree_allocator_max_order(i)).unwrap();
            (i, name, max_order.min(MAX_ORDER))
        })
        .collect()
}

fn try_alloc(bf: *const Buddyfree, size: usize, align: usize) -> BuddyfreeStatus {
    let mut p = ptr::dangling_mut::<c_void>();
    // SAFETY: a live instance, `p` writable.
    let status = unsafe { buddyfree_try_alloc(bf, size, align, &mut p) };
    if status != BuddyfreeStatus::Ok {
        assert!(p.is_null(), "out is NULL on failure");
    }
    status
}

/// What each size and alignment error of a call that takes them must answer, by the
/// header: `BUDDYFREE_STATUS_ZERO_SIZE` for zero bytes, `BUDDYFREE_STATUS_BAD_ALIGN` for an
/// alignment that is not a power of two or larger than the instance can honour (its
/// `max_align`), `BUDDYFREE_STATUS_TOO_LARGE` for more bytes than the largest block; the
/// same answer whether or not Rust's `Layout` can hold the pair (`8` aligned to `2^63`
/// cannot: it answered `TOO_LARGE`), with the alignment checked before the size, as the
/// heap checks them.
fn layout_cases(largest: usize, max_align: usize) -> Vec<(usize, usize, BuddyfreeStatus)> {
    use BuddyfreeStatus::{BadAlign, TooLarge, ZeroSize};
    vec![
        (0, 0, ZeroSize),
        (0, 64, ZeroSize),
        (0, 1 << 63, ZeroSize),
        (0, 3, BadAlign),
        (8, 3, BadAlign),
        (8, usize::MAX, BadAlign),
        (8, max_align * 2, BadAlign),
        (8, 1 << 63, BadAlign),
        (largest * 2, max_align * 2, BadAlign),
        (usize::MAX, 1 << 63, BadAlign),
        (largest + 1, 0, TooLarge),
        (largest + 1, max_align, TooLarge),
        (1 << 63, 0, TooLarge),
        (usize::MAX, 0, TooLarge),
        (usize::MAX - max_align, max_align, TooLarge),
    ]
}

/// The header's promises for sizes and alignments, on every allocator, through every call
/// that takes a size and an alignment; a refused call changes nothing.
#[test]
fn size_and_alignment_errors_answer_what_the_header_promises() {
    for (_, name, max_order) in every_allocator() {
        let c = BuddyfreeConfig {
            max_order,
            ..config(name)
        };
        let bf = create(&c, ptr::null_mut(), 0).unwrap();
        let s = stats(bf);
        let largest = UNIT << max_order;
        assert!(s.max_align >= UNIT && s.max_align.is_power_of_two());
        let live = alloc(bf, UNIT, 0).unwrap();
        for (size, align, want) in layout_cases(largest, s.max_align) {
            let case = format!("{name:?}: {size} bytes aligned to {align}");
            assert_eq!(alloc(bf, size, align), Err(want), "alloc {case}");
            assert_eq!(try_alloc(bf, size, align), want, "try_alloc {case}");
            assert_eq!(free(bf, live, size, align), want, "free {case}");
            // SAFETY: a live instance; `live` is never dereferenced.
            let tried = unsafe { buddyfree_try_free(bf, live, size, align) };
            assert_eq!(tried, want, "try_free {case}");
        }
        assert_eq!(stats(bf).free_units, UNITS - 1, "{name:?}: changed nothing");
        assert_eq!(free(bf, live, UNIT, 0), BuddyfreeStatus::Ok);
        destroy(bf);

        let dev = device(&c, 1 << 40);
        // A base aligned far above the largest block: blocks aligned to their size.
        for (size, align, want) in layout_cases(largest, largest) {
            let case = format!("{name:?}: {size} device bytes aligned to {align}");
            let mut addr = 1;
            // SAFETY: a live instance and a writable address.
            let got = unsafe { buddyfree_device_alloc(dev, size, align, &mut addr) };
            assert_eq!((got, addr), (want, 0), "device_alloc {case}");
            // SAFETY: as above.
            let got = unsafe { buddyfree_device_try_alloc(dev, size, align, &mut addr) };
            assert_eq!((got, addr), (want, 0), "device_try_alloc {case}");
            // SAFETY: a live instance; addresses are never dereferenced.
            let got = unsafe { buddyfree_device_try_free(dev, 1 << 40, size, align) };
            assert_eq!(got, want, "device_try_free {case}");
            let held = HeldAlloc {
                size,
                align,
                status: Mutex::new(None),
            };
            let arg = ptr::from_ref(&held).cast_mut().cast::<c_void>();
            // SAFETY: a live instance; the callback is safe with `arg`, which outlives it.
            let status = unsafe { buddyfree_device_with_core(dev, 0, Some(held_alloc), arg) };
            assert_eq!(status, BuddyfreeStatus::Ok);
            let got = held.status.into_inner().unwrap();
            assert_eq!(got, Some(want), "device_core_alloc {case}");
        }
        // SAFETY: made above, destroyed once.
        unsafe { buddyfree_device_destroy(dev) };
    }
}

/// A device instance of `c` from `base`.
fn device(c: &BuddyfreeConfig, base: u64) -> *mut BuddyfreeDevice {
    let mut dev = ptr::null_mut();
    // SAFETY: a valid configuration and out pointer.
    let status = unsafe { buddyfree_device_create(c, base, &mut dev) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    dev
}

/// A request for `buddyfree_device_core_alloc` and its answer.
struct HeldAlloc {
    size: usize,
    align: usize,
    status: Mutex<Option<BuddyfreeStatus>>,
}

/// Allocates the `HeldAlloc`'s request on the held device core (and frees what it gets).
///
/// # Safety
/// `core` must be the callback's held core and `arg` the test's `HeldAlloc`, alive until it
/// returns.
unsafe extern "C" fn held_alloc(core: *mut BuddyfreeDeviceCore, arg: *mut c_void) {
    // SAFETY: `arg` is the test's `HeldAlloc`, alive for the callback.
    let held = unsafe { &*arg.cast::<HeldAlloc>() };
    let mut addr = 1;
    // SAFETY: the held core and a writable address.
    let status = unsafe { buddyfree_device_core_alloc(core, held.size, held.align, &mut addr) };
    if status == BuddyfreeStatus::Ok {
        // SAFETY: the held core; the block just allocated.
        let freed = unsafe { buddyfree_device_core_free(core, addr) };
        assert_eq!(freed, BuddyfreeStatus::Ok);
    } else {
        assert_eq!(addr, 0, "0 on failure");
    }
    *held.status.lock().unwrap() = Some(status);
}

/// Each allocator's capability bits are the same by index and on its instances (heap and
/// device), they are the library's `Capabilities`, and each call answers
/// `BUDDYFREE_STATUS_UNSUPPORTED` exactly where its bit is clear.
#[test]
fn capability_bits_say_which_calls_are_unsupported() {
    use BuddyfreeStatus::{Ok as Done, Unsupported};

    let mut bits = u32::MAX;
    // SAFETY: a writable out; an index out of range is refused.
    unsafe {
        assert_eq!(
            buddyfree_allocator_capabilities(buddyfree_allocator_count(), &mut bits),
            BuddyfreeStatus::OutOfRange
        );
        assert_eq!(
            buddyfree_allocator_capabilities(0, ptr::null_mut()),
            BuddyfreeStatus::NullArgument
        );
        assert_eq!(
            buddyfree_capabilities(ptr::null(), &mut bits),
            BuddyfreeStatus::NullArgument
        );
    }
    assert_eq!(bits, u32::MAX, "untouched on failure");
    let mut seen = std::collections::BTreeSet::new();
    for (i, name, max_order) in every_allocator() {
        let c = BuddyfreeConfig {
            max_order,
            ..config(name)
        };
        let mut by_index = 0;
        // SAFETY: a writable out.
        let status = unsafe { buddyfree_allocator_capabilities(i, &mut by_index) };
        assert_eq!(status, Done);
        let entry = buddyfree::registry::find(name.to_str().unwrap()).unwrap();
        assert_eq!(by_index, entry.capabilities.bits(), "{name:?}");
        seen.insert(by_index);

        let bf = create(&c, ptr::null_mut(), 0).unwrap();
        let mut of_instance = 0;
        // SAFETY: a live instance and a writable out.
        let status = unsafe { buddyfree_capabilities(bf, &mut of_instance) };
        assert_eq!(status, Done);
        assert_eq!(of_instance, by_index, "{name:?}");
        let has = |bit: u32| by_index & bit != 0;
        let expect = |bit: u32, got: BuddyfreeStatus, call: &str| {
            if has(bit) {
                assert_ne!(got, Unsupported, "{name:?}: {call} claimed");
            } else {
                assert_eq!(got, Unsupported, "{name:?}: {call} not claimed");
            }
        };
        let base = stats(bf).base as usize;
        let (index, p) = alloc_order(bf, 0).unwrap();
        // SAFETY: a live instance throughout; pointers are never dereferenced.
        unsafe {
            let mut order = u32::MAX;
            let got = buddyfree_order_at(bf, p, &mut order);
            expect(BUDDYFREE_CAP_ORDER_AT, got, "order_at");
            let got = buddyfree_try_free_at(bf, p);
            if has(BUDDYFREE_CAP_TRY_FREE) {
                expect(BUDDYFREE_CAP_TRY_ORDER_AT, got, "try_free_at");
            }
            if got != Done {
                let got = buddyfree_free_at(bf, p);
                expect(BUDDYFREE_CAP_ORDER_AT, got, "free_at");
                if got != Done {
                    assert_eq!(free_order(bf, index, 0), Done);
                }
            }
            let (index, _) = alloc_order(bf, 0).unwrap();
            let got = buddyfree_try_free_order(bf, index, 0);
            expect(BUDDYFREE_CAP_TRY_FREE, got, "try_free_order");
            if got != Done {
                assert_eq!(free_order(bf, index, 0), Done);
            }
            let (mut index, mut q) = (usize::MAX, ptr::null_mut());
            let got = buddyfree_try_alloc_order(bf, 0, &mut index, &mut q);
            expect(BUDDYFREE_CAP_TRY_ALLOC, got, "try_alloc_order");
            if got == Done {
                assert_eq!(q as usize, base + index * UNIT);
                assert_eq!(free_order(bf, index, 0), Done);
            }
            let got = buddyfree_alloc_at(bf, UNITS - 1, 0);
            expect(BUDDYFREE_CAP_ALLOC_AT, got, "alloc_at");
            if got == Done {
                assert_eq!(free_order(bf, UNITS - 1, 0), Done);
            }
            let got = buddyfree_reserve_range(bf, UNITS - 3, 3);
            expect(BUDDYFREE_CAP_ALLOC_AT, got, "reserve_range");
            if got == Done {
                // Reserved units are refused by any free, and given back by free_range.
                let status = free_order(bf, UNITS - 1, 0);
                assert_eq!(status, BuddyfreeStatus::Reserved, "{name:?}");
                let got = buddyfree_free_range(bf, UNITS - 3, 3);
                expect(BUDDYFREE_CAP_ORDER_AT, got, "free_range");
            }
            assert_eq!(buddyfree_drain(bf), Done);
        }
        assert_eq!(stats(bf).free_units, UNITS, "{name:?}");
        destroy(bf);

        let dev = device(&c, 1 << 40);
        let mut of_device = 0;
        // SAFETY: a live instance and a writable out.
        let status = unsafe { buddyfree_device_capabilities(dev, &mut of_device) };
        assert_eq!((status, of_device), (Done, by_index), "{name:?}");
        // SAFETY: made above, destroyed once.
        unsafe { buddyfree_device_destroy(dev) };
    }
    // The published allocators all offer every optional operation (the baselines, which
    // offer fewer, are not in the C ABI).
    assert!(!seen.is_empty(), "allocators that differ: {seen:?}");
}

/// The first release's `BuddyfreeConfig` cut after `allocator`: a caller whose header had
/// only these fields.
#[repr(C)]
#[derive(Clone, Copy)]
struct FirstFields {
    unit_size: usize,
    units: usize,
    max_order: u32,
    cores: u32,
    allocator: *const std::ffi::c_char,
}

/// A caller whose header had the fields up to `parking_limit`.
#[repr(C)]
#[derive(Clone, Copy)]
struct UpToParkingLimit {
    first: FirstFields,
    parking_limit: usize,
}

/// A caller whose header is newer than this library: a field it does not know, appended.
#[repr(C)]
struct Newer {
    current: BuddyfreeConfig,
    later: u64,
}

/// `value` at the start of a buffer whose other bytes are all 0xff, as a configuration: a
/// library that read past `size_of::<T>()` would see every later field set (the longest
/// lists, interrupt-safe frees, an unknown field).
fn after_garbage<T>(value: T) -> Box<[u64]> {
    let mut words = vec![u64::MAX; 32].into_boxed_slice();
    assert!(std::mem::size_of::<T>() <= 32 * 8 && std::mem::align_of::<T>() <= 8);
    // SAFETY: `words` holds a `T` at its start, aligned (8 bytes) and in bounds.
    unsafe { words.as_mut_ptr().cast::<T>().write(value) };
    words
}

/// How many units core 0's cache parks after 64 order-0 frees there (see `park_and_count`).
fn parked_units(bf: *mut Buddyfree) -> usize {
    let parking = Parking {
        bf: bf as usize,
        got: Mutex::new(Vec::new()),
    };
    let arg = ptr::from_ref(&parking).cast_mut().cast::<c_void>();
    // SAFETY: a live instance; the callback is safe with `arg`, which outlives it.
    let status = unsafe { buddyfree_with_core(bf, 0, Some(park_and_count), arg) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    let got = parking.got.into_inner().unwrap();
    for &index in &got {
        assert_eq!(free_order(bf, index, 0), BuddyfreeStatus::Ok);
    }
    UNITS - got.len()
}

/// What a `buddyfree_try_free_order` of a block of the held core answers (see
/// `try_free_own_block`).
fn try_free_on_held_core(bf: *mut Buddyfree) -> Option<BuddyfreeStatus> {
    let interrupted = Interrupted {
        bf: bf as usize,
        status: Mutex::new(None),
    };
    let arg = ptr::from_ref(&interrupted).cast_mut().cast::<c_void>();
    // SAFETY: a live instance; the callback is safe with `arg`, which outlives it.
    let status = unsafe { buddyfree_with_core(bf, 0, Some(try_free_own_block), arg) };
    assert_eq!(status, BuddyfreeStatus::Ok);
    interrupted.status.into_inner().unwrap()
}

fn create_sized(
    config: *const BuddyfreeConfig,
    size: usize,
) -> Result<*mut Buddyfree, BuddyfreeStatus> {
    let mut bf = ptr::dangling_mut();
    // SAFETY: `config` is readable for `size` bytes (each caller); `bf` is writable.
    match unsafe {
        buddyfree_create_sized(
            config,
            size,
            ptr::null_mut(),
            0,
            ptr::null_mut(),
            0,
            &mut bf,
        )
    } {
        BuddyfreeStatus::Ok => Ok(bf),
        e => {
            assert_eq!(bf, ptr::dangling_mut(), "untouched on failure");
            Err(e)
        }
    }
}

/// Callers whose headers had fewer fields keep working with the sized calls: only their
/// `config_size` bytes are read (the bytes after them, all set, change nothing) and the
/// fields they lack take their defaults: lists that follow the units per core, frees under
/// the holder's lock. The fields they have are honoured.
#[test]
fn an_older_callers_shorter_config_is_read_to_its_size() {
    let name = c"llfree-magazine";
    let full = config(name);
    let first = FirstFields {
        unit_size: full.unit_size,
        units: full.units,
        max_order: full.max_order,
        cores: full.cores,
        allocator: full.allocator,
    };
    let defaults = create(&full, ptr::null_mut(), 0).unwrap();
    let (default_parked, default_try_free) =
        (parked_units(defaults), try_free_on_held_core(defaults));
    assert_eq!(default_try_free, Some(BuddyfreeStatus::WouldBlock));
    destroy(defaults);

    let old = after_garbage(first);
    let bf = create_sized(old.as_ptr().cast(), std::mem::size_of::<FirstFields>()).unwrap();
    let s = stats(bf);
    assert_eq!(
        (s.unit_size, s.total_units, s.max_order),
        (UNIT, UNITS, MAX_ORDER)
    );
    assert_eq!(parked_units(bf), default_parked, "the default lists");
    assert_eq!(try_free_on_held_core(bf), default_try_free, "frees held");
    destroy(bf);

    let longest = UpToParkingLimit {
        first,
        parking_limit: usize::MAX,
    };
    let old = after_garbage(longest);
    let size = std::mem::size_of::<UpToParkingLimit>();
    let bf = create_sized(old.as_ptr().cast(), size).unwrap();
    assert_eq!(parked_units(bf), 64, "its parking limit, the longest lists");
    assert_eq!(try_free_on_held_core(bf), default_try_free, "frees held");
    destroy(bf);

    // The metadata size and device instances read the same way.
    let (mut size, mut align) = (0, 0);
    let mut want = (0, 0);
    // SAFETY: readable configurations of the sizes given, writable outputs.
    unsafe {
        let old = after_garbage(first);
        let old = old.as_ptr().cast();
        let got = buddyfree_metadata_size_sized(old, size_of_first(), &mut size, &mut align);
        assert_eq!(got, BuddyfreeStatus::Ok);
        let got = buddyfree_metadata_size(&full, &mut want.0, &mut want.1);
        assert_eq!(got, BuddyfreeStatus::Ok);
        assert_eq!((size, align), want);
        let mut dev = ptr::null_mut();
        let got = buddyfree_device_create_sized(
            old,
            size_of_first(),
            1 << 40,
            ptr::null_mut(),
            0,
            &mut dev,
        );
        assert_eq!(got, BuddyfreeStatus::Ok);
        buddyfree_device_destroy(dev);
    }
}

fn size_of_first() -> usize {
    std::mem::size_of::<FirstFields>()
}

/// A newer caller's longer config is taken when the fields this library does not know are
/// 0 (their defaults), and refused, naming why and building nothing, when one is set: a
/// setting the library cannot honour is never dropped. Sizes that end before `allocator` or
/// inside a field are refused too; the calls without a size read the fields up to
/// `interrupt_safe_frees` and no more.
#[test]
fn a_newer_callers_longer_config_is_refused_only_for_fields_it_sets() {
    let name = c"llfree-magazine";
    let safe = BuddyfreeConfig {
        interrupt_safe_frees: 1,
        ..config(name)
    };
    let newer = Newer {
        current: safe,
        later: 0,
    };
    let bf = create_sized(ptr::from_ref(&newer).cast(), std::mem::size_of::<Newer>()).unwrap();
    assert_eq!(try_free_on_held_core(bf), Some(BuddyfreeStatus::Ok));
    destroy(bf);

    let newer = Newer {
        current: safe,
        later: 1 << 40,
    };
    let size = std::mem::size_of::<Newer>();
    let refused = create_sized(ptr::from_ref(&newer).cast(), size);
    assert_eq!(refused, Err(BuddyfreeStatus::InvalidConfig));
    let why = last_error();
    assert!(why.contains("does not know"), "{why}");
    let mut dev = ptr::dangling_mut();
    // SAFETY: readable for `size` bytes; `dev` writable.
    let got = unsafe {
        buddyfree_device_create_sized(
            ptr::from_ref(&newer).cast(),
            size,
            1 << 40,
            ptr::null_mut(),
            0,
            &mut dev,
        )
    };
    assert_eq!(
        (got, dev),
        (BuddyfreeStatus::InvalidConfig, ptr::dangling_mut())
    );

    let whole = std::mem::size_of::<BuddyfreeConfig>();
    let in_parking_limit = std::mem::offset_of!(BuddyfreeConfig, parking_limit) + 2;
    for size in [0, size_of_first() - 1, in_parking_limit] {
        let refused = create_sized(&safe, size);
        assert_eq!(refused, Err(BuddyfreeStatus::InvalidConfig), "{size} bytes");
        assert!(last_error().contains("config_size"), "{}", last_error());
    }
    assert_eq!(
        create_sized(ptr::null(), whole),
        Err(BuddyfreeStatus::NullArgument)
    );
    // The whole struct, with its trailing padding, and the fields without it.
    let end_of_fields = std::mem::offset_of!(BuddyfreeConfig, interrupt_safe_frees) + 4;
    for size in [whole, end_of_fields] {
        let bf = create_sized(&safe, size).unwrap();
        assert_eq!(
            try_free_on_held_core(bf),
            Some(BuddyfreeStatus::Ok),
            "{size}"
        );
        destroy(bf);
    }
    // The calls without a size read up to `interrupt_safe_frees`: a `BuddyfreeConfig`
    // followed by set bytes (in its trailing padding too) is read as it is.
    let old = after_garbage(safe);
    let mut bf = ptr::null_mut();
    // SAFETY: a `BuddyfreeConfig` at the start of `old`, aligned; `bf` writable.
    let got = unsafe { buddyfree_create(old.as_ptr().cast(), ptr::null_mut(), 0, &mut bf) };
    assert_eq!(got, BuddyfreeStatus::Ok);
    assert_eq!(try_free_on_held_core(bf), Some(BuddyfreeStatus::Ok));
    destroy(bf);
}
