//! Link arguments of the shared library (`libember.so`); the static library and the rlib are unaffected.
//!
//! - SONAME `libember.so.MAJOR`: programs linked against it record that name, and the loader finds the
//!   library of the same ABI under it (`make install` lays out `libember.so.MAJOR.MINOR.PATCH` with the two
//!   links; `make c-lib` adds `libember.so.MAJOR` beside the build's `libember.so`).
//! - `--exclude-libs ALL`: symbols of the dependencies (Rust rlibs are archives to the linker) are not exported.
//!   Without it, the `llg_*` C API of the structured-output crate would be exported beside ember's own: the
//!   library must export exactly the functions of `include/ember.h` (`tests/c/check_install.sh` checks it).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Both are GNU ld / lld options of ELF targets.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libember.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
}
