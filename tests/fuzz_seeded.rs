//! Seeded, deterministic mutation tests of every parser a host feeds (issue 15): the GGUF reader (header,
//! metadata, tensor table, then what loading reads from it: hyperparameters, tokenizer, chat template), the engine
//! configuration JSON, the request JSON (through `ApiRequest::submit`, what `engine_submit` calls), the tokenizer
//! (arbitrary text in, arbitrary ids out) and the chat template renderer (arbitrary messages). Thousands of inputs
//! each, made from real seeds by bit flips, byte inserts and deletes, truncation, splicing and, for GGUF, integer
//! fields overwritten with extremes (a count of 2^60 must fail fast, not allocate). Every input must give `Ok` or
//! `Err`: a panic fails the test. Fixed seeds: every run checks the same inputs, and a failure names its input.

mod common;
#[path = "common/gemma3.rs"]
mod gemma3;
#[path = "common/parser_checks.rs"]
mod parser_checks;
#[path = "common/rng.rs"]
mod rng;

use std::panic::{catch_unwind, AssertUnwindSafe};

use ember::engine::{EngineConfig, RequestOptions, SubmitRequest};
use ember::model::chat_template::{ChatMessage, ChatTemplate, TemplateLimits, TemplateOrigin};
use ember::model::gguf::writer::GgufWriter;
use ember::model::gguf::{Array, GgmlType, GgufFile, Value};
use ember::model::tokenizer::{keys, TokenId, Tokenizer, TokenizerError, TokenizerSpec, VocabKind};
use ember::model::Model;
use parser_checks::GgufOutcome;
use rng::Rng;

const GGUF_INPUTS: usize = 20_000;
const CONFIG_INPUTS: usize = 20_000;

/// One mutation of `seed`, made by `rng`: 1 to 4 edits of the kinds a fuzzer makes.
fn mutate(rng: &mut Rng, seed: &[u8], dictionary: &[&[u8]]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = if b.is_empty() { 0 } else { rng.below(b.len() as u64) as usize };
        match rng.below(7) {
            0 if !b.is_empty() => b[at] ^= 1 << rng.below(8),
            1 => b.insert(at, rng.byte()),
            2 if !b.is_empty() => {
                b.remove(at);
            }
            3 => b.truncate(at),
            4 => {
                // Splice: a copy of another stretch of the seed.
                let from = rng.below(seed.len().max(1) as u64) as usize;
                let len = rng.below(16) as usize;
                let piece: Vec<u8> = seed.iter().skip(from).take(len).copied().collect();
                b.splice(at..at, piece);
            }
            5 => {
                let word = dictionary[rng.below(dictionary.len() as u64) as usize];
                b.splice(at..at, word.iter().copied());
            }
            _ if b.len() >= at + 8 => {
                // An integer field overwritten with an extreme (counts, lengths, offsets, type ids, dimensions).
                let extremes = [0u64, 1, u64::MAX, 1 << 60, u32::MAX as u64, 0x8000_0000, 13, 1 << 32];
                let v = extremes[rng.below(extremes.len() as u64) as usize];
                let width = [1usize, 4, 8][rng.below(3) as usize];
                b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
            }
            _ => {}
        }
    }
    b
}

/// Runs `f` on input `i`, failing with the input's description if it panics.
fn must_not_panic(parser: &str, i: usize, input: &dyn std::fmt::Debug, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        panic!("{parser}: input {i} panicked: {input:?}");
    }
}

/// A small GGUF with a bit of everything the reader and the loader look at: typed scalars, arrays, strings, a
/// byte-level BPE vocabulary, a chat template, llama hyperparameters and two tensors.
fn gguf_seed() -> Vec<u8> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    GgufWriter::new()
        .metadata("general.architecture", Value::String("llama".into()))
        .metadata("general.name", Value::String("fuzz".into()))
        .metadata("llama.context_length", Value::U32(64))
        .metadata("llama.embedding_length", Value::U32(8))
        .metadata("llama.block_count", Value::U32(1))
        .metadata("llama.feed_forward_length", Value::U32(16))
        .metadata("llama.attention.head_count", Value::U32(2))
        .metadata("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
        .metadata("llama.rope.freq_base", Value::F64(10000.0))
        .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String("smollm".into()))
        .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(s(&["a", "b", "ab", "<|im_end|>"]))))
        .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1, 1, 1, 3])))
        .metadata("tokenizer.ggml.merges", Value::Array(Array::String(s(&["a b"]))))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(3))
        .metadata("tokenizer.chat_template", Value::String(ChatTemplateSeed::TEXT.into()))
        .metadata("fuzz.flags", Value::Array(Array::Bool(vec![true, false])))
        .metadata("fuzz.big", Value::I64(-1))
        .tensor_f32("token_embd.weight", &[8, 4], &[0.5; 32])
        .tensor("blk.0.ffn_down.weight", GgmlType::F16, &[16, 8], vec![0; 256])
        .to_bytes()
}

