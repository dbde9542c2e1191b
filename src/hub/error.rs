//! Why a hub name could not be resolved to files in the cache.

use std::fmt;
use std::path::PathBuf;

/// What went wrong, with what a person needs to act on it.
#[derive(Debug)]
pub enum HubError {
    /// The name is not of a form the client reads.
    InvalidName(String),
    /// Offline (`HF_HUB_OFFLINE`, or a lookup that may not download) and the cache does not hold the file.
    NotCached { name: String, cache: PathBuf },
    /// The server answered with an error status.
    Status { url: String, status: u16, detail: String },
    /// No answer: connection refused, reset, timed out, a TLS failure.
    Network { url: String, reason: String },
    /// An answer that is not what the hub sends (malformed or oversized JSON, a bad path or hash).
    BadResponse { url: String, reason: String },
    /// The repository has no file the name picks: the message lists what it has.
    NoMatch { name: String, reason: String, available: Vec<String> },
    /// The hub gave no sha256 for the file, so its download could not be checked.
    MissingHash { file: String },
    /// The file downloaded does not have the hub's sha256 (it was deleted).
    HashMismatch { file: String, expected: String, actual: String },
    /// The download kept failing.
    Interrupted { file: String, attempts: u32, last: String },
    /// Reading or writing the cache failed.
    Io { path: PathBuf, error: std::io::Error },
    /// The progress callback asked to stop (what was fetched stays, for a later resume).
    Cancelled,
}

impl fmt::Display for HubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HubError::InvalidName(why) => write!(f, "invalid model name {why}"),
            HubError::NotCached { name, cache } => write!(
                f,
                "{name} is not in the Hugging Face cache ({}) and the hub may not be asked (HF_HUB_OFFLINE, or a \
                 lookup that does not download): `ember-cli pull {name}` fetches it",
                cache.display()
            ),
            HubError::Status { url, status, detail } => {
                let hint = match status {
                    401 | 403 => ": the repository is gated or private; set HF_TOKEN to a token that may read it",
                    404 => ": no such repository, revision or file",
                    _ => "",
                };
                write!(f, "the hub answered {status} for {url}{hint}")?;
                match detail.is_empty() {
                    true => Ok(()),
                    false => write!(f, " ({detail})"),
                }
            }
            HubError::Network { url, reason } => write!(f, "cannot reach {url}: {reason}"),
            HubError::BadResponse { url, reason } => write!(f, "unexpected answer from {url}: {reason}"),
            HubError::NoMatch { name, reason, available } => {
                write!(f, "{name}: {reason}")?;
                match available.is_empty() {
                    true => write!(f, " (the repository has no GGUF model files)"),
                    false => write!(f, "; available: {}", available.join(", ")),
                }
            }
            HubError::MissingHash { file } => {
                write!(f, "the hub gives no sha256 for {file} (not an LFS file), so its download cannot be checked")
            }
            HubError::HashMismatch { file, expected, actual } => write!(
                f,
                "{file}: the downloaded bytes have sha256 {actual}, the hub says {expected}; the download was \
                 deleted (try again)"
            ),
            HubError::Interrupted { file, attempts, last } => {
                write!(f, "downloading {file} failed {attempts} times in a row (last: {last}); run again to resume")
            }
            HubError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            HubError::Cancelled => write!(f, "the download was cancelled"),
        }
    }
}

impl std::error::Error for HubError {}

impl HubError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
        let path = path.into();
        move |error| HubError::Io { path, error }
    }
}
