//! Where an engine's log lines go: nowhere by default (a library should not write to the host's stderr), or to
//! a function the host provides (the C API's log callback, the CLI's stderr).

use std::fmt;
use std::sync::Arc;

/// Severity of a log line. The numbers are part of the C API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

type LogFn = dyn Fn(LogLevel, &str) + Send + Sync;

/// A cheap-to-clone log sink.
#[derive(Clone, Default)]
pub struct Logger(Option<Arc<LogFn>>);

impl fmt::Debug for Logger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Logger(callback)" } else { "Logger(silent)" })
    }
}

impl Logger {
    /// Drops every line.
    pub fn silent() -> Self {
        Logger(None)
    }

    /// Calls `f` for every line.
    pub fn new(f: impl Fn(LogLevel, &str) + Send + Sync + 'static) -> Self {
        Logger(Some(Arc::new(f)))
    }

    /// Writes lines at `max` or more severe to stderr, prefixed with `ember` and the level.
    pub fn stderr(max: LogLevel) -> Self {
        Logger::new(move |level, line| {
            if level <= max {
                eprintln!("ember {}: {line}", level.as_str());
            }
        })
    }

    pub fn log(&self, level: LogLevel, line: &str) {
        if let Some(f) = &self.0 {
            f(level, line);
        }
    }
}