struct ChatTemplateSeed;

impl ChatTemplateSeed {
    const TEXT: &'static str = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}\
        {% if add_generation_prompt %}<|assistant|>{% endif %}";
}

#[test]
fn mutated_gguf_files_are_refused_or_read_never_a_panic() {
    let seed = gguf_seed();
    let dictionary: &[&[u8]] = &[b"GGUF", &[0xFF; 8], b"tokenizer.ggml.tokens", b"general.alignment", &[9, 0, 0, 0]];
    let mut rng = Rng(0x6767_7566);
    let (mut opened, mut loaded) = (0, 0);
    for i in 0..GGUF_INPUTS {
        let input = mutate(&mut rng, &seed, dictionary);
        must_not_panic("gguf", i, &input, || match parser_checks::check_gguf(&input) {
            GgufOutcome::Refused => {}
            GgufOutcome::Opened => opened += 1,
            GgufOutcome::Tokenizer => {
                opened += 1;
                loaded += 1;
            }
        });
    }
    println!("gguf: {GGUF_INPUTS} mutations, {opened} opened, {loaded} with a tokenizer");
    assert!(opened > 0, "no mutation left a readable file: the mutations are too destructive to test reading");
}

#[test]
fn mutated_engine_configurations_are_refused_or_read_never_a_panic() {
    let seed = serde_json::to_string(&EngineConfig::default()).unwrap();
    let dictionary: &[&[u8]] =
        &[b"null", b"-1", b"1e999", b"\"mmap\"", b"{}", b"[]", b"18446744073709551616", b"\\u0000"];
    let mut rng = Rng(0x636f_6e66);
    let mut accepted = 0;
    for i in 0..CONFIG_INPUTS {
        let input = String::from_utf8_lossy(&mutate(&mut rng, seed.as_bytes(), dictionary)).into_owned();
        must_not_panic("config", i, &input, || accepted += usize::from(parser_checks::check_config(&input)));
    }
    println!("config: {CONFIG_INPUTS} mutations, {accepted} accepted");
}

#[test]
fn mutated_requests_are_refused_or_served_never_a_panic() {
    let engine = common::engine(EngineConfig { kv_cache_tokens: 2048, max_num_seqs: 8, ..Default::default() });
    let seeds = [
        r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0, "stop": ["."], "logprobs": true, "top_logprobs": 2, "n": 2, "seed": 3, "stream": true, "stream_options": {"include_usage": true}}"#,
        r#"{"prompt": ["Hello", "World"], "max_tokens": 1, "echo": true, "logprobs": 1, "logit_bias": {"42": -100}, "presence_penalty": 0.5, "top_p": 0.9}"#,
        r#"{"prompt": [1, 2, 3], "max_tokens": 1, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}"#,
        r#"{"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 4, "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "tool_choice": "required"}"#,
    ];
    let dictionary: &[&[u8]] =
        &[b"null", b"-1", b"1e308", b"[]", b"{}", b"\"\\ud800\"", b"999999999", b"true", b"\"\""];
    let mut rng = Rng(0x7265_7175);
    let (mut served, mut refused) = (0, 0);
    for i in 0..3000 {
        let seed = seeds[i % seeds.len()];
        let input = String::from_utf8_lossy(&mutate(&mut rng, seed.as_bytes(), dictionary)).into_owned();
        must_not_panic("request", i, &input, || {
            if parser_checks::check_request(&engine, &input) {
                served += 1;
            } else {
                refused += 1;
            }
        });
    }
    println!("request: 3000 mutations, {served} served (then cancelled), {refused} refused");
    assert!(served > 0 && refused > 0, "{served} served, {refused} refused: the mutations miss one side");
    // Nothing of the 3000 is left behind in the engine.
    let h = engine
        .submit(SubmitRequest::with_options(
            vec![1, 2, 3],
            RequestOptions { max_tokens: Some(1), ..Default::default() },
        ))
        .unwrap();
    h.wait();
}

