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

use super::super::request::ApiKind;
use crate::engine::prompt_logprobs::PromptTokenLogprob;
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

/// `token_logprobs` and `top_logprobs` are `null` for an echoed prompt's first token, which nothing predicts.
#[derive(Debug, PartialEq, Serialize)]
pub(crate) struct CompletionLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<Option<f32>>,
    top_logprobs: Vec<Option<TopMap>>,
    text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    fn with_capacity(n: usize) -> Self {
        CompletionLogprobs {
            tokens: Vec::with_capacity(n),
            token_logprobs: Vec::with_capacity(n),
            top_logprobs: Vec::with_capacity(n),
            text_offset: Vec::with_capacity(n),
        }
    }

    /// One token's entries.
    fn push(&mut self, bytes: &[u8], offset: usize, scores: Option<(f32, TopMap)>) {
        self.tokens.push(text_of(bytes));
        self.text_offset.push(offset);
        let (logprob, top) = scores.unzip();
        self.token_logprobs.push(logprob);
        self.top_logprobs.push(top);
    }
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
    /// Offsets that start after `chars` characters (an echoed prompt's).
    pub fn starting_at(chars: usize) -> Self {
        TextOffsets { chars, pending: Vec::new() }
    }

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
            let mut out = CompletionLogprobs::with_capacity(tokens.len());
            for t in tokens {
                let bytes = pieces.piece(t.token);
                let offset = offsets.next(bytes);
                out.push(bytes, offset, Some((t.logprob, top_map(t, usize::MAX, pieces))));
            }
            LogprobsJson::Completion(out)
        }
    }
}

/// One position's `top_logprobs` map: its `top` most likely tokens, then the token itself if not among them (the
/// API "will always return the logprob of the sampled token").
fn top_map(t: &TokenLogprob, top: usize, pieces: &dyn TokenPieces) -> TopMap {
    let alternatives = &t.top[..top.min(t.top.len())];
    let mut out: Vec<(String, f32)> = Vec::with_capacity(alternatives.len() + 1);
    let itself = std::iter::once((t.token, t.logprob)).filter(|s| !alternatives.iter().any(|a| a.0 == s.0));
    for (id, logprob) in alternatives.iter().copied().chain(itself) {
        let text = text_of(pieces.piece(id));
        if !out.iter().any(|(seen, _)| *seen == text) {
            out.push((text, logprob));
        }
    }
    TopMap(out)
}

/// The echoed prompt's share of a completion's `logprobs` (`echo` with `logprobs`): its first token with `null`s
/// (nothing predicts it), then each scored token with its `top` most likely alternatives. Offsets point into
/// `echo_text`, the prompt as echoed; a token whose text is not there (a BOS the tokenizer added, or a control
/// token not written out) takes no room. The choice's own tokens then continue from
/// [`TextOffsets::starting_at`] the echo's length.
pub(crate) fn encode_echoed_prompt(
    first: TokenId,
    scored: &[PromptTokenLogprob],
    top: usize,
    pieces: &dyn TokenPieces,
    echo_text: &str,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::with_capacity(scored.len() + 1);
    let mut at = 0;
    let tokens = std::iter::once((first, None)).chain(scored.iter().map(|s| (s.logprob.token, Some(&s.logprob))));
    for (token, scores) in tokens {
        let bytes = pieces.piece(token);
        let offset = chars_before(echo_text, at);
        let rest = &echo_text.as_bytes()[at..];
        if rest.starts_with(bytes) {
            at += bytes.len();
        } else if bytes.first() == Some(&b' ') && rest.starts_with(&bytes[1..]) {
            // A SentencePiece tokenizer's dummy prefix: the first word's space is the tokenizer's, not the text's.
            at += bytes.len() - 1;
        }
        out.push(bytes, offset, scores.map(|t| (t.logprob, top_map(t, top, pieces))));
    }
    out
}

/// The characters of `text` that end before byte `at` (a character `at` cuts is not counted, as [`TextOffsets`]
/// counts a partial one).
fn chars_before(text: &str, at: usize) -> usize {
    let boundary = (0..=at.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    text[..boundary].chars().count()
}

/// A completion choice's `logprobs` with its echoed prompt's first.
pub(crate) fn prepend_echoed(mut prompt: CompletionLogprobs, rest: LogprobsJson) -> LogprobsJson {
    if let LogprobsJson::Completion(rest) = rest {
        prompt.tokens.extend(rest.tokens);
        prompt.token_logprobs.extend(rest.token_logprobs);
        prompt.top_logprobs.extend(rest.top_logprobs);
        prompt.text_offset.extend(rest.text_offset);
    }
    LogprobsJson::Completion(prompt)
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
    fn an_echoed_prompt_leads_with_nulls_and_its_offsets_skip_what_the_text_lacks() {
        use crate::engine::prompt_logprobs::PromptTokenLogprob;
        // Token 4 ("<|im_end|>" in this table) plays a BOS the tokenizer added: it is not in the echoed text.
        let scored = |token| PromptTokenLogprob { logprob: lp(token, -1.0, &[(1, -0.5), (token, -1.0)]), rank: 2 };
        let all = [scored(0), scored(1), scored(2), scored(3)];
        let prompt = encode_echoed_prompt(4, &all, 1, &pieces(), "Hello\u{e9}!");
        let v = serde_json::to_value(&prompt).unwrap();
        assert_eq!(v["tokens"], json!(["<|im_end|>", "Hel", "lo", "\u{FFFD}", "\u{FFFD}!"]));
        assert_eq!(v["text_offset"], json!([0, 0, 3, 5, 5]));
        assert_eq!(v["token_logprobs"], json!([null, -1.0, -1.0, -1.0, -1.0]));
        assert_eq!(v["top_logprobs"][0], Value::Null);
        assert_eq!(v["top_logprobs"][1], json!({"lo": -0.5, "Hel": -1.0}), "top 1, then the token itself");
        let mut after_echo = TextOffsets::starting_at(7);
        let own = encode_logprobs(ApiKind::Completion, &[lp(1, -0.25, &[])], &pieces(), &mut after_echo);
        let joined = serde_json::to_value(prepend_echoed(prompt, own)).unwrap();
        assert_eq!(joined["text_offset"], json!([0, 0, 3, 5, 5, 7]), "the completion continues after the echo");
        // A SentencePiece dummy prefix: " Hel" spells "Hel" at the start of the text.
        let spaced = Pieces(vec![b" Hel", b"lo"]);
        let sp = |t| PromptTokenLogprob { logprob: lp(t, -1.0, &[]), rank: 1 };
        let v = serde_json::to_value(encode_echoed_prompt(0, &[sp(1)], 0, &spaced, "Hello")).unwrap();
        assert_eq!(v["text_offset"], json!([0, 3]));
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
