//! Links the kernel at the address OpenSBI's `fw_jump` jumps to (`linker.ld`).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    println!("cargo:rustc-link-arg-bins=-T{dir}/linker.ld");
    println!("cargo:rerun-if-changed=linker.ld");
}
