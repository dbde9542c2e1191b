//! Engine handles (`EmberEngine`): `engine_new` and `engine_free`.

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::ThreadId;

use super::args::{optional_str, Out};
use super::boundary::{boundary, Failure};
use super::log::current_logger;
use super::registry::{to_pointer, ENGINES};
use super::status::EmberStatus;
use crate::engine::embed::{Embedder, Loaded};
use crate::engine::{self, EngineConfig, EngineError, ReadyQueue};
use crate::model::gguf::GgufFile;
use crate::model::locate::{locate_model, names_hub_model};
use crate::model::path::resolve_model_path;
use crate::model::progress::LoadProgress;
use crate::protocol::responses::ResponseStore;

/// An engine: a model loaded in memory, a KV cache, and the thread that serves the requests submitted to it.
/// Opaque; a handle from `engine_new`, freed with `engine_free`.
pub struct EmberEngine {
    _opaque: [u8; 0],
}

/// What an engine serves: generation (a decoder model), or embeddings (an encoder model: `engine_embed`).
pub(super) enum Served {
    // Both boxed: the variants' sizes differ, and an engine object is one allocation either way.
    Generator(Box<engine::Engine>),
    Embedder(Box<Embedder>),
}

/// What an engine handle names.
pub(super) struct EngineObject {
    /// The running engine; `None` once `engine_free` has shut it down. Read-locked while a request is submitted,
    /// write-locked only by `engine_free` to take it, so a free waits for submissions in progress and a
    /// submission after the free finds `None`.
    engine: RwLock<Option<Served>>,
    /// The waiting point of the requests submitted with `engine_submit_with_user_data` (`events.rs`).
    pub events: Arc<ReadyQueue>,
    /// Held through an `engine_wait_events` call, so that calls on one engine take events one after the other
    /// and a request's records reach the host in order.
    pub events_taker: Mutex<()>,
    /// The texts of the records each thread took last (`EmberEventRecord.event.text`), kept until that thread's
    /// next `engine_wait_events` on this engine.
    pub event_texts: Mutex<Vec<(ThreadId, Vec<String>)>>,
    /// The OpenAI Responses this engine answered with `store`, for `previous_response_id`.
    pub responses: Arc<ResponseStore>,
}

