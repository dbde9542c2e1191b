//! The token-valued fields of a `/completion` body, read into token ids with the model's tokenizer: `prompt` (a
//! string, token ids, ids and strings mixed, or `{"prompt_string"}`) and `logit_bias` (ids or strings, as an
//! array of pairs or an object). ember reads them here rather than in its Completions parser because llama-server
//! accepts shapes that parser does not (a mixed prompt, a string bias), and because the `/completion` answer
//! repeats the prompt as its tokens read back.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::error::ApiError;
use super::super::fields::{as_array, as_object, as_str, get, type_error};
use super::super::tokenize::tokenize_text;
use crate::model::{Model, TokenId};

/// The ids of `prompt`. Text is tokenized as llama-server does it (control tokens' texts parsed, BOS first when
/// the model asks for one and the text comes first), which is also how ember tokenizes a Completions prompt.
/// Several prompts in one request (an array of strings, or of arrays) are refused: llama-server answers them
/// with an array of results, which ember's `/completion` does not write.
pub(super) fn prompt_ids(model: &Model, prompt: &Value, param: &str) -> Result<Vec<TokenId>, ApiError> {
    match prompt {
        Value::String(text) => Ok(tokenize_text(model, text, true, true)),
        Value::Object(o) => {
            if get(o, "multimodal_data").and_then(Value::as_array).is_some_and(|d| !d.is_empty()) {
                return Err(ApiError::invalid(
                    format!("{param}.multimodal_data"),
                    "multimodal_data is not supported by ember: it serves text models only",
                ));
            }
            let text = get(o, "prompt_string")
                .ok_or_else(|| ApiError::invalid(format!("{param}.prompt_string"), "prompt_string is required"))?;
            Ok(tokenize_text(model, as_str(text, &format!("{param}.prompt_string"))?, true, true))
        }
        Value::Array(list) => {
            if list.is_empty() {
                return Err(ApiError::invalid(param, format!("{param} must not be an empty array")));
            }
            // One prompt of ids and strings (at least one id: an array of strings only is several prompts).
            let flat = list.iter().all(|v| v.is_number() || v.is_string());
            if flat && list.iter().any(Value::is_number) {
                return mixed(model, list, param);
            }
            if list.len() > 1 {
                return Err(ApiError::invalid(
                    param,
                    format!(
                        "{param} holds {} prompts: ember's /completion takes one prompt per request (send one \
                         request each, or use /v1/completions, which answers several)",
                        list.len()
                    ),
                ));
            }
            prompt_ids(model, &list[0], &format!("{param}[0]"))
        }
        other => Err(type_error(param, "a string, an array of token ids and strings, or an object", other)),
    }
}

/// A prompt of ids and strings: each string tokenized in place, BOS before the first only when it comes first
/// (llama-server's `tokenize_mixed`).
fn mixed(model: &Model, list: &[Value], param: &str) -> Result<Vec<TokenId>, ApiError> {
    let mut ids = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        match v {
            Value::String(text) => ids.extend(tokenize_text(model, text, i == 0, true)),
            other => ids.push(token_id(other, &format!("{param}[{i}]"))?),
        }
    }
    Ok(ids)
}

/// A token id (whether it is in the vocabulary is the engine's to check, naming the field).
fn token_id(value: &Value, param: &str) -> Result<TokenId, ApiError> {
    value
        .as_u64()
        .and_then(|id| TokenId::try_from(id).ok())
        .ok_or_else(|| type_error(param, "a token id (a non-negative integer)", value))
}

/// The bias that stands for llama-server's `false` ("never this token"): ember's lowest, which no other
/// setting can outweigh.
pub(super) const BANNED: f32 = -100.0;

/// `logit_bias` as `(token, bias)` pairs, in id order. llama-server takes `[[token, bias], ...]` or
/// `{"token": bias}`, a token being an id or a text (each of its tokens gets the bias), a bias a number or
/// `false`. Biases of one token add up, as llama-server adds them to the logit in turn; `false` wins over any
/// number.
pub(super) fn logit_bias(model: &Model, value: &Value) -> Result<Vec<(TokenId, f32)>, ApiError> {
    let mut pairs: Vec<(Vec<TokenId>, Option<f32>)> = Vec::new();
    let read_bias = |bias: &Value, param: &str| match bias {
        Value::Bool(false) => Ok(None),
        other => other.as_f64().map(|b| Some(b as f32)).ok_or_else(|| type_error(param, "a number or false", other)),
    };
    let tokens_of = |key: &Value, param: &str| -> Result<Vec<TokenId>, ApiError> {
        match key {
            Value::String(text) => match text.parse::<TokenId>() {
                Ok(id) => Ok(vec![id]),
                Err(_) => Ok(tokenize_text(model, text, false, false)),
            },
            other => Ok(vec![token_id(other, param)?]),
        }
    };
    match value {
        Value::Array(list) => {
            for (i, pair) in list.iter().enumerate() {
                let param = format!("logit_bias[{i}]");
                match as_array(pair, &param)? {
                    [key, bias] => {
                        pairs.push((tokens_of(key, &format!("{param}[0]"))?, read_bias(bias, &format!("{param}[1]"))?));
                    }
                    _ => return Err(ApiError::invalid(&param, format!("{param} must be a pair [token, bias]"))),
                }
            }
        }
        other => {
            for (key, bias) in as_object(other, "logit_bias")? {
                let param = format!("logit_bias.{key}");
                pairs.push((tokens_of(&Value::String(key.clone()), &param)?, read_bias(bias, &param)?));
            }
        }
    }
    // Summed per token, in id order (`None`: banned).
    let mut sums: BTreeMap<TokenId, Option<f32>> = BTreeMap::new();
    for (tokens, bias) in pairs {
        for token in tokens {
            let sum = sums.entry(token).or_insert(Some(0.0));
            *sum = sum.zip(bias).map(|(a, b)| a + b);
        }
    }
    Ok(sums.into_iter().map(|(t, b)| (t, b.unwrap_or(BANNED))).collect())
}
