//! The pre-tokenizers against their definitions: each hand-written pass gives the pieces its regex list gives, on
//! chosen texts and on many random ones; every regex list compiles; the names are llama.cpp's.

use super::*;

const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Each hand-written split and the regex list that defines it.
fn hand_written() -> Vec<(Split, RegexList)> {
    vec![
        (Split::Gpt2, RegexList::new(&[GPT2_REGEX])),
        (Split::SmolLm, RegexList::new(&[r"\p{N}", GPT2_REGEX])),
        (Split::Llama3, RegexList::new(&[LLAMA3_REGEX])),
        (Split::Qwen2, RegexList::new(&[QWEN2_REGEX])),
        (Split::Qwen35, RegexList::new(&[QWEN35_REGEX])),
    ]
}

const CHOSEN: &[&str] = &[
    "",
    "Hello world",
    "  leading two spaces",
    "don't I'LL we'Ve they're",
    "3.14159 and 1234567 or ٣٤٥²Ⅻ",
    "one\ntwo\n\nfour\r\n\r\n  five \n \n  six",
    "a   b\t\tc \u{a0}\u{3000}d\u{85}e",
    "Café naïve e\u{301}\u{301} ́x",
    "你好，世界！ 日本語 テキスト 한국어",
    "Emoji: 😀👍🏽🚀 ❤️ 🇫🇷 a👨\u{200d}👩b",
    "(yes) [no] {maybe} <tag/> x->y ...\n\n",
    "trailing   ",
    " ",
    "\n",
    "'",
    "''s's",
    "add(a, b):\n    return a + b  # sum",
];

/// Characters of every class the splits tell apart, some several times.
const ALPHABET: &[char] = &[
    'a', 'Z', 's', 't', 'e', 'R', 'l', 'é', 'ß', 'Ж', '你', 'ア', '\u{301}', '\u{903}', '1', '9', '٣', '²', 'Ⅻ', ' ',
    ' ', ' ', '\t', '\n', '\r', '\u{a0}', '\u{3000}', '\u{85}', '\'', '\'', '.', '!', '(', '/', '$', '+', '😀',
    '\u{200d}', '\u{0}', '\u{7f}', '，',
];

/// A deterministic sequence of random texts over `ALPHABET`.
fn random_texts(count: usize) -> Vec<String> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let len = (next() % 24) as usize;
            (0..len).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect()
        })
        .collect()
}

#[test]
fn hand_written_splits_equal_their_regexes() {
    let random = random_texts(3000);
    let texts = CHOSEN.iter().copied().chain(random.iter().map(String::as_str));
    let lists = hand_written();
    for text in texts {
        for (split, regexes) in &lists {
            let by_hand: Vec<&str> = split.pieces(text).collect();
            assert_eq!(by_hand, regexes.split(text), "{split:?} on {text:?}");
        }
    }
}

#[test]
fn every_split_covers_the_text_with_non_empty_pieces() {
    let splits = [
        Split::Gpt2,
        Split::SmolLm,
        Split::Llama3,
        Split::Qwen2,
        Split::Qwen35,
        Split::DeepSeekLlm,
        Split::DeepSeekCoder,
        Split::DeepSeekV3,
        Split::Falcon,
        Split::Tekken,
        Split::Gpt4o,
    ];
    let random = random_texts(300);
    for text in CHOSEN.iter().copied().chain(random.iter().map(String::as_str)) {
        for split in splits {
            let pieces: Vec<&str> = split.pieces(text).collect();
            assert!(pieces.iter().all(|p| !p.is_empty()), "{split:?} {text:?}: {pieces:?}");
            assert_eq!(pieces.concat(), text, "{split:?}");
        }
    }
}

#[test]
fn names_are_llama_cpp_s() {
    let pre = |name| PreTokenizer::from_gguf_name(name);
    assert_eq!(pre("smollm"), Some(PreTokenizer { split: Split::SmolLm, ignore_merges: false }));
    assert_eq!(pre("gpt-2"), Some(PreTokenizer { split: Split::Gpt2, ignore_merges: false }));
    assert_eq!(pre("llama-bpe"), Some(PreTokenizer { split: Split::Llama3, ignore_merges: true }));
    assert_eq!(pre("dbrx"), Some(PreTokenizer { split: Split::Llama3, ignore_merges: false }));
    assert_eq!(pre("qwen2"), Some(PreTokenizer { split: Split::Qwen2, ignore_merges: false }));
    assert_eq!(pre("tekken"), Some(PreTokenizer { split: Split::Tekken, ignore_merges: true }));
    // Names llama.cpp does not know, or whose split ember does not implement, are refused.
    assert_eq!(pre("gpt2"), None);
    assert_eq!(pre("viking"), None);
    assert_eq!(pre(""), None);
    let names: Vec<&str> = PreTokenizer::names().collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "a name listed twice");
}

#[test]
fn regex_splits_on_known_cases() {
    let pieces = |split: Split, text| split.pieces(text).collect::<Vec<_>>();
    // Tekken: a word keeps its capitals before lower case; a capital after lower case starts a new piece.
    assert_eq!(pieces(Split::Tekken, "HelloWorld ABCdef"), ["Hello", "World", " ABCdef"]);
    // GPT-4o: contractions stay on their word.
    assert_eq!(pieces(Split::Gpt4o, "don't 12345"), ["don't", " ", "123", "45"]);
    // Falcon: punctuation runs first, then GPT-2, then digit triples.
    assert_eq!(pieces(Split::Falcon, "a+b 12345"), ["a", "+", "b", " ", "123", "45"]);
    // DeepSeek Coder: line breaks alone, digits alone.
    assert_eq!(pieces(Split::DeepSeekCoder, "x\n42"), ["x", "\n", "4", "2"]);
}
