//! The tools' `parameters` schemas inside the constraint that holds them all, and which tool a refusal of that
//! constraint is due to.
//!
//! A tool's schema is its own document: its local `$ref`s (`#/$defs/x`) point into itself. Placed inside the
//! `anyOf` of a `"required"` call, they must point to where it now is, or they would name the wrong schema.
//!
//! The engine compiles the tools' constraint as one (`tools`); when it refuses it, the client is better told
//! which tool: each one's schema is checked alone, first against the input limits (cheap), then compiled, until
//! one is refused or as much time as the engine's `max_compile_cpu_ms` has passed. If none is refused alone, the
//! refusal stays on `tools` (only together are they too much).

use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::super::error::ApiError;
use super::Tool;
use crate::engine::guided::{GuidedRequest, GuidedSpec};
use crate::engine::Engine;

/// The keywords whose values are data, not schemas: a `$ref` there is a value to keep.
const DATA: [&str; 4] = ["const", "enum", "default", "examples"];

/// `schema` to be placed at `base` (a JSON pointer such as `#/anyOf/2/properties/arguments`) of a larger schema:
/// its local `$ref`s (`#`, `#/...`) rewritten to point below `base`.
pub(crate) fn rebased(schema: &Value, base: &str) -> Value {
    match schema {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("$ref", Value::String(r)) if r == "#" => Value::String(base.to_owned()),
                        ("$ref", Value::String(r)) if r.starts_with("#/") => {
                            Value::String(format!("{base}{}", &r[1..]))
                        }
                        (k, v) if DATA.contains(&k) => v.clone(),
                        (_, v) => rebased(v, base),
                    };
                    (k.clone(), v)
                })
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| rebased(v, base)).collect()),
        other => other.clone(),
    }
}

/// `error`, the engine's refusal of the tools' constraint, on the tool at fault when one is refused alone.
pub(crate) fn blame_tool(tools: &[Tool], engine: &Engine, error: ApiError) -> ApiError {
    let compiler = engine.guided_compiler();
    let alone = |t: &Tool| GuidedRequest::new(GuidedSpec::JsonSchema(t.parameters.clone()), "tools");
    let at_fault = |i: usize, message: String| {
        let param = format!("tools[{i}].function.parameters");
        ApiError::invalid(&param, format!("invalid {param}: {message}"))
    };
    for (i, tool) in tools.iter().enumerate() {
        if let Err(message) = compiler.check_input(&alone(tool).spec) {
            return at_fault(i, message);
        }
    }
    let budget = Duration::from_millis(engine.config().grammar_limits.max_compile_cpu_ms);
    let started = Instant::now();
    for (i, tool) in tools.iter().enumerate() {
        if started.elapsed() > budget {
            break;
        }
        if let Err(message) = compiler.compile(&engine.model().tokenizer, &alone(tool)) {
            return at_fault(i, message);
        }
    }
    error
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn local_refs_follow_the_schema_and_data_is_kept() {
        let schema = json!({
            "$ref": "#/$defs/a",
            "$defs": {"a": {"type": "object", "properties": {"self": {"$ref": "#"}, "ext": {"$ref": "other.json"}}}},
            "const": {"$ref": "#/not/a/schema"},
            "items": [{"$ref": "#/$defs/a"}]
        });
        let base = "#/anyOf/2/properties/arguments";
        assert_eq!(
            rebased(&schema, base),
            json!({
                "$ref": "#/anyOf/2/properties/arguments/$defs/a",
                "$defs": {"a": {"type": "object", "properties": {
                    "self": {"$ref": "#/anyOf/2/properties/arguments"}, "ext": {"$ref": "other.json"}}}},
                "const": {"$ref": "#/not/a/schema"},
                "items": [{"$ref": "#/anyOf/2/properties/arguments/$defs/a"}]
            })
        );
    }
}
