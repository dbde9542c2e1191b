//! `include/ember.h` is generated from `src/ffi/` by the cbindgen version pinned in Cargo.toml: this test
//! regenerates it and fails on any difference, so the committed header can never drift from the library.
//! `EMBER_BLESS_HEADER=1` rewrites the header instead (`make header`).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The header as the pinned cbindgen generates it now.
fn generate() -> String {
    let root = root();
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml is readable");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/ffi/mod.rs"))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen failed on src/ffi/: {e}"));
    let mut text = Vec::new();
    bindings.write(&mut text);
    String::from_utf8(text).expect("cbindgen writes UTF-8")
}

fn header_path() -> PathBuf {
    root().join("include/ember.h")
}

#[test]
fn committed_header_matches_the_generated_one() {
    let generated = generate();
    let path = header_path();
    if std::env::var("EMBER_BLESS_HEADER").as_deref() == Ok("1") {
        std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed.lines().zip(generated.lines()).position(|(a, b)| a != b);
        let line = line.unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{} is out of date (first difference at line {}): regenerate it with `make header` \
             (EMBER_BLESS_HEADER=1 cargo test --release --test header) and commit it",
            display(&path),
            line + 1
        );
    }
}

#[test]
fn version_macros_match_cargo_toml() {
    let header = generate();
    for (name, expected) in [
        ("EMBER_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("EMBER_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("EMBER_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        let define = format!("#define {name} {expected}\n");
        assert!(header.contains(&define), "the header lacks `{}`", define.trim_end());
    }
}

#[test]
fn every_export_is_documented_and_no_internal_item_leaks() {
    let header = generate();
    let exports = [
        "engine_new",
        "engine_new_with_progress",
        "engine_free",
        "engine_set_log_callback",
        "engine_submit",
        "engine_poll",
        "engine_cancel",
        "engine_request_free",
        "engine_get_timing_metrics",
        "engine_get_choice_timing_metrics",
        "engine_get_extended_metrics",
        "engine_get_token_timestamps",
        "engine_response_json",
        "engine_next_chunk_json",
        "engine_string_free",
        "engine_metrics_text",
        "engine_tokenize",
        "engine_detokenize",
        "engine_token_bytes",
        "engine_apply_chat_template",
        "engine_model_info_json",
        "engine_embed",
        "engine_rerank",
        "engine_embed_vectors",
        "engine_rerank_scores",
        "engine_embeddings_floats",
        "engine_embeddings_count",
        "engine_embeddings_dimensions",
        "engine_embeddings_input_tokens",
        "engine_embeddings_json",
        "engine_get_embeddings_timing_metrics",
        "engine_embeddings_free",
        "engine_status_message",
        "engine_last_error_message",
        "engine_version",
    ];
    let lines: Vec<&str> = header.lines().collect();
    for name in exports {
        // A declaration starts at column 0 with its return type; comment lines start with `/*` or ` *`.
        let declares = |l: &&str| {
            l.starts_with(|c: char| c.is_ascii_alphabetic())
                && (l.contains(&format!(" {name}(")) || l.contains(&format!("*{name}(")))
        };
        let at = lines.iter().position(declares).unwrap_or_else(|| panic!("{name} missing"));
        assert!(at > 0 && lines[at - 1].trim() == "*/", "{name} has no doc comment above it");
    }
    // Internal names that must never appear in the C API.
    let internals = [
        "Failure",
        "HandleTable",
        "RequestObject",
        "EngineObject",
        "EmbeddingsObject",
        "EncoderAnswer",
        "MAX_CHOICES",
        "Served",
        "Embedder",
    ];
    for internal in internals {
        assert!(!header.contains(internal), "{internal} leaked into the header");
    }
}

fn display(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}
