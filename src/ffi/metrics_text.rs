//! `engine_metrics_text`: the engine's metrics as Prometheus text, for a host's `/metrics`.

use std::ffi::{c_char, CString};

use super::args::Out;
use super::boundary::boundary;
use super::engine::EmberEngine;
use super::registry::{ENGINES, STRINGS};
use super::status::EmberStatus;
use crate::protocol::prometheus::metrics_text;

/// Writes the engine's metrics, in the Prometheus text exposition format (version 0.0.4; serve it with
/// `Content-Type: text/plain; version=0.0.4`), to `*out`: requests running and waiting to start (and the
/// limit), sequences running and waiting, KV cache usage over both block pools and its configuration, steps,
/// preemptions, prompt and generated tokens, choices ended by finish reason, submits refused as overloaded,
/// prefix-cache queries and hits, speculative drafts, and histograms of time to first token, inter-token
/// latency, queue time and end-to-end latency. Every sample is labelled `model_name` (`served_model_name`).
/// Names are vLLM's with an `ember_` prefix where vLLM has the metric, and with `metrics_vllm_names` the
/// endpoint picker's also under vLLM's own; `docs/c_api.md` ("Prometheus metrics") lists them all.
///
/// Returns `EMBER_STATUS_OK`; on failure `*out` is untouched: `EMBER_STATUS_INVALID_HANDLE`,
/// `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`).
///
/// Thread safety: any thread, any time (a short lock; never waits for a step). Ownership: the caller owns the
/// string (NUL-terminated UTF-8) and frees it with `engine_string_free`.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_metrics_text(engine: *const EmberEngine, out: *mut *mut c_char) -> EmberStatus {
    boundary("engine_metrics_text", || {
        let out = Out::new(out, "out")?;
        let text = ENGINES.get(engine.addr())?.with_engine(metrics_text)?;
        // The text is built from fixed names and numbers: it has no NUL byte.
        let string = STRINGS.give(CString::new(text).expect("metrics text has no NUL byte"));
        // SAFETY: `out` is non-NULL and writable by this function's contract.
        unsafe { out.write(string) };
        Ok(())
    })
}
