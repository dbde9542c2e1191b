//! What the embeddings and rerank bodies share: a JSON object whose fields are all known, `model` and `user`
//! (strings with no effect on the output), and ember's scheduling and reporting fields, read as chat reads them:
//! `priority`, `deadline_ms` and `include_metrics`.

use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::error::ApiError;
use crate::engine::request::MAX_DEADLINE_MS;

/// The fields every encoder body accepts besides its own.
const SHARED_FIELDS: [&str; 5] = ["model", "user", "priority", "deadline_ms", "include_metrics"];

/// `json` as an object whose every field is one of `fields` or of the shared ones; any other is refused by name
/// (`what`: "an embeddings request").
pub(super) fn known_object(json: &str, fields: &[&str], what: &str) -> Result<Map<String, Value>, ApiError> {
    let body: Value =
        serde_json::from_str(json).map_err(|e| ApiError::malformed(format!("the body is not JSON: {e}")))?;
    let Value::Object(body) = body else { return Err(ApiError::malformed("the body is not a JSON object")) };
    let known = |k: &str| fields.contains(&k) || SHARED_FIELDS.contains(&k);
    if let Some(unknown) = body.keys().find(|k| !known(k)) {
        return Err(ApiError::invalid(unknown.as_str(), format!("{unknown}: not a field of {what}")));
    }
    Ok(body)
}

/// The shared fields of one request, read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct SharedFields {
    /// `priority`: a lower value first (as chat's); 0 when absent.
    pub priority: i32,
    /// `deadline_ms` counted from `arrival`, on the monotonic clock.
    pub deadline: Option<Instant>,
    /// `include_metrics`: the request's half of the metrics gate (`docs/per_request_metrics.md`).
    pub include_metrics: bool,
}

/// Reads the shared fields of `body` (after checking that `model` and `user` are strings when given); the
/// deadline counts from `arrival`, when the call began. A field set to `null` is absent, as in a chat body.
pub(super) fn shared_fields(body: &Map<String, Value>, arrival: Instant) -> Result<SharedFields, ApiError> {
    let given = |key: &str| body.get(key).filter(|v| !v.is_null());
    for key in ["model", "user"] {
        if given(key).is_some_and(|v| !v.is_string()) {
            return Err(ApiError::invalid(key, format!("{key}: a string")));
        }
    }
    let priority = match given("priority") {
        None => 0,
        Some(v) => v
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| ApiError::invalid("priority", "priority: an integer in the 32-bit range"))?,
    };
    // The range and its message are chat's (`engine::request`): a week at most.
    let deadline = match given("deadline_ms") {
        None => None,
        Some(v) => {
            let ms = v.as_u64().filter(|ms| (1..=MAX_DEADLINE_MS).contains(ms)).ok_or_else(|| {
                ApiError::invalid("deadline_ms", format!("deadline_ms must be in 1..={MAX_DEADLINE_MS}, got {v}"))
            })?;
            Some(arrival + Duration::from_millis(ms))
        }
    };
    let include_metrics = match given("include_metrics") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("include_metrics", "include_metrics: true or false"))?,
    };
    Ok(SharedFields { priority, deadline, include_metrics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(body: Value) -> Result<SharedFields, Option<String>> {
        let Value::Object(body) = body else { unreachable!("the tests pass objects") };
        shared_fields(&body, Instant::now()).map_err(|e| e.param)
    }

    #[test]
    fn absent_and_null_fields_take_their_defaults() {
        for body in [json!({}), json!({"priority": null, "deadline_ms": null, "include_metrics": null})] {
            let f = read(body).unwrap();
            assert_eq!((f.priority, f.deadline, f.include_metrics), (0, None, false));
        }
    }

    #[test]
    fn a_deadline_counts_from_arrival() {
        let Value::Object(body) = json!({"deadline_ms": 1500, "include_metrics": true, "priority": -3}) else {
            unreachable!()
        };
        let arrival = Instant::now();
        let f = shared_fields(&body, arrival).unwrap();
        assert_eq!(f.deadline, Some(arrival + Duration::from_millis(1500)));
        assert_eq!((f.priority, f.include_metrics), (-3, true));
        assert!(read(json!({"deadline_ms": MAX_DEADLINE_MS})).is_ok());
    }

    #[test]
    fn refusals_name_their_field() {
        for (body, field) in [
            (json!({"deadline_ms": 0}), "deadline_ms"),
            (json!({"deadline_ms": MAX_DEADLINE_MS + 1}), "deadline_ms"),
            (json!({"deadline_ms": -1}), "deadline_ms"),
            (json!({"deadline_ms": 1.5}), "deadline_ms"),
            (json!({"deadline_ms": "10"}), "deadline_ms"),
            (json!({"include_metrics": 1}), "include_metrics"),
            (json!({"include_metrics": "true"}), "include_metrics"),
            (json!({"priority": 1u64 << 31}), "priority"),
            (json!({"model": 7}), "model"),
            (json!({"user": ["u"]}), "user"),
        ] {
            assert_eq!(read(body.clone()).unwrap_err().as_deref(), Some(field), "{body}");
        }
    }
}
