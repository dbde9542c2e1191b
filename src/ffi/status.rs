//! `EmberStatus`: the one result code of every C function, and its static description.
//!
//! The numbers are ABI: a value once published is never renumbered or reused for another meaning, so a host
//! compiled against an old header still reads new libraries correctly (rustls-ffi's `rustls_result` rule).
//! New statuses take the next free number.

use std::ffi::c_char;

/// The result of an ember C function. `EMBER_STATUS_OK` (0) is success; any other value is a failure whose
/// detail is in `engine_last_error_message()` on the calling thread. A failing function writes none of its
/// outputs, unless its documentation says otherwise (`EMBER_STATUS_BUFFER_TOO_SMALL`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmberStatus {
    /// Success.
    Ok = 0,
    /// A required pointer argument is NULL, or an argument is out of its documented range (a negative
    /// `timeout_ms` other than -1, a `struct_size` below the minimum).
    InvalidArgument = 1,
    /// A string argument is not valid UTF-8.
    InvalidUtf8 = 2,
    /// A handle is not a live handle of the expected type: freed, never issued, a handle of the other type,
    /// or a request passed with an engine it does not belong to.
    InvalidHandle = 3,
    /// The engine configuration JSON is malformed, has an unknown key, or has values that conflict or are out
    /// of range.
    InvalidConfig = 4,
    /// The model file could not be found or loaded.
    ModelLoadFailed = 5,
    /// The backend or the engine thread could not be started.
    EngineStartFailed = 6,
    /// The request JSON was refused; `engine_last_error_message()` is the OpenAI error body
    /// (`{"error": {"message", "type", "param", "code"}}`).
    InvalidRequest = 7,
    /// Nothing happened before the timeout: a wait's `timeout_ms` ran out, or an embeddings or rerank request's
    /// `deadline_ms` passed while it waited (none of its inputs was computed).
    Timeout = 8,
    /// The request has not finished yet, so there is no final response.
    NotFinished = 9,
    /// The stream has ended: every chunk (`engine_next_chunk_json`) or event (`engine_poll`) has been returned.
    /// An answer, not a failure: later calls answer it again, at once.
    StreamDone = 10,
    /// The caller's buffer is too short; the size needed was written.
    BufferTooSmall = 11,
    /// A choice index at or beyond the request's number of choices.
    ChoiceOutOfRange = 12,
    /// The process holds the most live handles ember can issue (2^24 - 1 of a type).
    TooManyHandles = 13,
    /// A bug inside ember was caught at the C boundary (a Rust panic). The call had no effect that can be
    /// relied on; the process is unharmed. Please report the message.
    Panic = 14,
    /// The handle was created by another process: this process is a child forked from it, and an engine's
    /// threads do not survive `fork()`. Nothing was done, and the handle's memory is left as fork copied it
    /// (freeing it in the child is also refused). Create engines after fork (`docs/c_api.md`).
    Forked = 15,
    /// The engine refused the request at once because `max_waiting_requests` requests already wait to start:
    /// nothing was queued. Retry later (an HTTP gateway answers 503 with `Retry-After`).
    /// `engine_last_error_message()` is the OpenAI error body, `code` `"overloaded"`.
    Overloaded = 16,
    /// The load progress callback of `engine_new_with_progress` returned false: the load stopped there and no
    /// engine was created (nothing is left running or allocated).
    LoadCancelled = 17,
}

/// Every status, in number order (private: cbindgen would export a public constant).
const ALL_STATUSES: [EmberStatus; 18] = [
    EmberStatus::Ok,
    EmberStatus::InvalidArgument,
    EmberStatus::InvalidUtf8,
    EmberStatus::InvalidHandle,
    EmberStatus::InvalidConfig,
    EmberStatus::ModelLoadFailed,
    EmberStatus::EngineStartFailed,
    EmberStatus::InvalidRequest,
    EmberStatus::Timeout,
    EmberStatus::NotFinished,
    EmberStatus::StreamDone,
    EmberStatus::BufferTooSmall,
    EmberStatus::ChoiceOutOfRange,
    EmberStatus::TooManyHandles,
    EmberStatus::Panic,
    EmberStatus::Forked,
    EmberStatus::Overloaded,
    EmberStatus::LoadCancelled,
];

impl EmberStatus {
    /// A one-line description, NUL-terminated so that C can use it in place.
    fn message(self) -> &'static str {
        match self {
            EmberStatus::Ok => "ok\0",
            EmberStatus::InvalidArgument => "invalid argument (a NULL pointer or a value out of range)\0",
            EmberStatus::InvalidUtf8 => "a string argument is not valid UTF-8\0",
            EmberStatus::InvalidHandle => "not a live handle (freed, never issued, or of another engine)\0",
            EmberStatus::InvalidConfig => "invalid engine configuration\0",
            EmberStatus::ModelLoadFailed => "the model could not be loaded\0",
            EmberStatus::EngineStartFailed => "the engine could not be started\0",
            EmberStatus::InvalidRequest => "invalid request\0",
            EmberStatus::Timeout => "timed out\0",
            EmberStatus::NotFinished => "the request has not finished\0",
            EmberStatus::StreamDone => "the stream has ended\0",
            EmberStatus::BufferTooSmall => "the buffer is too small\0",
            EmberStatus::ChoiceOutOfRange => "choice index out of range\0",
            EmberStatus::TooManyHandles => "too many live handles\0",
            EmberStatus::Panic => "internal error in ember (caught panic)\0",
            EmberStatus::Forked => "the handle belongs to the parent process (used after fork)\0",
            EmberStatus::Overloaded => "the engine is overloaded: too many requests wait to start\0",
            EmberStatus::LoadCancelled => "the load was cancelled by its progress callback\0",
        }
    }
}

/// A static, NUL-terminated English description of `status` (an `EmberStatus` value); never NULL. Unknown
/// values (from a newer header) give "unknown status".
///
/// Thread safety: any thread, any time. Ownership: the string is static; do not free it. Does not change the
/// last error message.
#[no_mangle]
pub extern "C" fn engine_status_message(status: u32) -> *const c_char {
    // `status` is taken as a plain integer: a host may pass any value, and an out-of-range value in a Rust
    // enum would be undefined behaviour.
    let text = ALL_STATUSES.iter().find(|s| **s as u32 == status).map_or("unknown status\0", |s| s.message());
    text.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn numbers_are_dense_and_in_order() {
        for (i, status) in ALL_STATUSES.iter().enumerate() {
            assert_eq!(*status as u32, i as u32, "{status:?}");
        }
    }

    #[test]
    fn every_status_has_a_message_and_unknown_values_are_named() {
        for status in ALL_STATUSES {
            // SAFETY: engine_status_message returns a static NUL-terminated string.
            let text = unsafe { CStr::from_ptr(engine_status_message(status as u32)) };
            assert!(!text.to_bytes().is_empty());
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(engine_status_message(9999)) };
        assert_eq!(unknown.to_str(), Ok("unknown status"));
    }
}
