//! `threads` above the CPUs available to the process is capped, with a warning naming the key, and the engine
//! still serves: an oversubscribed spinning pool made a 4-token request take seconds (issue 15).

mod common;

use std::sync::{Arc, Mutex};

use ember::engine::{BackendKind, Engine, EngineConfig, LogLevel, Logger};

#[test]
fn more_threads_than_cpus_are_capped_and_a_short_request_completes() {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let asked = 512;
    assert!(available < asked, "this test needs fewer than {asked} CPUs");
    let lines = Arc::new(Mutex::new(Vec::<(LogLevel, String)>::new()));
    let sink = lines.clone();
    let logger = Logger::new(move |level, line| sink.lock().unwrap().push((level, line.to_owned())));
    let config =
        EngineConfig { threads: asked, backend: BackendKind::Cpu, kv_cache_tokens: 1024, ..Default::default() };
    let engine = Engine::with_model(config, common::model(), logger).unwrap_or_else(|e| panic!("{e}"));

    let serving = engine.cpu_serving().expect("backend cpu");
    assert_eq!(serving.threads, available, "capped at the available CPUs");
    let warned = lines.lock().unwrap().iter().any(|(level, line)| {
        *level == LogLevel::Warn && line.starts_with("threads = 512 ") && line.contains(&format!("using {available}"))
    });
    assert!(warned, "no warning naming threads: {:?}", lines.lock().unwrap());

    let ids = common::ids_of(&engine.submit(common::greedy("hi", 4)).unwrap());
    assert!(!ids.is_empty() && ids.len() <= 4, "{ids:?}");
}
