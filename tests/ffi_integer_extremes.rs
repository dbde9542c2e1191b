//! Every integer a request can carry, at the extremes of the integer types a host might hold it in (0, −1, 2^31,
//! 2^53, 2^63, 2^64), submitted through the C ABI: each is accepted or refused with an OpenAI error naming the
//! field, never a panic (found by fuzzing: `"n": 9223372036854775808` once reached a `Vec` allocation of that many
//! choices and came back as `EMBER_STATUS_PANIC`).

use std::ffi::{CStr, CString};
use std::ptr;

use ember::ffi::{
    engine_cancel, engine_free, engine_last_error_message, engine_new, engine_request_free, engine_submit, EmberEngine,
    EmberStatus,
};
use serde_json::{json, Value};

/// The extremes, as JSON number literals (2^64 does not fit any JSON integer type serde keeps exactly). 2^64 − 1
/// once wrapped `max_tokens`' context check (the prompt plus it) to a small number and was accepted (issue 43).
const EXTREMES: [&str; 8] = [
    "0",
    "-1",
    "2147483648",
    "9007199254740992",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
];

fn last_error() -> String {
    // SAFETY: ember's last error is a NUL-terminated string valid until this thread's next ember call.
    unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned()
}

/// A request body: `base` with `field` set to `value` (raw JSON text, so that 2^64 stays the literal it is).
fn body(base: &Value, field: &str, value: &str) -> String {
    let mut template = base.clone();
    template[field] = json!("@VALUE@");
    template.to_string().replace("\"@VALUE@\"", value)
}

/// Where an integer can sit in a request: the base body, the field set, and how the value is wrapped in it.
struct Slot {
    base: Value,
    field: &'static str,
    wrap: fn(&str) -> String,
}

fn slots() -> Vec<Slot> {
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let completion = json!({"prompt": "hi", "max_tokens": 2});
    let plain: fn(&str) -> String = |v| v.to_owned();
    let in_list: fn(&str) -> String = |v| format!("[{v}]");
    let as_bias_value: fn(&str) -> String = |v| format!("{{\"5\": {v}}}");
    let as_bias_key: fn(&str) -> String = |v| format!("{{\"{v}\": 1}}");
    let mut out = Vec::new();
    for field in [
        "n",
        "max_tokens",
        "max_completion_tokens",
        "min_tokens",
        "seed",
        "top_k",
        "deadline_ms",
        "priority",
        "best_of",
    ] {
        out.push(Slot { base: chat.clone(), field, wrap: plain });
        out.push(Slot { base: completion.clone(), field, wrap: plain });
    }
    let with_logprobs = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "logprobs": true});
    out.push(Slot { base: with_logprobs, field: "top_logprobs", wrap: plain });
    out.push(Slot { base: completion.clone(), field: "logprobs", wrap: plain });
    out.push(Slot { base: completion.clone(), field: "prompt_logprobs", wrap: plain });
    out.push(Slot { base: completion.clone(), field: "prompt", wrap: in_list });
    out.push(Slot { base: chat.clone(), field: "stop_token_ids", wrap: in_list });
    out.push(Slot { base: chat.clone(), field: "logit_bias", wrap: as_bias_value });
    out.push(Slot { base: chat, field: "logit_bias", wrap: as_bias_key });
    out
}

#[test]
fn every_integer_field_at_every_extreme_is_accepted_or_refused_by_name() {
    let config = CString::new(r#"{"threads": 2, "kv_cache_tokens": 4096}"#).unwrap();
    let mut engine: *mut EmberEngine = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable pointer.
    assert_eq!(unsafe { engine_new(config.as_ptr(), &mut engine) }, EmberStatus::Ok, "{}", last_error());
    let (mut accepted, mut refused) = (0, 0);
    for slot in slots() {
        for extreme in EXTREMES {
            let json = body(&slot.base, slot.field, &(slot.wrap)(extreme));
            let text = CString::new(json.clone()).unwrap();
            let mut request = ptr::null_mut();
            // SAFETY: a live engine handle, a NUL-terminated string and a writable pointer.
            let status = unsafe { engine_submit(engine, text.as_ptr(), &mut request) };
            match status {
                EmberStatus::Ok => {
                    accepted += 1;
                    // Whatever it would generate (up to the context), it is cancelled at once.
                    assert_eq!(engine_cancel(request), EmberStatus::Ok);
                    engine_request_free(request);
                }
                EmberStatus::InvalidRequest => {
                    refused += 1;
                    let error: Value = serde_json::from_str(&last_error()).unwrap();
                    let param =
                        error["error"]["param"].as_str().unwrap_or_else(|| panic!("no param: {error} for {json}"));
                    assert!(param.starts_with(slot.field), "{json}: the error names {param:?}: {error}");
                }
                other => panic!("{json}: {other:?} {}", last_error()),
            }
        }
    }
    eprintln!("{accepted} accepted, {refused} refused by name");
    engine_free(engine);
}
