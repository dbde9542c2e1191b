//! The library's version, as macros for compile time and `engine_version()` for run time, so a host can check
//! that the library it loaded is the one it was compiled against.

use std::ffi::c_char;

/// The major version of the header (`Cargo.toml`'s, checked by a test). Incompatible changes bump it.
pub const EMBER_VERSION_MAJOR: u32 = 0;
/// The minor version of the header. Additions bump it.
pub const EMBER_VERSION_MINOR: u32 = 1;
/// The patch version of the header.
pub const EMBER_VERSION_PATCH: u32 = 0;

/// The library's version, `"MAJOR.MINOR.PATCH"`: compare it with the `EMBER_VERSION_*` macros of the header the
/// host was compiled with.
///
/// Thread safety: any thread, any time. Ownership: static; do not free. Does not change the last error message.
#[no_mangle]
pub extern "C" fn engine_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn macros_and_string_match_cargo_toml() {
        let number = |s: &str| s.parse::<u32>().unwrap();
        assert_eq!(EMBER_VERSION_MAJOR, number(env!("CARGO_PKG_VERSION_MAJOR")));
        assert_eq!(EMBER_VERSION_MINOR, number(env!("CARGO_PKG_VERSION_MINOR")));
        assert_eq!(EMBER_VERSION_PATCH, number(env!("CARGO_PKG_VERSION_PATCH")));
        // SAFETY: engine_version returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(engine_version()) }.to_str().unwrap();
        assert_eq!(text, format!("{EMBER_VERSION_MAJOR}.{EMBER_VERSION_MINOR}.{EMBER_VERSION_PATCH}"));
    }
}
