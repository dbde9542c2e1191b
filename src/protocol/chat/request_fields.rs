//! Every request field ember knows, and the check that refuses the others: a field is either implemented, or
//! accepted without effect (listed), or refused with an error naming it, never silently ignored. A client that
//! sends `response_format` believes it gets JSON; if ember cannot give it, the client must hear so. (The values
//! an implemented field cannot take are its parser's to refuse, also by name: `tool_choice: "auto"` for a chat
//! template whose tool-call format ember cannot read, say.)
//!
//! `docs/protocol.md` has the same list as a table; change both together.

use super::super::error::ApiError;
use super::super::fields::Object;
use super::super::request::ApiKind;

/// How ember treats a field it knows.
#[derive(Clone, Copy)]
enum Known {
    /// Implemented: read (and type-checked) by the parser.
    Read,
    /// Accepted and without effect (its type is not checked either).
    NoEffect,
}

/// The fields of both endpoints (`messages` only makes a chat request and `prompt` a completion one, which the
/// parser decides before this check).
const FIELDS: &[(&str, Known)] = &[
    ("messages", Known::Read),
    ("prompt", Known::Read),
    ("model", Known::Read),
    ("max_completion_tokens", Known::Read),
    ("max_tokens", Known::Read),
    ("temperature", Known::Read),
    ("top_p", Known::Read),
    ("top_k", Known::Read),
    ("min_p", Known::Read),
    ("n", Known::Read),
    ("stop", Known::Read),
    ("seed", Known::Read),
    ("presence_penalty", Known::Read),
    ("frequency_penalty", Known::Read),
    ("repetition_penalty", Known::Read),
    ("logit_bias", Known::Read),
    ("stream", Known::Read),
    ("stream_options", Known::Read),
    ("include_metrics", Known::Read),
    ("include_choice_metrics", Known::Read),
    ("ignore_eos", Known::Read),
    ("stop_token_ids", Known::Read),
    ("include_stop_str_in_output", Known::Read),
    ("skip_special_tokens", Known::Read),
    // Completions only: the parser refuses a non-empty suffix in a chat request, and the prompt stage one for a
    // model without infill tokens.
    ("suffix", Known::Read),
    ("response_format", Known::Read),
    ("guided_json", Known::Read),
    ("guided_regex", Known::Read),
    ("guided_choice", Known::Read),
    ("guided_grammar", Known::Read),
    ("user", Known::NoEffect),
    ("parallel_tool_calls", Known::Read),
    // What stock OpenAI clients send for OpenAI's own services: stored completions and their tags, a processing
    // tier, a prompt-cache routing key (ember's prefix cache needs none), an end-user id for abuse reports.
    ("store", Known::NoEffect),
    ("metadata", Known::NoEffect),
    ("service_tier", Known::NoEffect),
    ("prompt_cache_key", Known::NoEffect),
    ("safety_identifier", Known::NoEffect),
    // GPT-5's `verbosity` steers OpenAI's own models; ember's models have no such switch.
    ("verbosity", Known::NoEffect),
    // OpenAI's Predicted Outputs: a draft source for speculative decoding, which leaves the output unchanged.
    ("prediction", Known::Read),
    // Output modalities: ["text"] is what ember writes; any other is refused (`prediction.rs`).
    ("modalities", Known::Read),
    ("logprobs", Known::Read),
    ("top_logprobs", Known::Read),
    ("echo", Known::Read),
    ("prompt_logprobs", Known::Read),
    ("best_of", Known::Read),
    ("tools", Known::Read),
    ("tool_choice", Known::Read),
    ("min_tokens", Known::Read),
    ("speculative_decoding", Known::Read),
    ("deadline_ms", Known::Read),
    ("priority", Known::Read),
    // llama-server's: `prompt_progress` events and chunks while the prompt is computed (`prompt_progress.rs`).
    ("return_progress", Known::Read),
    // Chat only: how the template renders (`template_options.rs`).
    ("add_generation_prompt", Known::Read),
    ("continue_final_message", Known::Read),
    ("chat_template_kwargs", Known::Read),
    ("reasoning_effort", Known::Read),
    // Chat only: where a thinking model's reasoning goes (`reasoning.rs`).
    ("reasoning_format", Known::Read),
];

/// Refuses a field ember does not know (the other endpoint's input among them: `prompt` in a chat request,
/// `messages` in a completion). A field set to `null` is absent, like everywhere in the parser (OpenAI's clients send `null` for unset options).
pub(crate) fn check_fields(o: &Object, kind: ApiKind) -> Result<(), ApiError> {
    let other_input = match kind {
        ApiKind::Chat => "prompt",
        ApiKind::Completion => "messages",
    };
    for (name, _) in o.iter().filter(|(_, v)| !v.is_null()) {
        let known = FIELDS.iter().find(|(known, _)| known == name && *known != other_input);
        match known.map(|&(_, how)| how) {
            Some(Known::Read | Known::NoEffect) => {}
            None => return Err(ApiError::invalid(name.as_str(), format!("unrecognized request argument: {name}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn check(body: Value) -> Result<(), ApiError> {
        check_fields(body.as_object().unwrap(), ApiKind::Chat)
    }

    fn refused(body: Value) -> (String, String) {
        let e = check(body).unwrap_err();
        (e.param.unwrap(), e.message)
    }

    #[test]
    fn every_implemented_field_passes() {
        let all: Object =
            FIELDS.iter().filter(|(_, k)| matches!(k, Known::Read)).map(|(n, _)| (n.to_string(), json!(1))).collect();
        let all_but =
            |other: &str| all.iter().filter(|(n, _)| *n != other).map(|(n, v)| (n.clone(), v.clone())).collect();
        assert!(check_fields(&all_but("prompt"), ApiKind::Chat).is_ok());
        assert!(check_fields(&all_but("messages"), ApiKind::Completion).is_ok());
        let e = check_fields(&all, ApiKind::Chat).unwrap_err();
        assert_eq!(e.message, "unrecognized request argument: prompt", "a chat request has no prompt");
        assert!(check(json!({"messages": [], "user": "u", "parallel_tool_calls": true})).is_ok());
    }

    /// The docs' field tables list every field the parser knows, so that the two cannot drift apart.
    #[test]
    fn docs_protocol_md_lists_every_field() {
        let docs = include_str!("../../../docs/protocol.md");
        // A row's first cell names one field or a few (`presence_penalty`, `frequency_penalty`), or a sub-field.
        let first_cells: Vec<&str> =
            docs.lines().filter(|l| l.starts_with("| `")).filter_map(|l| l.split('|').nth(1)).collect();
        for (name, _) in FIELDS {
            let named = |cell: &&str| cell.contains(&format!("`{name}`")) || cell.contains(&format!("`{name}."));
            assert!(first_cells.iter().any(named), "docs/protocol.md has no table row for `{name}`");
        }
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let (param, message) = refused(json!({"messages": [], "temprature": 0.5}));
        assert_eq!(param, "temprature");
        assert_eq!(message, "unrecognized request argument: temprature");
        assert!(check(json!({"messages": [], "functions": null})).is_ok(), "null is absent");
    }
}
