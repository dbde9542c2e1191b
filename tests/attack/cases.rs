//! Every case of the attack suite by name, and what the host does for each (in the child process).

use std::path::{Path, PathBuf};

use ember::ffi::EmberStatus;
use ember::model::gguf::Value as GgufValue;
use ember::model::llama::SyntheticSpec;
use serde_json::{json, Value};

use super::api_cases::{api_bombs, api_case, CHAINED};
use super::encoder_cases::{encoder_bombs, encoder_case, HANDLE_MISUSE};
use super::gguf_cases::{gguf_bomb, gguf_bomb_names};
use super::grammar_cases::{grammar_bombs, grammar_heavy_served};
use super::host::{reset_peak, rss_kib, timed, Engine};
use super::request_cases::request_bombs;
use super::template_cases::{template_bombs, TemplateBomb, Trigger};

/// What a case did: `error` says why it failed (`None`: it passed).
pub struct Outcome {
    pub error: Option<String>,
    /// How long the call that met the attack took, in milliseconds.
    pub attack_ms: f64,
    /// The process's peak resident memory during that call, above what it was before it, in KiB.
    pub peak_above_kib: u64,
    /// ember's refusal (the error it returned), or what it served.
    pub refusal: String,
}

impl Outcome {
    pub fn to_json(&self, name: &str) -> Value {
        json!({
            "case": name,
            "error": self.error,
            "attack_ms": self.attack_ms,
            "peak_above_kib": self.peak_above_kib,
            "refusal": self.refusal,
        })
    }
}

const VIAS: [&str; 2] = ["model_file", "option"];

/// Every case's name: `template/NAME/model_file`, `template/NAME/option`, `grammar/NAME`, `gguf/NAME`,
/// `request/NAME`, `encoder/NAME`, `api/NAME`.
pub fn all_cases() -> Vec<String> {
    let mut names = Vec::new();
    for bomb in template_bombs() {
        names.extend(VIAS.iter().map(|via| format!("template/{}/{via}", bomb.name)));
    }
    names.extend(grammar_bombs().into_iter().map(|(name, _, _)| format!("grammar/{name}")));
    names.extend(grammar_heavy_served().into_iter().map(|(name, _, _)| format!("grammar_served/{name}")));
    names.extend(gguf_bomb_names().map(|name| format!("gguf/{name}")));
    names.extend(request_bombs().into_iter().map(|b| format!("request/{}", b.name)));
    names.extend(encoder_bombs().into_iter().map(|b| format!("encoder/{}", b.name)));
    names.push(format!("encoder/{HANDLE_MISUSE}"));
    names.extend(api_bombs().into_iter().map(|b| format!("api/{}", b.name)));
    names.push(format!("api/{CHAINED}"));
    names
}

/// Runs the case `name` with `dir` for its files.
pub fn run_case(name: &str, dir: &Path) -> Outcome {
    let parts: Vec<&str> = name.split('/').collect();
    let result = match parts.as_slice() {
        ["template", bomb, via] => match template_bombs().into_iter().find(|b| b.name == *bomb) {
            Some(b) => template_case(&b, *via == "model_file", dir),
            None => Err(format!("no template case {bomb}")),
        },
        ["grammar", bomb] => match grammar_bombs().into_iter().find(|(n, _, _)| n == bomb) {
            Some((_, field, body)) => grammar_case(field, &body),
            None => Err(format!("no grammar case {bomb}")),
        },
        ["grammar_served", case] => match grammar_heavy_served().into_iter().find(|(n, _, _)| n == case) {
            Some((_, _, body)) => grammar_served_case(&body),
            None => Err(format!("no grammar case {case}")),
        },
        ["gguf", bomb] => match gguf_bomb(dir, bomb) {
            Some((path, expect)) => gguf_case(&path, expect, dir),
            None => Err(format!("no load case {bomb}")),
        },
        ["request", bomb] => match request_bombs().into_iter().find(|b| b.name == *bomb) {
            Some(b) => request_case(&b.body, b.refused_naming, dir),
            None => Err(format!("no request case {bomb}")),
        },
        ["encoder", case] => encoder_case(case, dir),
        ["api", case] => api_case(case, dir),
        _ => Err(format!("no case {name}")),
    };
    result.unwrap_or_else(|error| Outcome {
        error: Some(error),
        attack_ms: 0.0,
        peak_above_kib: 0,
        refusal: String::new(),
    })
}

/// The attack's call, measured: its result, its duration, and the peak memory above the process's before it.
pub(super) fn measured<T>(attack: impl FnOnce() -> T) -> (T, f64, u64) {
    reset_peak();
    let (before, _) = rss_kib();
    let (result, took) = timed(attack);
    let (_, peak) = rss_kib();
    (result, took.as_secs_f64() * 1e3, peak.saturating_sub(before))
}

