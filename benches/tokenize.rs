//! Tokenizer throughput on the real vocabulary: loading it from the GGUF file, encoding ~2 MB of English, and
//! decoding the result. Single thread, best of several runs; prints a table and one JSON line.
//!
//! The text is generated, not repeated: sentences drawn by a fixed-seed generator from a few hundred words, with
//! numbers, punctuation, quotes, contractions and paragraph breaks, so every run sees the same text and no small set
//! of pieces dominates it.
//!
//! `encode` remembers the pieces it has encoded for the length of one call. One 2 MB call shows that memory warm;
//! the same text in prompt-sized calls of ~4 KB (each starting with an empty memory) shows it mostly cold.
//!
//! Then the Unigram tokenizer on llama.cpp's XLM-RoBERTa vocabulary (`.cache/llamacpp/vocab/`, `make vocabs`), when
//! it is there: 100 kB of English (this repository's `docs/*.md`, in name order) and 100 kB of mixed scripts (the
//! Unigram fixture's texts, `tests/fixtures/tokenizers/*.inp`, repeated), the texts `python3
//! scripts/llamacpp/unigram_fixtures.py --time` gives llama.cpp for the same figures.
//!
//! Run: `cargo bench --bench tokenize`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ember::model::gguf::GgufFile;
use ember::model::tokenizer::Tokenizer;

/// Bytes of generated text.
const TEXT_BYTES: usize = 2 << 20;
/// Timed repetitions of each measurement; the fastest counts.
const RUNS: usize = 5;
/// Size of one call in the prompt-sized measurement.
const CHUNK_BYTES: usize = 4096;

const WORDS: &str = "the of and to in is was that for on with as by at from his her they this which be are have \
    had not but one all were when we there can an your more would their will some if about what so time into has \
    than them only other new could these two may first then do any like my now over such our man me even most made \
    after also did many before must through back years where much way well down should because each just those \
    people how too little state good very make world still own see men work long get here between both life being \
    under never day same another know while last might great old year off come since against go came right used \
    take three city river mountain engine language history market garden window letter morning evening question \
    answer number system water light music paper school family country problem student teacher doctor village \
    kitchen winter summer bridge station harbour island forest desert journey machine measure weather \
    government committee experiment particular remarkable surprisingly unfortunately independently";

const NAMES: [&str; 12] =
    ["Alice", "Bob", "Carol", "Dmitri", "Eleanor", "François", "Grace", "Hiroshi", "Ingrid", "José", "Kwame", "London"];

const CONTRACTIONS: [&str; 8] = ["don't", "it's", "we've", "they're", "I'll", "can't", "she'd", "you're"];

/// xorshift64: a fixed-seed generator, enough for varied text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn english_text(len: usize) -> String {
    let words: Vec<&str> = WORDS.split_whitespace().collect();
    let mut rng = Rng(0x5EED_7E57_0B0E_0001);
    let mut text = String::with_capacity(len + 256);
    while text.len() < len {
        let sentence_words = 6 + rng.below(18);
        for i in 0..sentence_words {
            let word = match rng.below(20) {
                0 => NAMES[rng.below(NAMES.len())].to_string(),
                1 => CONTRACTIONS[rng.below(CONTRACTIONS.len())].to_string(),
                2 => format!("{}", rng.below(100_000)),
                3 => format!("{}.{:02}", rng.below(1000), rng.below(100)),
                _ => words[rng.below(words.len())].to_string(),
            };
            if i == 0 {
                let mut chars = word.chars();
                text.extend(chars.next().map(|c| c.to_ascii_uppercase()));
                text.push_str(chars.as_str());
            } else {
                text.push(' ');
                match rng.below(30) {
                    0 => text.push_str(&format!("\"{word}\"")),
                    1 => text.push_str(&format!("({word})")),
                    _ => text.push_str(&word),
                }
                if rng.below(12) == 0 && i + 1 < sentence_words {
                    text.push_str([",", ";", " -", ":"][rng.below(4)]);
                }
            }
        }
        text.push_str([".", ".", ".", "?", "!", "..."][rng.below(6)]);
        text.push_str(if rng.below(8) == 0 { "\n\n" } else { " " });
    }
    text
}

/// `text` cut into pieces of about `size` bytes, at character boundaries.
fn chunks(text: &str, size: usize) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (chunk, tail) = rest.split_at(end);
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

/// The fastest of `RUNS` timings of `f`.
fn best_of<T>(mut f: impl FnMut() -> T) -> Duration {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .min()
        .expect("RUNS > 0")
}

