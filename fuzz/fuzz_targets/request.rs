//! Arbitrary text as a request body, submitted to one engine on the real model (as `engine_submit` does) and
//! cancelled at once when it is served. The model comes from `EMBER_MODEL` or the default path (run from the
//! repository root).
#![no_main]

use std::sync::OnceLock;

use ember::engine::{Engine, EngineConfig};

#[path = "../../tests/common/parser_checks.rs"]
mod parser_checks;

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let config = EngineConfig { threads: 1, kv_cache_tokens: 2048, max_num_seqs: 8, ..Default::default() };
        Engine::new(config).unwrap_or_else(|e| panic!("{e}"))
    })
}

libfuzzer_sys::fuzz_target!(|text: &str| {
    parser_checks::check_request(engine(), text);
});
