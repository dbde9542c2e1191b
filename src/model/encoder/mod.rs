//! Bidirectional encoders, the models behind embeddings and reranking (BERT's family): their hyperparameters and
//! tensors (`config.rs`), how token vectors become an input's vector (`pooling.rs`), and synthetic files of their
//! real shapes for tests (`synthetic.rs`). The forward pass runs on the CPU backend (`backend/cpu/encoder.rs`):
//!
//! ```text
//! x = LayerNorm(token_embd[tokens] + token_types[0] [+ position_embd[positions]])   per input, positions from 0
//! for each block l:
//!     q, k, v = x·Wq[l]ᵀ [+ bq], x·Wk[l]ᵀ [+ bk], x·Wv[l]ᵀ [+ bv]   [nomic-bert: one attn_qkv tensor]
//!     [nomic-bert: q, k = RoPE(q), RoPE(k), NEOX pairs]
//!     att = softmax(q·kᵀ / √head_dim)·v        per head, every token of the input sees every other (no mask)
//!     x = LayerNorm(x + att·Wo[l]ᵀ [+ bo], attn_output_norm[l])
//!     x = LayerNorm(x + GELU(x·Wup[l]ᵀ [+ bup])·Wdown[l]ᵀ [+ bdown], layer_output_norm[l])
//!                                              [nomic-bert: SiLU(x·Wgateᵀ) ⊙ x·Wupᵀ in place of GELU(...)]
//! vector = pool(x of the input's tokens)          mean, CLS (first) or last; then L2-normalized by the caller
//! ```
//!
//! llama.cpp's graph is the same (`src/models/bert.cpp`, which runs `nomic-bert` too), token types included: it adds
//! type 0 to every token.

pub mod config;
pub mod decoder_head;
pub mod pooling;
pub mod synthetic;
pub mod synthetic_decoder;

pub use config::{EncoderArch, EncoderBiases, EncoderConfig, EncoderFfn, Positions};
pub use decoder_head::{fill_rerank_template, DecoderHead, RERANK_TEMPLATE_KEY};
pub use pooling::{cosine_similarity, normalize, Pooling};
pub use synthetic::SyntheticEncoder;
pub use synthetic_decoder::{decoder_family_writer, DECODER_FAMILIES};
