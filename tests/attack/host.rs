//! The host of an attack case: what a C or Go program does with ember, through the C ABI only (`engine_new`,
//! `engine_submit`, `engine_submit_api`, `engine_count_prompt_tokens`, `engine_poll`, `engine_response_json`,
//! `engine_apply_chat_template`, `engine_embed_vectors`, `engine_rerank_scores` and their result's accessors),
//! with the process measurements the suite reports (peak resident memory above the engine's, and each call's
//! duration).

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

use ember::ffi::{
    engine_apply_chat_template, engine_count_prompt_tokens, engine_embed_vectors, engine_embeddings_count,
    engine_embeddings_dimensions, engine_embeddings_floats, engine_embeddings_free, engine_free,
    engine_last_error_message, engine_new, engine_poll, engine_request_free, engine_rerank_scores,
    engine_response_json, engine_string_free, engine_submit, engine_submit_api, EmberEmbeddings, EmberEngine,
    EmberEvent, EmberEventKind, EmberRequest, EmberStatus, EMBER_DELIVERY_POLL,
};
use serde_json::Value;

/// This thread's last ember error (an OpenAI error body for a refused request, a message otherwise).
pub fn last_error() -> String {
    // SAFETY: ember's last error is a NUL-terminated string valid until this thread's next ember call.
    unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned()
}

fn owned(text: *mut c_char) -> String {
    // SAFETY: a NUL-terminated string ember handed over; freed here, once.
    let s = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
    engine_string_free(text);
    s
}

/// A live engine, freed on drop.
pub struct Engine(*mut EmberEngine);

/// A refused call: its status and ember's message.
#[derive(Debug)]
pub struct Refused {
    pub status: EmberStatus,
    pub message: String,
}

impl Engine {
    /// `engine_new` with `config` (a JSON object).
    pub fn new(config: &Value) -> Result<Engine, Refused> {
        let text = CString::new(config.to_string()).expect("no NUL in a JSON text");
        let mut engine = ptr::null_mut();
        // SAFETY: a NUL-terminated string and a writable pointer.
        let status = unsafe { engine_new(text.as_ptr(), &mut engine) };
        match status {
            EmberStatus::Ok => Ok(Engine(engine)),
            status => Err(Refused { status, message: last_error() }),
        }
    }

    /// `engine_submit`: the request, or the refusal.
    pub fn submit(&self, body: &str) -> Result<Request<'_>, Refused> {
        let text =
            CString::new(body).map_err(|_| Refused { status: EmberStatus::InvalidUtf8, message: "NUL".into() })?;
        let mut request = ptr::null_mut();
        // SAFETY: a live engine, a NUL-terminated string and a writable pointer.
        let status = unsafe { engine_submit(self.0, text.as_ptr(), &mut request) };
        match status {
            EmberStatus::Ok => Ok(Request { engine: self, request }),
            status => Err(Refused { status, message: last_error() }),
        }
    }

    /// `engine_submit_api` with a body of `api` (any number: a host may pass one out of range) as raw bytes
    /// (a NUL byte ends the string there): the request, or the refusal.
    pub fn submit_api(&self, api: u32, body: &[u8]) -> Result<Request<'_>, Refused> {
        let text: Vec<u8> = body.iter().copied().chain([0]).collect();
        let mut request = ptr::null_mut();
        // SAFETY: a live engine, a NUL-terminated byte string and a writable pointer.
        let status =
            unsafe { engine_submit_api(self.0, api, text.as_ptr().cast(), 0, EMBER_DELIVERY_POLL, &mut request) };
        match status {
            EmberStatus::Ok => Ok(Request { engine: self, request }),
            status => Err(Refused { status, message: last_error() }),
        }
    }

    /// `engine_count_prompt_tokens` of a body of `api`, raw bytes: the count, or the refusal.
    pub fn count_prompt_tokens(&self, api: u32, body: &[u8]) -> Result<usize, Refused> {
        let text: Vec<u8> = body.iter().copied().chain([0]).collect();
        let mut tokens = 0;
        // SAFETY: a live engine, a NUL-terminated byte string and a writable size_t.
        let status = unsafe { engine_count_prompt_tokens(self.0, api, text.as_ptr().cast(), &mut tokens) };
        match status {
            EmberStatus::Ok => Ok(tokens),
            status => Err(Refused { status, message: last_error() }),
        }
    }

    /// `engine_apply_chat_template`: the prompt JSON, or the refusal.
    pub fn apply_chat_template(&self, body: &str) -> Result<String, Refused> {
        let text =
            CString::new(body).map_err(|_| Refused { status: EmberStatus::InvalidUtf8, message: "NUL".into() })?;
        let mut out = ptr::null_mut();
        // SAFETY: a live engine, a NUL-terminated string and a writable pointer.
        let status = unsafe { engine_apply_chat_template(self.0, text.as_ptr(), &mut out) };
        match status {
            EmberStatus::Ok => Ok(owned(out)),
            status => Err(Refused { status, message: last_error() }),
        }
    }

    /// `engine_embed_vectors` on `body`, raw bytes (a C host may pass any; a NUL byte ends the string there).
    pub fn embed_vectors(&self, body: &[u8]) -> Result<Embeddings, Refused> {
        self.encode(engine_embed_vectors, body)
    }

    /// `engine_rerank_scores` on `body`, raw bytes.
    pub fn rerank_scores(&self, body: &[u8]) -> Result<Embeddings, Refused> {
        self.encode(engine_rerank_scores, body)
    }

    fn encode(
        &self,
        call: unsafe extern "C" fn(*mut EmberEngine, *const c_char, *mut *mut EmberEmbeddings) -> EmberStatus,
        body: &[u8],
    ) -> Result<Embeddings, Refused> {
        let text: Vec<u8> = body.iter().copied().chain([0]).collect();
        let mut handle = ptr::null_mut();
        // SAFETY: a live engine, a NUL-terminated byte string and a writable pointer.
        let status = unsafe { call(self.0, text.as_ptr().cast(), &mut handle) };
        match status {
            EmberStatus::Ok => Ok(Embeddings(handle)),
            status => Err(Refused { status, message: last_error() }),
        }
    }

    /// Submits `body` and reads it to its end: the response body, or why it was refused or failed.
    pub fn serve(&self, body: &str) -> Result<Value, String> {
        let request = self.submit(body).map_err(|r| format!("{:?}: {}", r.status, r.message))?;
        request.finish()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        engine_free(self.0);
    }
}

