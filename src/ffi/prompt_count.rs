//! `engine_count_prompt_tokens`: a request's prompt tokens, counted without submitting it.

use std::ffi::c_char;

use super::args::{required_str, Out};
use super::boundary::{boundary, Failure};
use super::engine::EmberEngine;
use super::registry::ENGINES;
use super::status::EmberStatus;
use crate::protocol::{count_prompt_tokens, Api};

/// The prompt tokens of `request_json`, a request body of the API `api` (`EMBER_API_*`, as `engine_submit_api`
/// takes it), written to `*out_tokens`: exactly the prompt tokens its submission would have (`usage`'s
/// `prompt_tokens`; Anthropic's `input_tokens` plus `cache_read_input_tokens`), after the API's translation,
/// the chat template and the tools' description. Several prompts (a Completions `prompt` array) add up; `n`
/// does not multiply them. Nothing is submitted, queued or stored: what Anthropic's
/// `POST /v1/messages/count_tokens` answers.
///
/// The body is read and refused as its submission would be, naming the field as its API names it, except that a
/// field only generation needs may be absent (Anthropic's `max_tokens`) and what the engine checks at
/// submission is not checked (a prompt longer than the context is counted; sampling ranges are not read).
///
/// Returns `EMBER_STATUS_OK`; on failure `*out_tokens` is untouched: `EMBER_STATUS_INVALID_REQUEST` (the body
/// was refused; `engine_last_error_message()` is the OpenAI error JSON; also for an engine that serves
/// embeddings), `EMBER_STATUS_INVALID_HANDLE`, `EMBER_STATUS_INVALID_UTF8`, `EMBER_STATUS_INVALID_ARGUMENT` (a
/// NULL argument, an `api` that is no `EMBER_API_*` value).
///
/// Thread safety: any thread, concurrently with any other call; does not wait for the engine's steps.
///
/// # Safety
/// `request_json` is NULL or a NUL-terminated string; `out_tokens` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_count_prompt_tokens(
    engine: *const EmberEngine,
    api: u32,
    request_json: *const c_char,
    out_tokens: *mut usize,
) -> EmberStatus {
    boundary("engine_count_prompt_tokens", || {
        let out = Out::new(out_tokens, "out_tokens")?;
        let Some(api) = Api::from_code(api) else {
            return Err(Failure::invalid_argument(format!("api = {api} is not an EMBER_API_* value")));
        };
        // SAFETY: NULL or NUL-terminated, by this function's contract.
        let json = unsafe { required_str(request_json, "request_json") }?;
        let engine_object = ENGINES.get(engine.addr())?;
        let tokens = engine_object
            .with_engine(|e| count_prompt_tokens(e, json, api, &engine_object.responses))?
            .map_err(|e| Failure::verbatim(EmberStatus::InvalidRequest, e.to_json()))?;
        // SAFETY: `out_tokens` is non-NULL and writable by this function's contract.
        unsafe { out.write(tokens) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;
    use std::ptr;

    use super::super::api_tests::new_engine;
    use super::super::engine::engine_free;
    use super::super::last_error;
    use super::super::request::{EMBER_API_ANTHROPIC_MESSAGES, EMBER_API_LLAMA_COMPLETION};
    use super::*;

    /// The call's status, its count (`usize::MAX`: untouched) and its last error.
    fn count(engine: *const EmberEngine, api: u32, json: Option<&[u8]>) -> (EmberStatus, usize, String) {
        let json = json.map(|bytes| CString::new(bytes).unwrap());
        let mut tokens = usize::MAX;
        let json_ptr = json.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        // SAFETY: a NUL-terminated string or NULL, and a writable size_t.
        let status = unsafe { engine_count_prompt_tokens(engine, api, json_ptr, &mut tokens) };
        (status, tokens, last_error::get())
    }

    #[test]
    fn counts_a_messages_body_and_refuses_hostile_calls_clearly() {
        let engine = new_engine();
        let body = br#"{"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}"#;
        let (status, tokens, _) = count(engine, EMBER_API_ANTHROPIC_MESSAGES, Some(body));
        assert_eq!(status, EmberStatus::Ok);
        assert!(tokens > 3 && tokens < 100, "{tokens}");

        let (status, tokens, error) = count(engine, 99, Some(body));
        assert_eq!((status, tokens), (EmberStatus::InvalidArgument, usize::MAX));
        assert!(error.contains("api = 99 is not an EMBER_API_* value"), "{error}");
        let (status, _, error) = count(engine, EMBER_API_ANTHROPIC_MESSAGES, None);
        assert_eq!(status, EmberStatus::InvalidArgument);
        assert!(error.contains("request_json is NULL"), "{error}");
        let json = CString::new(&body[..]).unwrap();
        // SAFETY: a NUL-terminated string; the NULL out pointer is refused before any write.
        let status = unsafe { engine_count_prompt_tokens(engine, 4, json.as_ptr(), ptr::null_mut()) };
        assert_eq!(
            (status, last_error::get().as_str()),
            (EmberStatus::InvalidArgument, "engine_count_prompt_tokens: out_tokens is NULL")
        );

        let (status, tokens, error) = count(engine, EMBER_API_ANTHROPIC_MESSAGES, Some(b"{\"messages\": ["));
        assert_eq!((status, tokens), (EmberStatus::InvalidRequest, usize::MAX));
        assert!(error.starts_with("{\"error\"") && error.contains("not valid JSON"), "{error}");
        let (status, _, error) = count(engine, EMBER_API_ANTHROPIC_MESSAGES, Some(b"{\"system\": \"\xff\"}"));
        assert_eq!(status, EmberStatus::InvalidUtf8, "{error}");
        let (status, _, error) = count(engine, EMBER_API_LLAMA_COMPLETION, Some(br#"{"prompt": [4294967295]}"#));
        assert_eq!(status, EmberStatus::InvalidRequest);
        assert!(error.contains("\"param\":\"prompt\""), "{error}");

        engine_free(engine);
        let (status, _, _) = count(engine, EMBER_API_ANTHROPIC_MESSAGES, Some(body));
        assert_eq!(status, EmberStatus::InvalidHandle, "a freed engine");
        let (status, _, _) = count(ptr::null(), EMBER_API_ANTHROPIC_MESSAGES, Some(body));
        assert_ne!(status, EmberStatus::Ok, "a NULL engine");
    }
}
