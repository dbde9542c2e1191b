//! The model's tokenizer, chat template and description for hosts: `engine_tokenize`, `engine_detokenize`,
//! `engine_token_bytes`, `engine_apply_chat_template`, `engine_model_info_json`. Token ids come back in a caller's buffer with the
//! size-query convention of `engine_get_token_timestamps`; text and JSON as strings the caller frees with
//! `engine_string_free`.

use std::ffi::{c_char, CString};

use super::args::{copy_to_buffer, required_str, Out};
use super::boundary::{boundary, Failure};
use super::engine::{EmberEngine, Served};
use super::registry::{ENGINES, STRINGS};
use super::status::EmberStatus;
use crate::model::TokenId;
use crate::protocol::model_info::{embedder_info_json, model_info_json};
use crate::protocol::tokenize::{apply_chat_template, detokenize, tokenize_text};

/// Hands `text` to the host as a NUL-terminated string it frees with `engine_string_free`. Text with a NUL byte
/// (a detokenized NUL token) is cut there: C strings end at the first NUL.
fn give_text(text: String) -> *mut c_char {
    let text = match CString::new(text) {
        Ok(c) => c,
        Err(e) => {
            let at = e.nul_position();
            let mut bytes = e.into_vec();
            bytes.truncate(at);
            CString::new(bytes).expect("no NUL before the first one")
        }
    };
    STRINGS.give(text)
}

/// The token ids the engine computes for `text` (`text_len` bytes of UTF-8; NULL only with length 0), written to
/// `buffer` with their number in `*out_count`. `parse_special`: the texts of control tokens (`<|im_start|>`)
/// become those tokens, as the engine reads every prompt (chat or completion); otherwise they are ordinary text
/// (a user's text that must not inject control tokens). `add_special`: a BOS token first when the model asks for
/// one (as the engine adds it to a prompt), unless the text already starts with it. A submitted prompt's ids are
/// `engine_tokenize(text, true, true)`. On an engine that serves embeddings, `add_special` frames the ids as an
/// embedding input (`[CLS] text [SEP]`, `text <|endoftext|>`: the BOS, separator and EOS the file asks for), the
/// ids an `engine_embed` input of that text gets.
///
/// Returns `EMBER_STATUS_OK`; `EMBER_STATUS_BUFFER_TOO_SMALL` when `capacity` is below the number of ids: then
/// `*out_count` is the capacity needed and `buffer` is untouched (pass `capacity` 0 and a NULL `buffer` to ask
/// the size); `EMBER_STATUS_INVALID_UTF8`, `EMBER_STATUS_INVALID_HANDLE`, `EMBER_STATUS_INVALID_ARGUMENT`
/// (NULL `out_count`, NULL `text` with a non-zero length, NULL `buffer` with a non-zero `capacity`).
///
/// Thread safety: any thread, any time; does not wait for the engine's steps.
///
/// # Safety
/// `text` is NULL or points to `text_len` readable bytes; `buffer` is NULL or points to `capacity` writable
/// `uint32_t`s; `out_count` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_tokenize(
    engine: *const EmberEngine,
    text: *const c_char,
    text_len: usize,
    add_special: bool,
    parse_special: bool,
    buffer: *mut u32,
    capacity: usize,
    out_count: *mut usize,
) -> EmberStatus {
    boundary("engine_tokenize", || {
        let out_count = Out::new(out_count, "out_count")?;
        if buffer.is_null() && capacity > 0 {
            return Err(Failure::invalid_argument(format!("buffer is NULL but capacity is {capacity}")));
        }
        if text.is_null() && text_len > 0 {
            return Err(Failure::invalid_argument(format!("text is NULL but text_len is {text_len}")));
        }
        let bytes: &[u8] = match text_len {
            0 => &[],
            // SAFETY: non-NULL, and `text_len` readable bytes by this function's contract.
            n => unsafe { std::slice::from_raw_parts(text.cast::<u8>(), n) },
        };
        let text = std::str::from_utf8(bytes)
            .map_err(|e| Failure::new(EmberStatus::InvalidUtf8, format!("text is not valid UTF-8: {e}")))?;
        let ids = ENGINES.get(engine.addr())?.with_served(|served| match served {
            Served::Generator(e) => tokenize_text(e.model(), text, add_special, parse_special),
            Served::Embedder(e) => e.tokenize_text(text, add_special, parse_special),
        })?;
        // SAFETY: `buffer` and `out_count` as this function's contract says, which is `copy_to_buffer`'s.
        unsafe { copy_to_buffer(&ids, buffer, capacity, out_count, "token ids") }
    })
}

