//! Reading a llama-server `POST /completion` body (its `tools/server/README.md`, "POST /completion") into a
//! Completions body. Every llama-server field is served, accepted without effect (it has none on ember), or
//! refused by name; a sampler ember does not have is accepted only at its off value, so a client never gets
//! output sampled otherwise than it asked without hearing so. `docs/protocol.md`, "llama-server endpoints", has
//! the same lists as tables.

use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::fields::{as_array, as_str, get, opt_bool, opt_f32, opt_u64, type_error, Object};
use super::prompt::{logit_bias, prompt_ids};
use super::settings::{Settings, RANDOM_SEED};
use super::unsupported::{check_no_effect, refuse_unsupported};
use crate::model::{Model, TokenId};

/// How ember treats each field of a `/completion` body; any other is refused by name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    /// Read here.
    Own,
    /// ember's own field, with its Completions meaning.
    Copy,
    /// Accepted, type-checked, and without effect on ember (`docs/protocol.md` says why, field by field).
    NoEffect,
}

const FIELDS: &[(&str, Field)] = &[
    ("prompt", Field::Own),
    ("n_predict", Field::Own),
    ("max_tokens", Field::Own),
    ("temperature", Field::Own),
    ("top_k", Field::Own),
    ("top_p", Field::Own),
    ("min_p", Field::Own),
    ("typical_p", Field::Own),
    ("repeat_penalty", Field::Own),
    ("repeat_last_n", Field::Own),
    ("presence_penalty", Field::Own),
    ("frequency_penalty", Field::Own),
    ("seed", Field::Own),
    ("stop", Field::Own),
    ("stream", Field::Own),
    ("n_probs", Field::Own),
    ("ignore_eos", Field::Own),
    ("logit_bias", Field::Own),
    ("grammar", Field::Own),
    ("json_schema", Field::Own),
    ("samplers", Field::Own),
    ("return_tokens", Field::Own),
    ("timings_per_token", Field::Own),
    ("response_fields", Field::Own),
    ("n_cmpl", Field::Own),
    ("n", Field::Own),
    ("n_keep", Field::Own),
    ("n_discard", Field::Own),
    ("n_indent", Field::Own),
    ("t_max_predict_ms", Field::Own),
    ("t_max_prompt_ms", Field::Own),
    ("min_keep", Field::Own),
    ("post_sampling_probs", Field::Own),
    ("lora", Field::Own),
    // Samplers ember does not have: accepted at their off values only (`refuse_on`).
    ("mirostat", Field::Own),
    ("dry_multiplier", Field::Own),
    ("xtc_probability", Field::Own),
    ("dynatemp_range", Field::Own),
    ("top_n_sigma", Field::Own),
    // Their parameters, which do nothing while the sampler is off.
    ("mirostat_tau", Field::NoEffect),
    ("mirostat_eta", Field::NoEffect),
    ("dry_base", Field::NoEffect),
    ("dry_allowed_length", Field::NoEffect),
    ("dry_penalty_last_n", Field::NoEffect),
    ("dry_sequence_breakers", Field::NoEffect),
    ("xtc_threshold", Field::NoEffect),
    ("dynatemp_exponent", Field::NoEffect),
    // llama-server's prompt cache and slots: ember's prefix cache reuses every request's prompt, and it has no
    // slots to pick.
    ("cache_prompt", Field::NoEffect),
    ("n_cache_reuse", Field::NoEffect),
    ("id_slot", Field::NoEffect),
    // ember's own, with their Completions meaning.
    ("model", Field::Copy),
    ("return_progress", Field::Copy),
    ("include_metrics", Field::Copy),
    ("priority", Field::Copy),
    ("deadline_ms", Field::Copy),
    ("speculative_decoding", Field::Copy),
    ("guided_grammar", Field::Copy),
    ("guided_regex", Field::Copy),
    ("guided_choice", Field::Copy),
];

/// The OpenAI field names the Completions body uses, with the `/completion` names a refusal should give (the
/// longer first: the first match renames).
pub(super) const FIELD_NAMES: &[(&str, &str)] = &[
    ("response_format.json_schema.schema", "json_schema"),
    ("response_format", "json_schema"),
    ("max_tokens", "n_predict"),
    ("logprobs", "n_probs"),
    ("repetition_penalty", "repeat_penalty"),
];

/// A `/completion` request, read.
pub(super) struct LlamaRequest {
    /// The Completions body.
    pub body: Value,
    /// The prompt's ids (`tokens_evaluated`, and `prompt` read back).
    pub prompt: Vec<TokenId>,
    pub settings: Settings,
    /// `n_predict` when the request bounded it: a choice that stopped short of it ran out of context
    /// (`truncated`).
    pub n_predict: Option<usize>,
    pub return_tokens: bool,
    /// `response_fields`: the final object keeps only these (paths with `/`).
    pub response_fields: Vec<String>,
    pub model: Option<String>,
}

