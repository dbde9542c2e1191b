//! Arbitrary text as `engine_new`'s configuration JSON.
#![no_main]

#[path = "../../tests/common/parser_checks.rs"]
mod parser_checks;

libfuzzer_sys::fuzz_target!(|text: &str| {
    parser_checks::check_config(text);
});
