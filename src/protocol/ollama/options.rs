//! Ollama's `options` (its Modelfile parameters, per request): each one is served by a chat field, refused unless
//! it asks for nothing ember would have to do differently, or accepted without effect (the runner settings that
//! ember fixes when the engine starts). docs/protocol.md, "Ollama", lists them.

use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::fields::{as_object, type_error};

/// How an option is served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opt {
    /// The chat field of this name, the value unchanged (the chat core checks its type and range).
    Field(&'static str),
    /// Read here.
    Own,
    /// A runner setting: checked for its type, no effect.
    NoEffect(Kind),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Number,
    Bool,
}

const OPTIONS: &[(&str, Opt)] = &[
    ("temperature", Opt::Field("temperature")),
    ("top_p", Opt::Field("top_p")),
    ("top_k", Opt::Field("top_k")),
    ("min_p", Opt::Field("min_p")),
    ("stop", Opt::Field("stop")),
    ("presence_penalty", Opt::Field("presence_penalty")),
    ("frequency_penalty", Opt::Field("frequency_penalty")),
    ("repeat_penalty", Opt::Field("repetition_penalty")),
    ("num_predict", Opt::Own),
    ("seed", Opt::Own),
    ("repeat_last_n", Opt::Own),
    ("mirostat", Opt::Own),
    ("typical_p", Opt::Own),
    ("tfs_z", Opt::Own),
    // Mirostat's parameters do nothing while mirostat is 0, the only value served.
    ("mirostat_tau", Opt::NoEffect(Kind::Number)),
    ("mirostat_eta", Opt::NoEffect(Kind::Number)),
    // Ollama itself no longer reads it.
    ("penalize_newline", Opt::NoEffect(Kind::Bool)),
    // What Ollama keeps when it shifts a full context; ember does not shift: a prompt too long is refused.
    ("num_keep", Opt::NoEffect(Kind::Integer)),
    // The runner's: the context and batch sizes, threads, GPU layers and memory are the engine's, set at start.
    ("num_ctx", Opt::NoEffect(Kind::Integer)),
    ("num_batch", Opt::NoEffect(Kind::Integer)),
    ("num_gpu", Opt::NoEffect(Kind::Integer)),
    ("main_gpu", Opt::NoEffect(Kind::Integer)),
    ("num_thread", Opt::NoEffect(Kind::Integer)),
    ("numa", Opt::NoEffect(Kind::Bool)),
    ("low_vram", Opt::NoEffect(Kind::Bool)),
    ("f16_kv", Opt::NoEffect(Kind::Bool)),
    ("logits_all", Opt::NoEffect(Kind::Bool)),
    ("vocab_only", Opt::NoEffect(Kind::Bool)),
    ("use_mmap", Opt::NoEffect(Kind::Bool)),
    ("use_mlock", Opt::NoEffect(Kind::Bool)),
    ("embedding_only", Opt::NoEffect(Kind::Bool)),
];

