//! Arbitrary bytes as a GGUF file: the reader (header, metadata, tensor table) and what loading reads next.
#![no_main]

#[path = "../../tests/common/parser_checks.rs"]
mod parser_checks;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    parser_checks::check_gguf(bytes);
});
