//! Streaming detokenization: text as tokens arrive, without ever emitting part of a character.
//!
//! A token can end inside a multi-byte UTF-8 character (byte-level BPE splits rare characters into byte tokens),
//! so the decoder holds back an incomplete sequence until the bytes that complete it arrive. Bytes known to be
//! invalid are replaced by U+FFFD as soon as they are known, exactly as [`String::from_utf8_lossy`] replaces them
//! (one replacement per maximal invalid subpart, Unicode §3.9 "U+FFFD Substitution of Maximal Subparts"): UTF-8
//! decoding decides each error from the bytes up to it, so everything pushed plus [`StreamDecoder::finish`] equals
//! [`Tokenizer::decode`](super::Tokenizer::decode) of the whole sequence.

use super::{TokenId, Tokenizer, TokenizerError};

/// Turns a stream of token ids into text, piece by piece.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    include_special: bool,
    /// The start of a UTF-8 sequence whose remaining bytes have not arrived yet: 0 to 3 bytes.
    pending: Vec<u8>,
    /// The text returned by the last `push` or `finish`.
    emitted: String,
}

impl StreamDecoder {
    /// A decoder that writes control tokens as their text when `include_special` (as [`Tokenizer::decode`]).
    pub fn new(include_special: bool) -> Self {
        StreamDecoder { include_special, pending: Vec::new(), emitted: String::new() }
    }

    /// Adds token `id` and returns the text it completes: possibly empty (the token ended inside a character, or
    /// decodes to nothing), possibly including characters begun by earlier tokens.
    ///
    /// An id beyond the vocabulary is an error and changes nothing.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: TokenId) -> Result<&str, TokenizerError> {
        let bytes = tokenizer
            .token_bytes(id, self.include_special)
            .ok_or(TokenizerError::UnknownTokenId { id, vocab_size: tokenizer.vocab_size() })?;
        self.emitted.clear();
        self.pending.extend_from_slice(bytes);
        let mut incomplete_tail = 0;
        let mut chunks = self.pending.utf8_chunks().peekable();
        while let Some(chunk) = chunks.next() {
            self.emitted.push_str(chunk.valid());
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            // Only the last chunk can end in a sequence that later bytes may still complete.
            if chunks.peek().is_none() && is_incomplete_sequence(invalid) {
                incomplete_tail = invalid.len();
            } else {
                self.emitted.push(char::REPLACEMENT_CHARACTER);
            }
        }
        self.pending.drain(..self.pending.len() - incomplete_tail);
        Ok(&self.emitted)
    }

    /// Ends the stream: returns what is held back (an incomplete character becomes U+FFFD, as `from_utf8_lossy`
    /// writes it) and resets the decoder for a new stream.
    pub fn finish(&mut self) -> &str {
        self.emitted.clear();
        self.emitted.push_str(&String::from_utf8_lossy(&self.pending));
        self.pending.clear();
        &self.emitted
    }
}

/// Whether `bytes` (an invalid chunk from `utf8_chunks`) is the valid beginning of a longer UTF-8 sequence.
fn is_incomplete_sequence(bytes: &[u8]) -> bool {
    matches!(std::str::from_utf8(bytes), Err(e) if e.valid_up_to() == 0 && e.error_len().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_sequences_are_recognized() {
        assert!(is_incomplete_sequence(&[0xE2]));
        assert!(is_incomplete_sequence(&[0xE2, 0x82]));
        assert!(is_incomplete_sequence(&[0xF0, 0x9F, 0x98]));
        assert!(!is_incomplete_sequence(&[0x80]));
        assert!(!is_incomplete_sequence(&[0xE2, 0x41]));
        assert!(!is_incomplete_sequence(&[0xFF]));
        // 0xE0 0x80 can never be completed (overlong): invalid at once.
        assert!(!is_incomplete_sequence(&[0xE0, 0x80]));
    }
}
