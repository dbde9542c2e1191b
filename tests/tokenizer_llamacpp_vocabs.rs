//! The tokenizer on the real vocabularies llama.cpp ships for its own tokenizer tests: for every vocabulary ember
//! claims, each of llama.cpp's test texts (`ggml-vocab-*.gguf.inp`) gives exactly the ids its `.out` lists (made
//! with the models' Hugging Face tokenizers), tokenized as llama.cpp's `test-tokenizer-0` does: no BOS, special
//! tokens not parsed. The vocabularies ember does not claim are refused with an error naming what is missing.
//!
//! The files come from the pinned llama-cpp-python 0.3.36 sdist: `scripts/llamacpp/fetch-vocabs.sh` copies them into
//! `.cache/llamacpp/vocab/` (`make test` runs it first); `EMBER_LLAMACPP_VOCABS` names another folder. They are
//! vocabulary-only GGUF files (no tensors), which is also what this test shows ember loads as a tokenizer.
//!
//! llama.cpp ships XLM-RoBERTa's Unigram vocabulary (`nomic-bert-moe`) without test texts: its `.inp`/`.out` are
//! committed in `tests/fixtures/tokenizers/`, made with llama.cpp itself (`scripts/llamacpp/unigram_fixtures.py`:
//! llama.cpp's test texts of every other vocabulary and more), with `nomic-bert-moe.json` beside them for the
//! inputs with special tokens added and the text the ids decode to.

use std::path::PathBuf;

use ember::model::gguf::GgufFile;
use ember::model::tokenizer::{TokenId, Tokenizer};

/// The vocabularies with test texts whose tokenizer ember implements, by file stem.
const CLAIMED: &[&str] = &[
    "bert-bge",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "nomic-bert-moe",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
];

/// The others, and a part of the error ember refuses each with.
const REFUSED: &[(&str, &str)] = &[
    // Byte-level BPE without a `tokenizer.ggml.pre`: llama.cpp guesses a default, ember asks for the key.
    ("aquila", "tokenizer.ggml.pre"),
    ("gpt-neox", "tokenizer.ggml.pre"),
    // Another tokenizer model: Gemma 4's.
    ("gemma-4", "gemma4"),
];

fn vocab_dir() -> PathBuf {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    assert!(
        dir.join("ggml-vocab-llama-bpe.gguf").exists(),
        "llama.cpp's vocabularies are not in {}: run scripts/llamacpp/fetch-vocabs.sh (make test does)",
        dir.display()
    );
    dir
}

fn load(stem: &str) -> Result<Tokenizer, String> {
    let path = vocab_dir().join(format!("ggml-vocab-{stem}.gguf"));
    let file = GgufFile::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Tokenizer::from_gguf(&file).map_err(|e| e.to_string())
}

/// Where the committed test texts of the vocabularies llama.cpp ships without them are.
fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers")
}

/// The test texts and their ids, read as `test-tokenizer-0.cpp` reads them: texts separated by
/// `"\n__ggml_vocab_test__\n"`, one line of space-separated ids per text.
fn cases(stem: &str) -> Vec<(String, Vec<TokenId>)> {
    let committed = fixture_dir();
    let dir = if committed.join(format!("ggml-vocab-{stem}.gguf.inp")).exists() { committed } else { vocab_dir() };
    let read = |ext: &str| {
        let path = dir.join(format!("ggml-vocab-{stem}.gguf.{ext}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let (inp, out) = (read("inp"), read("out"));
    let mut texts = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find("\n__ggml_vocab_test__\n") {
            Some(at) => {
                texts.push(rest[..at].to_owned());
                rest = &rest[at + "\n__ggml_vocab_test__\n".len()..];
            }
            None => {
                texts.push(rest.to_owned());
                break;
            }
        }
    }
    let ids: Vec<Vec<TokenId>> =
        out.lines().map(|line| line.split_whitespace().map(|id| id.parse().expect("an id")).collect()).collect();
    assert_eq!(texts.len(), ids.len(), "{stem}: texts and id lines differ in number");
    texts.into_iter().zip(ids).collect()
}

#[test]
fn every_claimed_vocabulary_gives_the_reference_ids() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for stem in CLAIMED {
        let tokenizer = load(stem).unwrap_or_else(|e| panic!("{stem}: {e}"));
        for (text, expected) in cases(stem) {
            let got = tokenizer.encode(&text, false);
            checked += 1;
            if got != expected {
                let texts = |ids: &[TokenId]| -> Vec<String> {
                    ids.iter().map(|&id| tokenizer.token_text(id).unwrap_or("?").to_owned()).collect()
                };
                failures.push(format!(
                    "{stem} {text:?}:\n  expected {expected:?} {:?}\n  got      {got:?} {:?}",
                    texts(&expected),
                    texts(&got)
                ));
            }
        }
    }
    assert!(checked > 400, "only {checked} cases");
    assert!(failures.is_empty(), "{} of {checked} cases differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn the_unclaimed_vocabularies_are_refused_by_name() {
    for (stem, named) in REFUSED {
        let err = load(stem).err().unwrap_or_else(|| panic!("{stem} loaded"));
        assert!(err.contains(named), "{stem}: {err:?} does not name {named:?}");
    }
}

#[test]
fn every_vocabulary_file_is_listed() {
    let mut stems: Vec<String> = std::fs::read_dir(vocab_dir())
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("ggml-vocab-")?.strip_suffix(".gguf").map(str::to_owned)
        })
        .collect();
    stems.sort_unstable();
    let mut listed: Vec<String> = CLAIMED
        .iter()
        .chain(REFUSED.iter().map(|(s, _)| s))
        .map(|s| s.to_string())
        .chain(["baichuan".into()])
        .collect();
    listed.sort_unstable();
    // Baichuan's SentencePiece vocabulary loads, but llama.cpp ships no test texts for it: neither claimed nor refused.
    assert_eq!(stems, listed);
}

