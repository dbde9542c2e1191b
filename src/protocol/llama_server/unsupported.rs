//! The `/completion` fields ember cannot honour but at their off values (samplers it does not have, features it
//! lacks), each refused by name with what ember does instead, and the fields it accepts without effect, whose
//! types are still checked. A client sending llama-server's full parameter set (its web UI does) is served as
//! long as what it turns on, ember has.

use serde_json::Value;

use super::super::error::ApiError;
use super::super::fields::{as_array, as_str, get, opt_bool, type_error, Object};

/// llama-server's default sampler orders (its README and `common.h`, past and present), as arrays and as
/// `--sampling-seq` letters: a request that sends one asks for the default, which ember's order stands for.
const DEFAULT_SAMPLERS: &[&[&str]] = &[
    &["dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
    &["dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
    &["penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
    &["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
];
const DEFAULT_SAMPLER_SEQS: &[&str] = &["dkypmxt", "dskypmxt", "edkypmxt", "edskypmxt"];

/// The fields whose non-default values ember cannot honour: each refused by name, with what ember does instead.
pub(super) fn refuse_unsupported(o: &Object) -> Result<(), ApiError> {
    let number = |name: &str, off: &dyn Fn(f64) -> bool, why: &str| -> Result<(), ApiError> {
        match get(o, name) {
            None => Ok(()),
            Some(v) => match v.as_f64() {
                Some(x) if off(x) => Ok(()),
                Some(_) => Err(ApiError::invalid(name, format!("{name} is not supported by ember: {why}"))),
                None => Err(type_error(name, "a number", v)),
            },
        }
    };
    let no_sampler = "ember does not have this sampler (leave it at its off value)";
    number("mirostat", &|x| x == 0.0, no_sampler)?;
    number("dry_multiplier", &|x| x == 0.0, no_sampler)?;
    number("xtc_probability", &|x| x <= 0.0, no_sampler)?;
    number("dynatemp_range", &|x| x <= 0.0, no_sampler)?;
    number("top_n_sigma", &|x| x <= 0.0, no_sampler)?;
    number("typical_p", &|x| x >= 1.0, "ember does not have locally typical sampling (leave typical_p at 1)")?;
    number("min_keep", &|x| x == 0.0, "ember's top-p and min-p keep at least one token, and no minimum beyond it")?;
    number("n_indent", &|x| x == 0.0, "ember does not indent the output")?;
    number("n_cmpl", &|x| x == 1.0, "one completion per /completion request (/v1/completions has n)")?;
    number("n", &|x| x == 1.0, "one completion per /completion request (/v1/completions has n)")?;
    number(
        "t_max_predict_ms",
        &|x| x <= 0.0,
        "ember's time limit is deadline_ms, counted from submission, which ends the output with stop_type \"limit\"",
    )?;
    number("t_max_prompt_ms", &|x| x <= 0.0, "ember has no time limit on computing the prompt")?;
    if opt_bool(o, "post_sampling_probs")? == Some(true) {
        return Err(ApiError::invalid(
            "post_sampling_probs",
            "post_sampling_probs is not supported by ember: n_probs gives the model's probabilities before sampling",
        ));
    }
    if let Some(lora) = get(o, "lora") {
        if !as_array(lora, "lora")?.is_empty() {
            return Err(ApiError::invalid("lora", "lora is not supported by ember: it serves no adapters"));
        }
    }
    if let Some(grammar) = get(o, "grammar") {
        if !as_str(grammar, "grammar")?.is_empty() {
            return Err(ApiError::invalid(
                "grammar",
                "grammar (llama.cpp's GBNF) is not supported by ember: send json_schema, or ember's guided_grammar \
                 (a Lark grammar, llguidance's dialect)",
            ));
        }
    }
    if let Some(samplers) = get(o, "samplers") {
        let default = match samplers {
            Value::String(seq) => DEFAULT_SAMPLER_SEQS.contains(&seq.as_str()),
            Value::Array(list) => {
                let names: Option<Vec<&str>> = list.iter().map(Value::as_str).collect();
                names.is_some_and(|n| DEFAULT_SAMPLERS.contains(&n.as_slice()))
            }
            other => return Err(type_error("samplers", "an array of sampler names, or a string", other)),
        };
        if !default {
            return Err(ApiError::invalid(
                "samplers",
                "samplers other than llama-server's default order are not supported by ember: its order is fixed \
                 (penalties, top_k, temperature, top_p, min_p)",
            ));
        }
    }
    Ok(())
}

/// A field without effect on ember: its type is still checked, so that a typo'd value is heard of.
pub(super) fn check_no_effect(name: &str, value: &Value) -> Result<(), ApiError> {
    let fits = match name {
        "cache_prompt" => value.is_boolean(),
        "dry_sequence_breakers" => value.as_array().is_some_and(|l| l.iter().all(Value::is_string)),
        "dry_allowed_length" | "dry_penalty_last_n" | "n_cache_reuse" | "id_slot" => value.is_i64(),
        _ => value.is_number(),
    };
    match fits {
        true => Ok(()),
        false => Err(type_error(name, "of llama-server's type for it", value)),
    }
}
