//! The detail of the calling thread's last failure, readable through `engine_last_error_message()`.
//!
//! Thread-local, so that threads never see each other's errors and no lock is taken. Every ember call except the
//! three static getters (`engine_last_error_message`, `engine_status_message`, `engine_version`) clears it on
//! entry and sets it when it fails, so after a call the message describes that call: empty on success.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

thread_local! {
    /// The message of this thread's last failing call; `None` after a successful call.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Forgets this thread's last error (a call is starting).
pub(super) fn clear() {
    // `try_with` fails only while the thread is being torn down; there is nothing to clear then.
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            *e = None;
        }
    });
}

/// Records `message` as this thread's last error. Interior NUL bytes (possible in text quoted from a request)
/// are replaced, so that C sees the whole message.
pub(super) fn set(message: String) {
    let message = CString::new(message).unwrap_or_else(|e| {
        let bytes: Vec<u8> = e.into_vec().into_iter().map(|b| if b == 0 { b'?' } else { b }).collect();
        CString::new(bytes).unwrap_or_default()
    });
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            *e = Some(message);
        }
    });
}

/// A copy of this thread's last error (for Rust tests of the C API).
#[cfg(test)]
pub(super) fn get() -> String {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ref().map(|m| m.to_string_lossy().into_owned()).unwrap_or_default())
        .unwrap_or_default()
}

/// The detail of this thread's last failure, as a NUL-terminated UTF-8 string; "" when this thread's last
/// ember call succeeded (or it made none). Never NULL.
///
/// After `EMBER_STATUS_INVALID_REQUEST` the message is the OpenAI error body, a JSON object
/// `{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}`; after any other failure it is an
/// English sentence that names the function and the argument at fault.
///
/// Thread safety: any thread; each thread has its own message. Ownership: the string belongs to ember and stays
/// valid until this thread's next ember call other than `engine_last_error_message`, `engine_status_message`
/// and `engine_version`; copy it to keep it. Do not free it.
#[no_mangle]
pub extern "C" fn engine_last_error_message() -> *const c_char {
    const EMPTY: &str = "\0";
    // The pointer stays valid after `with` returns: the CString's heap buffer lives in the thread-local until
    // the next `clear` or `set` on this thread, which only an ember call does.
    LAST_ERROR
        .try_with(|e| match e.try_borrow() {
            Ok(e) => e.as_ref().map(|m| m.as_ptr()),
            Err(_) => None,
        })
        .ok()
        .flatten()
        .unwrap_or(EMPTY.as_ptr().cast())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn message() -> String {
        // SAFETY: engine_last_error_message returns a NUL-terminated string valid until the next ember call.
        unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn set_clear_and_interior_nul() {
        clear();
        assert_eq!(message(), "");
        set("bad \0 byte".into());
        assert_eq!(message(), "bad ? byte");
        assert_eq!(get(), "bad ? byte");
        clear();
        assert_eq!(message(), "");
    }

    #[test]
    fn threads_do_not_share_messages() {
        set("main thread".into());
        std::thread::spawn(|| assert_eq!(message(), "")).join().unwrap();
        assert_eq!(message(), "main thread");
    }
}
