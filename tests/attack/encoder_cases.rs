//! Hostile embeddings and rerank bodies, and misuse of their result handle (`EmberEmbeddings`), through
//! `engine_embed_vectors` and `engine_rerank_scores` on synthetic one-layer files of bge-small's shapes (an
//! embedding model, and a reranker) with llama.cpp's real BERT vocabulary. Each body is refused with a status and a
//! message naming its field, or served within its bounds; then the same engine serves an ordinary request.

use std::path::{Path, PathBuf};
use std::ptr;

use ember::ffi::{
    engine_embeddings_count, engine_embeddings_dimensions, engine_embeddings_floats, engine_embeddings_free,
    engine_embeddings_input_tokens, engine_embeddings_json, engine_get_embeddings_timing_metrics, EmberEmbeddings,
    EmberPerRequestTimingMetrics, EmberStatus,
};
use ember::model::encoder::SyntheticEncoder;
use ember::model::gguf::GgufFile;
use serde_json::json;

use super::cases::{measured, outcome, Outcome};
use super::host::{last_error, Engine};

/// Which call meets the body.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Embed,
    Rerank,
}

/// What must come of it.
#[derive(Clone, Copy)]
enum Expect {
    /// Refused with this status, the message containing this text (the field at fault, or the cause).
    Refused(EmberStatus, &'static str),
    /// Served, with this many rows.
    Served(usize),
}

/// A hostile body for one of the two calls.
pub struct EncoderBomb {
    pub name: &'static str,
    endpoint: Endpoint,
    body: Vec<u8>,
    expect: Expect,
}

/// The case that misuses the result handle rather than sending a body.
pub const HANDLE_MISUSE: &str = "result_handle_misuse";

const U64_MAX: &str = "18446744073709551615";
/// The BERT vocabulary's size: its first id past the end.
const VOCAB: &str = "30522";

fn refused(name: &'static str, endpoint: Endpoint, body: impl Into<Vec<u8>>, naming: &'static str) -> EncoderBomb {
    let expect = Expect::Refused(EmberStatus::InvalidRequest, naming);
    EncoderBomb { name, endpoint, body: body.into(), expect }
}

/// `count` copies of `item`, comma-separated.
fn repeated(item: &str, count: usize) -> String {
    vec![item; count].join(",")
}

pub fn encoder_bombs() -> Vec<EncoderBomb> {
    use Endpoint::{Embed, Rerank};
    let embed = |extra: &str| format!(r#"{{"input": "a"{extra}}}"#);
    let rerank = |extra: &str| format!(r#"{{"query": "q", "documents": ["a", "b"]{extra}}}"#);
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut v = vec![
        refused("malformed_json", Embed, r#"{"input": ["a", "#, "not JSON"),
        refused("not_an_object", Rerank, "[1, 2, 3]", "not a JSON object"),
        refused("dimensions_u64_max", Embed, embed(&format!(r#", "dimensions": {U64_MAX}"#)), "dimensions"),
        refused("dimensions_1e300", Embed, embed(r#", "dimensions": 1e300"#), "dimensions"),
        refused("dimensions_negative", Embed, embed(r#", "dimensions": -384"#), "dimensions"),
        refused(
            "inputs_1000000_strings",
            Embed,
            format!(r#"{{"input": [{}]}}"#, repeated(r#""a""#, 1_000_000)),
            "input: 1000000 inputs",
        ),
        refused(
            "inputs_1000000_token_lists",
            Embed,
            format!(r#"{{"input": [{}]}}"#, repeated("[101, 102]", 1_000_000)),
            "input: 1000000 inputs",
        ),
        refused(
            "one_input_of_1000000_tokens",
            Embed,
            format!(r#"{{"input": [{}]}}"#, repeated("1037", 1_000_000)),
            "input[0]",
        ),
        refused("input_4_mib_text", Embed, format!(r#"{{"input": "{}"}}"#, "word ".repeat(800_000)), "input[0]"),
        refused("input_nested_100000_deep", Embed, format!(r#"{{"input": {deep}}}"#), "not JSON"),
        refused("input_nested_3_deep", Embed, r#"{"input": [[[101, 102]]]}"#, "input"),
        refused("token_id_u32_max", Embed, r#"{"input": [[101, 4294967295, 102]]}"#, "input[0]"),
        refused("token_id_past_the_vocabulary", Embed, format!(r#"{{"input": [[101, {VOCAB}]]}}"#), "input[0]"),
        refused("token_id_u64_max", Embed, format!(r#"{{"input": [{U64_MAX}]}}"#), "input"),
        refused("token_id_negative", Embed, r#"{"input": [101, -1]}"#, "input"),
        refused("deadline_ms_u64_max", Embed, embed(&format!(r#", "deadline_ms": {U64_MAX}"#)), "deadline_ms"),
        refused("include_metrics_not_bool", Rerank, rerank(r#", "include_metrics": "yes""#), "include_metrics"),
        refused("priority_i64_max", Rerank, rerank(r#", "priority": 9223372036854775807"#), "priority"),
        refused("top_n_negative", Rerank, rerank(r#", "top_n": -1"#), "top_n"),
        refused("top_n_1e300", Rerank, rerank(r#", "top_n": 1e300"#), "top_n"),
        refused(
            "documents_1000000",
            Rerank,
            format!(r#"{{"query": "q", "documents": [{}]}}"#, repeated(r#""d""#, 1_000_000)),
            "documents: 1000000",
        ),
        refused(
            "query_4_mib",
            Rerank,
            format!(r#"{{"query": "{}", "documents": ["a"]}}"#, "word ".repeat(800_000)),
            "documents[0]",
        ),
        refused("documents_nested", Rerank, r#"{"query": "q", "documents": [["a"]]}"#, "documents"),
        // A C string ends at its NUL: what comes before it is not a whole body.
        refused("nul_byte_in_the_body", Embed, b"{\"input\": \"a\0b\"}".to_vec(), "not JSON"),
        EncoderBomb {
            name: "invalid_utf8",
            endpoint: Embed,
            body: b"{\"input\": \"\xff\xfe caf\xe9\"}".to_vec(),
            expect: Expect::Refused(EmberStatus::InvalidUtf8, "UTF-8"),
        },
    ];
    // Served within their bounds: an absurd top_n keeps every document; an escaped NUL is a character of the text;
    // the most inputs a request may have, each as wide as the model.
    let served = [
        ("top_n_u64_max", Rerank, rerank(&format!(r#", "top_n": {U64_MAX}"#)), 2),
        ("escaped_nul_in_a_text", Embed, r#"{"input": ["a\u0000b", "\u0000"]}"#.to_owned(), 2),
        ("inputs_2048_at_full_width", Embed, format!(r#"{{"input": [{}]}}"#, repeated(r#""a b c""#, 2048)), 2048),
    ];
    v.extend(served.into_iter().map(|(name, endpoint, body, rows)| EncoderBomb {
        name,
        endpoint,
        body: body.into_bytes(),
        expect: Expect::Served(rows),
    }));
    v
}

/// A synthetic one-layer file of `family` in `dir`.
fn family_file(dir: &Path, family: &str) -> Result<PathBuf, String> {
    let vocabs = std::env::var_os("EMBER_LLAMACPP_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab"));
    let vocab = GgufFile::open(vocabs.join("ggml-vocab-bert-bge.gguf"))
        .map_err(|e| format!("llama.cpp's vocabularies (scripts/llamacpp/fetch-vocabs.sh): {e}"))?;
    let path = dir.join(format!("{family}.gguf"));
    let spec = SyntheticEncoder::family(family, 3, 1).ok_or("no such encoder family")?;
    spec.writer(&vocab).write(&path).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

fn encoder_engine(dir: &Path, endpoint: Endpoint) -> Result<Engine, String> {
    let family = if endpoint == Endpoint::Rerank { "bge-small-rerank" } else { "bge-small-mean" };
    let model = family_file(dir, family)?;
    Engine::new(&json!({"model": model, "threads": 1, "load": "read"}))
        .map_err(|r| format!("the engine did not load: {:?}: {}", r.status, r.message))
}

/// An ordinary request of the engine's kind, served to its end with the rows it asks for.
fn serves(engine: &Engine, endpoint: Endpoint) -> Result<(), String> {
    let (result, rows) = match endpoint {
        Endpoint::Embed => (engine.embed_vectors(br#"{"input": ["Hello, world!", "a"]}"#), 2 * 384),
        Endpoint::Rerank => (engine.rerank_scores(br#"{"query": "q", "documents": ["a", "b", "c"]}"#), 3),
    };
    let floats =
        result.map_err(|r| format!("then a normal request failed: {:?}: {}", r.status, r.message))?.floats()?;
    if floats.len() != rows || floats.iter().any(|x| !x.is_finite()) {
        return Err(format!("then a normal request gave {} floats, not {rows} finite ones", floats.len()));
    }
    Ok(())
}

/// Runs the case `name` (a bomb's, or the handle misuse) with `dir` for its files.
pub fn encoder_case(name: &str, dir: &Path) -> Result<Outcome, String> {
    if name == HANDLE_MISUSE {
        return handle_misuse(dir);
    }
    let bomb = encoder_bombs().into_iter().find(|b| b.name == name).ok_or_else(|| format!("no encoder case {name}"))?;
    let engine = encoder_engine(dir, bomb.endpoint)?;
    let (result, ms, peak) = measured(|| match bomb.endpoint {
        Endpoint::Embed => engine.embed_vectors(&bomb.body),
        Endpoint::Rerank => engine.rerank_scores(&bomb.body),
    });
    let said = match (result, bomb.expect) {
        (Ok(served), Expect::Served(rows)) => {
            let floats = served.floats()?;
            let width = if bomb.endpoint == Endpoint::Rerank { 1 } else { 384 };
            if floats.len() != rows * width {
                return Err(format!("served {} floats, expected {rows} rows of {width}", floats.len()));
            }
            format!("served {rows} rows")
        }
        (Ok(_), Expect::Refused(_, naming)) => return Err(format!("accepted; expected a refusal naming {naming:?}")),
        (Err(r), Expect::Served(_)) => return Err(format!("refused: {:?}: {}", r.status, r.message)),
        (Err(r), Expect::Refused(status, naming)) => {
            if r.status != status || !r.message.contains(naming) {
                return Err(format!("expected {status:?} naming {naming:?}, got {:?}: {}", r.status, r.message));
            }
            let text = r.message.to_lowercase();
            if text.contains("panick") || text.contains("internal error") {
                return Err(format!("the refusal carries a panic: {}", r.message));
            }
            r.message
        }
    };
    serves(&engine, bomb.endpoint)?;
    Ok(outcome(said, ms, peak))
}

/// Every accessor and the free with a NULL, freed, forged or other type's handle: a status each, nothing read or
/// written, no crash; a double free does nothing; a live result reads on and the engine serves.
fn handle_misuse(dir: &Path) -> Result<Outcome, String> {
    let engine = encoder_engine(dir, Endpoint::Embed)?;
    let live = engine.embed_vectors(br#"{"input": "a"}"#).map_err(|r| r.message)?;
    let before = live.floats()?;
    let freed = engine.embed_vectors(br#"{"input": "b"}"#).map_err(|r| r.message)?.0; // freed here, on drop
                                                                                      // Values with the embeddings tag (0xE3 in bits 24..32) but a serial never issued, or another slot's.
    let forged = [1usize, 0xdead_beef, 0xE300_0001, 7 << 32 | 0xE300_0001, (freed as usize) + 1, usize::MAX];
    let mut wrong: Vec<*mut EmberEmbeddings> = forged.iter().map(|&v| v as *mut EmberEmbeddings).collect();
    wrong.push(freed);
    let (statuses, ms, peak) = measured(|| {
        let mut seen = vec![accessor_statuses(ptr::null_mut())];
        seen.extend(wrong.iter().map(|&h| accessor_statuses(h)));
        for &h in wrong.iter().chain([&freed, &freed]) {
            engine_embeddings_free(h);
        }
        seen
    });
    if statuses[0] != [EmberStatus::InvalidArgument; 6] {
        return Err(format!("NULL: {:?}", statuses[0]));
    }
    if let Some((i, s)) = statuses[1..].iter().enumerate().find(|(_, s)| **s != [EmberStatus::InvalidHandle; 6]) {
        return Err(format!("handle {:?}: {s:?}", wrong[i]));
    }
    engine_embeddings_free(freed);
    let message = last_error();
    if !message.contains("not a live embeddings handle") {
        return Err(format!("a double free does not say so: {message}"));
    }
    if live.floats()? != before {
        return Err("a live result changed".into());
    }
    drop(live);
    serves(&engine, Endpoint::Embed)?;
    Ok(outcome(message, ms, peak))
}

/// What the six accessors answer for `handle`, with writable outputs.
fn accessor_statuses(handle: *mut EmberEmbeddings) -> [EmberStatus; 6] {
    let (mut floats, mut n, mut tokens, mut json) = (ptr::null(), 0usize, ptr::null(), ptr::null());
    let mut metrics = EmberPerRequestTimingMetrics {
        struct_size: size_of::<EmberPerRequestTimingMetrics>() as u32,
        present: 0,
        time_to_first_token_ms: 0.0,
        generation_time_ms: 0.0,
        queue_time_ms: 0.0,
        mean_itl_ms: 0.0,
        tokens_per_second: 0.0,
    };
    // SAFETY: the handle is checked by the registry, never dereferenced; every output is writable.
    unsafe {
        [
            engine_embeddings_floats(handle, &mut floats),
            engine_embeddings_count(handle, &mut n),
            engine_embeddings_dimensions(handle, &mut n),
            engine_embeddings_input_tokens(handle, &mut tokens),
            engine_embeddings_json(handle, &mut json),
            engine_get_embeddings_timing_metrics(handle, &mut metrics),
        ]
    }
}
