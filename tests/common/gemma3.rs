//! Where the tests find Gemma 3 270M (`scripts/fetch-model.sh gemma3-270m`; `make test` fetches it). Included with
//! `#[path]`.
#![allow(dead_code)] // each includer uses some of it

use std::path::PathBuf;

/// The file `scripts/fetch-model.sh gemma3-270m` writes.
pub fn gemma3_path() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(path.exists(), "{} is missing: run scripts/fetch-model.sh gemma3-270m", path.display());
    path
}
