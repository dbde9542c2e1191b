//! `engine_new`'s JSON into an [`EngineConfig`], with every error naming the key at fault: a host reads
//! "threads: invalid type: string \"x\", expected a non-negative integer", not serde's bare "expected usize at
//! line 1 column 15".
//!
//! Each key's value is read on its own first (so the error is known to be that key's), then the whole object.
//! The keys are those `EngineConfig` serializes to, so a field added to the struct is a key here too.

use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::config::{ConfigError, EngineConfig};
use crate::engine::guided::json_kind;

/// Every configuration key, in the struct's order.
pub fn config_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let Ok(Value::Object(fields)) = serde_json::to_value(EngineConfig::default()) else {
            unreachable!("EngineConfig serializes to a JSON object of its fields")
        };
        // Leaked once per process (a handful of short names, reachable from this static) so that errors can
        // name keys as `&'static str`, like `validate`'s.
        fields.keys().map(|key| &*key.clone().leak()).collect()
    })
}

impl EngineConfig {
    /// Parses a JSON object of options (absent keys keep their defaults; unknown keys are errors); blank text
    /// means all defaults. Every error names its key, except for text that is not a JSON object at all.
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        let trimmed = json.trim();
        let config = if trimmed.is_empty() { EngineConfig::default() } else { parse_object(trimmed)? };
        config.validate()?;
        Ok(config)
    }
}

fn parse_object(json: &str) -> Result<EngineConfig, ConfigError> {
    let value: Value = serde_json::from_str(json).map_err(|e| ConfigError {
        options: vec![],
        message: format!("invalid engine configuration: not valid JSON: {e}"),
    })?;
    let Value::Object(object) = value else {
        return Err(ConfigError {
            options: vec![],
            message: format!(
                "invalid engine configuration: it must be a JSON object of options (e.g. {{\"threads\": 2}}), \
                 not {}",
                json_kind(&value)
            ),
        });
    };
    for (key, value) in &object {
        let key = known_key(key)?;
        let alone = Map::from_iter([(key.to_owned(), value.clone())]);
        EngineConfig::deserialize(Value::Object(alone)).map_err(|e| ConfigError {
            options: vec![key],
            message: format!("{key}: {}", plain_words(&e.to_string())),
        })?;
    }
    // Every value was read alone above, so the whole object can only fail on something serde adds later.
    EngineConfig::deserialize(Value::Object(object))
        .map_err(|e| ConfigError { options: vec![], message: format!("invalid engine configuration: {e}") })
}

/// `key` as one of [`config_keys`], or the error naming it and listing the keys.
fn known_key(key: &str) -> Result<&'static str, ConfigError> {
    config_keys().iter().copied().find(|known| *known == key).ok_or_else(|| ConfigError {
        options: vec![],
        message: format!("unknown configuration key {key:?}; the keys are: {}", config_keys().join(", ")),
    })
}