/// Ollama's sampling defaults (its `DefaultOptions`), for the options a request leaves unset: an Ollama client
/// that sets none gets Ollama's sampling, not OpenAI's temperature 1 without truncation. Its default
/// `repeat_penalty` 1.1 over the last 64 tokens is left out: ember's penalty covers the prompt and the output,
/// and would change every answer more than Ollama's does.
fn defaults() -> [(&'static str, Value); 3] {
    [("temperature", json!(0.8)), ("top_k", json!(40)), ("top_p", json!(0.9))]
}

/// The `options.NAME` of a refusal.
fn param(name: &str) -> String {
    format!("options.{name}")
}

/// Reads `options` (absent: Ollama's defaults) into `chat`'s fields. `num_predict` -1 (Ollama's default) or -2
/// (fill the context) is no `max_tokens`: the output may run to the end of the context.
pub(super) fn read_options(options: Option<&Value>, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let empty = Map::new();
    let options = match options {
        Some(v) => as_object(v, "options")?,
        None => &empty,
    };
    for (name, value) in options.iter().filter(|(_, v)| !v.is_null()) {
        let Some(&(_, how)) = OPTIONS.iter().find(|(known, _)| known == name) else {
            return Err(ApiError::invalid(param(name), format!("unrecognized option: options.{name}")));
        };
        match how {
            Opt::Field(field) => {
                chat.insert(field.into(), value.clone());
            }
            Opt::Own => read_own(name, value, chat)?,
            Opt::NoEffect(kind) => check_kind(name, value, kind)?,
        }
    }
    // `repeat_last_n` 0 turns the penalty off, whatever `repeat_penalty` says (read after it, in any order).
    if options.get("repeat_last_n").and_then(Value::as_i64) == Some(0) {
        chat.remove("repetition_penalty");
    }
    for (field, default) in defaults() {
        chat.entry(field).or_insert(default);
    }
    Ok(())
}

fn read_own(name: &str, value: &Value, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let integer = || value.as_i64().ok_or_else(|| type_error(&param(name), "an integer", value));
    let number = || value.as_f64().ok_or_else(|| type_error(&param(name), "a number", value));
    match name {
        "num_predict" => match integer()? {
            -2 | -1 => {}
            // 0 and other counts go to the chat core, which refuses 0 naming options.num_predict.
            n if n >= 0 => {
                chat.insert("max_tokens".into(), json!(n));
            }
            n => {
                let why =
                    format!("options.num_predict must be a count, -1 (no limit) or -2 (fill the context), got {n}");
                return Err(ApiError::invalid(param(name), why));
            }
        },
        // Ollama's -1 is a random seed; any other value is that seed (a negative one as chat reads it).
        "seed" => {
            if value.as_i64() != Some(-1) {
                chat.insert("seed".into(), value.clone());
            }
        }
        // ember's repetition penalty covers the whole prompt and output, not the last N tokens; 0 turns it off
        // (read_options).
        "repeat_last_n" => {
            integer()?;
        }
        "mirostat" => {
            if integer()? != 0 {
                return Err(ApiError::invalid(
                    param(name),
                    "options.mirostat is not supported unless 0: ember samples with temperature, top_k, top_p and min_p",
                ));
            }
        }
        // 1 (or more) is off, Ollama's default.
        "typical_p" | "tfs_z" => {
            if number()? < 1.0 {
                return Err(ApiError::invalid(
                    param(name),
                    format!("options.{name} is not supported: only 1 (off) is accepted"),
                ));
            }
        }
        _ => unreachable!("every Own option is read above"),
    }
    Ok(())
}

fn check_kind(name: &str, value: &Value, kind: Kind) -> Result<(), ApiError> {
    let (ok, expected) = match kind {
        Kind::Integer => (value.is_i64() || value.is_u64(), "an integer"),
        Kind::Number => (value.is_number(), "a number"),
        Kind::Bool => (value.is_boolean(), "a boolean"),
    };
    if ok {
        Ok(())
    } else {
        Err(type_error(&param(name), expected, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(options: Value) -> Result<Map<String, Value>, ApiError> {
        let mut chat = Map::new();
        read_options(Some(&options), &mut chat).map(|()| chat)
    }

    #[test]
    fn options_become_chat_fields_with_ollamas_defaults() {
        let chat = read(json!({"temperature": 0, "num_predict": 8, "repeat_penalty": 1.2, "stop": ["\n"],
            "seed": 7, "num_ctx": 4096, "num_thread": 2, "use_mmap": true, "mirostat": 0, "typical_p": 1.0}))
        .unwrap();
        assert_eq!(
            Value::Object(chat),
            json!({"temperature": 0, "max_tokens": 8, "repetition_penalty": 1.2, "stop": ["\n"], "seed": 7,
                "top_k": 40, "top_p": 0.9})
        );
        let mut chat = Map::new();
        read_options(None, &mut chat).unwrap();
        assert_eq!(Value::Object(chat), json!({"temperature": 0.8, "top_k": 40, "top_p": 0.9}));
    }

    #[test]
    fn unlimited_predictions_random_seeds_and_no_penalty_window() {
        for n in [-1, -2] {
            assert!(!read(json!({"num_predict": n})).unwrap().contains_key("max_tokens"));
        }
        assert!(!read(json!({"seed": -1})).unwrap().contains_key("seed"));
        let chat = read(json!({"repeat_last_n": 0, "repeat_penalty": 1.3})).unwrap();
        assert!(!chat.contains_key("repetition_penalty"));
        assert!(read(json!({"repeat_last_n": 64, "repeat_penalty": 1.3})).unwrap().contains_key("repetition_penalty"));
    }

    #[test]
    fn refusals_name_the_option() {
        let param = |options: Value| read(options).unwrap_err().param.unwrap_or_default();
        assert_eq!(param(json!({"mirostat": 2})), "options.mirostat");
        assert_eq!(param(json!({"typical_p": 0.5})), "options.typical_p");
        assert_eq!(param(json!({"tfs_z": 0.9})), "options.tfs_z");
        assert_eq!(param(json!({"num_predict": -3})), "options.num_predict");
        assert_eq!(param(json!({"num_ctx": "big"})), "options.num_ctx");
        assert_eq!(param(json!({"frobnicate": 1})), "options.frobnicate");
        assert_eq!(read(json!([])).unwrap_err().param.as_deref(), Some("options"));
    }
}
