//! The structured-output fields: OpenAI's `response_format` and vLLM's `guided_json`, `guided_regex`,
//! `guided_choice` and `guided_grammar`, read into the engine's [`GuidedRequest`]. Shapes and types are checked
//! here; whether a schema, regex or grammar compiles is the engine's to say (at submit, naming the same field).

use serde_json::Value;

use super::error::ApiError;
use super::fields::{as_array, as_object, as_str, get, opt_bool, opt_str, type_error, Object};
use crate::engine::guided::{GuidedRequest, GuidedSpec};

/// The field a compile error of each kind names.
const SCHEMA_FIELD: &str = "response_format.json_schema.schema";

/// The request's constraint, if any. At most one of the fields may ask for one (`response_format` of type
/// `text` asks for none), as vLLM requires: two constraints at once have no meaning.
pub(crate) fn parse_guided(o: &Object) -> Result<Option<GuidedRequest>, ApiError> {
    let mut found: Vec<GuidedRequest> = Vec::new();
    if let Some(format) = get(o, "response_format") {
        found.extend(parse_response_format(format)?);
    }
    if let Some(v) = get(o, "guided_json") {
        let schema = match v {
            // vLLM takes the schema as an object or as its JSON text.
            Value::String(text) => serde_json::from_str(text).map_err(|e| {
                ApiError::invalid("guided_json", format!("guided_json is a string that is not JSON: {e}"))
            })?,
            Value::Object(_) | Value::Bool(_) => v.clone(),
            other => return Err(type_error("guided_json", "a JSON schema (an object, or its JSON text)", other)),
        };
        found.push(GuidedRequest::new(GuidedSpec::JsonSchema(schema), "guided_json"));
    }
    if let Some(v) = get(o, "guided_regex") {
        found.push(GuidedRequest::new(GuidedSpec::Regex(as_str(v, "guided_regex")?.to_owned()), "guided_regex"));
    }
    if let Some(v) = get(o, "guided_choice") {
        let choices = as_array(v, "guided_choice")?
            .iter()
            .enumerate()
            .map(|(i, c)| Ok(as_str(c, &format!("guided_choice[{i}]"))?.to_owned()))
            .collect::<Result<Vec<_>, ApiError>>()?;
        found.push(GuidedRequest::new(GuidedSpec::Choice(choices), "guided_choice"));
    }
    if let Some(v) = get(o, "guided_grammar") {
        let grammar = as_str(v, "guided_grammar")?.to_owned();
        found.push(GuidedRequest::new(GuidedSpec::Lark(grammar), "guided_grammar"));
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|g| g.field.split('.').next().unwrap_or(g.field)).collect();
        return Err(ApiError::invalid(
            found[1].field.split('.').next().unwrap_or(found[1].field),
            format!("only one structured-output constraint per request, got {}", names.join(" and ")),
        ));
    }
    Ok(found.pop())
}

/// `response_format`: `{"type": "text"}` (no constraint), `{"type": "json_object"}`, or
/// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}}`. Any other key is an
/// error rather than ignored.
fn parse_response_format(value: &Value) -> Result<Option<GuidedRequest>, ApiError> {
    let format = as_object(value, "response_format")?;
    let kind = match get(format, "type") {
        Some(t) => as_str(t, "response_format.type")?,
        None => return Err(ApiError::invalid("response_format.type", "response_format.type is required")),
    };
    let allowed: &[&str] = match kind {
        "json_schema" => &["type", "json_schema"],
        "text" | "json_object" => &["type"],
        other => {
            return Err(ApiError::invalid(
                "response_format.type",
                format!("response_format.type must be \"text\", \"json_object\" or \"json_schema\", got \"{other}\""),
            ))
        }
    };
    unknown_keys(format, allowed, "response_format")?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(GuidedRequest::new(GuidedSpec::JsonObject, "response_format"))),
        _ => {
            let Some(js) = get(format, "json_schema") else {
                return Err(ApiError::invalid(
                    "response_format.json_schema",
                    "response_format.json_schema is required when response_format.type is \"json_schema\"",
                ));
            };
            let js = as_object(js, "response_format.json_schema")?;
            unknown_keys(js, &["name", "schema", "strict", "description"], "response_format.json_schema")?;
            match opt_str(js, "name").map_err(|e| renamed(e, "response_format.json_schema.name"))? {
                Some(_) => {}
                None => {
                    return Err(ApiError::invalid(
                        "response_format.json_schema.name",
                        "response_format.json_schema.name is required",
                    ))
                }
            }
            opt_str(js, "description").map_err(|e| renamed(e, "response_format.json_schema.description"))?;
            // `strict: false` would allow output outside the schema; ember's output always matches it, which
            // satisfies either setting.
            opt_bool(js, "strict").map_err(|e| renamed(e, "response_format.json_schema.strict"))?;
            let Some(schema) = get(js, "schema") else {
                return Err(ApiError::invalid(SCHEMA_FIELD, format!("{SCHEMA_FIELD} is required")));
            };
            if !schema.is_object() && !schema.is_boolean() {
                return Err(type_error(SCHEMA_FIELD, "a JSON schema (an object)", schema));
            }
            Ok(Some(GuidedRequest::new(GuidedSpec::JsonSchema(schema.clone()), SCHEMA_FIELD)))
        }
    }
}

