//! The `logprobs` object of a choice, in the two shapes of the OpenAI API.
//!
//! Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
//! "refusal": null}`, `top_logprobs` holding exactly the `top_logprobs` most likely tokens.
//!
//! Completions (the legacy shape): `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`, parallel arrays;
//! each `top_logprobs` entry maps token text to log probability for the `logprobs` most likely tokens plus the
//! sampled one (the API "will always return the logprob of the sampled token"), and `text_offset` is where each
//! token's text starts in the choice's text, in characters (Unicode scalar values, as Python's `len` counts).
//!
//! A token's `token` is its text with invalid UTF-8 replaced (a token can end inside a character); `bytes` are
//! its exact bytes. Special tokens (`<|im_end|>`) appear with their text. What the numbers are (the raw model
//! distribution) is `engine/sampling/logprobs.rs`'s to say.

use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::request::ApiKind;
use crate::engine::sampling::TokenLogprob;
use crate::model::tokenizer::Tokenizer;
use crate::model::Model;
use crate::model::TokenId;

/// The bytes of a token as the text shows it; the model's tokenizer in the engine, a table in tests.
pub(crate) trait TokenPieces: Send + Sync {
    fn piece(&self, id: TokenId) -> &[u8];
}

impl TokenPieces for Tokenizer {
    fn piece(&self, id: TokenId) -> &[u8] {
        self.token_bytes(id, true).unwrap_or_default()
    }
}

impl TokenPieces for Model {
    fn piece(&self, id: TokenId) -> &[u8] {
        self.tokenizer.piece(id)
    }
}

/// The token names of a request that asked for log probabilities, shared by its body and its chunk encoder.
#[derive(Clone)]
pub(crate) struct SharedPieces(pub Arc<dyn TokenPieces>);

impl std::fmt::Debug for SharedPieces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedPieces")
    }
}

/// A choice's `logprobs`, or one chunk's share of it.
#[derive(Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum LogprobsJson {
    Chat(ChatLogprobs),
    Completion(CompletionLogprobs),
}

#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct ChatLogprobs {
    content: Vec<ChatTokenLogprob>,
    /// Always `null`: ember produces no refusals.
    refusal: (),
}

#[derive(Debug, PartialEq, Serialize)]
struct ChatTokenLogprob {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
    top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, PartialEq, Serialize)]
struct ChatTopLogprob {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
}

#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct CompletionLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<f32>,
    top_logprobs: Vec<TopMap>,
    text_offset: Vec<usize>,
}

/// One position's alternatives as a JSON object from token text to log probability, in order, most likely first.
/// Two tokens with the same text (a partial character each) keep the first, more likely, one.
#[derive(Debug, PartialEq)]
struct TopMap(Vec<(String, f32)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            map.serialize_entry(token, logprob)?;
        }
        map.end()
    }
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Where each token's text starts in a choice's text, in characters, token after token. Bytes that do not yet
/// complete a character wait for the next token's.
#[derive(Clone, Debug, Default)]
pub(crate) struct TextOffsets {
    chars: usize,
    pending: Vec<u8>,
}

impl TextOffsets {
    /// The offset of a token with text `bytes`, which then counts towards the next offsets.
    fn next(&mut self, bytes: &[u8]) -> usize {
        let offset = self.chars;
        self.pending.extend_from_slice(bytes);
        let complete = match std::str::from_utf8(&self.pending) {
            Ok(text) => text.len(),
            // Bytes that can never become a character count as one each (the text has a replacement there).
            Err(e) if e.error_len().is_some() => self.pending.len(),
            Err(e) => e.valid_up_to(),
        };
        self.chars += String::from_utf8_lossy(&self.pending[..complete]).chars().count();
        self.pending.drain(..complete);
        offset
    }
}

