//! The tokenizer on the real vocabularies llama.cpp ships for its own tokenizer tests: for every vocabulary ember
//! claims, each of llama.cpp's test texts (`ggml-vocab-*.gguf.inp`) gives exactly the ids its `.out` lists (made
//! with the models' Hugging Face tokenizers), tokenized as llama.cpp's `test-tokenizer-0` does: no BOS, special
//! tokens not parsed. The vocabularies ember does not claim are refused with an error naming what is missing.
//!
//! The files come from the pinned llama-cpp-python 0.3.36 sdist: `scripts/llamacpp/fetch-vocabs.sh` copies them into
//! `.cache/llamacpp/vocab/` (`make test` runs it first); `EMBER_LLAMACPP_VOCABS` names another folder. They are
//! vocabulary-only GGUF files (no tensors), which is also what this test shows ember loads as a tokenizer.

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
    // Other tokenizer models: Gemma 4's, Unigram.
    ("gemma-4", "gemma4"),
    ("nomic-bert-moe", "t5"),
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

/// The test texts and their ids, read as `test-tokenizer-0.cpp` reads them: texts separated by
/// `"\n__ggml_vocab_test__\n"`, one line of space-separated ids per text.
fn cases(stem: &str) -> Vec<(String, Vec<TokenId>)> {
    let dir = vocab_dir();
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
}
