//! The one rule for finding the model file: an explicit path, else `EMBER_MODEL`, else the default location
//! that `scripts/fetch-model.sh` fills.

use std::fmt;
use std::path::{Path, PathBuf};

/// The environment variable that names a model file.
pub const MODEL_ENV_VAR: &str = "EMBER_MODEL";
/// Where `scripts/fetch-model.sh` puts the model, relative to the project root.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// No model file where the rule points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelNotFound {
    pub path: PathBuf,
    /// Which part of the rule chose the path.
    pub source: &'static str,
}

impl fmt::Display for ModelNotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "model file not found at {} ({}); run scripts/fetch-model.sh to download it, \
             or set {MODEL_ENV_VAR} to a GGUF file",
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for ModelNotFound {}

/// Resolves the model path: `explicit` when given, else `$EMBER_MODEL` when set and non-empty, else
/// [`DEFAULT_MODEL_PATH`] (relative to the current directory). The file must exist.
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
        (None, None) => (PathBuf::from(DEFAULT_MODEL_PATH), "default location"),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(ModelNotFound { path, source })
    }
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
        assert!(err.to_string().contains("scripts/fetch-model.sh"));
        let err = resolve_with(None, Some(missing)).unwrap_err();
        assert_eq!(err.source, "from EMBER_MODEL");
    }

    #[test]
    fn default_is_used_without_explicit_or_env() {
        match resolve_with(None, None) {
            Ok(p) => assert_eq!(p, PathBuf::from(DEFAULT_MODEL_PATH)),
            Err(e) => assert_eq!(e.path, PathBuf::from(DEFAULT_MODEL_PATH)),
        }
    }
}
