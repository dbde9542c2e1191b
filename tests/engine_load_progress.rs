//! The load progress of `engine_new_with_progress` (`Engine::start_reporting`): fractions from 0 to 1, never
//! decreasing, 1 exactly once and last; a `false` from the host at any report cancels the load and leaves no
//! engine thread behind. One test function: it counts the process's engine threads, which tests running in
//! parallel would change.

use std::fs;
use std::time::Duration;

use ember::engine::{BackendKind, Engine, EngineConfig, EngineError, Logger};
use ember::model::gguf::LoadMode;
use ember::model::path::resolve_model_path;
use ember::model::progress::LoadProgress;

fn config(load: LoadMode) -> EngineConfig {
    EngineConfig { load, backend: BackendKind::Cpu, threads: 2, kv_cache_tokens: 1024, ..Default::default() }
}

/// Threads of this process named by the engine (`ember-engine`).
fn engine_threads() -> usize {
    fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "ember-engine")
        .count()
}

/// Starts an engine reporting to a host that answers `false` at its `cancel_at`-th report (never when `None`);
/// returns the outcome and every fraction reported.
fn start(load: LoadMode, cancel_at: Option<usize>) -> (Result<Engine, EngineError>, Vec<f32>) {
    let mut seen = Vec::new();
    let mut report = |fraction: f32| {
        seen.push(fraction);
        Some(seen.len()) != cancel_at
    };
    let mut progress = LoadProgress::new(Some(&mut report));
    let result = Engine::start_reporting(config(load), None, Logger::silent(), &mut progress);
    (result, seen)
}

#[test]
fn progress_rises_to_one_and_a_false_answer_cancels_at_any_report() {
    let model_len = fs::metadata(resolve_model_path(None).unwrap()).unwrap().len();
    // Read in 16 MiB chunks: 0, then one report per chunk, then 1 once the backend serves.
    let chunks = model_len.div_ceil(16 << 20) as usize;

    let (engine, read) = start(LoadMode::Read, None);
    let engine = engine.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.len(), chunks + 2, "{read:?}");
    assert_eq!(read.first(), Some(&0.0));
    assert_eq!(read.last(), Some(&1.0));
    assert!(read.windows(2).all(|w| w[0] <= w[1]), "{read:?}");
    assert_eq!(read.iter().filter(|&&f| f == 1.0).count(), 1, "{read:?}");
    // The read is half the work: the file's length again stands for building the backend.
    assert!((read[chunks] - 0.5).abs() < 1e-3, "{read:?}");
    assert!(engine.load_time() > Duration::ZERO);
    drop(engine);

    // A map reads nothing: 0, then 1.
    let (engine, mapped) = start(LoadMode::Mmap, None);
    assert!(engine.is_ok());
    assert_eq!(mapped, [0.0, 1.0]);
    drop(engine);
    assert_eq!(engine_threads(), 0);

    // Cancelled at the first report (before reading), in the middle of the read, and at the last report (the
    // engine was running: it is stopped and joined before the call returns).
    for cancel_at in [1, 3, chunks + 2] {
        let (result, seen) = start(LoadMode::Read, Some(cancel_at));
        assert!(matches!(result, Err(EngineError::LoadCancelled)), "cancel at {cancel_at}: {seen:?}");
        assert_eq!(seen.len(), cancel_at, "no report after the cancel: {seen:?}");
        assert_eq!(engine_threads(), 0, "cancel at {cancel_at}");
    }
    let (result, _) = start(LoadMode::Mmap, Some(2));
    assert!(matches!(result, Err(EngineError::LoadCancelled)));
    assert_eq!(engine_threads(), 0);
}