/// Text of every kind the tokenizers meet: words, special-token lookalikes, control bytes, invalid UTF-8 made
/// lossy, long runs.
fn text_seeds() -> Vec<Vec<u8>> {
    vec![
        b"The quick brown fox jumps over the lazy dog.".to_vec(),
        "<|im_start|>user\nH\u{e9}llo, \u{4e16}\u{754c} \u{1F600}<|im_end|><start_of_turn><bos>".as_bytes().to_vec(),
        b"\x00\x01\x04\x06\xf1\xf2\xff\xfe  \t\n\r\n   123456789 -- ''' \"\"\"".to_vec(),
        "a".repeat(300).into_bytes(),
    ]
}

fn fuzz_tokenizer(name: &str, tok: &Tokenizer, seed_value: u64) {
    let seeds = text_seeds();
    let dictionary: &[&[u8]] = &[b"<|im_end|>", b"<end_of_turn>", b"<bos>", b"<|endoftext|>", "\u{200b}".as_bytes()];
    let mut rng = Rng(seed_value);
    let vocab = tok.vocab_size() as u64;
    for i in 0..3000 {
        let text = String::from_utf8_lossy(&mutate(&mut rng, &seeds[i % seeds.len()], dictionary)).into_owned();
        must_not_panic(name, i, &text, || parser_checks::check_text(tok, &text));
        // Arbitrary ids: in range they decode, out of range they are an error.
        let ids: Vec<TokenId> = (0..rng.below(12)).map(|_| rng.below(vocab + 4) as TokenId).collect();
        let include_special = rng.below(2) == 0;
        must_not_panic(name, i, &ids, || parser_checks::check_ids(tok, &ids, include_special));
    }
}

/// llama.cpp's XLM-RoBERTa vocabulary (Unigram, with its precompiled charsmap), from the folder
/// `tests/tokenizer_llamacpp_vocabs.rs` reads (`make test` fetches it).
fn xlm_roberta_vocab() -> GgufFile {
    let dir = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let path = dir.join("ggml-vocab-nomic-bert-moe.gguf");
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}: run scripts/llamacpp/fetch-vocabs.sh (make test does)"))
}

#[test]
fn tokenizers_take_arbitrary_text_and_ids() {
    fuzz_tokenizer("smollm2 tokenizer", &common::model().tokenizer, 0x746f_6b31);
    let gemma = Model::load(Some(&gemma3::gemma3_path())).unwrap_or_else(|e| panic!("{e}"));
    fuzz_tokenizer("gemma3 tokenizer", &gemma.tokenizer, 0x746f_6b32);
    let xlm_roberta = Tokenizer::from_gguf(&xlm_roberta_vocab()).unwrap_or_else(|e| panic!("{e}"));
    fuzz_tokenizer("xlm-roberta unigram tokenizer", &xlm_roberta, 0x746f_6b33);
}

/// The real charsmap (XLM-RoBERTa's 237,539 bytes), mutated: each mutation is refused with the charsmap's error or
/// loads, and then normalizes and tokenizes arbitrary text without a panic. Under a vocabulary of its first 2,000
/// pieces, so that each load costs the charsmap's check (a few milliseconds), not the whole vocabulary's.
#[test]
fn mutated_unigram_charsmaps_are_refused_or_normalize_never_a_panic() {
    let file = xlm_roberta_vocab();
    let charsmap = file.byte_array(keys::PRECOMPILED_CHARSMAP).unwrap();
    let tokens = &file.string_array(keys::TOKENS).unwrap()[..2000];
    let types = &file.i32_array(keys::TOKEN_TYPE).unwrap()[..2000];
    let scores = &file.f32_array(keys::SCORES).unwrap()[..2000];
    let texts = text_seeds();
    let dictionary: &[&[u8]] = &[&[0xFF; 4], &[0, 0, 0, 0], &[0x00, 0x01, 0x00, 0x80]];
    let mut rng = Rng(0x6368_6d70);
    let (mut loaded, inputs) = (0, 300);
    for i in 0..inputs {
        let mutated = mutate(&mut rng, charsmap, dictionary);
        let spec = TokenizerSpec {
            kind: VocabKind::Unigram,
            token_types: Some(types),
            scores: Some(scores),
            precompiled_charsmap: Some(&mutated),
            add_space_prefix: true,
            remove_extra_whitespaces: true,
            unknown_id: Some(3),
            ..TokenizerSpec::new(tokens, &[], "")
        };
        must_not_panic("charsmap", i, &i, || match Tokenizer::from_spec(&spec) {
            Ok(tok) => {
                loaded += 1;
                for text in &texts {
                    parser_checks::check_text(&tok, &String::from_utf8_lossy(text));
                }
            }
            Err(TokenizerError::MalformedCharsmap { .. }) => {}
            Err(other) => panic!("refused by another error: {other}"),
        });
    }
    println!("charsmap: {inputs} mutations, {loaded} loaded");
    assert!(loaded > 0 && loaded < inputs, "{loaded} of {inputs} loaded: the mutations test one side only");
}