/// Reads `body`; `max_model_len` is the most positions a request may have (a prompt plus its output).
pub(super) fn read(body: &Value, model: &Model, max_model_len: usize) -> Result<LlamaRequest, ApiError> {
    let o = body.as_object().ok_or_else(|| ApiError::malformed("the request body must be a JSON object"))?;
    let mut out = Map::new();
    for (name, value) in o.iter().filter(|(_, v)| !v.is_null()) {
        match FIELDS.iter().find(|(known, _)| known == name).map(|&(_, f)| f) {
            Some(Field::Copy) => {
                out.insert(name.clone(), value.clone());
            }
            Some(Field::NoEffect) => check_no_effect(name, value)?,
            Some(Field::Own) => {}
            None => return Err(ApiError::invalid(name.as_str(), format!("unrecognized request argument: {name}"))),
        }
    }
    refuse_unsupported(o)?;
    let prompt = prompt_ids(
        model,
        get(o, "prompt").ok_or_else(|| ApiError::invalid("prompt", "prompt is required"))?,
        "prompt",
    )?;
    let mut settings = Settings::default();

    // n_predict (or its alias max_tokens): -1 (the default) generates until the context is full. ember refuses a
    // request whose prompt and max_tokens overflow the context, where llama-server stops at the context's end:
    // max_tokens is bounded by the room left, and `truncated` says when that bound ended the output.
    let n_predict = match (opt_i64(o, "n_predict")?, opt_i64(o, "max_tokens")?) {
        (Some(n), _) => (n, "n_predict"),
        (None, Some(n)) => (n, "max_tokens"),
        (None, None) => (-1, "n_predict"),
    };
    let n_predict = match n_predict {
        (n, _) if n < 0 => None,
        (0, name) => {
            return Err(ApiError::invalid(
                name,
                format!("{name} 0 (compute the prompt into the cache, generate nothing) is not supported by ember"),
            ))
        }
        (n, _) => Some(n as usize),
    };
    settings.n_predict = n_predict.map_or(-1, |n| n as i64);
    let room = max_model_len.saturating_sub(prompt.len()).max(1);
    out.insert("max_tokens".into(), json!(n_predict.map_or(room, |n| n.min(room))));

    // Sampling. llama-server's temperature ≤ 0 is greedy, top_k ≤ 0 and top_p ≥ 1 are off.
    if let Some(t) = opt_f32(o, "temperature")? {
        settings.temperature = t.max(0.0);
    }
    if let Some(k) = opt_i64(o, "top_k")? {
        settings.top_k = k.max(0);
    }
    settings.top_p = opt_f32(o, "top_p")?.unwrap_or(settings.top_p);
    settings.min_p = opt_f32(o, "min_p")?.unwrap_or(settings.min_p);
    settings.repeat_penalty = opt_f32(o, "repeat_penalty")?.unwrap_or(settings.repeat_penalty);
    settings.presence_penalty = opt_f32(o, "presence_penalty")?.unwrap_or(0.0);
    settings.frequency_penalty = opt_f32(o, "frequency_penalty")?.unwrap_or(0.0);
    read_repeat_last_n(o, &mut settings)?;
    out.insert("temperature".into(), json!(settings.temperature));
    out.insert("top_k".into(), json!(if settings.top_k == 0 { -1 } else { settings.top_k }));
    out.insert("top_p".into(), json!(settings.top_p));
    out.insert("min_p".into(), json!(settings.min_p));
    out.insert("repetition_penalty".into(), json!(settings.repeat_penalty));
    out.insert("presence_penalty".into(), json!(settings.presence_penalty));
    out.insert("frequency_penalty".into(), json!(settings.frequency_penalty));
    if let Some(seed) = opt_i64_or_u64(o, "seed")? {
        // -1, and llama-server's own 0xFFFFFFFF, draw a random seed.
        if seed != -1 && seed != RANDOM_SEED as i128 {
            out.insert("seed".into(), json!(seed));
            settings.seed = seed as u64;
        }
    }
    if let Some(value) = get(o, "logit_bias") {
        let applied = logit_bias(model, value)?;
        if !applied.is_empty() {
            // The Completions body's shape: `{"id": bias}`.
            let body: Map<String, Value> = applied.iter().map(|&(t, b)| (t.to_string(), json!(b))).collect();
            out.insert("logit_bias".into(), Value::Object(body));
        }
        settings.logit_bias = applied;
    }

    settings.stop = read_stop(o)?;
    if !settings.stop.is_empty() {
        out.insert("stop".into(), json!(settings.stop));
    }
    settings.ignore_eos = opt_bool(o, "ignore_eos")?.unwrap_or(false);
    out.insert("ignore_eos".into(), json!(settings.ignore_eos));
    settings.stream = opt_bool(o, "stream")?.unwrap_or(false);
    if settings.stream {
        // The summary (`tokens_predicted`, `timings`) comes with the usage chunk, the stream's last.
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    settings.n_probs = opt_u64(o, "n_probs")?.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
    if settings.n_probs > 0 {
        out.insert("logprobs".into(), json!(settings.n_probs));
    }
    settings.timings_per_token = opt_bool(o, "timings_per_token")?.unwrap_or(false);
    settings.n_keep = opt_i64(o, "n_keep")?.unwrap_or(0);
    settings.n_discard = opt_i64(o, "n_discard")?.unwrap_or(0);
    read_structured(o, &mut out)?;

    out.insert("prompt".into(), json!(prompt));
    Ok(LlamaRequest {
        body: Value::Object(out),
        prompt,
        settings,
        n_predict,
        return_tokens: opt_bool(o, "return_tokens")?.unwrap_or(false),
        response_fields: read_response_fields(o)?,
        model: get(o, "model").and_then(Value::as_str).map(str::to_owned),
    })
}

/// An integer field that may be negative.
fn opt_i64(o: &Object, name: &str) -> Result<Option<i64>, ApiError> {
    get(o, name).map(|v| v.as_i64().ok_or_else(|| type_error(name, "an integer", v))).transpose()
}

/// An integer in `i64` or `u64` range (a seed).
fn opt_i64_or_u64(o: &Object, name: &str) -> Result<Option<i128>, ApiError> {
    get(o, name)
        .map(|v| {
            v.as_i64().map(i128::from).or(v.as_u64().map(i128::from)).ok_or_else(|| type_error(name, "an integer", v))
        })
        .transpose()
}

/// `repeat_last_n`: how many recent tokens the penalties look at. ember's repetition penalty looks at the whole
/// prompt and output (-1, llama-server's "the whole context"), and `0` turns every penalty off, as in
/// llama-server; any other window is refused while a penalty is on (it would change which tokens are penalized).
fn read_repeat_last_n(o: &Object, settings: &mut Settings) -> Result<(), ApiError> {
    let Some(n) = opt_i64(o, "repeat_last_n")? else { return Ok(()) };
    let penalized =
        settings.repeat_penalty != 1.0 || settings.presence_penalty != 0.0 || settings.frequency_penalty != 0.0;
    match n {
        -1 => {}
        0 => {
            settings.repeat_last_n = 0;
            settings.repeat_penalty = 1.0;
            settings.presence_penalty = 0.0;
            settings.frequency_penalty = 0.0;
        }
        _ if !penalized => {}
        _ => {
            return Err(ApiError::invalid(
                "repeat_last_n",
                format!(
                    "repeat_last_n {n} is not supported by ember with a penalty on: its repetition penalty looks at \
                     the whole prompt and output (-1), and 0 turns the penalties off"
                ),
            ))
        }
    }
    Ok(())
}

/// `stop`: an array of strings (a lone string too); llama-server drops empty ones.
fn read_stop(o: &Object) -> Result<Vec<String>, ApiError> {
    let list = match get(o, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| Ok(as_str(v, &format!("stop[{i}]"))?.to_owned()))
            .collect::<Result<Vec<_>, ApiError>>()?,
        Some(other) => return Err(type_error("stop", "an array of strings", other)),
    };
    Ok(list.into_iter().filter(|s| !s.is_empty()).collect())
}

/// `json_schema` (a JSON schema; `{}` is any JSON) becomes `response_format`.
fn read_structured(o: &Object, out: &mut Map<String, Value>) -> Result<(), ApiError> {
    let Some(schema) = get(o, "json_schema") else { return Ok(()) };
    if !schema.is_object() && !schema.is_boolean() {
        return Err(type_error("json_schema", "a JSON schema (an object)", schema));
    }
    out.insert(
        "response_format".into(),
        json!({"type": "json_schema", "json_schema": {"name": "json_schema", "schema": schema}}),
    );
    Ok(())
}

/// `response_fields`: the paths (`a/b`) the final object keeps.
fn read_response_fields(o: &Object) -> Result<Vec<String>, ApiError> {
    let Some(list) = get(o, "response_fields") else { return Ok(Vec::new()) };
    as_array(list, "response_fields")?
        .iter()
        .enumerate()
        .map(|(i, v)| Ok(as_str(v, &format!("response_fields[{i}]"))?.to_owned()))
        .collect()
}
