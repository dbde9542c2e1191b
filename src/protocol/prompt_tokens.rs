//! A request's prompt tokens: the one computation that a submission gives the engine and that counting
//! (`engine_count_prompt_tokens`, Anthropic's `/v1/messages/count_tokens`) counts, so that a count is exactly the
//! `usage` prompt tokens of the same request submitted.

use std::sync::Arc;

use super::api::Api;
use super::error::ApiError;
use super::prompt::PromptInput;
use super::request::ParsedRequest;
use super::responses::ResponseStore;
use super::template_options::reasoning_effort_variable;
use super::translate::{read_request, rename_fields, Purpose, TranslateContext};
use crate::engine::{Engine, SubmitError};
use crate::model::{Model, TokenId};

/// The prompts `request` gives the engine, each a token sequence: its messages through the chat template (with
/// its tools), or its texts or token ids, or fill-in-the-middle prompts. Takes `request.input` (left empty).
///
/// A reasoning effort the template cannot be told is dropped from `request` and said to have no effect in its
/// warnings (clients send it to every model they talk to); a template's own error about it still refuses the
/// request.
pub(crate) fn request_prompts(model: &Model, request: &mut ParsedRequest) -> Result<Vec<Vec<TokenId>>, ApiError> {
    if let Some(effort) = request.template.reasoning_effort {
        if reasoning_effort_variable(&model.chat_template, effort).is_err() {
            request.template.reasoning_effort = None;
            request
                .warnings
                .push("reasoning_effort has no effect: this model's chat template has no reasoning setting".to_owned());
        }
    }
    let input = std::mem::replace(&mut request.input, PromptInput::Tokens(Vec::new()));
    input.into_token_prompts(model, request.suffix.as_deref(), request.tools.as_ref(), &request.template)
}

/// The prompt tokens of `json`, a request body of `api`, as its submission would bill them (`usage`'s
/// `prompt_tokens`, Anthropic's `input_tokens` plus `cache_read_input_tokens`): every prompt's tokens, each
/// prompt counted once whatever its number of choices. Nothing is submitted and nothing is stored.
///
/// The body is read as its submission reads it, and refused as it would be, naming the field as its API names
/// it; a field only generation needs may be absent (Anthropic's `max_tokens`). What only the engine checks at
/// submission (lengths against the context, sampling ranges) is not checked: a prompt too long to serve is
/// counted. An empty prompt and a token id outside the vocabulary are refused, as a submission refuses them.
pub fn count_prompt_tokens(
    engine: &Engine,
    json: &str,
    api: Api,
    responses: &Arc<ResponseStore>,
) -> Result<usize, ApiError> {
    let context = TranslateContext { engine, responses, purpose: Purpose::CountPrompt };
    let (mut request, translated) = read_request(api, json, &context)?;
    let names = translated.map(|(_, names)| names).unwrap_or_default();
    let model = engine.model();
    let prompts = request_prompts(model, &mut request).map_err(|e| rename_fields(e, names))?;
    let vocab_size = model.config.vocab_size;
    let refusal = |error: SubmitError| rename_fields(ApiError::from_submit(&error, request.names), names);
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(refusal(SubmitError::EmptyPrompt));
    }
    if let Some(&token) = prompts.iter().flatten().find(|&&t| t as usize >= vocab_size) {
        return Err(refusal(SubmitError::TokenOutOfVocab { token, vocab_size }));
    }
    Ok(prompts.iter().map(Vec::len).sum())
}