/// A key of `object` not in `allowed` is an error naming `prefix.key`.
fn unknown_keys(object: &Object, allowed: &[&str], prefix: &str) -> Result<(), ApiError> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::invalid(format!("{prefix}.{k}"), format!("unrecognized argument: {prefix}.{k}"))),
        None => Ok(()),
    }
}

/// The type errors of `fields.rs` name the key alone; inside `response_format` the full path is what a client
/// can find.
fn renamed(e: ApiError, param: &str) -> ApiError {
    let short = e.param.clone().unwrap_or_default();
    ApiError { message: e.message.replacen(&short, param, 1), param: Some(param.to_owned()), ..e }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value) -> Result<Option<GuidedRequest>, ApiError> {
        parse_guided(body.as_object().unwrap())
    }

    fn param(body: Value) -> String {
        parse(body).unwrap_err().param.unwrap()
    }

    #[test]
    fn each_field_gives_its_constraint() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let format = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}});
        let g = parse(json!({ "response_format": format })).unwrap().unwrap();
        assert_eq!(g, GuidedRequest::new(GuidedSpec::JsonSchema(schema.clone()), SCHEMA_FIELD));
        let g = parse(json!({"response_format": {"type": "json_object"}})).unwrap().unwrap();
        assert_eq!(g.spec, GuidedSpec::JsonObject);
        assert_eq!(parse(json!({"response_format": {"type": "text"}})).unwrap(), None);
        assert_eq!(
            parse(json!({"guided_json": schema.to_string()})).unwrap().unwrap().spec,
            GuidedSpec::JsonSchema(schema)
        );
        assert_eq!(parse(json!({"guided_regex": "a+"})).unwrap().unwrap().spec, GuidedSpec::Regex("a+".into()));
        let choice = parse(json!({"guided_choice": ["yes", "no"]})).unwrap().unwrap();
        assert_eq!((choice.spec, choice.field), (GuidedSpec::Choice(vec!["yes".into(), "no".into()]), "guided_choice"));
        assert_eq!(parse(json!({"guided_grammar": "start: \"x\""})).unwrap().unwrap().field, "guided_grammar");
        assert_eq!(parse(json!({"guided_regex": null})).unwrap(), None, "null is absent");
    }

    #[test]
    fn bad_shapes_name_their_field() {
        assert_eq!(param(json!({"response_format": "json"})), "response_format");
        assert_eq!(param(json!({"response_format": {}})), "response_format.type");
        assert_eq!(param(json!({"response_format": {"type": "xml"}})), "response_format.type");
        assert_eq!(param(json!({"response_format": {"type": "json_object", "schema": {}}})), "response_format.schema");
        assert_eq!(param(json!({"response_format": {"type": "json_schema"}})), "response_format.json_schema");
        let js = |v: Value| json!({"response_format": {"type": "json_schema", "json_schema": v}});
        assert_eq!(param(js(json!({"schema": {}}))), "response_format.json_schema.name");
        assert_eq!(param(js(json!({"name": 1, "schema": {}}))), "response_format.json_schema.name");
        assert_eq!(param(js(json!({"name": "x"}))), SCHEMA_FIELD);
        assert_eq!(param(js(json!({"name": "x", "schema": [1]}))), SCHEMA_FIELD);
        assert_eq!(
            param(js(json!({"name": "x", "schema": {}, "strict": "yes"}))),
            "response_format.json_schema.strict"
        );
        assert_eq!(param(js(json!({"name": "x", "schema": {}, "extra": 1}))), "response_format.json_schema.extra");
        assert_eq!(param(json!({"guided_json": "{not json"})), "guided_json");
        assert_eq!(param(json!({"guided_json": 3})), "guided_json");
        assert_eq!(param(json!({"guided_regex": 3})), "guided_regex");
        assert_eq!(param(json!({"guided_choice": ["a", 1]})), "guided_choice[1]");
        assert_eq!(param(json!({"guided_grammar": ["x"]})), "guided_grammar");
        let two = parse(json!({"response_format": {"type": "json_object"}, "guided_regex": "a"})).unwrap_err();
        assert_eq!(two.param.as_deref(), Some("guided_regex"));
        assert!(two.message.contains("response_format and guided_regex"), "{}", two.message);
    }
}
