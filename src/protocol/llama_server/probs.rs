//! `completion_probabilities`, llama-server's log probabilities (`probs_vector_to_json` in its
//! `server-task.cpp`): per generated token `{id, token, bytes, logprob, top_logprobs: [{id, token, bytes,
//! logprob}]}`, `token` being the token's text cut before an incomplete UTF-8 character and `bytes` all of it.
//! Written from the engine's own records (`TokenLogprob`), which carry the ids the OpenAI shapes leave out.

use serde_json::{json, Value};

use crate::engine::sampling::TokenLogprob;
use crate::model::tokenizer::Tokenizer;
use crate::model::TokenId;

/// The entries of `logprobs`, in order.
pub(super) fn completion_probabilities(tokenizer: &Tokenizer, logprobs: &[TokenLogprob]) -> Vec<Value> {
    logprobs
        .iter()
        .map(|t| {
            let mut entry = one(tokenizer, t.token, t.logprob);
            let top: Vec<Value> = t.top.iter().map(|&(id, logprob)| one(tokenizer, id, logprob)).collect();
            entry["top_logprobs"] = Value::Array(top);
            entry
        })
        .collect()
}

fn one(tokenizer: &Tokenizer, id: TokenId, logprob: f32) -> Value {
    let bytes = tokenizer.token_bytes(id, true).unwrap_or_default();
    json!({"id": id, "token": valid_prefix(bytes), "bytes": bytes, "logprob": finite(logprob)})
}

/// The text of `bytes` up to the first byte that does not continue valid UTF-8 (llama-server's `validate_utf8`
/// cuts a token that ends inside a character).
fn valid_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        // `valid_up_to` bytes are valid UTF-8 by its definition.
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    }
}

/// llama-server writes the lowest `f32` where the log probability is -inf, which JSON cannot hold.
fn finite(logprob: f32) -> f32 {
    if logprob.is_finite() {
        logprob
    } else {
        f32::MIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_cut_inside_a_character_keeps_its_bytes() {
        assert_eq!(valid_prefix("é".as_bytes()), "é");
        assert_eq!(valid_prefix(&[b'a', 0xC3]), "a");
        assert_eq!(valid_prefix(&[0xA9]), "");
        assert_eq!(finite(f32::NEG_INFINITY), f32::MIN);
        assert_eq!(finite(-0.5), -0.5);
    }
}