/// Encodes the logprobs of a choice's tokens, in `kind`'s shape. `offsets` carries the completions shape's
/// `text_offset` from one call to the next of the same choice (a stream's chunks).
pub(crate) fn encode_logprobs(
    kind: ApiKind,
    tokens: &[TokenLogprob],
    pieces: &dyn TokenPieces,
    offsets: &mut TextOffsets,
) -> LogprobsJson {
    match kind {
        ApiKind::Chat => LogprobsJson::Chat(ChatLogprobs {
            content: tokens
                .iter()
                .map(|t| {
                    let bytes = pieces.piece(t.token);
                    ChatTokenLogprob {
                        token: text_of(bytes),
                        logprob: t.logprob,
                        bytes: bytes.to_vec(),
                        top_logprobs: t
                            .top
                            .iter()
                            .map(|&(id, logprob)| {
                                let bytes = pieces.piece(id);
                                ChatTopLogprob { token: text_of(bytes), logprob, bytes: bytes.to_vec() }
                            })
                            .collect(),
                    }
                })
                .collect(),
            refusal: (),
        }),
        ApiKind::Completion => {
            let mut out = CompletionLogprobs {
                tokens: Vec::with_capacity(tokens.len()),
                token_logprobs: Vec::with_capacity(tokens.len()),
                top_logprobs: Vec::with_capacity(tokens.len()),
                text_offset: Vec::with_capacity(tokens.len()),
            };
            for t in tokens {
                let bytes = pieces.piece(t.token);
                out.text_offset.push(offsets.next(bytes));
                out.tokens.push(text_of(bytes));
                out.token_logprobs.push(t.logprob);
                let mut top: Vec<(String, f32)> = Vec::with_capacity(t.top.len() + 1);
                let sampled = std::iter::once((t.token, t.logprob)).filter(|s| !t.top.iter().any(|a| a.0 == s.0));
                for (id, logprob) in t.top.iter().copied().chain(sampled) {
                    let text = text_of(pieces.piece(id));
                    if !top.iter().any(|(seen, _)| *seen == text) {
                        top.push((text, logprob));
                    }
                }
                out.top_logprobs.push(TopMap(top));
            }
            LogprobsJson::Completion(out)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// Token `i` is the `i`-th entry.
    pub(crate) struct Pieces(pub Vec<&'static [u8]>);

    impl TokenPieces for Pieces {
        fn piece(&self, id: TokenId) -> &[u8] {
            self.0[id as usize]
        }
    }

    fn pieces() -> Pieces {
        // "é" is 0xC3 0xA9: tokens 2 and 3 split it.
        Pieces(vec![b"Hel", b"lo", b"\xC3", b"\xA9!", b"<|im_end|>"])
    }

    fn lp(token: TokenId, logprob: f32, top: &[(TokenId, f32)]) -> TokenLogprob {
        TokenLogprob { token, logprob, top: top.to_vec() }
    }

    fn json_of(kind: ApiKind, tokens: &[TokenLogprob]) -> Value {
        serde_json::to_value(encode_logprobs(kind, tokens, &pieces(), &mut TextOffsets::default())).unwrap()
    }

    #[test]
    fn chat_shape_with_bytes_and_exactly_the_top_alternatives() {
        let v = json_of(ApiKind::Chat, &[lp(0, -0.5, &[(0, -0.5), (4, -1.5)]), lp(2, -2.0, &[])]);
        assert_eq!(
            v,
            json!({"content": [
                {"token": "Hel", "logprob": -0.5, "bytes": [72, 101, 108], "top_logprobs": [
                    {"token": "Hel", "logprob": -0.5, "bytes": [72, 101, 108]},
                    {"token": "<|im_end|>", "logprob": -1.5, "bytes": b"<|im_end|>".to_vec()}]},
                {"token": "\u{FFFD}", "logprob": -2.0, "bytes": [195], "top_logprobs": []}],
                "refusal": null})
        );
    }

    #[test]
    fn completion_shape_always_has_the_sampled_token_and_offsets_in_characters() {
        let v = json_of(
            ApiKind::Completion,
            &[
                lp(0, -0.5, &[(1, -0.25)]),
                lp(1, -0.125, &[(1, -0.125)]),
                lp(2, -1.0, &[]),
                lp(3, 0.0, &[]),
                lp(1, -3.0, &[]),
            ],
        );
        assert_eq!(v["tokens"], json!(["Hel", "lo", "\u{FFFD}", "\u{FFFD}!", "lo"]));
        assert_eq!(v["token_logprobs"], json!([-0.5, -0.125, -1.0, 0.0, -3.0]));
        assert_eq!(v["top_logprobs"][0], json!({"lo": -0.25, "Hel": -0.5}), "top first, then the sampled token");
        assert_eq!(v["top_logprobs"][1], json!({"lo": -0.125}), "the sampled token is not repeated");
        // "Hello" is 5 characters, then "é" (split over two tokens) starts at 5, "!" ... the next token at 7.
        assert_eq!(v["text_offset"], json!([0, 3, 5, 5, 7]));
        let top = TopMap(vec![("lo".into(), -0.25), ("Hel".into(), -0.5)]);
        assert_eq!(serde_json::to_string(&top).unwrap(), r#"{"lo":-0.25,"Hel":-0.5}"#, "most likely first");
    }

    #[test]
    fn offsets_continue_across_chunks_and_count_invalid_bytes_once() {
        let mut offsets = TextOffsets::default();
        assert_eq!(
            [offsets.next(b"ab"), offsets.next(b"\xC3"), offsets.next(b"\xA9"), offsets.next(b"c")],
            [0, 2, 2, 3]
        );
        let mut offsets = TextOffsets::default();
        assert_eq!([offsets.next(b"\xFF"), offsets.next(b"x")], [0, 1], "a byte that starts no character is one");
    }
}
