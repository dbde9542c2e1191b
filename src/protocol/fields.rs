//! Typed reads of request fields from a parsed JSON object. Every failure names the field as the client wrote it
//! (`"temperature"`, `"messages[1].content"`), which serde-derived parsing cannot do.
//!
//! A field set to JSON `null` reads as absent: OpenAI's own clients send `null` for options left unset.

use serde_json::{Map, Value};

use super::error::ApiError;

/// A request object's fields.
pub(crate) type Object = Map<String, Value>;

/// `object[name]`, with `null` read as absent.
pub(crate) fn get<'a>(object: &'a Object, name: &str) -> Option<&'a Value> {
    object.get(name).filter(|v| !v.is_null())
}

/// "must be {expected}, got {what value is}", naming `param`. A non-negative integer refused where an integer is
/// expected is past the largest the field takes (an `i64`, a token id's `u32`): the message says so with its
/// value, rather than "must be an integer, got an integer".
pub(crate) fn type_error(param: &str, expected: &str, value: &Value) -> ApiError {
    if let Some(n) = value.as_u64().filter(|_| expected.contains("integer")) {
        return ApiError::invalid(param, format!("{param} must be {expected}, got {n}, larger than it can be"));
    }
    ApiError::invalid(param, format!("{param} must be {expected}, got {}", describe(value)))
}

/// What a JSON value is, for error messages.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a floating-point number",
        Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|i| i < 0) => "a negative integer",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn as_str<'a>(value: &'a Value, param: &str) -> Result<&'a str, ApiError> {
    value.as_str().ok_or_else(|| type_error(param, "a string", value))
}

pub(crate) fn as_object<'a>(value: &'a Value, param: &str) -> Result<&'a Object, ApiError> {
    value.as_object().ok_or_else(|| type_error(param, "an object", value))
}

pub(crate) fn as_array<'a>(value: &'a Value, param: &str) -> Result<&'a [Value], ApiError> {
    value.as_array().map(Vec::as_slice).ok_or_else(|| type_error(param, "an array", value))
}

/// A non-negative integer. A number written with a fraction or exponent (`2.0`, `1e3`) is refused rather than
/// converted: JSON parsers disagree on whether those are integers.
pub(crate) fn as_u64(value: &Value, param: &str) -> Result<u64, ApiError> {
    value.as_u64().ok_or_else(|| type_error(param, "a non-negative integer", value))
}

pub(crate) fn opt_bool(object: &Object, name: &str) -> Result<Option<bool>, ApiError> {
    get(object, name).map(|v| v.as_bool().ok_or_else(|| type_error(name, "a boolean", v))).transpose()
}

pub(crate) fn opt_str<'a>(object: &'a Object, name: &str) -> Result<Option<&'a str>, ApiError> {
    get(object, name).map(|v| as_str(v, name)).transpose()
}

pub(crate) fn opt_u64(object: &Object, name: &str) -> Result<Option<u64>, ApiError> {
    get(object, name).map(|v| as_u64(v, name)).transpose()
}

/// A number, narrowed to `f32` (the sampler's precision). A value too large for `f32` becomes infinite and is
/// then refused by the range check of its field.
pub(crate) fn opt_f32(object: &Object, name: &str) -> Result<Option<f32>, ApiError> {
    get(object, name).map(|v| v.as_f64().map(|x| x as f32).ok_or_else(|| type_error(name, "a number", v))).transpose()
}

/// An integer in `i64` or `u64` range, as its 64 bits: a negative value in two's complement. OpenAI's `seed` is a
/// signed 64-bit integer, and the sampler's seed is `u64`. Distinct `i64` seeds stay distinct; a negative seed is
/// the same seed as its two's-complement `u64` (`-1` and `18446744073709551615`).
pub(crate) fn opt_integer_bits(object: &Object, name: &str) -> Result<Option<u64>, ApiError> {
    get(object, name)
        .map(|v| v.as_u64().or_else(|| v.as_i64().map(|i| i as u64)).ok_or_else(|| type_error(name, "an integer", v)))
        .transpose()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(v: Value) -> Object {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn null_is_absent_and_wrong_types_name_the_field() {
        let o = object(json!({"a": null, "b": "x", "c": 2.5, "d": -3, "e": true}));
        assert_eq!(opt_bool(&o, "a"), Ok(None));
        assert_eq!(opt_bool(&o, "missing"), Ok(None));
        assert_eq!(opt_str(&o, "b"), Ok(Some("x")));
        let e = opt_bool(&o, "b").unwrap_err();
        assert_eq!((e.param.as_deref(), e.message.as_str()), (Some("b"), "b must be a boolean, got a string"));
        assert_eq!(
            opt_u64(&o, "c").unwrap_err().message,
            "c must be a non-negative integer, got a floating-point number"
        );
        assert_eq!(opt_u64(&o, "d").unwrap_err().message, "d must be a non-negative integer, got a negative integer");
        assert_eq!(opt_f32(&o, "d"), Ok(Some(-3.0)));
        let past_i64 = json!(9_223_372_036_854_775_808u64);
        assert_eq!(
            type_error("n", "an integer", &past_i64).message,
            "n must be an integer, got 9223372036854775808, larger than it can be"
        );
        assert_eq!(type_error("n", "a string", &past_i64).message, "n must be a string, got an integer");
        assert_eq!(opt_f32(&o, "e").unwrap_err().param.as_deref(), Some("e"));
    }

    #[test]
    fn huge_numbers_become_infinite_f32_for_the_range_check_to_refuse() {
        let o = object(json!({"t": 1e300}));
        assert_eq!(opt_f32(&o, "t"), Ok(Some(f32::INFINITY)));
    }

    #[test]
    fn integers_may_be_signed_or_unsigned() {
        let o = object(json!({"a": -1, "b": u64::MAX, "c": 1.5}));
        assert_eq!(opt_integer_bits(&o, "a"), Ok(Some(u64::MAX)));
        assert_eq!(opt_integer_bits(&o, "b"), Ok(Some(u64::MAX)));
        assert_eq!(opt_integer_bits(&o, "c").unwrap_err().param.as_deref(), Some("c"));
    }
}
