//! A completion's prompt scores, in the two shapes clients know: vLLM's `prompt_logprobs` (per choice, a list
//! with `null` for the first token, then per token a map from token id to `{"logprob", "rank",
//! "decoded_token"}`: the prompt token first, then its position's most likely tokens), and the legacy API's
//! `echo` with `logprobs` (the echoed prompt's tokens lead the choice's `logprobs`, `logprobs.rs`).
//!
//! The engine computes them once per prompt (`engine/sampling/prompt_logprobs.rs`); this module only writes them.

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::logprobs::{encode_echoed_prompt, CompletionLogprobs, TokenPieces};
use crate::engine::prompt_logprobs::PromptTokenLogprob;
use crate::engine::RequestHandle;
use crate::model::TokenId;

/// What a completions request asked of its prompts' scores.
#[derive(Clone, Debug)]
pub(crate) struct PromptScores {
    /// `prompt_logprobs`: alternatives per position in `choices[].prompt_logprobs`.
    prompt_logprobs: Option<usize>,
    /// `echo` with `logprobs`: alternatives per position in the echoed prompt's `logprobs`.
    echo_logprobs: Option<usize>,
    /// Per choice, its prompt's first token (which has no score, but a place in the echoed `logprobs`).
    first_tokens: Vec<TokenId>,
}

/// One prompt position of vLLM's `prompt_logprobs`.
#[derive(Debug, PartialEq)]
pub(crate) struct PositionJson(Vec<(TokenId, f32, u32, String)>);

#[derive(Serialize)]
struct Entry<'a> {
    logprob: f32,
    rank: u32,
    decoded_token: &'a str,
}

impl Serialize for PositionJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (id, logprob, rank, text) in &self.0 {
            map.serialize_entry(&id.to_string(), &Entry { logprob: *logprob, rank: *rank, decoded_token: text })?;
        }
        map.end()
    }
}

impl PromptScores {
    /// `None` when the request scores no prompt. `first_tokens`: each choice's prompt's first token.
    pub fn new(
        prompt_logprobs: Option<usize>,
        echo_logprobs: Option<usize>,
        first_tokens: Vec<TokenId>,
    ) -> Option<Self> {
        (prompt_logprobs.is_some() || echo_logprobs.is_some()).then_some(PromptScores {
            prompt_logprobs,
            echo_logprobs,
            first_tokens,
        })
    }

    /// Choice `choice`'s `prompt_logprobs`: `None` when not asked for; `Some(None)` (JSON `null`) when its prompt
    /// was never scored (the request failed first).
    pub fn prompt_logprobs_json(
        &self,
        choice: usize,
        handle: &RequestHandle,
        pieces: &dyn TokenPieces,
    ) -> Option<Option<Vec<Option<PositionJson>>>> {
        let top = self.prompt_logprobs?;
        let scored = handle.prompt_logprobs(choice);
        Some(scored.map(|s| std::iter::once(None).chain(s.iter().map(|e| Some(position(e, top, pieces)))).collect()))
    }

    /// Choice `choice`'s echoed prompt's share of its `logprobs` (`echo` with `logprobs`), once scored.
    pub fn echoed(
        &self,
        choice: usize,
        handle: &RequestHandle,
        pieces: &dyn TokenPieces,
        echo_text: &str,
    ) -> Option<CompletionLogprobs> {
        let top = self.echo_logprobs?;
        let scored = handle.prompt_logprobs(choice)?;
        let first = *self.first_tokens.get(choice)?;
        Some(encode_echoed_prompt(first, &scored, top, pieces, echo_text))
    }
}

/// A prompt token first (with its rank), then the `top` most likely at its position (ranks 1, 2, ...).
fn position(entry: &PromptTokenLogprob, top: usize, pieces: &dyn TokenPieces) -> PositionJson {
    let t = &entry.logprob;
    let text = |id: TokenId| String::from_utf8_lossy(pieces.piece(id)).into_owned();
    let mut out = vec![(t.token, t.logprob, entry.rank, text(t.token))];
    for (i, &(id, logprob)) in t.top.iter().take(top).enumerate() {
        if id != t.token {
            out.push((id, logprob, i as u32 + 1, text(id)));
        }
    }
    PositionJson(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::logprobs::tests::Pieces;
    use super::*;
    use crate::engine::sampling::TokenLogprob;

    fn entry(token: TokenId, logprob: f32, rank: u32, top: &[(TokenId, f32)]) -> PromptTokenLogprob {
        PromptTokenLogprob { logprob: TokenLogprob { token, logprob, top: top.to_vec() }, rank }
    }

    #[test]
    fn a_position_has_the_prompt_token_first_then_the_top_without_repeats() {
        let pieces = Pieces(vec![b"a", b"b", b"c"]);
        let e = entry(2, -3.0, 3, &[(0, -0.5), (1, -1.0), (2, -3.0)]);
        let v = serde_json::to_value(position(&e, 2, &pieces)).unwrap();
        assert_eq!(
            v,
            json!({"2": {"logprob": -3.0, "rank": 3, "decoded_token": "c"},
                   "0": {"logprob": -0.5, "rank": 1, "decoded_token": "a"},
                   "1": {"logprob": -1.0, "rank": 2, "decoded_token": "b"}})
        );
        let keys: Vec<String> = serde_json::to_string(&position(&e, 2, &pieces))
            .unwrap()
            .split("\":{")
            .map(|k| k.rsplit('"').next().unwrap().to_owned())
            .take(3)
            .collect();
        assert_eq!(keys, ["2", "0", "1"], "the prompt token first");
        let top_itself = entry(0, -0.5, 1, &[(0, -0.5), (1, -1.0)]);
        assert_eq!(position(&top_itself, 2, &pieces).0.len(), 2, "a token among the top is not repeated");
        assert_eq!(position(&top_itself, 0, &pieces).0.len(), 1, "prompt_logprobs: 0 gives the token alone");
    }
}
