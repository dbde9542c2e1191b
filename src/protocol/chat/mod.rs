//! OpenAI's Chat Completions (`POST /v1/chat/completions`) and Completions (`POST /v1/completions`): the one
//! reader of their request bodies and the writers of their answers. The two are one API in two kinds
//! ([`ApiKind`](super::request::ApiKind)): the same reader and writers, told apart by `messages` or `prompt`.
//!
//! The folder is `chat/`, not `openai/`, because OpenAI's Responses API is OpenAI's too and has a folder of its
//! own (`responses/`); "chat" is what the rest of the protocol calls this shape ("a chat body", "the chat core").
//!
//! Chat's shape is also the one every other API passes through: another API's folder reads its body into a chat
//! or completions body (`translate.rs`), which `request.rs` here reads, and writes its answers from the bodies and
//! chunks written here. So a new API is one folder beside this one, and this one is never changed for it.
//!
//! - `request.rs`: the body, field by field (every refusal names its field); `request_fields.rs` the list of
//!   every field ember knows, which `docs/protocol.md`'s tables restate.
//! - `response.rs`: the whole body (`chat.completion`, `text_completion`) with `usage` and `metrics`.
//! - `stream.rs`: the streaming chunks (`chat.completion.chunk`, `text_completion`).
//! - `logprobs.rs`: the two shapes of a choice's `logprobs`; `prompt_logprobs.rs` the prompt's scores (vLLM's
//!   `prompt_logprobs`, and the echoed prompt's share of `logprobs`).

mod logprobs;
mod prompt_logprobs;
mod request;
mod request_fields;
mod response;
mod stream;

// What the core (`api_request.rs`) uses to write a request's answers, and what `protocol`'s users see of chat's.
pub(crate) use logprobs::SharedPieces;
pub(crate) use prompt_logprobs::PromptScores;
pub use request::{COMPLETION_DEFAULT_MAX_TOKENS, OPENAI_DEFAULT_TEMPERATURE};
pub(crate) use response::{response_body, ChoiceExtras, ResponseHeader};
pub(crate) use stream::ChunkEncoder;
pub use stream::ChunkPoll;