impl EngineObject {
    /// Runs `f` on the engine, unless it has been freed or serves embeddings only.
    pub fn with_engine<R>(&self, f: impl FnOnce(&engine::Engine) -> R) -> Result<R, Failure> {
        let guard = self.engine.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(Served::Generator(engine)) => Ok(f(engine)),
            Some(Served::Embedder(e)) => Err(Failure::new(
                EmberStatus::InvalidRequest,
                format!(
                    "this engine's model is an embedding model ({}): it serves embeddings (engine_embed) and reranking \
                     (engine_rerank), not generation",
                    e.shape().arch
                ),
            )),
            None => Err(Failure::invalid_handle("the engine has been freed")),
        }
    }

    /// Runs `f` on what the engine serves, generation or embeddings, unless it has been freed: for the calls both
    /// kinds answer (tokenizing, model information).
    pub fn with_served<R>(&self, f: impl FnOnce(&Served) -> R) -> Result<R, Failure> {
        let guard = self.engine.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(served) => Ok(f(served)),
            None => Err(Failure::invalid_handle("the engine has been freed")),
        }
    }

    /// Runs `f` on the engine's embedder, unless it has been freed or its model generates.
    pub fn with_embedder<R>(&self, f: impl FnOnce(&Embedder) -> R) -> Result<R, Failure> {
        let guard = self.engine.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(Served::Embedder(embedder)) => Ok(f(embedder)),
            Some(Served::Generator(_)) => Err(Failure::new(
                EmberStatus::InvalidRequest,
                "this engine's model generates text; embeddings need an encoder model (bert, nomic-bert), a decoder \
                 whose file declares a pooling (Qwen3-Embedding, Qwen3-Reranker), or the engine option \"pooling\"",
            )),
            None => Err(Failure::invalid_handle("the engine has been freed")),
        }
    }

    /// Whether the engine is still live (not freed), whatever it serves.
    pub fn is_live(&self) -> bool {
        self.engine.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// Creates an engine: loads the model and starts the engine thread (this takes as long as loading the model).
///
/// `config_json` is a JSON object of options (see `docs/c_api.md`; e.g. `{"model": "path.gguf", "threads": 2}`);
/// absent keys keep their defaults, unknown keys are refused. NULL or "" means all defaults (the model then comes
/// from `EMBER_MODEL`, else the default model in the Hugging Face cache, else
/// `models/SmolLM2-135M-Instruct.Q4_1.gguf` relative to the current directory). A `model` (or `EMBER_MODEL`) that
/// is a hub name, `org/repo:QUANT` or `hf://org/repo/file.gguf`, is taken from the Hugging Face cache, downloaded
/// into it first when missing (`docs/models.md`). Log lines go to the callback set by `engine_set_log_callback`
/// before this call.
///
/// Returns `EMBER_STATUS_OK` and writes the new handle to `*out`; on failure `*out` is untouched:
/// `EMBER_STATUS_INVALID_CONFIG` (bad JSON, unknown key, conflicting or out-of-range values),
/// `EMBER_STATUS_MODEL_LOAD_FAILED`, `EMBER_STATUS_ENGINE_START_FAILED`, `EMBER_STATUS_INVALID_UTF8`,
/// `EMBER_STATUS_INVALID_ARGUMENT` (`out` is NULL).
///
/// Thread safety: any thread; engines are independent of each other. Ownership: the caller owns the handle and
/// frees it with `engine_free`.
///
/// # Safety
/// `config_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn engine_new(config_json: *const c_char, out: *mut *mut EmberEngine) -> EmberStatus {
    boundary("engine_new", || {
        // SAFETY: as this function's contract says, which is `create`'s.
        unsafe { create(config_json, &mut LoadProgress::silent(), out) }
    })
}

/// Called by `engine_new_with_progress` as the model loads: `userdata` as given, and the fraction loaded, from 0
/// to 1, never decreasing (1 exactly once, last, when the engine is ready). Return true to go on, false to
/// cancel the load.
///
/// It is called on the thread that called `engine_new_with_progress`, during that call only; it must return
/// normally (no C++ exception, no `longjmp`) and must not call ember functions on the engine being created.
pub type EmberLoadProgressCallback = Option<unsafe extern "C" fn(userdata: *mut c_void, progress: f32) -> bool>;

/// `engine_new`, reporting the load's progress to `callback` (llama.cpp's `progress_callback`; NULL: none, as
/// `engine_new`). The fraction advances as the file is read (`"load": "read"`, or `"auto"` under 1 GiB, in 16 MiB
/// chunks: the file's length weighs as much as the backend's start) and once more when the backend serves; with a
/// mapped file it goes from 0 to 1 in one step. When the callback returns false, the load stops at once (between two
/// chunks, or before the engine is handed over): `EMBER_STATUS_LOAD_CANCELLED`, `*out` untouched, and nothing
/// left running or allocated. The load time is in `EmberStats.model_load_time_ms`.
///
/// Returns what `engine_new` returns, and `EMBER_STATUS_LOAD_CANCELLED`.
///
/// Thread safety: as `engine_new`. Ownership: `userdata` is only passed back to `callback`, during this call.
///
/// # Safety
/// As `engine_new`; `callback`, when not NULL, must follow the rules of `EmberLoadProgressCallback`.
#[no_mangle]
pub unsafe extern "C" fn engine_new_with_progress(
    config_json: *const c_char,
    callback: EmberLoadProgressCallback,
    userdata: *mut c_void,
    out: *mut *mut EmberEngine,
) -> EmberStatus {
    boundary("engine_new_with_progress", || {
        let mut report = |fraction: f32| match callback {
            // SAFETY: the host's function, called as `EmberLoadProgressCallback` says, on the calling thread
            // during this call.
            Some(callback) => unsafe { callback(userdata, fraction) },
            None => true,
        };
        let mut progress = LoadProgress::new(Some(&mut report));
        // SAFETY: as this function's contract says, which is `create`'s.
        unsafe { create(config_json, &mut progress, out) }
    })
}

