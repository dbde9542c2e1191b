//! The host's log callback: set process-wide with `engine_set_log_callback`, captured by each engine when it is
//! created. This is the C API's second piece of process-wide state; it is read only by `engine_new`, so engines
//! already running keep the callback they started with and never interfere with each other.

use std::ffi::{c_char, c_void, CString};
use std::sync::Mutex;

use super::boundary::boundary;
use super::status::EmberStatus;
use crate::engine::{LogLevel, Logger};

/// Severity of a log line; lower is more severe.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmberLogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl From<LogLevel> for EmberLogLevel {
    fn from(level: LogLevel) -> Self {
        match level {
            LogLevel::Error => EmberLogLevel::Error,
            LogLevel::Warn => EmberLogLevel::Warn,
            LogLevel::Info => EmberLogLevel::Info,
            LogLevel::Debug => EmberLogLevel::Debug,
        }
    }
}

/// Receives one log line: `userdata` as given to `engine_set_log_callback`, the line's level, and the line as a
/// NUL-terminated UTF-8 string valid only during the call (copy it to keep it).
///
/// It may be called from any thread, the engine's own thread included, and from several threads at once; it
/// must return normally (no C++ exception, no `longjmp`: unwinding into ember aborts the process) and must not
/// call ember functions.
pub type EmberLogCallback =
    Option<unsafe extern "C" fn(userdata: *mut c_void, level: EmberLogLevel, message: *const c_char)>;

/// A callback with its userdata.
#[derive(Clone, Copy)]
struct HostLog {
    callback: unsafe extern "C" fn(*mut c_void, EmberLogLevel, *const c_char),
    userdata: *mut c_void,
}

// SAFETY: `engine_set_log_callback`'s contract makes the host promise that the callback may be called from any
// thread with this userdata; ember only passes the pointer back, never dereferences it.
unsafe impl Send for HostLog {}
// SAFETY: as above; sharing a `HostLog` only shares the right to call the callback, which the host allows from
// several threads at once.
unsafe impl Sync for HostLog {}

/// The callback that engines created from now on will log to.
static HOST_LOG: Mutex<Option<HostLog>> = Mutex::new(None);

/// Sets the log callback of engines created after this call (`NULL` = no logging, the default). Engines already
/// created keep the callback they were created with. Always returns `EMBER_STATUS_OK`.
///
/// Thread safety: any thread; a call concurrent with `engine_new` applies to that engine or not.
/// Ownership: ember keeps `userdata` without dereferencing it; it must stay valid, and `callback` callable, until
/// every engine created while it was set has been freed with `engine_free`.
///
/// # Safety
/// `callback`, when not NULL, must follow the rules of `EmberLogCallback`.
#[no_mangle]
pub unsafe extern "C" fn engine_set_log_callback(callback: EmberLogCallback, userdata: *mut c_void) -> EmberStatus {
    boundary("engine_set_log_callback", || {
        *HOST_LOG.lock().unwrap_or_else(|e| e.into_inner()) = callback.map(|callback| HostLog { callback, userdata });
        Ok(())
    })
}

impl HostLog {
    /// Passes one line to the host.
    fn emit(&self, level: LogLevel, line: &str) {
        // A line with a NUL byte is cut there rather than dropped.
        let line = CString::new(line).unwrap_or_else(|e| {
            let end = e.nul_position();
            CString::new(&line.as_bytes()[..end]).unwrap_or_default()
        });
        // SAFETY: the host promised (engine_set_log_callback) that the callback is callable from any thread with
        // this userdata while the engine lives; the message is NUL-terminated and outlives the call.
        unsafe { (self.callback)(self.userdata, level.into(), line.as_ptr()) }
    }
}

/// The logger for an engine created now.
pub(super) fn current_logger() -> Logger {
    match *HOST_LOG.lock().unwrap_or_else(|e| e.into_inner()) {
        None => Logger::silent(),
        Some(host) => Logger::new(move |level, line| host.emit(level, line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Counts the lines "cut" at level Warn. No assertion here: a panic cannot unwind out of a C callback.
    unsafe extern "C" fn count_lines(userdata: *mut c_void, level: EmberLogLevel, message: *const c_char) {
        // SAFETY: the test passes a pointer to a static AtomicU32, and ember a NUL-terminated message.
        let (counter, message) = unsafe { (&*(userdata as *const AtomicU32), CStr::from_ptr(message)) };
        if level == EmberLogLevel::Warn && message.to_bytes() == b"cut" {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn loggers_capture_the_callback_set_when_they_are_made() {
        static LINES: AtomicU32 = AtomicU32::new(0);
        let userdata = &LINES as *const AtomicU32 as *mut c_void;
        // SAFETY: count_lines follows the callback rules; LINES is static.
        assert_eq!(unsafe { engine_set_log_callback(Some(count_lines), userdata) }, EmberStatus::Ok);
        let logger = current_logger();
        // SAFETY: NULL unsets the callback.
        assert_eq!(unsafe { engine_set_log_callback(None, std::ptr::null_mut()) }, EmberStatus::Ok);
        logger.log(LogLevel::Warn, "cut\0 here");
        current_logger().log(LogLevel::Warn, "not delivered");
        assert_eq!(LINES.load(Ordering::Relaxed), 1);
    }
}
