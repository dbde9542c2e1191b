//! Where the hub client talks to and keeps files: the Hugging Face variables (`HF_ENDPOINT`, `HF_TOKEN`,
//! `HF_HOME`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`, `HF_HUB_DOWNLOAD_TIMEOUT`), read as `huggingface_hub` reads them so
//! that both share one cache.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The Hugging Face hub's public endpoint: the one place it is written.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// How long a connection, a response's headers or any one read of a body may stall before the attempt fails
/// (`huggingface_hub`'s default for `HF_HUB_DOWNLOAD_TIMEOUT`). A download that stalls resumes where it stopped.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a token file is read.
const TOKEN_FILE_LIMIT: u64 = 4096;

/// The hub client's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HubSettings {
    /// The hub's base URL, without a trailing `/` (`HF_ENDPOINT`).
    pub endpoint: String,
    /// Sent as `Authorization: Bearer` to the endpoint (never to a host it redirects to): `HF_TOKEN`, else the token
    /// file `huggingface-cli login` writes (`HF_TOKEN_PATH`, else `$HF_HOME/token`).
    pub token: Option<String>,
    /// The cache's root (`HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`; `HF_HOME` defaults to
    /// `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`).
    pub cache_dir: PathBuf,
    /// `HF_HUB_OFFLINE`: names resolve from the cache only, and nothing is requested.
    pub offline: bool,
    /// `HF_HUB_DOWNLOAD_TIMEOUT` (seconds): see [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
}

impl HubSettings {
    /// The settings of this process's environment.
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// The settings that the variables `var` gives (unset and empty are the same), so that the rule is testable
    /// without touching the process's environment.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        let home = || get("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
        let hf_home = get("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            get("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| home().join(".cache")).join("huggingface")
        });
        let cache_dir = get("HF_HUB_CACHE")
            .or_else(|| get("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let endpoint = get("HF_ENDPOINT")
            .and_then(|e| e.into_string().ok())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
            .trim_end_matches('/')
            .to_owned();
        let token_file = get("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| hf_home.join("token"));
        let token = get("HF_TOKEN").and_then(|t| t.into_string().ok()).or_else(|| read_token_file(&token_file));
        let token = token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        let offline = get("HF_HUB_OFFLINE").is_some_and(|v| is_true(&v.to_string_lossy()));
        let timeout = get("HF_HUB_DOWNLOAD_TIMEOUT")
            .and_then(|v| v.to_string_lossy().trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64);
        HubSettings { endpoint, token, cache_dir, offline, timeout }
    }
}

/// `huggingface_hub`'s truth values.
fn is_true(value: &str) -> bool {
    matches!(value.trim().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

fn read_token_file(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(TOKEN_FILE_LIMIT).read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> HubSettings {
        let vars: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        HubSettings::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn the_cache_follows_huggingface_hubs_order() {
        let s = settings(&[("HOME", "/home/u")]);
        assert_eq!(s.cache_dir, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert_eq!(s.endpoint, DEFAULT_ENDPOINT);
        assert_eq!((s.offline, s.timeout, s.token), (false, DEFAULT_TIMEOUT, None));
        let s = settings(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(s.cache_dir, PathBuf::from("/x/huggingface/hub"));
        let s = settings(&[("HF_HOME", "/h"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(s.cache_dir, PathBuf::from("/h/hub"));
        let s = settings(&[("HF_HOME", "/h"), ("HUGGINGFACE_HUB_CACHE", "/old")]);
        assert_eq!(s.cache_dir, PathBuf::from("/old"));
        let s = settings(&[("HF_HOME", "/h"), ("HF_HUB_CACHE", "/c"), ("HUGGINGFACE_HUB_CACHE", "/old")]);
        assert_eq!(s.cache_dir, PathBuf::from("/c"));
    }

    #[test]
    fn endpoint_token_offline_and_timeout_come_from_their_variables() {
        let s = settings(&[
            ("HF_ENDPOINT", "http://127.0.0.1:9/"),
            ("HF_TOKEN", " hf_abc\n"),
            ("HF_HUB_OFFLINE", "yes"),
            ("HF_HUB_DOWNLOAD_TIMEOUT", "2.5"),
        ]);
        assert_eq!(s.endpoint, "http://127.0.0.1:9");
        assert_eq!(s.token.as_deref(), Some("hf_abc"));
        assert!(s.offline);
        assert_eq!(s.timeout, Duration::from_millis(2500));
        for off in ["0", "no", "false", ""] {
            assert!(!settings(&[("HF_HUB_OFFLINE", off)]).offline, "{off}");
        }
        for bad in ["-1", "nan", "soon", "1e9"] {
            assert_eq!(settings(&[("HF_HUB_DOWNLOAD_TIMEOUT", bad)]).timeout, DEFAULT_TIMEOUT, "{bad}");
        }
    }
}