/// Creates an engine from `config_json`, reporting its load to `progress`, and writes its handle to `*out`.
///
/// # Safety
/// `config_json` is NULL or a NUL-terminated string; `out` is NULL or points to writable storage for a pointer.
unsafe fn create(
    config_json: *const c_char,
    progress: &mut LoadProgress<'_>,
    out: *mut *mut EmberEngine,
) -> Result<(), Failure> {
    let out = Out::new(out, "out")?;
    // SAFETY: NULL or NUL-terminated, by this function's contract.
    let json = unsafe { optional_str(config_json, "config_json") }?.unwrap_or("");
    let mut config =
        EngineConfig::from_json(json).map_err(|e| Failure::new(EmberStatus::InvalidConfig, e.to_string()))?;
    // A hub name resolves (downloading when the cache lacks it) once, here, after the options are checked: the
    // encoder check and the engine then open the file.
    if names_hub_model(config.model.as_deref()) {
        config.validate().map_err(|e| Failure::new(EmberStatus::InvalidConfig, e.to_string()))?;
        let path = locate_model(config.model.as_deref(), progress).map_err(|e| match progress.cancelled() {
            true => Failure::new(EmberStatus::LoadCancelled, EngineError::LoadCancelled.to_string()),
            false => Failure::new(EmberStatus::ModelLoadFailed, EngineError::Model(e).to_string()),
        })?;
        config.model = Some(path);
    }
    let served = match open_encoder(&config, progress)? {
        Some(embedder) => Served::Embedder(Box::new(embedder)),
        None => Served::Generator(Box::new(start_generator(config, progress)?)),
    };
    let events = ReadyQueue::new().map_err(|e| {
        Failure::new(EmberStatus::EngineStartFailed, format!("cannot create the event descriptor: {e}"))
    })?;
    let object = EngineObject {
        engine: RwLock::new(Some(served)),
        events: Arc::new(events),
        events_taker: Mutex::new(()),
        event_texts: Mutex::new(Vec::new()),
        responses: Arc::new(ResponseStore::new()),
    };
    // On failure here the engine is dropped, which stops its thread: nothing leaks.
    let handle = ENGINES.insert(Arc::new(object))?;
    // SAFETY: `out` is non-NULL and writable by this function's contract.
    unsafe { out.write(to_pointer(handle)) };
    Ok(())
}

/// The embedder of `config`'s model when that model is an encoder (`model::encoder`); `None` for any other file
/// (the generation engine then loads it and reports what is wrong with it).
fn open_encoder(config: &EngineConfig, progress: &mut LoadProgress<'_>) -> Result<Option<Embedder>, Failure> {
    let Ok(path) = resolve_model_path(config.model.as_deref()) else { return Ok(None) };
    let Ok(file) = GgufFile::open_with(&path, config.load) else { return Ok(None) };
    if !Loaded::is_embedding_model(&file, config.pooling) {
        return Ok(None);
    }
    if !progress.begin(file.file_len()) {
        return Err(Failure::new(EmberStatus::LoadCancelled, "the load was cancelled"));
    }
    let embedder = Embedder::for_engine(Arc::new(file), &path, config)
        .map_err(|e| Failure::new(EmberStatus::ModelLoadFailed, format!("{}: {e}", path.display())))?;
    if !progress.finish() {
        return Err(Failure::new(EmberStatus::LoadCancelled, "the load was cancelled"));
    }
    Ok(Some(embedder))
}

/// Starts the generation engine of `config`.
fn start_generator(config: EngineConfig, progress: &mut LoadProgress<'_>) -> Result<engine::Engine, Failure> {
    engine::Engine::start_reporting(config, None, current_logger(), progress).map_err(|e| {
        let status = match e {
            EngineError::Config(_) => EmberStatus::InvalidConfig,
            EngineError::Model(_) => EmberStatus::ModelLoadFailed,
            EngineError::Backend(_) | EngineError::Thread(_) => EmberStatus::EngineStartFailed,
            EngineError::LoadCancelled => EmberStatus::LoadCancelled,
        };
        Failure::new(status, e.to_string())
    })
}

