//! The field policy (docs/protocol.md, "Field policy"): fields current SDKs send that cannot change ember's
//! output are accepted (`modalities: ["text"]`, `verbosity`, `reasoning_effort` on a template without a reasoning
//! setting, the latter two with a warning), `prediction` feeds speculative decoding without changing the output,
//! and what would change the output and cannot be honoured is refused by name.

use ember::engine::speculative::{DraftPolicy, SpeculativeConfig, SpeculativeMethod};
use ember::engine::EngineConfig;
use ember::protocol::ApiRequest;
use serde_json::{json, Value};

fn speculating_engine() -> ember::engine::Engine {
    super::common::engine(EngineConfig {
        kv_cache_tokens: 4096,
        speculative: Some(SpeculativeConfig {
            method: SpeculativeMethod::Ngram,
            num_speculative_tokens: 8,
            prompt_lookup_min: 1,
            prompt_lookup_max: 3,
            // Every draft is verified whatever the step costs, so the counts do not depend on timing.
            draft_policy: DraftPolicy::Always,
        }),
        ..Default::default()
    })
}

fn completion(engine: &ember::engine::Engine, body: &Value) -> Value {
    super::common::whole_response(engine, body)
}

#[test]
fn a_prediction_drafts_for_speculative_decoding_and_leaves_the_output_unchanged() {
    let e = speculating_engine();
    let base =
        json!({"messages": [{"role": "user", "content": "Count from 1 to 20."}], "max_tokens": 48, "temperature": 0});
    let plain = completion(&e, &base);
    let text = plain["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    assert!(plain["usage"].get("completion_tokens_details").is_none(), "no prediction: no counts");
    let predicted = completion(
        &e,
        &super::common::with_fields(base.clone(), &json!({"prediction": {"type": "content", "content": text}})),
    );
    assert_eq!(predicted["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"]);
    let details = &predicted["usage"]["completion_tokens_details"];
    let accepted = details["accepted_prediction_tokens"].as_u64().unwrap();
    assert!(accepted > 0, "the output repeats the prediction: its drafts are accepted ({details})");
    assert!(details["rejected_prediction_tokens"].is_u64());
    // A prediction the output does not follow still leaves it unchanged.
    let wrong =
        super::common::with_fields(base, &json!({"prediction": {"type": "content", "content": "zebra ocean lamp"}}));
    assert_eq!(completion(&e, &wrong)["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"]);
}

#[test]
fn fields_without_effect_are_accepted_with_a_warning_and_the_rest_refused_by_name() {
    let e = super::engine();
    let submit = |extra: Value| {
        let body = super::common::with_fields(
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
            &extra,
        );
        ApiRequest::submit(&e, &body.to_string(), None)
    };
    let accepted = submit(json!({"modalities": ["text"], "verbosity": "low", "reasoning_effort": "high"})).unwrap();
    let warnings = accepted.warnings().join("\n");
    assert!(warnings.contains("verbosity") && warnings.contains("reasoning_effort"), "{warnings}");
    assert!(submit(json!({})).unwrap().warnings().is_empty());
    let refused = |extra: Value| submit(extra).expect_err("refused").param.unwrap_or_default();
    assert_eq!(refused(json!({"modalities": ["text", "audio"]})), "modalities[1]");
    assert_eq!(refused(json!({"audio": {"voice": "alloy"}})), "audio");
    assert_eq!(refused(json!({"prediction": {"type": "content", "content": "a".repeat(40_000)}})), "prediction");
    assert_eq!(refused(json!({"web_search_options": {}})), "web_search_options");
}

/// The rows of docs/protocol.md's "Field policy" table: field, the JSON value sent, the policy.
fn policy_rows() -> Vec<(String, Value, String)> {
    let docs = include_str!("../../docs/protocol.md");
    let table = docs.split("### Field policy").nth(1).expect("docs/protocol.md has a Field policy section");
    let cell = |c: &str| c.trim().trim_matches('`').to_owned();
    table
        .lines()
        .skip_while(|l| !l.starts_with("| field"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            let value = serde_json::from_str(&cell(cells[2])).unwrap_or_else(|e| panic!("{l}: {e}"));
            (cell(cells[1]), value, cells[3].trim().to_owned())
        })
        .collect()
}

#[test]
fn the_field_policy_table_holds_row_by_row() {
    let e = super::engine();
    let rows = policy_rows();
    assert!(rows.len() >= 15, "the table was read: {rows:?}");
    for (field, value, policy) in rows {
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, field.clone(): value});
        let outcome = ApiRequest::submit(&e, &body.to_string(), None);
        let warned = |r: &ApiRequest| r.warnings().iter().any(|w| w.contains(&field));
        match outcome {
            Err(error) => {
                assert!(
                    policy.starts_with("refused"),
                    "{field}: refused ({}) but the table says {policy}",
                    error.message
                );
                assert!(error.param.unwrap_or_default().starts_with(&field), "{field}: the refusal names it");
            }
            Ok(request) => {
                request.handle().wait();
                assert!(!policy.starts_with("refused"), "{field} = {body}: accepted but the table says {policy}");
                // SmolLM2's template has no reasoning setting: `reasoning_effort` takes the row's "else" branch.
                let expects_warning = policy.ends_with("accepted, warning");
                assert_eq!(
                    warned(&request),
                    expects_warning,
                    "{field}: warnings {:?}, policy {policy}",
                    request.warnings()
                );
            }
        }
    }
}