pub(super) fn outcome(refusal: String, attack_ms: f64, peak_above_kib: u64) -> Outcome {
    Outcome { error: None, attack_ms, peak_above_kib, refusal }
}

/// A model small enough to load in milliseconds (2 layers of width 64, a byte vocabulary), with `template` in
/// its file when given.
pub(super) fn tiny_model(dir: &Path, template: Option<&str>) -> PathBuf {
    let mut writer = SyntheticSpec::tiny(43).writer_with_byte_vocabulary();
    if let Some(template) = template {
        writer = writer.metadata("tokenizer.chat_template", GgufValue::String(template.to_owned()));
    }
    let path = dir.join(if template.is_some() { "hostile.gguf" } else { "tiny.gguf" });
    writer.write(&path).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

pub(super) fn tiny_config(model: &Path) -> Value {
    json!({"model": model, "threads": 1, "kv_cache_tokens": 1024, "load": "read"})
}

const CHAT: &str = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}"#;
const COMPLETION: &str = r#"{"prompt": "hi", "max_tokens": 4}"#;

/// ember still serves in this process: a chat and a completion on `engine`, to their ends.
pub(super) fn serves(engine: &Engine, chat: bool) -> Result<(), String> {
    if chat {
        engine.serve(CHAT).map_err(|e| format!("then a normal chat failed: {e}"))?;
    }
    engine.serve(COMPLETION).map_err(|e| format!("then a normal completion failed: {e}"))?;
    Ok(())
}

/// Whether `message` says what the case expects, and, for a limit, where the template came from.
/// A template's fuel and its time limit bound the same thing, a render's work, and which a bomb reaches first
/// depends on the machine: the slowest bombs spend the fuel in 0.5-0.65 s of CPU per render on a Zen 3 EPYC guest,
/// against the 1 s limit (a 100-million-digit `format`, `pprint` of deep copies). So a bomb expected to run out of
/// fuel may name the time limit instead; either refusal names its limit.
const FUEL: &str = "chat_template_limits.fuel";
const TIME: &str = "chat_template_limits.time_ms";

fn names(message: &str, expect: &str, model_file: bool) -> Result<(), String> {
    let named = message.contains(expect) || (expect == FUEL && message.contains(TIME));
    if !named {
        return Err(format!("the error does not say {expect:?}: {message}"));
    }
    let origin = if model_file { "the model file's chat template" } else { "chat_template option" };
    if expect.starts_with("chat_template_limits.") && !message.contains(origin) {
        return Err(format!("the error does not name the template's origin ({origin:?}): {message}"));
    }
    Ok(())
}

fn template_case(bomb: &TemplateBomb, model_file: bool, dir: &Path) -> Result<Outcome, String> {
    let model = tiny_model(dir, model_file.then_some(bomb.source.as_str()));
    let mut config = tiny_config(&model);
    if !model_file {
        config["chat_template"] = json!(bomb.source);
    }
    let trigger_body = match &bomb.trigger {
        Trigger::Always => {
            // The engine's probe render meets it at load: a limit refuses the load; another error (a rule of
            // ember's, such as a namespace holding a namespace) is logged there and refuses every chat.
            let (engine, ms, peak) = measured(|| Engine::new(&config));
            let engine = match engine {
                Err(refused) => {
                    names(&refused.message, bomb.expect, model_file)?;
                    // The host lives on, and ember serves: the same file with a plain template.
                    let mut plain = tiny_config(&model);
                    plain["chat_template"] = json!("{{ messages[0]['content'] }}");
                    let engine =
                        Engine::new(&plain).map_err(|r| format!("then a plain engine failed: {}", r.message))?;
                    serves(&engine, true)?;
                    return Ok(outcome(refused.message, ms, peak));
                }
                Ok(engine) => engine,
            };
            let (submitted, ms, peak) = measured(|| engine.submit(CHAT).map(drop));
            let refused = submitted.err().ok_or("the engine loaded and served a chat through the template")?;
            names(&refused.message, bomb.expect, model_file)?;
            serves(&engine, false)?;
            return Ok(outcome(refused.message, ms, peak));
        }
        Trigger::Message(content) => json!({"messages": [{"role": "user", "content": content}], "max_tokens": 4}),
        Trigger::Kwargs(kwargs) => {
            let kwargs: Value = serde_json::from_str(kwargs).expect("the case's kwargs are JSON");
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "chat_template_kwargs": kwargs})
        }
        Trigger::LongMessage(bytes) => {
            json!({"messages": [{"role": "user", "content": "a".repeat(*bytes)}], "max_tokens": 4})
        }
    }
    .to_string();
    let engine = Engine::new(&config).map_err(|r| format!("the engine did not load: {}", r.message))?;
    let (submitted, ms, peak) = measured(|| engine.submit(&trigger_body).map(drop));
    let refused = match submitted {
        Ok(()) => return Err("the triggering request was accepted".into()),
        Err(r) if r.status != EmberStatus::InvalidRequest => return Err(format!("{:?}: {}", r.status, r.message)),
        Err(r) => r,
    };
    names(&refused.message, bomb.expect, model_file)?;
    let applied = engine.apply_chat_template(&trigger_body);
    match applied {
        Ok(_) => return Err("engine_apply_chat_template rendered the triggering request".into()),
        Err(r) => names(&r.message, bomb.expect, model_file)?,
    }
    serves(&engine, true)?;
    Ok(outcome(refused.message, ms, peak))
}

