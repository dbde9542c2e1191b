//! A model file truncated, rewritten, deleted or replaced under a live engine (issue 15). With the default
//! `"load": "read"` the engine owns its copy of the weights, so nothing that happens to the file afterwards can
//! reach it: later requests answer exactly as before. With `"load": "mmap"` replacing the file by rename is
//! safe (the map keeps the old inode), and truncating it kills the process with SIGBUS — the documented reason
//! `"mmap"` is an opt-in, shown here in a child process.

use std::fs::{self, OpenOptions};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ember::engine::{BackendKind, Engine, EngineConfig, RequestOptions, SubmitRequest};
use ember::model::gguf::LoadMode;
use ember::model::path::resolve_model_path;
use ember::model::TokenId;

/// A private copy of the real model, removed when dropped.
struct ModelCopy(PathBuf);

impl ModelCopy {
    fn new(name: &str) -> Self {
        let source = resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
        let path = std::env::temp_dir().join(format!("ember-{}-{name}.gguf", std::process::id()));
        fs::copy(&source, &path).unwrap_or_else(|e| panic!("copying {}: {e}", source.display()));
        ModelCopy(path)
    }
}

impl Drop for ModelCopy {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn engine_on(path: &Path, load: LoadMode) -> Engine {
    let config = EngineConfig {
        model: Some(path.to_owned()),
        load,
        backend: BackendKind::Cpu,
        threads: 2,
        kv_cache_tokens: 1024,
        ..Default::default()
    };
    Engine::new(config).unwrap_or_else(|e| panic!("{e}"))
}

/// The greedy continuation of a fixed prompt (ids only, so any vocabulary works).
fn generate(engine: &Engine) -> Vec<TokenId> {
    let prompt: Vec<TokenId> = (100..116).collect();
    let h = engine
        .submit(SubmitRequest::with_options(prompt, RequestOptions { max_tokens: Some(8), ..Default::default() }))
        .expect("submit");
    h.wait();
    h.choices()[0].token_ids.clone()
}

fn truncate(path: &Path, len: u64) {
    OpenOptions::new().write(true).open(path).and_then(|f| f.set_len(len)).expect("truncating the copy");
}

#[test]
fn a_file_truncated_right_after_start_does_not_affect_a_read_engine() {
    let copy = ModelCopy::new("truncated-cold");
    let engine = engine_on(&copy.0, LoadMode::Read);
    truncate(&copy.0, 0);
    let after = generate(&engine);
    // The reference: the same engine configuration on an intact file.
    let intact = ModelCopy::new("truncated-cold-reference");
    assert_eq!(after, generate(&engine_on(&intact.0, LoadMode::Read)));
}

#[test]
fn a_file_truncated_rewritten_and_deleted_under_a_serving_engine_changes_nothing() {
    let copy = ModelCopy::new("truncated-warm");
    let engine = engine_on(&copy.0, LoadMode::Read);
    let before = generate(&engine);
    assert!(!before.is_empty());
    truncate(&copy.0, 4096);
    assert_eq!(generate(&engine), before, "after truncation");
    // Rewritten in place with other bytes (what `cp other model.gguf` does to an open file).
    fs::write(&copy.0, vec![0xA5u8; 1 << 20]).expect("rewriting");
    assert_eq!(generate(&engine), before, "after rewriting");
    fs::remove_file(&copy.0).expect("deleting");
    assert_eq!(generate(&engine), before, "after deletion");
    // And a new engine on the changed file gets a clean error, not a crash.
    fs::write(&copy.0, vec![0xA5u8; 4096]).expect("rewriting");
    let config = EngineConfig { model: Some(copy.0.clone()), backend: BackendKind::Cpu, ..Default::default() };
    let Err(err) = Engine::new(config).map(drop) else { panic!("a file of junk was accepted") };
    let err = err.to_string();
    assert!(err.contains("cannot load the model"), "{err}");
}

#[test]
fn a_file_replaced_by_rename_does_not_affect_a_mapped_engine() {
    let copy = ModelCopy::new("renamed");
    let engine = engine_on(&copy.0, LoadMode::Mmap);
    let before = generate(&engine);
    let replacement = copy.0.with_extension("new");
    fs::write(&replacement, vec![0u8; 4096]).expect("writing the replacement");
    fs::rename(&replacement, &copy.0).expect("renaming over the model");
    assert_eq!(generate(&engine), before);
}

/// SIGBUS's number on Linux (x86_64 and aarch64).
const SIGBUS: i32 = 7;

/// The child process of the next test: an engine mapping `path`, the file truncated, then a read of the map.
const CHILD_ENV: &str = "EMBER_TEST_MMAP_TRUNCATED_CHILD";

#[test]
fn a_mapped_file_truncated_under_the_engine_raises_sigbus() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        let engine = engine_on(Path::new(&path), LoadMode::Mmap);
        truncate(Path::new(&path), 4096);
        // The CPU backend packed and copied the weights it needs; the file's SHA-256 reads the map.
        let _ = engine.model_sha256();
        return; // Not reached: the tensor data's pages are past the new end of the file.
    }
    let copy = ModelCopy::new("mmap-truncated");
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_mapped_file_truncated_under_the_engine_raises_sigbus"])
        .args(["--test-threads", "1"])
        .env(CHILD_ENV, &copy.0)
        .output()
        .expect("running the child")
        .status;
    assert_eq!(status.signal(), Some(SIGBUS), "{status:?}");
}
