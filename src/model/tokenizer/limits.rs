//! The sizes a vocabulary is held to, checked before anything is built from it.
//!
//! The GGUF reader bounds what a file's arrays take parsed (`gguf/budget.rs`); building a tokenizer from them costs
//! more again: each token's text is copied into the token table, its lookup map and its decoded bytes, and each
//! merge adds a map entry and, where its result is no token, an interned string. These limits sit four to ten times
//! beyond the largest real vocabularies (llama.cpp's test vocabularies, Gemma 3 and 4: at most 262,144 tokens and
//! 2.8 MB of token text, 514,906 merges and 5.1 MB of merge text) and keep that work to well under a gigabyte and a
//! few seconds (`docs/reliability.md`, "Load"). llama.cpp has no such limits: it takes any array ggml reads (up to
//! 2^30 elements that fit the file) and builds its maps from it.

use super::spec::{keys, TokenizerSpec};
use super::TokenizerError;

/// Tokens in a vocabulary: four times the largest real ones (Gemma 3 and 4's 262,144; Command R's 256,000).
pub const MAX_TOKENS: usize = 1 << 20;
/// Bytes of all token texts together: real vocabularies hold 1 to 3 MB (Command R's 256,000 tokens: 2.8 MB).
pub const MAX_TOKEN_BYTES: usize = 32 << 20;
/// Merges of a byte-level BPE vocabulary. They can outnumber the tokens (Gemma 4: 514,906 merges for 262,144
/// tokens): four times that.
pub const MAX_MERGES: usize = 2 << 20;
/// Bytes of all merge texts together: real ones hold up to 5.1 MB (Gemma 4's).
pub const MAX_MERGE_BYTES: usize = 32 << 20;
/// Bytes of a Unigram vocabulary's precompiled charsmap: the real one (`nmt_nfkc`, XLM-RoBERTa's and T5's) is
/// 237,539 bytes. Checking it walks its trie, at most 255 probes a unit: 4 MiB is at most about 270 million probes.
pub const MAX_CHARSMAP_BYTES: usize = 4 << 20;

/// Checks the counts and sizes of `spec` against the limits, and that the per-token arrays have one entry per
/// token: all before the tokenizer allocates for them.
pub(super) fn check(spec: &TokenizerSpec<'_>) -> Result<(), TokenizerError> {
    let tokens = spec.tokens.len();
    if tokens == 0 {
        return Err(TokenizerError::EmptyVocabulary);
    }
    if tokens > MAX_TOKENS {
        return Err(TokenizerError::TooMany { key: keys::TOKENS, count: tokens, max: MAX_TOKENS });
    }
    let token_bytes = total_len(spec.tokens);
    if token_bytes > MAX_TOKEN_BYTES {
        return Err(TokenizerError::TooLarge { key: keys::TOKENS, bytes: token_bytes, max: MAX_TOKEN_BYTES });
    }
    if let Some(types) = spec.token_types.filter(|t| t.len() != tokens) {
        return Err(TokenizerError::TokenTypeCount { types: types.len(), tokens });
    }
    if let Some(scores) = spec.scores.filter(|s| s.len() != tokens) {
        return Err(TokenizerError::ScoreCount { scores: scores.len(), tokens });
    }
    if spec.merges.len() > MAX_MERGES {
        return Err(TokenizerError::TooMany { key: keys::MERGES, count: spec.merges.len(), max: MAX_MERGES });
    }
    let merge_bytes = total_len(spec.merges);
    if merge_bytes > MAX_MERGE_BYTES {
        return Err(TokenizerError::TooLarge { key: keys::MERGES, bytes: merge_bytes, max: MAX_MERGE_BYTES });
    }
    if let Some(charsmap) = spec.precompiled_charsmap.filter(|c| c.len() > MAX_CHARSMAP_BYTES) {
        let (key, bytes, max) = (keys::PRECOMPILED_CHARSMAP, charsmap.len(), MAX_CHARSMAP_BYTES);
        return Err(TokenizerError::TooLarge { key, bytes, max });
    }
    Ok(())
}

fn total_len(texts: &[String]) -> usize {
    texts.iter().map(String::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(tokens: &'a [String], merges: &'a [String]) -> TokenizerSpec<'a> {
        TokenizerSpec::new(tokens, merges, "gpt-2")
    }

    #[test]
    fn counts_sizes_and_per_token_arrays_are_checked() {
        let one = vec!["a".to_string()];
        assert!(check(&spec(&one, &[])).is_ok());
        assert!(matches!(check(&spec(&[], &[])), Err(TokenizerError::EmptyVocabulary)));
        let many = vec![String::new(); MAX_TOKENS + 1];
        match check(&spec(&many, &[])) {
            Err(TokenizerError::TooMany { key, count, max }) => {
                assert_eq!((key, count, max), (keys::TOKENS, MAX_TOKENS + 1, MAX_TOKENS))
            }
            other => panic!("{other:?}"),
        }
        let long = vec!["x".repeat(MAX_TOKEN_BYTES / 2 + 1), "y".repeat(MAX_TOKEN_BYTES / 2)];
        assert!(matches!(check(&spec(&long, &[])), Err(TokenizerError::TooLarge { key: keys::TOKENS, .. })));
        let merges = vec![String::new(); MAX_MERGES + 1];
        assert!(matches!(check(&spec(&one, &merges)), Err(TokenizerError::TooMany { key: keys::MERGES, .. })));
        let types = [1, 1];
        let s = TokenizerSpec { token_types: Some(&types), ..spec(&one, &[]) };
        assert!(matches!(check(&s), Err(TokenizerError::TokenTypeCount { types: 2, tokens: 1 })));
        let scores = [0.0; 3];
        let s = TokenizerSpec { scores: Some(&scores), ..spec(&one, &[]) };
        assert!(matches!(check(&s), Err(TokenizerError::ScoreCount { scores: 3, tokens: 1 })));
        let charsmap = vec![0u8; MAX_CHARSMAP_BYTES + 1];
        let s = TokenizerSpec { precompiled_charsmap: Some(&charsmap), ..spec(&one, &[]) };
        assert!(matches!(check(&s), Err(TokenizerError::TooLarge { key: keys::PRECOMPILED_CHARSMAP, .. })));
    }
}
