//! The C boundary: every exported function runs its body through [`boundary`], which clears the thread's last
//! error, catches any panic (unwinding into C is undefined behaviour), and turns the body's `Result` into an
//! [`EmberStatus`] plus the last error message. This is rustls-ffi's `ffi_panic_boundary!` as a function: the
//! body is a closure, so argument checks can use `?`.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::last_error;
use super::status::EmberStatus;

/// Why a call failed: the status to return and the detail for `engine_last_error_message`.
#[derive(Debug)]
pub(super) struct Failure {
    pub status: EmberStatus,
    pub detail: Detail,
}

/// The last error message of a failure.
#[derive(Debug)]
pub(super) enum Detail {
    /// A sentence; the boundary prefixes the function's name.
    Text(String),
    /// A machine-readable body (the OpenAI error JSON) that must reach the host unchanged.
    Verbatim(String),
}

impl Failure {
    pub fn new(status: EmberStatus, message: impl Into<String>) -> Self {
        Failure { status, detail: Detail::Text(message.into()) }
    }

    pub fn verbatim(status: EmberStatus, body: String) -> Self {
        Failure { status, detail: Detail::Verbatim(body) }
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Failure::new(EmberStatus::InvalidArgument, message)
    }

    pub fn invalid_handle(message: impl Into<String>) -> Self {
        Failure::new(EmberStatus::InvalidHandle, message)
    }
}

/// Runs the body of the exported function `function`: `Ok` → `EMBER_STATUS_OK`; `Err` → its status, with its
/// message recorded; a panic → `EMBER_STATUS_PANIC`, with the panic message recorded.
///
/// `AssertUnwindSafe`: after a caught panic, the state a body may have left half-updated is behind mutexes
/// whose poisoning every lock in ember ignores deliberately (`unwrap_or_else(into_inner)`); the registry never
/// runs code that can panic while holding its lock, so a panic cannot leave it inconsistent.
pub(super) fn boundary(function: &'static str, body: impl FnOnce() -> Result<(), Failure>) -> EmberStatus {
    last_error::clear();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => EmberStatus::Ok,
        Ok(Err(failure)) => {
            last_error::set(match failure.detail {
                Detail::Text(message) => format!("{function}: {message}"),
                Detail::Verbatim(body) => body,
            });
            failure.status
        }
        Err(payload) => {
            last_error::set(format!(
                "{function}: internal error (please report this bug in ember): {}",
                panic_message(payload.as_ref())
            ));
            EmberStatus::Panic
        }
    }
}

/// The text of a panic payload (`panic!` with a literal gives `&str`, with a format gives `String`).
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_clears_the_last_error() {
        last_error::set("stale".into());
        assert_eq!(boundary("engine_test", || Ok(())), EmberStatus::Ok);
        assert_eq!(last_error::get(), "");
    }

    #[test]
    fn failures_name_the_function_unless_verbatim() {
        let status = boundary("engine_test", || Err(Failure::invalid_argument("out is NULL")));
        assert_eq!(status, EmberStatus::InvalidArgument);
        assert_eq!(last_error::get(), "engine_test: out is NULL");
        let body = r#"{"error":{"message":"m"}}"#;
        let status = boundary("engine_test", || Err(Failure::verbatim(EmberStatus::InvalidRequest, body.into())));
        assert_eq!(status, EmberStatus::InvalidRequest);
        assert_eq!(last_error::get(), body);
    }

    #[test]
    fn panics_are_caught_and_reported() {
        let status = boundary("engine_test", || panic!("boom {}", 42));
        assert_eq!(status, EmberStatus::Panic);
        let message = last_error::get();
        assert!(message.starts_with("engine_test: internal error") && message.ends_with("boom 42"), "{message}");
        let status = boundary("engine_test", || std::panic::panic_any(7_u8));
        assert_eq!(status, EmberStatus::Panic);
        assert!(last_error::get().ends_with("a panic without a message"));
    }
}
