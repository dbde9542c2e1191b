//! Everything about the model file and its text interface: the GGUF reader, hyperparameters, the tokenizer and
//! the chat template. Knows nothing of backends, engines or protocols.

pub mod chat_template;
pub mod encoder;
pub mod gguf;
pub mod llama;
mod load;
pub mod locate;
pub mod path;
pub mod progress;
pub mod tokenizer;

pub use load::{Model, ModelError};

/// A token id: an index into the model's vocabulary.
pub type TokenId = u32;