/// serde's Rust type names as a C host reads them.
fn plain_words(message: &str) -> String {
    const RUST_NAMES: [(&str, &str); 4] = [
        ("expected usize", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected path string", "expected a path string"),
    ];
    let mut message = message.to_owned();
    for (rust, plain) in RUST_NAMES {
        message = message.replace(rust, plain);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_the_structs_fields() {
        let keys = config_keys();
        assert_eq!(keys.len(), 26, "{keys:?}");
        assert!(["model", "load", "threads", "seed", "enable_prefix_caching"].iter().all(|k| keys.contains(k)));
    }

    /// The key list is the one source: the C API's table and the Go binding's `Config` name every key.
    #[test]
    fn the_c_docs_and_the_go_binding_name_every_key() {
        let (docs, go) = (include_str!("../../../docs/c_api.md"), include_str!("../../../bindings/go/engine.go"));
        for key in config_keys() {
            assert!(docs.contains(&format!("\n| `{key}` |")), "docs/c_api.md has no row for {key}");
            assert!(go.contains(&format!("`json:\"{key},omitempty\"`")), "Go's Config has no field for {key}");
        }
    }

    /// `chat_template` is the template when it holds a Jinja tag, else a file's path; a path that cannot be read
    /// is an error naming the key.
    #[test]
    fn chat_template_is_text_or_a_path() {
        let source = |value: &str| {
            EngineConfig { chat_template: Some(value.into()), ..Default::default() }.chat_template_source()
        };
        assert_eq!(source("{{ messages[0].content }}").unwrap().as_deref(), Some("{{ messages[0].content }}"));
        assert!(source("{% if tools %}x{% endif %}").unwrap().is_some_and(|text| text.starts_with("{% if")));
        let path = std::env::temp_dir().join(format!("ember-template-{}.jinja", std::process::id()));
        std::fs::write(&path, "{{ bos_token }}").unwrap();
        assert_eq!(source(path.to_str().unwrap()).unwrap().as_deref(), Some("{{ bos_token }}"));
        std::fs::remove_file(&path).unwrap();
        let e = source(path.to_str().unwrap()).unwrap_err();
        assert_eq!(e.options, ["chat_template"]);
        assert!(e.message.contains("neither a Jinja template") && e.message.contains("ember-template"), "{e}");
        assert_eq!(EngineConfig::default().chat_template_source().unwrap(), None);
    }

    #[test]
    fn a_wrong_type_for_any_key_names_the_key() {
        // An array is the wrong type for every key but an object's (serde reads a struct from a sequence too):
        // none is a list; an object's key gets a number.
        for &key in config_keys() {
            let wrong =
                if matches!(key, "speculative" | "grammar_limits" | "chat_template_limits") { "7" } else { "[1]" };
            let e = EngineConfig::from_json(&format!(r#"{{"{key}": {wrong}}}"#)).unwrap_err();
            assert_eq!(e.options, [key]);
            assert!(e.message.starts_with(&format!("{key}: invalid type: ")), "{}", e.message);
            assert!(!e.message.contains("line 1"), "{}", e.message);
        }
    }

    #[test]
    fn type_errors_are_in_plain_words() {
        let message = |json: &str| EngineConfig::from_json(json).unwrap_err().message;
        assert_eq!(
            message(r#"{"threads": "x"}"#),
            r#"threads: invalid type: string "x", expected a non-negative integer"#
        );
        assert_eq!(message(r#"{"seed": -1}"#), "seed: invalid value: integer `-1`, expected a non-negative integer");
        assert_eq!(message(r#"{"model": 3}"#), "model: invalid type: integer `3`, expected a path string");
        assert_eq!(message(r#"{"backend": 3}"#), "backend: invalid type: integer `3`, expected a string");
        assert_eq!(
            message(r#"{"backend": "tpu"}"#),
            r#"backend: unknown backend "tpu", expected "auto", "cpu" or "cuda""#
        );
        assert!(message(r#"{"activation_precision": "f16"}"#).starts_with("activation_precision: unknown activation"));
        assert_eq!(
            message(r#"{"enable_per_request_metrics": "yes"}"#),
            r#"enable_per_request_metrics: invalid type: string "yes", expected a boolean"#
        );
        assert!(message(r#"{"max_num_seqs": 1.5}"#).starts_with("max_num_seqs: invalid type: floating point"));
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = EngineConfig::from_json(r#"{"threads": 2, "max_num_seq": 4}"#).unwrap_err();
        assert!(e.message.starts_with(r#"unknown configuration key "max_num_seq"; the keys are: model, "#), "{e}");
    }

    #[test]
    fn anything_but_an_object_is_refused() {
        for (json, kind) in [("[]", "an array"), ("3", "a number"), (r#""x""#, "a string"), ("null", "null")] {
            let e = EngineConfig::from_json(json).unwrap_err();
            assert!(e.message.contains("must be a JSON object") && e.message.ends_with(kind), "{json}: {e}");
        }
        assert!(EngineConfig::from_json("{").unwrap_err().message.contains("not valid JSON"));
        assert_eq!(EngineConfig::from_json("{}").unwrap(), EngineConfig::default());
    }

    #[test]
    fn valid_values_still_parse() {
        let c = EngineConfig::from_json(r#"{"model": "m.gguf", "backend": "cpu", "activation_precision": "f32"}"#);
        let c = c.unwrap();
        assert_eq!(c.model.as_deref(), Some(std::path::Path::new("m.gguf")));
        assert_eq!(c.backend, super::super::config::BackendKind::Cpu);
        assert_eq!(c.activation_precision, super::super::config::ActivationPrecision::F32);
    }
}
