//! Links the binary without the C start files: `_start` is ours (see `src/sys.rs`). libc is
//! linked (dynamically) only for `memcpy` and friends, which `core` calls; nothing of its
//! start-up runs, and the program makes its system calls itself.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64")
    {
        println!("cargo:rustc-link-arg-bins=-nostartfiles");
        println!("cargo:rustc-link-arg-bins=-lc");
    }
}