/// Whether prompts start with BOS, as llama.cpp decides it for each claimed vocabulary: the file's
/// `tokenizer.ggml.add_bos_token` where it has one (command-r, deepseek-*, llama-spm, phi-3), else llama.cpp's default
/// by tokenizer and pre-tokenizer: true for SentencePiece and for the Llama 3 pre-tokenizer (`llama-bpe` has no key
/// and llama.cpp starts its prompts with 128000), false for the other byte-level ones.
#[test]
fn bos_is_added_where_llama_cpp_adds_it() {
    let expected = [
        ("bert-bge", true),
        ("command-r", true),
        ("deepseek-coder", true),
        ("deepseek-llm", true),
        ("falcon", false),
        ("gpt-2", false),
        ("llama-bpe", true),
        ("llama-spm", true),
        ("mpt", false),
        ("nomic-bert-moe", true),
        ("phi-3", true),
        ("qwen2", false),
        ("qwen35", false),
        ("refact", false),
        ("starcoder", false),
    ];
    assert_eq!(expected.len(), CLAIMED.len());
    for (stem, add_bos) in expected {
        let tokenizer = load(stem).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert_eq!(tokenizer.add_bos(), add_bos, "{stem}");
    }
    assert_eq!(load("llama-bpe").unwrap().bos_id(), Some(128000));
    // BERT's inputs are `[CLS] … [SEP]`: the file names neither, and llama.cpp's defaults are BERT's ids.
    let bert = load("bert-bge").unwrap();
    assert_eq!((bert.bos_id(), bert.sep_id(), bert.add_sep()), (Some(101), Some(102), true));
    assert!(!load("llama-bpe").unwrap().add_sep());
    // XLM-RoBERTa's inputs are `<s> text </s>`: the file asks for both (llama.cpp's `t5` default has no BOS).
    let xlmr = load("nomic-bert-moe").unwrap();
    assert_eq!((xlmr.bos_id(), xlmr.eos_id(), xlmr.add_eos(), xlmr.add_sep()), (Some(0), Some(2), true, false));
}

#[derive(serde::Deserialize)]
struct FramedCases {
    cases: Vec<FramedCase>,
}

/// One text of `nomic-bert-moe.json`, as llama.cpp gives it (`scripts/llamacpp/tokenize_cases.cpp`).
#[derive(serde::Deserialize)]
struct FramedCase {
    /// `llama_tokenize(add_special=true, parse_special=false)`.
    ids_special: Vec<TokenId>,
    /// `ids_special` through `llama_token_to_piece`, concatenated: without special tokens, and with them.
    pieces: String,
    pieces_special: String,
    /// `llama_detokenize` of the plain ids (`remove_special=false, unparse_special=false`).
    detokenized: String,
}

/// For every text of the Unigram fixture: the input with special tokens as the embedder frames it (BOS, text, EOS:
/// `Embedder::tokenize`'s rule, which has no model here to run on) equals llama.cpp's `add_special` tokenization, and
/// decoding gives llama.cpp's text, piece by piece (what llama-server's `/detokenize` and a token stream give). Its
/// `llama_detokenize` also drops the leading space its normalizer added (`add_space_prefix`); ember's decode keeps
/// it, as for SentencePiece.
#[test]
fn unigram_inputs_are_framed_and_decoded_as_llama_cpp_does() {
    let tokenizer = load("nomic-bert-moe").unwrap();
    let path = fixture_dir().join("nomic-bert-moe.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let framed: FramedCases = serde_json::from_str(&text).expect("nomic-bert-moe.json parses");
    let cases = cases("nomic-bert-moe");
    assert_eq!(framed.cases.len(), cases.len());
    let mut failures = Vec::new();
    for ((text, ids), expected) in cases.iter().zip(&framed.cases) {
        let mut framed_ids: Vec<TokenId> = tokenizer.bos_id().filter(|_| tokenizer.add_bos()).into_iter().collect();
        framed_ids.extend(tokenizer.encode(text, false));
        framed_ids.extend(tokenizer.eos_id().filter(|_| tokenizer.add_eos()));
        let pieces = tokenizer.decode(&expected.ids_special, false).unwrap();
        let pieces_special = tokenizer.decode(&expected.ids_special, true).unwrap();
        let plain = tokenizer.decode(ids, false).unwrap();
        let detokenized = plain.strip_prefix(' ').unwrap_or(&plain);
        if framed_ids != expected.ids_special
            || pieces != expected.pieces
            || pieces_special != expected.pieces_special
            || detokenized != expected.detokenized
        {
            failures.push(format!(
                "{text:?}:\n  ids {framed_ids:?} / {:?}\n  decoded {pieces:?} / {:?}\n  with special \
                 {pieces_special:?} / {:?}\n  detokenized {detokenized:?} / {:?}",
                expected.ids_special, expected.pieces, expected.pieces_special, expected.detokenized
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