/// An engine on the real model, with structured outputs warmed up: they are compiled against its vocabulary
/// (their cost grows with it), whose part is built on the first constrained request, here, so that what is
/// measured is the case's own cost.
fn grammar_engine() -> Result<Engine, String> {
    let engine = Engine::new(&json!({"threads": 1, "kv_cache_tokens": 8192}))
        .map_err(|r| format!("the engine did not load: {}", r.message))?;
    let warm = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "response_format": {"type": "json_object"}}"#;
    engine.serve(warm).map_err(|e| format!("a plain constrained request failed: {e}"))?;
    Ok(engine)
}

/// A constraint that looks like a bomb but is within every limit: compiled, and served to its end.
fn grammar_served_case(body: &str) -> Result<Outcome, String> {
    let engine = grammar_engine()?;
    let (served, ms, peak) = measured(|| engine.serve(body));
    let served = served.map_err(|e| format!("not served: {e}"))?;
    serves(&engine, true)?;
    Ok(outcome(served["choices"][0]["finish_reason"].to_string(), ms, peak))
}

fn grammar_case(field: &str, body: &str) -> Result<Outcome, String> {
    let engine = grammar_engine()?;
    let (submitted, ms, peak) = measured(|| engine.submit(body).map(drop));
    let refused = match submitted {
        Ok(()) => return Err("the grammar was accepted".into()),
        Err(r) if r.status != EmberStatus::InvalidRequest => return Err(format!("{:?}: {}", r.status, r.message)),
        Err(r) => r,
    };
    let error: Value = serde_json::from_str(&refused.message).map_err(|e| format!("{e}: {}", refused.message))?;
    let param = error["error"]["param"].as_str().unwrap_or_default();
    if !param.starts_with(field) || error["error"]["type"] != "invalid_request_error" {
        return Err(format!("the refusal does not name {field} as an invalid request: {error}"));
    }
    let text = refused.message.to_lowercase();
    if text.contains("panick") || text.contains("backtrace") {
        return Err(format!("the refusal carries a panic: {}", refused.message));
    }
    serves(&engine, true)?;
    Ok(outcome(refused.message, ms, peak))
}

fn gguf_case(path: &Path, expect: &str, dir: &Path) -> Result<Outcome, String> {
    let config = json!({"model": path, "threads": 1, "kv_cache_tokens": 1024});
    let (engine, ms, peak) = measured(|| Engine::new(&config));
    let refused = match engine {
        Ok(_) => return Err("the file loaded".into()),
        Err(r) => r,
    };
    if !refused.message.contains(expect) {
        return Err(format!("the error does not say {expect:?}: {}", refused.message));
    }
    let engine = Engine::new(&tiny_config(&tiny_model(dir, None)))
        .map_err(|r| format!("then a plain engine failed: {}", r.message))?;
    serves(&engine, true)?;
    Ok(outcome(refused.message, ms, peak))
}

fn request_case(body: &str, refused_naming: Option<&str>, dir: &Path) -> Result<Outcome, String> {
    let engine = Engine::new(&tiny_config(&tiny_model(dir, None)))
        .map_err(|r| format!("the engine did not load: {}", r.message))?;
    let (submitted, ms, peak) = measured(|| engine.submit(body).map(|request| request.finish()));
    let refusal = match (submitted, refused_naming) {
        (Ok(served), None) => served.map(|v| v["choices"][0]["finish_reason"].to_string())?,
        (Ok(_), Some(field)) => return Err(format!("accepted; expected a refusal naming {field}")),
        (Err(r), None) => return Err(format!("refused: {:?}: {}", r.status, r.message)),
        (Err(r), Some(field)) => {
            let error: Value = serde_json::from_str(&r.message).unwrap_or(Value::Null);
            let param = error["error"]["param"].as_str().unwrap_or_default();
            if r.status != EmberStatus::InvalidRequest || !(param.starts_with(field) || r.message.contains(field)) {
                return Err(format!("the refusal does not name {field}: {:?}: {}", r.status, r.message));
            }
            r.message
        }
    };
    serves(&engine, true)?;
    Ok(outcome(refusal, ms, peak))
}
