//! Checked conversions of C arguments: strings (NULL and UTF-8 checks), output pointers (NULL check, written only
//! at the end of a successful call), timeouts. Handles are checked by `registry.rs`, never dereferenced.

use std::ffi::{c_char, CStr};
use std::ptr::{self, NonNull};
use std::time::Duration;

use super::boundary::Failure;
use super::status::EmberStatus;

/// The string argument `name`; NULL is refused.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that stays valid and unchanged while `'a` lasts (the
/// call).
pub(super) unsafe fn required_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str, Failure> {
    // SAFETY: forwarded from this function's contract.
    unsafe { optional_str(ptr, name) }?.ok_or_else(|| Failure::invalid_argument(format!("{name} is NULL")))
}

/// The string argument `name`, `None` when NULL.
///
/// # Safety
/// As [`required_str`].
pub(super) unsafe fn optional_str<'a>(ptr: *const c_char, name: &str) -> Result<Option<&'a str>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL, and by this function's contract NUL-terminated and valid for 'a.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(Some(s)),
        Err(e) => Err(Failure::new(
            EmberStatus::InvalidUtf8,
            format!("{name} is not valid UTF-8 (invalid byte at offset {})", e.valid_up_to()),
        )),
    }
}

/// An output pointer checked for NULL, to be written once the call has succeeded.
pub(super) struct Out<T: Copy>(NonNull<T>);

impl<T: Copy> Out<T> {
    /// Checks the output argument `name`.
    pub fn new(ptr: *mut T, name: &str) -> Result<Self, Failure> {
        NonNull::new(ptr).map(Out).ok_or_else(|| Failure::invalid_argument(format!("{name} is NULL")))
    }

    /// Writes the result. Unaligned, so that a host's packed or misaligned storage is no undefined behaviour.
    ///
    /// # Safety
    /// The pointer given to [`Out::new`] points to `size_of::<T>()` writable bytes (the host's side of the
    /// contract, documented on every function).
    pub unsafe fn write(self, value: T) {
        // SAFETY: non-NULL (checked in `new`) and writable by this function's contract; `T: Copy`, so
        // overwriting without dropping the old bytes loses nothing.
        unsafe { ptr::write_unaligned(self.0.as_ptr(), value) }
    }
}

/// Copies `items` into the host's `buffer` of `capacity` entries and writes their number to `*out_count`, with
/// the size-query protocol of the `engine_get_token_*` functions: a NULL `buffer` with `capacity` 0 asks for the
/// size; a `capacity` below `items.len()` writes only the size needed and fails with `BUFFER_TOO_SMALL` (the
/// buffer untouched). `what` names the items in the error.
///
/// # Safety
/// `buffer` is NULL or points to `capacity` writable `T`s; `out_count` is NULL or points to a writable `usize`.
pub(super) unsafe fn copy_to_buffer<T: Copy>(
    items: &[T],
    buffer: *mut T,
    capacity: usize,
    out_count: Out<usize>,
    what: &str,
) -> Result<(), Failure> {
    if items.len() > capacity {
        // SAFETY: `out_count` is non-NULL and writable by this function's contract.
        unsafe { out_count.write(items.len()) };
        return Err(Failure::new(
            EmberStatus::BufferTooSmall,
            format!("{} {what} do not fit a buffer of {capacity}", items.len()),
        ));
    }
    if !items.is_empty() {
        // SAFETY: `buffer` is non-NULL (the callers refuse a NULL buffer with a non-zero capacity, and capacity ≥
        // len > 0) and holds `capacity` ≥ `items.len()` writable `T`s by this function's contract; the two do
        // not overlap (`items` is ours). Unaligned, as `Out::write`.
        unsafe {
            for (i, item) in items.iter().enumerate() {
                ptr::write_unaligned(buffer.add(i), *item);
            }
        }
    }
    // SAFETY: as above.
    unsafe { out_count.write(items.len()) };
    Ok(())
}

/// A poll timeout: 0 = do not wait, -1 = wait until something happens, other positive values = milliseconds.
/// `None` means "no limit".
pub(super) fn timeout(timeout_ms: i32) -> Result<Option<Duration>, Failure> {
    match timeout_ms {
        -1 => Ok(None),
        ms if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
        ms => Err(Failure::invalid_argument(format!("timeout_ms = {ms}: only -1 (no limit) or >= 0 is allowed"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_null_utf8_and_valid() {
        // SAFETY: NULL is allowed by the contract.
        assert_eq!(unsafe { required_str(ptr::null(), "json") }.unwrap_err().status, EmberStatus::InvalidArgument);
        // SAFETY: as above.
        assert!(unsafe { optional_str(ptr::null(), "json") }.unwrap().is_none());
        let bad = b"ab\xffc\0";
        // SAFETY: `bad` is NUL-terminated and outlives the call.
        let e = unsafe { required_str(bad.as_ptr().cast(), "json") }.unwrap_err();
        assert_eq!(e.status, EmberStatus::InvalidUtf8);
        let good = c"h\u{e9}llo";
        // SAFETY: a C string literal is NUL-terminated and static.
        assert_eq!(unsafe { required_str(good.as_ptr(), "json") }.unwrap(), "h\u{e9}llo");
    }

    #[test]
    fn out_refuses_null_and_writes_unaligned() {
        assert_eq!(Out::<u64>::new(ptr::null_mut(), "out").err().unwrap().status, EmberStatus::InvalidArgument);
        let mut bytes = [0u8; 9];
        let out = Out::new(bytes[1..].as_mut_ptr().cast::<u64>(), "out").unwrap();
        // SAFETY: 8 writable bytes at an odd address, which `write` supports.
        unsafe { out.write(u64::MAX) };
        assert_eq!(bytes, [0, 255, 255, 255, 255, 255, 255, 255, 255]);
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout(-1).unwrap(), None);
        assert_eq!(timeout(0).unwrap(), Some(Duration::ZERO));
        assert_eq!(timeout(250).unwrap(), Some(Duration::from_millis(250)));
        assert_eq!(timeout(-2).unwrap_err().status, EmberStatus::InvalidArgument);
        assert_eq!(timeout(i32::MIN).unwrap_err().status, EmberStatus::InvalidArgument);
    }
}