#[test]
fn chat_templates_render_arbitrary_messages_or_refuse_them() {
    let gemma = Model::load(Some(&gemma3::gemma3_path())).unwrap_or_else(|e| panic!("{e}"));
    let templates = [("smollm2", &common::model().chat_template), ("gemma3", &gemma.chat_template)];
    let roles = ["system", "user", "assistant", "tool", "", "model", "{{ raise_exception('x') }}"];
    let seeds = text_seeds();
    let dictionary: &[&[u8]] = &[b"{{", b"}}", b"{%", b"%}", b"{# ", b"<|im_start|>"];
    let mut rng = Rng(0x6368_6174);
    let mut rendered = 0;
    for i in 0..2000 {
        let messages: Vec<ChatMessage> = (0..rng.below(5))
            .map(|_| {
                let role = roles[rng.below(roles.len() as u64) as usize];
                let seed = &seeds[rng.below(seeds.len() as u64) as usize];
                let content = mutate(&mut rng, seed, dictionary);
                ChatMessage::new(role, String::from_utf8_lossy(&content))
            })
            .collect();
        let add_generation_prompt = rng.below(2) == 0;
        for (name, template) in templates {
            must_not_panic(name, i, &messages, || {
                rendered += usize::from(parser_checks::check_template(template, &messages, add_generation_prompt));
            });
        }
    }
    println!("chat templates: 2000 message lists on each of 2 templates, {rendered} rendered");
}

/// Chat template sources themselves (a model file's, an option's), mutated from llama.cpp's 70 real templates
/// (`make templates` fetches them) and a few hostile seeds, compiled and rendered within small limits: each
/// compiles or is refused, renders or is refused, never a panic or a crash (a stack overflow would end the test's
/// process). The cargo-fuzz target `template_source` does the same without end.
#[test]
fn mutated_chat_template_sources_compile_and_render_or_refuse() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/templates");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (make templates fetches them)", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut seeds: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    seeds.extend(
        [
            "{% set ns = namespace(v=[]) %}{% for i in range(50) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}",
            "{% macro f(x) %}{{ f([x]) }}{% endmacro %}{{ f(1) }}",
            "{{ messages|tojson(indent='  ') }}{{ '{:>8}'.format('x') }}{{ 'a b'.split() }}",
        ]
        .map(|s| s.as_bytes().to_vec()),
    );
    let dictionary: &[&[u8]] = &[
        b"{{",
        b"}}",
        b"{%",
        b"%}",
        b"{%-",
        b"-%}",
        b"set ",
        b"for ",
        b" in ",
        b"endfor",
        b"if ",
        b"endif",
        b"ns.v",
        b"[ns.v]",
        b"namespace(",
        b"macro ",
        b"endmacro",
        b"loop(",
        b" recursive",
        b"|list",
        b"|tojson",
        b"|batch(1)",
        b"|map(",
        b" * 1000",
        b" ~ ",
        b".split()",
        b"caller()",
    ];
    let limits = TemplateLimits { fuel: 200_000, time_ms: 200, ..Default::default() };
    let messages = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "hi")];
    let mut rng = Rng(0x7465_6d70);
    let (mut compiled, mut rendered) = (0, 0);
    for i in 0..2000 {
        let seed = &seeds[rng.below(seeds.len() as u64) as usize];
        let source = String::from_utf8_lossy(&mutate(&mut rng, seed, dictionary)).into_owned();
        must_not_panic("chat template source", i, &source, || {
            // The render thread turns a panic into an error: it must not say one happened.
            let no_panic = |e: &dyn std::fmt::Display| assert!(!e.to_string().contains("panicked"), "{i}: {e}");
            match ChatTemplate::compile(Some(&source), "<s>", "</s>", TemplateOrigin::ModelFile, &limits) {
                Ok(t) => {
                    compiled += 1;
                    match t.render(&messages, true) {
                        Ok(_) => rendered += 1,
                        Err(e) => no_panic(&e),
                    }
                }
                Err(e) => no_panic(&e),
            }
        });
    }
    println!("chat template sources: 2000 mutants, {compiled} compiled, {rendered} rendered");
}
