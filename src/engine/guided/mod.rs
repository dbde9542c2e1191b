//! Structured outputs: generation constrained to a JSON schema, any JSON object, a regular expression, one of a
//! list of strings, or a Lark grammar, with the `llguidance` crate (the constrained-decoding library of llama.cpp,
//! vLLM and SGLang).
//!
//! How a constraint flows through the engine:
//!
//! 1. The protocol layer reads the request's fields into a [`GuidedRequest`] (`spec.rs`: what to constrain to,
//!    and which request field asked, so that an error can name it).
//! 2. `Engine::submit` compiles it while the host's thread waits (`compile.rs`), against a token environment
//!    built once per engine from ember's own tokenizer (`vocab.rs`), within the engine's `grammar_limits`
//!    (`limits.rs`): the input is checked first (`schema_check.rs`, `lark_check.rs`), the compiled grammar
//!    before a parser is built from it (`grammar_check.rs`), and the first mask is computed, proving the grammar
//!    can begin. An invalid schema, regex or grammar, or one beyond a limit, is a `SubmitError::Invalid` naming
//!    the field and the limit (`errors.rs` keeps llguidance's messages to one line and no panic): nothing is
//!    queued, nothing can hang or panic later.
//! 3. Each choice gets its own [`GuidedMatcher`] (`matcher.rs`), a clone of the compiled parser with the first
//!    mask: `n > 1` choices advance independently.
//! 4. During a step, the masks of the constrained sequences that sample are computed on a second thread while
//!    the forward pass runs (`masks.rs`): a mask depends only on tokens already accepted, never on the logits.
//!    The runner then sets the disallowed logits to −∞ before the sequence's sampler runs, so temperature, top-p
//!    and the rest apply to the allowed tokens only.
//! 5. The scheduler's update feeds the sampled token to the matcher; a grammar that is complete (nothing may
//!    follow, or the model chose end-of-generation where the grammar allowed it) ends the choice with `stop`.
//!
//! `timing.rs` keeps the mask times per token and how long a step waited for its masks, for the bench.

mod compile;
mod errors;
mod grammar_check;
mod lark_check;
mod limits;
mod masks;
mod matcher;
mod schema_check;
mod spec;
mod timing;
mod vocab;

pub use compile::{CompiledGrammar, GuidedCompiler};
pub use limits::GrammarLimits;
pub(crate) use masks::MaskJobs;
pub use matcher::{Accepted, GuidedMatcher};
pub(crate) use spec::json_kind;
pub use spec::{json_layout, GuidedRequest, GuidedSpec};
pub use timing::{MaskTimeSummary, MaskTimes};
