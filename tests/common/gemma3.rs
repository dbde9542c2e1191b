//! Where the tests find Gemma 3 270M (`scripts/fetch-model.sh gemma3-270m`; `make test` fetches it). Included with
//! `#[path]`.
#![allow(dead_code)] // each includer uses some of it

use std::path::PathBuf;

use ember::model::TokenId;
use serde::Deserialize;

/// The file `scripts/fetch-model.sh gemma3-270m` writes.
pub fn gemma3_path() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(path.exists(), "{} is missing: run scripts/fetch-model.sh gemma3-270m", path.display());
    path
}

/// `tests/fixtures/gemma3/greedy_ref.json`: llama.cpp's greedy completions of plain-text prompts, with the top-5
/// distribution at every generated position.
#[derive(Deserialize)]
pub struct GreedyRef {
    pub cases: Vec<GreedyCase>,
}

#[derive(Deserialize)]
pub struct GreedyCase {
    pub prompt: String,
    pub prompt_ids: Vec<TokenId>,
    pub generated_ids: Vec<TokenId>,
    pub top5_per_position: Vec<RefPosition>,
}

#[derive(Deserialize)]
pub struct RefPosition {
    pub top5: Vec<RefToken>,
}

#[derive(Deserialize)]
pub struct RefToken {
    pub id: TokenId,
    pub prob: f64,
}

pub fn greedy_ref() -> GreedyRef {
    serde_json::from_str(include_str!("../fixtures/gemma3/greedy_ref.json")).expect("greedy_ref.json parses")
}