/// The text of `n_ids` token ids at `ids` (NULL only with 0), written to `*out`: their bytes, invalid UTF-8
/// replaced by U+FFFD; control tokens write their text only when `include_special` (vLLM's
/// `skip_special_tokens: false`). A NUL byte in the text ends the C string there.
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched: `EMBER_STATUS_INVALID_ARGUMENT` (an id outside
/// the vocabulary, named with its index; NULL `out`; NULL `ids` with a non-zero count),
/// `EMBER_STATUS_INVALID_HANDLE`.
///
/// Thread safety: any thread, any time. Ownership: the caller frees the string with `engine_string_free`.
///
/// # Safety
/// `ids` is NULL or points to `n_ids` readable `uint32_t`s; `out` is NULL or points to writable storage for a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_detokenize(
    engine: *const EmberEngine,
    ids: *const u32,
    n_ids: usize,
    include_special: bool,
    out: *mut *mut c_char,
) -> EmberStatus {
    boundary("engine_detokenize", || {
        let out = Out::new(out, "out")?;
        if ids.is_null() && n_ids > 0 {
            return Err(Failure::invalid_argument(format!("ids is NULL but n_ids is {n_ids}")));
        }
        let ids: &[TokenId] = match n_ids {
            0 => &[],
            // SAFETY: non-NULL, and `n_ids` readable ids by this function's contract (u32 is `TokenId`).
            n => unsafe { std::slice::from_raw_parts(ids, n) },
        };
        let text = ENGINES
            .get(engine.addr())?
            .with_served(|served| match served {
                Served::Generator(e) => detokenize(e.model().tokenizer.as_ref(), ids, include_special),
                Served::Embedder(e) => detokenize(e.tokenizer(), ids, include_special),
            })?
            .map_err(|e| Failure::invalid_argument(e.message))?;
        // SAFETY: `out` is non-NULL and writable by this function's contract.
        unsafe { out.write(give_text(text)) };
        Ok(())
    })
}

/// The bytes of token `id`'s text, written to `buffer` with their number in `*out_len`: exactly the bytes the
/// tokenizer gives it (a byte-level token may be part of a UTF-8 character, so they need not be valid UTF-8), a
/// control token's text included. `engine_detokenize` of one id replaces such bytes; llama-server's
/// `/tokenize` `with_pieces` answers them as they are.
///
/// Returns `EMBER_STATUS_OK`; `EMBER_STATUS_BUFFER_TOO_SMALL` when `capacity` is below the number of bytes: then
/// `*out_len` is the capacity needed and `buffer` is untouched (pass `capacity` 0 and a NULL `buffer` to ask the
/// size); `EMBER_STATUS_INVALID_ARGUMENT` (an id outside the vocabulary, NULL `out_len`, NULL `buffer` with a
/// non-zero `capacity`), `EMBER_STATUS_INVALID_HANDLE`.
///
/// Thread safety: any thread, any time; does not wait for the engine's steps.
///
/// # Safety
/// `buffer` is NULL or points to `capacity` writable bytes; `out_len` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_token_bytes(
    engine: *const EmberEngine,
    id: u32,
    buffer: *mut u8,
    capacity: usize,
    out_len: *mut usize,
) -> EmberStatus {
    boundary("engine_token_bytes", || {
        let out_len = Out::new(out_len, "out_len")?;
        if buffer.is_null() && capacity > 0 {
            return Err(Failure::invalid_argument(format!("buffer is NULL but capacity is {capacity}")));
        }
        let bytes = ENGINES.get(engine.addr())?.with_served(|served| {
            let tokenizer = match served {
                Served::Generator(e) => e.model().tokenizer.as_ref(),
                Served::Embedder(e) => e.tokenizer(),
            };
            tokenizer.token_bytes(id, true).map(<[u8]>::to_vec).ok_or(tokenizer.vocab_size())
        })?;
        let bytes = bytes
            .map_err(|vocab| Failure::invalid_argument(format!("token {id} is outside the vocabulary of {vocab}")))?;
        // SAFETY: `buffer` and `out_len` as this function's contract says, which is `copy_to_buffer`'s.
        unsafe { copy_to_buffer(&bytes, buffer, capacity, out_len, "bytes") }
    })
}

