//! GPT-2's byte-level alphabet: each of the 256 byte values is written as one printable character, so that a
//! vocabulary of strings can hold arbitrary bytes. Token texts in a `gpt2` GGUF vocabulary are in this alphabet
//! (`Ġ` is the space byte, `Ċ` the newline).
//!
//! The rule is `bytes_to_unicode` of OpenAI's GPT-2 `encoder.py`: bytes that are printable Latin-1 characters stand
//! for themselves; the other 68 bytes, in increasing order, stand for U+0100, U+0101, ...

/// `BYTE_TO_CHAR[b]`: the character that stands for byte `b`.
pub(crate) const BYTE_TO_CHAR: [char; 256] = build_byte_to_char();

/// `CHAR_TO_BYTE[c]`: the byte that character `c` stands for, for every `c` below U+0144 (the last one used).
const CHAR_TO_BYTE: [Option<u8>; 0x144] = build_char_to_byte();

/// The bytes GPT-2 keeps as themselves: `!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`.
const fn stands_for_itself(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

const fn build_byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next_shifted = 0x100;
    let mut b = 0;
    while b < 256 {
        let code = if stands_for_itself(b as u8) {
            b as u32
        } else {
            next_shifted += 1;
            next_shifted - 1
        };
        table[b] = match char::from_u32(code) {
            Some(c) => c,
            None => panic!("byte-level code points are below U+0144"),
        };
        b += 1;
    }
    table
}

const fn build_char_to_byte() -> [Option<u8>; 0x144] {
    let mut table = [None; 0x144];
    let mut b = 0;
    while b < 256 {
        table[BYTE_TO_CHAR[b] as usize] = Some(b as u8);
        b += 1;
    }
    table
}

/// The byte that `c` stands for, if it is one of the 256 byte-level characters.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    CHAR_TO_BYTE.get(c as usize).copied().flatten()
}

/// Appends the bytes that a normal token's `text` stands for to `out`.
///
/// A character outside the byte-level alphabet (which a well-formed `gpt2` vocabulary never has) is written the
/// way llama.cpp's `llama_decode_text` writes it — `[UNK_BYTE_0x` + the character's UTF-8 in hex + the whole token
/// text + `]` — so that ember's text equals llama.cpp's even for such a vocabulary.
pub(crate) fn decode_token_text(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut utf8 = [0u8; 4];
                for b in c.encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_is_a_bijection_onto_256_characters() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = BYTE_TO_CHAR[b as usize];
            assert!(seen.insert(c), "{c:?} stands for two bytes");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(seen.len(), 256);
    }

    #[test]
    fn known_characters_match_gpt2() {
        // From GPT-2's vocabulary: `Ġ` is the space, `Ċ` the newline, `ĉ` the tab; printable ASCII is itself.
        assert_eq!(BYTE_TO_CHAR[b' ' as usize], 'Ġ');
        assert_eq!(BYTE_TO_CHAR[b'\n' as usize], 'Ċ');
        assert_eq!(BYTE_TO_CHAR[b'\t' as usize], 'ĉ');
        assert_eq!(BYTE_TO_CHAR[0], '\u{100}');
        assert_eq!(BYTE_TO_CHAR[0xAD], '\u{143}');
        assert_eq!(BYTE_TO_CHAR[b'a' as usize], 'a');
        assert_eq!(BYTE_TO_CHAR[0xE9], 'é');
        assert_eq!(char_to_byte('x'), Some(b'x'));
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte('你'), None);
    }

    #[test]
    fn token_text_decodes_to_its_bytes() {
        let mut out = Vec::new();
        decode_token_text("ĠHelloĊ", &mut out);
        assert_eq!(out, b" Hello\n");
    }

    #[test]
    fn characters_outside_the_alphabet_are_marked_like_llama_cpp() {
        let mut out = Vec::new();
        decode_token_text("a你", &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "a[UNK_BYTE_0xe4bda0a你]");
    }
}
