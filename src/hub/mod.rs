//! The model hub client: a model named on the Hugging Face hub (`org/repo:QUANT`, `hf://org/repo/file.gguf`)
//! resolved to files in the Hugging Face cache, downloaded when missing (resumable, checked against the hub's
//! sha256). Below the engine and the model loader, which resolve their `model` through it; it knows nothing of
//! models beyond file names (docs/models.md).
//!
//! - `name`: what a model string names (a path, or a hub name).
//! - `settings`: the `HF_*` environment: endpoint, token, cache, offline, timeout.
//! - `cache`: the cache layout shared with `huggingface_hub`.
//! - `quant`: which file a quantization picks; split files' parts.
//! - `api`, `http`: the hub's listing; HTTP with the token kept to the endpoint.
//! - `download`: one file into its blob, resumed and checked.
//! - `resolve`: all of it, cache first.

mod api;
mod cache;
mod download;
mod error;
mod http;
mod name;
mod quant;
mod resolve;
mod settings;

pub use cache::{cached_models, CachedModel};
pub use download::{DownloadProgress, Quiet, MAX_ATTEMPTS, MAX_FAILURES_IN_A_ROW};
pub use error::HubError;
pub use name::{parse_model_spec, FileChoice, HubRef, ModelSpec, DEFAULT_REVISION, HUB_SCHEME};
pub use quant::{quant_of, DEFAULT_QUANTS};
pub use resolve::{resolve, resolve_cached, Freshness, Resolved};
pub use settings::{HubSettings, DEFAULT_ENDPOINT, DEFAULT_TIMEOUT};
