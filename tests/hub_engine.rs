//! `engine_new` with a hub name as its `model` (what a newcomer's `Engine({"model": "org/repo:Q4_1"})` passes
//! through the C ABI): the real model served by the local hub stand-in (tests/hub_server), downloaded into the
//! cache with the download in the first half of the load's progress, loaded, and served; the second engine loads
//! from the cache without a request; a split model is downloaded and refused with what to do; a name the hub lacks
//! fails with the hub's answer. One test function: it sets the process's `HF_*` variables, which the library reads.

mod hub_server;

use std::ffi::{c_void, CStr, CString};
use std::path::PathBuf;
use std::ptr;
use std::sync::Arc;

use ember::ffi::{
    engine_free, engine_last_error_message, engine_new, engine_new_with_progress, EmberEngine, EmberStatus,
};
use ember::model::path::DEFAULT_MODEL_PATH;
use hub_server::{Content, HubServer, COMMIT};

fn last_error() -> String {
    // SAFETY: ember's last error is a NUL-terminated string valid until this thread's next ember call.
    unsafe { CStr::from_ptr(engine_last_error_message()) }.to_string_lossy().into_owned()
}

unsafe extern "C" fn record(userdata: *mut c_void, progress: f32) -> bool {
    // SAFETY: `userdata` is the `Vec<f32>` the test passed, alive for the call.
    unsafe { &mut *(userdata as *mut Vec<f32>) }.push(progress);
    true
}

/// `engine_new_with_progress` with `config`: the status, the engine (NULL on failure) and the fractions reported.
fn start(config: &str) -> (EmberStatus, *mut EmberEngine, Vec<f32>) {
    let config = CString::new(config).unwrap();
    let mut seen: Vec<f32> = Vec::new();
    let mut engine: *mut EmberEngine = ptr::null_mut();
    // SAFETY: a NUL-terminated config, a callback whose userdata is `seen`, and a place for the handle.
    let status = unsafe {
        engine_new_with_progress(config.as_ptr(), Some(record), &mut seen as *mut Vec<f32> as *mut c_void, &mut engine)
    };
    (status, engine, seen)
}

#[test]
fn an_engine_loads_a_model_named_on_the_hub() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_MODEL_PATH);
    let size = std::fs::metadata(&model).unwrap().len();
    let server = HubServer::start();
    let model_bytes = std::fs::read(&model).unwrap();
    let third = model_bytes.len() / 3;
    let part = |r: std::ops::Range<usize>| Content::Bytes(Arc::new(model_bytes[r].to_vec()));
    server.add_repo(
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
        vec![
            ("smollm2-135m-instruct-q4_1.gguf", Content::File(model.clone())),
            ("smollm2-135m-instruct-q8_0-00001-of-00003.gguf", part(0..third)),
            ("smollm2-135m-instruct-q8_0-00002-of-00003.gguf", part(third..2 * third)),
            ("smollm2-135m-instruct-q8_0-00003-of-00003.gguf", part(2 * third..model_bytes.len())),
        ],
    );
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hub-engine");
    let _ = std::fs::remove_dir_all(&cache);
    // The only test in this binary: nothing else reads the environment while it changes.
    std::env::set_var("HF_ENDPOINT", &server.endpoint);
    std::env::set_var("HF_HUB_CACHE", &cache);
    for unset in ["HF_HUB_OFFLINE", "HF_TOKEN", "EMBER_MODEL"] {
        std::env::remove_var(unset);
    }

    let (status, engine, seen) = start(r#"{"model": "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1", "threads": 2}"#);
    assert_eq!(status, EmberStatus::Ok, "{}", last_error());
    engine_free(engine);
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert_eq!((seen.first(), seen.last()), (Some(&0.0), Some(&1.0)), "{seen:?}");
    assert!(seen.iter().any(|&f| f > 0.0 && f < 0.5), "the download reports in the first half: {seen:?}");
    assert!(seen.contains(&0.5), "the load begins at half: {seen:?}");
    assert_eq!(server.served_bytes(), size);
    let cached = cache.join(format!(
        "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF/snapshots/{COMMIT}/smollm2-135m-instruct-q4_1.gguf"
    ));
    assert_eq!(std::fs::read(&cached).unwrap(), model_bytes);

    // Again, by engine_new: from the cache, without a request.
    let requests = server.seen().len();
    let config = CString::new(r#"{"model": "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:q4_1", "threads": 2}"#).unwrap();
    let mut engine: *mut EmberEngine = ptr::null_mut();
    // SAFETY: a NUL-terminated config and a place for the handle.
    assert_eq!(unsafe { engine_new(config.as_ptr(), &mut engine) }, EmberStatus::Ok, "{}", last_error());
    engine_free(engine);
    assert_eq!(server.seen().len(), requests);

    // A split model: every part downloaded, then refused with what to do.
    let (status, engine, _) = start(r#"{"model": "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q8_0"}"#);
    assert_eq!((status, engine), (EmberStatus::ModelLoadFailed, ptr::null_mut()));
    let message = last_error();
    assert!(message.contains("is split in 3 files") && message.contains("llama-gguf-split --merge"), "{message}");
    assert_eq!(server.served_bytes(), 2 * size);

    // A repository the hub lacks, and an invalid option before any download.
    let (status, _, _) = start(r#"{"model": "nobody/nothing:Q4_1"}"#);
    assert_eq!(status, EmberStatus::ModelLoadFailed);
    let message = last_error();
    assert!(message.contains("no file nobody/nothing:Q4_1 here") && message.contains("answered 404"), "{message}");
    let (status, _, _) = start(r#"{"model": "nobody/other:Q4_1", "threads": -1}"#);
    assert_eq!(status, EmberStatus::InvalidConfig, "{}", last_error());
    assert!(!server.seen().iter().any(|s| s.path.contains("nobody/other")));
}
