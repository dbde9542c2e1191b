//! What the embeddings and rerank bodies share: a JSON object whose fields are all known, ember's `priority`, and
//! `model` and `user` (strings with no effect on the output).

use serde_json::{Map, Value};

use super::error::ApiError;

/// `json` as an object whose every field is one of `fields`; any other is refused by name (`what`: "an
/// embeddings request").
pub(super) fn known_object(json: &str, fields: &[&str], what: &str) -> Result<Map<String, Value>, ApiError> {
    let body: Value =
        serde_json::from_str(json).map_err(|e| ApiError::malformed(format!("the body is not JSON: {e}")))?;
    let Value::Object(body) = body else { return Err(ApiError::malformed("the body is not a JSON object")) };
    if let Some(unknown) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid(unknown.as_str(), format!("{unknown}: not a field of {what}")));
    }
    Ok(body)
}

/// The request's `priority` (0 when absent), after checking that `model` and `user` are strings when given.
pub(super) fn priority_and_names(body: &Map<String, Value>) -> Result<i32, ApiError> {
    for key in ["model", "user"] {
        if body.get(key).is_some_and(|v| !v.is_null() && !v.is_string()) {
            return Err(ApiError::invalid(key, format!("{key}: a string")));
        }
    }
    match body.get("priority").filter(|v| !v.is_null()) {
        None => Ok(0),
        Some(v) => v
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| ApiError::invalid("priority", "priority: an integer in the 32-bit range")),
    }
}
