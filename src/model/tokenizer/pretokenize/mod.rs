//! Pre-tokenization: splitting text into the pieces that BPE then encodes one at a time (merges never cross a
//! piece boundary). Which split a byte-level BPE vocabulary was trained with is named by its `tokenizer.ggml.pre`
//! key; the names and what they select are llama.cpp's (`src/llama-vocab.cpp`), and an unknown name is refused.
//!
//! The most deployed families are split by hand-written passes (`gpt2.rs`: GPT-2 and the StarCoder/SmolLM family;
//! `llama3.rs`: Llama 3, Qwen 2/3 and Qwen 3.5), one pass over characters; the rest by their regexes with a
//! look-ahead-capable engine (`regex_list.rs`). The module tests check each hand-written pass against its regex.

mod classes;
mod gpt2;
mod llama3;
mod regex_list;

use std::sync::OnceLock;

pub use gpt2::Gpt2Pieces;
pub use llama3::Llama3Pieces;
use llama3::Llama3Rules;
use regex_list::RegexList;

/// How a vocabulary's text is split into pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The GPT-2 regex (`gpt-2`, `mpt`, `olmo`, `phi-2`, …).
    Gpt2,
    /// Every number character alone, then the GPT-2 regex between them (`smollm`, `starcoder`, `refact`,
    /// `command-r`, …).
    SmolLm,
    /// Llama 3's regex (`llama-bpe`, `dbrx`, `glm4`, …).
    Llama3,
    /// Llama 3's with single digits (`qwen2`, `deepseek-r1-qwen`, `stablelm2`, `grok-2`, …).
    Qwen2,
    /// Qwen 2's with combining marks in words (`qwen35`).
    Qwen35,
    /// DeepSeek LLM's six regexes (`deepseek-llm`).
    DeepSeekLlm,
    /// DeepSeek Coder's five (`deepseek-coder`).
    DeepSeekCoder,
    /// DeepSeek V3's three (`deepseek-v3`, `hunyuan-dense`, …).
    DeepSeekV3,
    /// Falcon's three (`falcon`).
    Falcon,
    /// Mistral's Tekken (`tekken`: Mistral Nemo and later).
    Tekken,
    /// GPT-4o's (`gpt-4o`, `llama4`, `minimax-m2`, …).
    Gpt4o,
}

/// A vocabulary's pre-tokenization: its split, and whether a piece that is itself a token is taken whole before
/// any merge (llama.cpp's `ignore_merges`, set for Llama 3, GLM-4 and Tekken vocabularies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreTokenizer {
    pub split: Split,
    pub ignore_merges: bool,
}

/// `tokenizer.ggml.pre` values and what llama.cpp selects for each, for the splits ember implements.
const NAMES: &[(&str, Split, bool)] = &[
    ("gpt-2", Split::Gpt2, false),
    ("phi-2", Split::Gpt2, false),
    ("mpt", Split::Gpt2, false),
    ("olmo", Split::Gpt2, false),
    ("jais", Split::Gpt2, false),
    ("trillion", Split::Gpt2, false),
    ("granite-docling", Split::Gpt2, false),
    ("exaone4", Split::Gpt2, false),
    ("gigachat", Split::Gpt2, false),
    ("a.x-4.0", Split::Gpt2, false),
    ("mellum", Split::Gpt2, false),
    ("smollm", Split::SmolLm, false),
    ("starcoder", Split::SmolLm, false),
    ("refact", Split::SmolLm, false),
    ("command-r", Split::SmolLm, false),
    ("codeshell", Split::SmolLm, false),
    ("exaone", Split::SmolLm, false),
    ("minerva-7b", Split::SmolLm, false),
    ("mellum2", Split::SmolLm, false),
    ("llama3", Split::Llama3, true),
    ("llama-v3", Split::Llama3, true),
    ("llama-bpe", Split::Llama3, true),
    ("falcon3", Split::Llama3, true),
    ("falcon-h1", Split::Llama3, true),
    ("pixtral", Split::Llama3, true),
    ("midm-2.0", Split::Llama3, true),
    ("lfm2", Split::Llama3, true),
    ("glm4", Split::Llama3, true),
    ("glm5", Split::Llama3, true),
    ("dbrx", Split::Llama3, false),
    ("smaug-bpe", Split::Llama3, false),
    ("chatglm-bpe", Split::Llama3, false),
    ("qwen2", Split::Qwen2, false),
    ("deepseek-r1-qwen", Split::Qwen2, false),
    ("kormo", Split::Qwen2, false),
    ("f2llmv2", Split::Qwen2, false),
    ("megrez", Split::Qwen2, false),
    ("stablelm2", Split::Qwen2, false),
    ("hunyuan", Split::Qwen2, false),
    ("solar-open", Split::Qwen2, false),
    ("grok-2", Split::Qwen2, false),
    ("qwen35", Split::Qwen35, false),
    ("deepseek-llm", Split::DeepSeekLlm, false),
    ("deepseek-coder", Split::DeepSeekCoder, false),
    ("deepseek-v3", Split::DeepSeekV3, false),
    ("hunyuan-dense", Split::DeepSeekV3, false),
    ("joyai-llm", Split::DeepSeekV3, false),
    ("hy_v4", Split::DeepSeekV3, false),
    ("falcon", Split::Falcon, false),
    ("tekken", Split::Tekken, true),
    ("gpt-4o", Split::Gpt4o, false),
    ("llama4", Split::Gpt4o, false),
    ("kanana2", Split::Gpt4o, false),
    ("talkie", Split::Gpt4o, false),
    ("minimax-m2", Split::Gpt4o, false),
];