/// Frees an engine: cancels its unfinished requests (they end with `EMBER_FINISH_REASON_CANCELLED`), stops and joins
/// the engine thread, and releases the model. Returns when all of that is done. NULL is a no-op.
///
/// The engine's request handles stay valid for `engine_get_*_metrics`, `engine_response_json` and
/// `engine_request_free`, which the host must still call; `engine_poll` and `engine_next_chunk_json` refuse them
/// from now on, since they take the freed engine. A freed, stale or foreign handle (a double free) does nothing
/// and leaves the reason in `engine_last_error_message()`.
///
/// Thread safety: any thread, except from inside the log callback. Calls on this engine in other threads either
/// complete before the engine stops or fail with `EMBER_STATUS_INVALID_HANDLE`.
#[no_mangle]
pub extern "C" fn engine_free(engine: *mut EmberEngine) {
    let _ = boundary("engine_free", || {
        if engine.is_null() {
            return Ok(());
        }
        let object = ENGINES.remove(engine.addr())?;
        // Take the engine out under the write lock, drop it (joining the thread) after releasing the lock.
        let running = object.engine.write().unwrap_or_else(|e| e.into_inner()).take();
        drop(running);
        // A host thread blocked in `engine_wait_events` returns, and finds the engine freed.
        object.events.wakeup();
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::last_error;
    use std::ptr;

    #[test]
    fn refused_configurations_leave_out_untouched() {
        let mut out: *mut EmberEngine = ptr::null_mut();
        let cases: [(&std::ffi::CStr, EmberStatus, &str); 10] = [
            (c"{\"load\": \"disk\"}", EmberStatus::InvalidConfig, "load: unknown load mode \"disk\""),
            (c"{\"threads\": \"two\"}", EmberStatus::InvalidConfig, "engine_new: threads: invalid type"),
            (c"{\"max_num_seq\": 4}", EmberStatus::InvalidConfig, "unknown configuration key \"max_num_seq\""),
            (c"[]", EmberStatus::InvalidConfig, "must be a JSON object"),
            (c"null", EmberStatus::InvalidConfig, "must be a JSON object"),
            (c"3", EmberStatus::InvalidConfig, "must be a JSON object"),
            (
                c"{\"enable_per_request_metrics\": true, \"disable_log_stats\": true}",
                EmberStatus::InvalidConfig,
                "disable_log_stats",
            ),
            (c"{\"model\": \"/nonexistent/model.gguf\"}", EmberStatus::ModelLoadFailed, "/nonexistent/model.gguf"),
            (c"{\"model\": \"/\"}", EmberStatus::ModelLoadFailed, "is a directory, not a regular file"),
            (c"{\"model\": \"/dev/null\"}", EmberStatus::ModelLoadFailed, "is not a regular file"),
        ];
        for (json, status, needle) in cases {
            // SAFETY: a C string literal and a writable pointer.
            assert_eq!(unsafe { engine_new(json.as_ptr(), &mut out) }, status, "{json:?}");
            assert!(last_error::get().contains(needle), "{}", last_error::get());
            assert!(out.is_null());
        }
        // SAFETY: NULL `out` is refused before anything is read.
        let status = unsafe { engine_new(ptr::null(), ptr::null_mut()) };
        assert_eq!(status, EmberStatus::InvalidArgument);
        let bad_utf8 = b"{\"model\": \"\xff\"}\0";
        // SAFETY: NUL-terminated bytes and a writable pointer.
        assert_eq!(unsafe { engine_new(bad_utf8.as_ptr().cast(), &mut out) }, EmberStatus::InvalidUtf8);
    }

    #[test]
    fn freeing_null_or_a_bogus_handle_is_harmless_and_reported() {
        last_error::set("stale".into());
        engine_free(ptr::null_mut());
        assert_eq!(last_error::get(), "", "NULL is a no-op, and a successful call");
        engine_free(to_pointer(0xdead_beef));
        assert!(last_error::get().starts_with("engine_free: "), "{}", last_error::get());
    }
}
