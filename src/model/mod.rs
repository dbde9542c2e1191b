//! Everything about the model file and its text interface: the GGUF reader, hyperparameters, the tokenizer and
//! the chat template. Knows nothing of backends, engines or protocols.

pub mod chat_template;
pub mod gguf;
pub mod llama;
pub mod path;
pub mod tokenizer;