impl PreTokenizer {
    /// The pre-tokenization llama.cpp selects for a `tokenizer.ggml.pre` value, among those ember implements.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        NAMES
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(_, split, ignore_merges)| PreTokenizer { split, ignore_merges })
    }

    /// Every `tokenizer.ggml.pre` value ember accepts.
    pub fn names() -> impl Iterator<Item = &'static str> {
        NAMES.iter().map(|(n, _, _)| *n)
    }

    /// The pieces of `text`, in order; their concatenation is `text`, and none is empty.
    pub fn pieces(self, text: &str) -> Pieces<'_> {
        self.split.pieces(text)
    }
}

impl Split {
    /// The pieces of `text`, in order; their concatenation is `text`, and none is empty.
    pub fn pieces(self, text: &str) -> Pieces<'_> {
        let llama3 = |max_digits, marks_are_letters| {
            Pieces::Llama3(Llama3Pieces::new(text, Llama3Rules { max_digits, marks_are_letters }))
        };
        match self {
            Split::Gpt2 => Pieces::Gpt2(Gpt2Pieces::new(text, false)),
            Split::SmolLm => Pieces::Gpt2(Gpt2Pieces::new(text, true)),
            Split::Llama3 => llama3(3, false),
            Split::Qwen2 => llama3(1, false),
            Split::Qwen35 => llama3(1, true),
            _ => Pieces::Listed(self.regexes().split(text).into_iter()),
        }
    }

    /// The compiled regexes of a regex-split vocabulary (compiled once per process).
    fn regexes(self) -> &'static RegexList {
        static LISTS: [OnceLock<RegexList>; 6] = [const { OnceLock::new() }; 6];
        let (slot, patterns): (usize, &[&str]) = match self {
            Split::DeepSeekLlm => (0, DEEPSEEK_LLM),
            Split::DeepSeekCoder => (1, DEEPSEEK_CODER),
            Split::DeepSeekV3 => (2, DEEPSEEK_V3),
            Split::Falcon => (3, FALCON),
            Split::Tekken => (4, TEKKEN),
            Split::Gpt4o => (5, GPT4O),
            Split::Gpt2 | Split::SmolLm | Split::Llama3 | Split::Qwen2 | Split::Qwen35 => {
                unreachable!("{self:?} is split by hand")
            }
        };
        LISTS[slot].get_or_init(|| RegexList::new(patterns))
    }
}

/// Iterator over the pieces of a text (see [`PreTokenizer::pieces`]).
pub enum Pieces<'a> {
    Gpt2(Gpt2Pieces<'a>),
    Llama3(Llama3Pieces<'a>),
    Listed(std::vec::IntoIter<&'a str>),
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        match self {
            Pieces::Gpt2(p) => p.next(),
            Pieces::Llama3(p) => p.next(),
            Pieces::Listed(p) => p.next(),
        }
    }
}

// The regex lists, as the vocabularies' `tokenizer.json` files give them (via llama.cpp's `llama-vocab.cpp`, which
// rewrites some for C++'s regex engine; ember's engine runs the originals). In DeepSeek LLM's letter class, the
// characters that Unicode normalization would change (and that turn three of its ranges backwards and one into
// `K-ℭ`, most of the BMP) are written as escapes: U+1F7D, U+1FD3, U+1FDB, U+2126, U+212A, U+1FBE.

const GPT2_REGEX: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

const DEEPSEEK_LLM: &[&str] = &[
    "[\r\n]",
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1F7D}ᾀ-ᾴᾶ-ᾼ\x{1FBE}ῂ-ῄῆ-ῌῐ-\x{1FD3}ῖ-\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}+",
];

const DEEPSEEK_CODER: &[&str] = &["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"];

const DEEPSEEK_V3: &[&str] = &[
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];

const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2_REGEX, "[0-9][0-9][0-9]"];

const TEKKEN: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

const GPT4O: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

#[cfg(test)]
mod tests;
