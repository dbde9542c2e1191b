//! The model a config or command line names, as a file to open: a path goes through the model-path rule
//! ([`super::path`]); a hub name (`org/repo:QUANT`, `hf://org/repo/file.gguf`, in the argument or in
//! `EMBER_MODEL`) resolves through [`crate::hub`], from the cache or downloaded into it, the download reported to
//! the load's progress.

use std::path::{Path, PathBuf};

use super::path::{resolve_model_path, resolve_with, MODEL_ENV_VAR};
use super::progress::LoadProgress;
use super::ModelError;
use crate::hub::{self, DownloadProgress, Freshness, HubError, HubSettings, ModelSpec};

/// Whether `explicit` (else `EMBER_MODEL`) is a hub name rather than a path.
pub fn names_hub_model(explicit: Option<&Path>) -> bool {
    let env = std::env::var_os(MODEL_ENV_VAR).filter(|v| !v.is_empty()).map(PathBuf::from);
    let named = explicit.or(env.as_deref()).and_then(Path::to_str);
    named.is_some_and(|text| !matches!(hub::parse_model_spec(text), Ok(ModelSpec::Path(_))))
}

/// The file to load for `explicit` (a path or a hub name), else `EMBER_MODEL`'s, else the default model.
pub fn locate_model(explicit: Option<&Path>, progress: &mut LoadProgress<'_>) -> Result<PathBuf, ModelError> {
    let env = std::env::var_os(MODEL_ENV_VAR).filter(|v| !v.is_empty()).map(PathBuf::from);
    let (named, from_env) = match (explicit, env.as_deref()) {
        (Some(p), _) => (p, false),
        (None, Some(p)) => (p, true),
        (None, None) => return resolve_model_path(None).map_err(ModelError::NotFound),
    };
    // A name that is not UTF-8 can only be a path.
    let spec = match named.to_str() {
        Some(text) => hub::parse_model_spec(text).map_err(ModelError::Hub)?,
        None => ModelSpec::Path(named.to_owned()),
    };
    match spec {
        ModelSpec::Path(path) => match from_env {
            false => resolve_with(Some(&path), None),
            true => resolve_with(None, Some(&path)),
        }
        .map_err(ModelError::NotFound),
        ModelSpec::Hub(name) => {
            let settings = HubSettings::from_env();
            let found = hub::resolve(&name, &settings, Freshness::CacheFirst, &mut Reporting(progress));
            progress.end_download();
            let found = found.map_err(|error| match (&error, named.to_str()) {
                // A string that might have been meant as a file: say that it was not one.
                (HubError::Status { status: 404, .. } | HubError::Network { .. }, Some(text))
                    if !text.starts_with(hub::HUB_SCHEME) =>
                {
                    ModelError::NotFoundAnywhere { name: text.to_owned(), error }
                }
                _ => ModelError::Hub(error),
            })?;
            if found.files.len() > 1 {
                return Err(ModelError::Split { name: name.to_string(), parts: found.files });
            }
            Ok(found.first().clone())
        }
    }
}

/// A download reported as the first part of the load's progress.
struct Reporting<'p, 'a>(&'p mut LoadProgress<'a>);

impl DownloadProgress for Reporting<'_, '_> {
    fn start(&mut self, total_bytes: u64) -> bool {
        self.0.begin_download(total_bytes)
    }

    fn advance(&mut self, bytes: u64) -> bool {
        self.0.advance(bytes)
    }
}
