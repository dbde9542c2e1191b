//! The Python binding (bindings/python) restates parts of the C ABI in Python: the enumerations, the event
//! structs it reads through ctypes, and the version. This test holds each to the header and Cargo.toml, so that a
//! change in Rust that the binding misses fails here (the versioned metric structs are held by
//! `c_struct_fields.rs`). Its behaviour is tested by its own pytest suite (`make python-test`).

use std::collections::BTreeMap;
use std::path::PathBuf;

fn read(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

const CONSTANTS: &str = "bindings/python/src/ember/_constants.py";
const STRUCTS: &str = "bindings/python/src/ember/_structs.py";

/// `NAME = VALUE` members of a C enum (or `#define` family) with this prefix, as (NAME without it, VALUE).
fn header_values(header: &str, prefix: &str) -> BTreeMap<String, u32> {
    header
        .lines()
        .map(|l| l.trim().trim_start_matches("#define ").trim_end_matches(','))
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (name, value) = rest.split_once(" = ").or_else(|| rest.split_once(' '))?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// The `    NAME = VALUE` members of `class NAME(IntEnum):` in the Python constants.
fn python_enum(python: &str, class: &str) -> BTreeMap<String, u32> {
    let start = python.find(&format!("class {class}(IntEnum):")).unwrap_or_else(|| panic!("no enum {class}"));
    let body = &python[start..];
    let end = body[1..].find("\nclass ").map_or(body.len(), |i| i + 1);
    body[..end]
        .lines()
        .filter_map(|l| {
            let (name, value) = l.strip_prefix("    ")?.split_once(" = ")?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_enums_are_the_headers() {
    let (header, python) = (read("include/ember.h"), read(CONSTANTS));
    for (class, prefix) in [
        ("Status", "EMBER_STATUS_"),
        ("EventKind", "EMBER_EVENT_KIND_"),
        ("FinishReason", "EMBER_FINISH_REASON_"),
        ("CpuKernels", "EMBER_CPU_KERNELS_"),
        ("LogLevel", "EMBER_LOG_LEVEL_"),
        ("API", "EMBER_API_"),
    ] {
        let expected = header_values(&header, prefix);
        assert!(!expected.is_empty(), "no {prefix} values in the header");
        assert_eq!(python_enum(&python, class), expected, "{class} in {CONSTANTS}");
    }
    for (name, define) in [
        ("DELIVERY_POLL", "EMBER_DELIVERY_POLL"),
        ("DELIVERY_EVENTS", "EMBER_DELIVERY_EVENTS"),
        ("DELIVERY_CHUNKS", "EMBER_DELIVERY_CHUNKS"),
    ] {
        let value = header_values(&header, "")[define];
        assert!(python.contains(&format!("\n{name} = {value}\n")), "{name} is not {value} in {CONSTANTS}");
    }
}

#[test]
fn the_event_structs_are_the_headers() {
    let (header, python) = (read("include/ember.h"), read(STRUCTS));
    for (c_name, class) in [("EmberEvent", "EventStruct"), ("EmberEventRecord", "EventRecordStruct")] {
        let start = header.find(&format!("typedef struct {c_name} {{")).expect("the struct is in the header");
        let body = &header[start..header[start..].find(&format!("}} {c_name};")).expect("it ends") + start];
        let expected: Vec<&str> = body
            .lines()
            .map(str::trim)
            .filter(|l| l.ends_with(';') && !l.starts_with('*'))
            .map(|l| l.trim_end_matches(';').rsplit(' ').next().expect("a declaration").trim_start_matches('*'))
            .collect();
        let start = python.find(&format!("class {class}(ctypes.Structure):")).expect("the class is there");
        let fields: Vec<&str> = python[start..]
            .lines()
            .skip_while(|l| !l.contains("_fields_"))
            .skip(1)
            .take_while(|l| l.trim_start().starts_with("(\""))
            .map(|l| l.trim_start().trim_start_matches("(\"").split('"').next().expect("a name"))
            .collect();
        assert_eq!(fields, expected, "{class} in {STRUCTS}");
    }
}

#[test]
fn the_versions_are_the_crates() {
    let version = env!("CARGO_PKG_VERSION");
    assert!(read("bindings/python/pyproject.toml").contains(&format!("\nversion = \"{version}\"\n")));
    assert!(read("bindings/python/src/ember/_lib.py").contains(&format!("\nBINDING_VERSION = \"{version}\"\n")));
}
