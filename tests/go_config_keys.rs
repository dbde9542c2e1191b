//! The Go binding's `Config` (bindings/go/engine.go) has one field per key of `engine_new`'s JSON: its `json`
//! tags are held to the engine's own list (`config_keys`, the keys `EngineConfig` serializes to), so a key added
//! to the engine and forgotten in Go fails here, and so does a Go field the engine would refuse.

use std::path::PathBuf;

use ember::engine::config_json::config_keys;

/// The `json:"..."` names of the fields of `type Config struct` in the Go file, in order (`json:"-"` excluded).
fn go_config_tags(go: &str) -> Vec<String> {
    let start = go.find("type Config struct {").expect("bindings/go/engine.go declares type Config struct");
    let body = &go[start..start + go[start..].find("\n}\n").expect("the struct ends")];
    body.lines()
        .filter_map(|line| {
            let tag = line.split("json:\"").nth(1)?;
            let name = tag.split([',', '"']).next()?;
            (name != "-").then(|| name.to_owned())
        })
        .collect()
}

#[test]
fn the_go_config_has_exactly_the_engines_keys() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bindings/go/engine.go");
    let go = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut tags = go_config_tags(&go);
    let mut keys: Vec<String> = config_keys().iter().map(|k| (*k).to_owned()).collect();
    tags.sort();
    keys.sort();
    let missing: Vec<&String> = keys.iter().filter(|k| !tags.contains(k)).collect();
    let unknown: Vec<&String> = tags.iter().filter(|t| !keys.contains(t)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "Go Config lacks {missing:?}; has keys the engine refuses: {unknown:?}"
    );
}

#[test]
fn the_tags_are_read_from_the_struct() {
    let go = "type Config struct {\n\tModel string `json:\"model,omitempty\"`\n\tLog LogFunc `json:\"-\"`\n\
              \tSeed uint64 `json:\"seed\"`\n}\n";
    assert_eq!(go_config_tags(go), ["model", "seed"]);
}