/// `text` cut to at most `len` bytes, at a character boundary.
fn cut(mut text: String, len: usize) -> String {
    let mut end = len.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// The Unigram benchmark's two texts, built as `scripts/llamacpp/unigram_fixtures.py --time` builds them.
fn unigram_texts(root: &std::path::Path) -> [(&'static str, String); 2] {
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut english = String::new();
    for doc in docs {
        english.push_str(&std::fs::read_to_string(doc).expect("a doc reads"));
        if english.len() > UNIGRAM_TEXT_BYTES {
            break;
        }
    }
    let fixture = root.join("tests/fixtures/tokenizers/ggml-vocab-nomic-bert-moe.gguf.inp");
    let mixed =
        std::fs::read_to_string(fixture).expect("the Unigram fixture reads").replace("\n__ggml_vocab_test__\n", "\n");
    [
        ("English (docs/*.md)", cut(english, UNIGRAM_TEXT_BYTES)),
        ("mixed scripts (the fixture's texts)", cut(mixed.repeat(10), UNIGRAM_TEXT_BYTES)),
    ]
}

/// Bytes of each Unigram text.
const UNIGRAM_TEXT_BYTES: usize = 100_000;

fn unigram_bench() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join(".cache/llamacpp/vocab/ggml-vocab-nomic-bert-moe.gguf");
    let Ok(file) = GgufFile::open(&path) else {
        println!("unigram: {} is missing (make vocabs); skipped", path.display());
        return;
    };
    let load = best_of(|| Tokenizer::from_gguf(&file).expect("vocabulary loads"));
    let tok = Tokenizer::from_gguf(&file).expect("vocabulary loads");
    println!("{:<40} {:>10} {:>10} {:>12}", "unigram (XLM-RoBERTa), best of 5", "ms", "MB/s", "tokens/s");
    println!(
        "{:<40} {:>10.2} {:>10} {:>12}",
        "Tokenizer::from_gguf (250048 tokens)",
        load.as_secs_f64() * 1e3,
        "-",
        "-"
    );
    let mut json = format!("{{\"bench\":\"tokenize_unigram\",\"load_ms\":{:.2}", load.as_secs_f64() * 1e3);
    for (i, (name, text)) in unigram_texts(root).iter().enumerate() {
        let tokens = tok.encode(text, false).len();
        let encode = best_of(|| tok.encode(black_box(text), false));
        let seconds = encode.as_secs_f64();
        let label = format!("encode {name}");
        println!(
            "{label:<40} {:>10.2} {:>10.1} {:>12.0}",
            seconds * 1e3,
            text.len() as f64 / seconds / 1e6,
            tokens as f64 / seconds
        );
        json.push_str(&format!(
            ",\"text{i}_bytes\":{},\"text{i}_tokens\":{tokens},\"text{i}_tokens_per_s\":{:.0}",
            text.len(),
            tokens as f64 / seconds
        ));
    }
    println!("{json}}}");
}

fn main() {
    let path = ember::model::path::resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let load = best_of(|| Tokenizer::from_gguf(&file).expect("vocabulary loads"));
    let tok = Tokenizer::from_gguf(&file).expect("vocabulary loads");

    let text = english_text(TEXT_BYTES);
    let mb = text.len() as f64 / 1e6;
    let ids = tok.encode(&text, false);
    let encode = best_of(|| tok.encode(black_box(&text), false));
    let encode_special = best_of(|| tok.encode(black_box(&text), true));
    let decode = best_of(|| tok.decode(black_box(&ids), false).expect("ids are in range"));
    let chunks = chunks(&text, CHUNK_BYTES);
    let encode_chunks = best_of(|| chunks.iter().map(|c| tok.encode(black_box(c), false).len()).sum::<usize>());

    let rate = |d: Duration| mb / d.as_secs_f64();
    println!("tokenize bench: {:.2} MB of generated English, {} tokens ({:.2} bytes/token)", mb, ids.len(), {
        text.len() as f64 / ids.len() as f64
    });
    println!("{:<34} {:>10} {:>10}", "measurement (best of 5)", "ms", "MB/s");
    println!("{:<34} {:>10.2} {:>10}", "Tokenizer::from_gguf (49152 tokens)", load.as_secs_f64() * 1e3, "-");
    println!("{:<34} {:>10.2} {:>10.1}", "encode, parse_special = false", encode.as_secs_f64() * 1e3, rate(encode));
    println!(
        "{:<34} {:>10.2} {:>10.1}",
        "encode, parse_special = true",
        encode_special.as_secs_f64() * 1e3,
        rate(encode_special)
    );
    println!(
        "{:<34} {:>10.2} {:>10.1}",
        "encode, 4 KB calls (memory cold)",
        encode_chunks.as_secs_f64() * 1e3,
        rate(encode_chunks)
    );
    println!("{:<34} {:>10.2} {:>10.1}", "decode", decode.as_secs_f64() * 1e3, rate(decode));
    println!(
        "{{\"bench\":\"tokenize\",\"mb_per_s\":{:.2},\"mb_per_s_parse_special\":{:.2},\
         \"mb_per_s_4kb_calls\":{:.2},\"decode_mb_per_s\":{:.2},\"load_ms\":{:.2},\"text_bytes\":{},\"tokens\":{}}}",
        rate(encode),
        rate(encode_special),
        rate(encode_chunks),
        rate(decode),
        load.as_secs_f64() * 1e3,
        text.len(),
        ids.len()
    );
    unigram_bench();
}
