//! The two real models the targets feed, loaded once per process from the paths `scripts/fetch-model.sh` writes
//! (relative to the repository root, where `cargo fuzz run` is started): SmolLM2 (byte-level BPE, its chat
//! template) and Gemma 3 (SentencePiece, its template).

use std::path::Path;
use std::sync::OnceLock;

use ember::model::Model;

pub fn models() -> &'static [Model; 2] {
    static MODELS: OnceLock<[Model; 2]> = OnceLock::new();
    MODELS.get_or_init(|| {
        let load = |path: Option<&Path>| Model::load(path).unwrap_or_else(|e| panic!("{e}"));
        [load(None), load(Some(Path::new("models/gemma-3-270m-q4_k_m.gguf")))]
    })
}
