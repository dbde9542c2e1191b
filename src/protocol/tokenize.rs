//! The tokenizer and the chat template as a host calls them (`engine_tokenize`, `engine_detokenize`,
//! `engine_apply_chat_template`; the gateway's `/tokenize` and `/detokenize`): the same tokenization the engine
//! applies to a request, so a host can count tokens, cut a prompt to the context or bill before submitting.

use serde_json::json;

use super::error::ApiError;
use super::json::encode;
use super::prompt::{render_chat, tokenize, PromptInput};
use super::request::{ApiKind, ParsedRequest};
use crate::model::tokenizer::Tokenizer;
use crate::model::{Model, TokenId};

/// The token ids of `text`. `parse_special`: the texts of control tokens (`<|im_start|>`) become those tokens,
/// as the engine reads every prompt; otherwise they are ordinary text (a user's text that must not inject
/// them). `add_special`: BOS first when the model asks for one (unless the text already starts with it), as the
/// engine adds it to every prompt.
pub fn tokenize_text(model: &Model, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
    if add_special && parse_special {
        return tokenize(model, text);
    }
    let tokenizer = &model.tokenizer;
    let mut ids = tokenizer.encode(text, parse_special);
    if let Some(bos) = tokenizer.bos_id().filter(|_| add_special && tokenizer.add_bos()) {
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    ids
}

/// The text of `ids`, invalid UTF-8 replaced by U+FFFD; control tokens write their text only when
/// `include_special` (vLLM's `skip_special_tokens: false`). An id outside the vocabulary is refused, naming
/// `tokens[i]`.
pub fn detokenize(tokenizer: &Tokenizer, ids: &[TokenId], include_special: bool) -> Result<String, ApiError> {
    let vocab = tokenizer.vocab_size();
    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
        return Err(ApiError::invalid(
            format!("tokens[{i}]"),
            format!("token {id} is outside the vocabulary of {vocab}"),
        ));
    }
    tokenizer.decode(ids, include_special).map_err(|e| ApiError::invalid("tokens", e.to_string()))
}

/// A chat request body's prompt, as the engine would compute it: `{"prompt": text, "prompt_token_ids": [...]}`.
/// The body is a Chat Completions request (`messages`, and `tools` when given); its other fields are checked as
/// `engine_submit` checks them, and every refusal names its field.
pub fn apply_chat_template(model: &Model, json: &str) -> Result<String, ApiError> {
    let request = ParsedRequest::parse(json, Some(ApiKind::Chat))?;
    let PromptInput::Messages(messages) = &request.input else {
        return Err(ApiError::invalid("messages", "a chat request has messages"));
    };
    let text = render_chat(model, messages, request.tools.as_ref(), &request.template)?;
    let ids = tokenize(model, &text);
    Ok(encode(&json!({"prompt": text, "prompt_token_ids": ids})))
}