/// A submitted request, freed on drop.
pub struct Request<'e> {
    engine: &'e Engine,
    request: *mut EmberRequest,
}

impl Request<'_> {
    /// Polls every event to the end (the time cap of the suite catches a request that never ends), then returns
    /// the response body, or the error event's text.
    pub fn finish(&self) -> Result<Value, String> {
        let mut failure = None;
        loop {
            let mut event = std::mem::MaybeUninit::<EmberEvent>::uninit();
            // SAFETY: live engine and request handles, storage for one event.
            match unsafe { engine_poll(self.engine.0, self.request, -1, event.as_mut_ptr()) } {
                EmberStatus::Ok => {
                    // SAFETY: engine_poll wrote the whole event on EMBER_STATUS_OK.
                    let event = unsafe { event.assume_init() };
                    if event.kind == EmberEventKind::Error {
                        // SAFETY: an ERROR event's text is `text_len` bytes, valid until the next poll.
                        let bytes = unsafe { std::slice::from_raw_parts(event.text.cast::<u8>(), event.text_len) };
                        failure = Some(String::from_utf8_lossy(bytes).into_owned());
                    }
                }
                EmberStatus::StreamDone => break,
                status => return Err(format!("engine_poll: {status:?}: {}", last_error())),
            }
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        let mut out = ptr::null_mut();
        // SAFETY: a live request and a writable pointer.
        match unsafe { engine_response_json(self.request, &mut out) } {
            EmberStatus::Ok => serde_json::from_str(&owned(out)).map_err(|e| e.to_string()),
            status => Err(format!("engine_response_json: {status:?}: {}", last_error())),
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        engine_request_free(self.request);
    }
}

/// The process's resident memory now and at its peak since the last [`reset_peak`], in KiB.
pub fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets the peak that [`rss_kib`] reports to the current resident memory (Linux's `clear_refs` 5).
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `work`'s result and how long it took.
pub fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let result = work();
    (result, start.elapsed())
}

/// The result of `engine_embed_vectors` or `engine_rerank_scores`, freed on drop.
pub struct Embeddings(pub *mut EmberEmbeddings);

impl Embeddings {
    /// Its `count` rows of `dimensions` floats, read through the accessors.
    pub fn floats(&self) -> Result<Vec<f32>, String> {
        let (mut data, mut count, mut dimensions) = (ptr::null(), 0usize, 0usize);
        // SAFETY: a live handle and writable outputs.
        let statuses = unsafe {
            [
                engine_embeddings_floats(self.0, &mut data),
                engine_embeddings_count(self.0, &mut count),
                engine_embeddings_dimensions(self.0, &mut dimensions),
            ]
        };
        if statuses != [EmberStatus::Ok; 3] {
            return Err(format!("the accessors answered {statuses:?}: {}", last_error()));
        }
        // SAFETY: `count × dimensions` floats of the live result.
        Ok(unsafe { std::slice::from_raw_parts(data, count * dimensions) }.to_vec())
    }
}

impl Drop for Embeddings {
    fn drop(&mut self) {
        engine_embeddings_free(self.0);
    }
}
