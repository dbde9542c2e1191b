//! The vocabulary as llguidance sees it: every token's bytes, from ember's own tokenizer.
//!
//! llguidance walks a trie of the tokens' bytes to find which tokens a grammar allows next. The bytes must be
//! exactly what ember's detokenizer writes for each token, or the text a client receives could differ from the
//! text the grammar accepted; `Tokenizer::token_bytes` is that function, so the trie is built from it.
//!
//! Control and unknown tokens (`<|im_start|>`, `<|endoftext|>`…) are written with llguidance's special-token
//! marker (a 0xFF byte before their text), which no grammar's text can contain: a grammar cannot make the model
//! emit them. The end-of-generation tokens are the trie's EOS set, allowed exactly when the grammar may end.

use std::sync::Arc;

use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::model::tokenizer::{TokenType, Tokenizer};

/// ember's vocabulary as an llguidance token environment.
struct EmberTokEnv {
    trie: TokTrie,
}

impl TokenizerEnv for EmberTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Only used by llguidance for forced tokens and prompt healing, which ember does not ask for; the trie's
    /// greedy tokenization is enough, and `tokenize_is_canonical` says that it is not the model's own.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// Builds the token environment of `tokenizer`; an error when the vocabulary has no end-of-generation token
/// (nothing could end a constrained choice whose grammar allows more text).
pub(super) fn token_env(tokenizer: &Tokenizer) -> Result<TokEnv, String> {
    let eos: Vec<TokenId> = match tokenizer.eog_ids() {
        [] => tokenizer.eos_id().into_iter().collect(),
        ids => ids.to_vec(),
    };
    if eos.is_empty() {
        return Err("the model's vocabulary has no end-of-generation token".into());
    }
    let words: Vec<Vec<u8>> = (0..tokenizer.vocab_size() as TokenId).map(|id| token_word(tokenizer, id)).collect();
    let info = TokRxInfo::new(words.len() as u32, eos[0]);
    let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
    Ok(Arc::new(EmberTokEnv { trie }))
}

/// What token `id` is in the trie: its bytes; the marker and its text for a special token; nothing (never
/// allowed) for a token that decodes to nothing, or whose bytes begin with 0xFF, which would read as the marker
/// (such a byte never starts valid UTF-8, so no grammar over text needs it).
fn token_word(tokenizer: &Tokenizer, id: TokenId) -> Vec<u8> {
    let special = matches!(tokenizer.token_type(id), Some(TokenType::Control | TokenType::Unknown));
    if special {
        let mut word = vec![TokTrie::SPECIAL_TOKEN_MARKER];
        word.extend_from_slice(tokenizer.token_bytes(id, true).unwrap_or_default());
        return word;
    }
    match tokenizer.token_bytes(id, false) {
        Some(bytes) if bytes.first() != Some(&TokTrie::SPECIAL_TOKEN_MARKER) => bytes.to_vec(),
        _ => Vec::new(),
    }
}