/// The prompt a Chat Completions request body would have, as the engine computes it: `*out` is the JSON
/// `{"prompt": text, "prompt_token_ids": [...]}` (the chat template applied to `messages`, with `tools` when the
/// body has them, ending with the assistant's turn; then tokenized as `engine_submit` tokenizes it). The body is
/// checked as `engine_submit` checks it.
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched: `EMBER_STATUS_INVALID_REQUEST` (the body was
/// refused; `engine_last_error_message()` is the OpenAI error body naming the field), `EMBER_STATUS_INVALID_UTF8`,
/// `EMBER_STATUS_INVALID_HANDLE`, `EMBER_STATUS_INVALID_ARGUMENT` (a NULL argument).
///
/// Thread safety: any thread, any time. Ownership: the caller frees the string with `engine_string_free`.
///
/// # Safety
/// `request_json` is NULL or NUL-terminated; `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_apply_chat_template(
    engine: *const EmberEngine,
    request_json: *const c_char,
    out: *mut *mut c_char,
) -> EmberStatus {
    boundary("engine_apply_chat_template", || {
        let out = Out::new(out, "out")?;
        // SAFETY: NULL or NUL-terminated, by this function's contract.
        let json = unsafe { required_str(request_json, "request_json") }?;
        let prompt = ENGINES
            .get(engine.addr())?
            .with_engine(|e| apply_chat_template(e.model(), json))?
            .map_err(|e| Failure::verbatim(EmberStatus::InvalidRequest, e.to_json()))?;
        // SAFETY: `out` is non-NULL and writable by this function's contract.
        unsafe { out.write(give_text(prompt)) };
        Ok(())
    })
}

/// A description of the model the engine serves, as JSON in `*out`: `name`, `serves` (`"generation"` or
/// `"embeddings"`), `architecture`, `parameters`, `context_length` (the model's) and `max_model_len` (the longest
/// request this engine takes: the context or the KV cache, whichever is smaller), `embedding_length`, `layers`,
/// `heads`, `kv_heads`, `vocab_size`, `add_bos`, `special_tokens` (`bos`, `eos`, `eot`, `pad`, `unknown` when the model
/// has them: `{"id", "text"}`), `end_of_generation_ids`, `chat_template` (whether the file has one; otherwise ChatML is
/// used), `chat_template_source` (the Jinja text requests are rendered with), `tool_call_format` (the format ember
/// reads `"auto"` tool calls in, `"ember"` for a template without one; null when it cannot read them), `thinks`
/// (whether the template teaches a reasoning ember splits off), `tensor_types` (tensors per weight type), `file`
/// (`path`, `size_bytes`, `sha256`), `backend` (`{"kind": "cpu", "kernels", "threads"}` or `{"kind": "cuda",
/// "description"}`), `kv_cache` and `max_num_seqs` (the most sequences one step runs). An engine that serves embeddings describes its model with the fields these share (no `layers`,
/// `heads`, `kv_heads`, `end_of_generation_ids`, `chat_template` and the three after it, or `kv_cache`;
/// `special_tokens` may name `sep`) and adds `pooling` (the requests' default) and `classifier_outputs` (a reranker's
/// scores per input, else null). The first call computes the file's SHA-256 (it reads every byte: about a tenth of a
/// second per 100 MB); later calls are immediate.
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched: `EMBER_STATUS_INVALID_HANDLE`,
/// `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`).
///
/// Thread safety: any thread, any time. Ownership: the caller frees the string with `engine_string_free`.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_model_info_json(engine: *const EmberEngine, out: *mut *mut c_char) -> EmberStatus {
    boundary("engine_model_info_json", || {
        let out = Out::new(out, "out")?;
        let info = ENGINES.get(engine.addr())?.with_served(|served| match served {
            Served::Generator(e) => model_info_json(e),
            Served::Embedder(e) => embedder_info_json(e),
        })?;
        // SAFETY: `out` is non-NULL and writable by this function's contract.
        unsafe { out.write(give_text(info)) };
        Ok(())
    })
}
