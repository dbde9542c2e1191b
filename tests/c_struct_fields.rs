//! The versioned C structs' fields appear in several places: the Rust struct (whose `versioned_fields!` list is
//! the one list, checked against the struct's layout at compile time), the generated header's struct and its
//! presence bits, the Go binding that converts each field, and the docs that define them. This test holds every
//! other place to the list, so a field added in Rust and forgotten elsewhere fails here.

use std::path::PathBuf;

use ember::ffi::{EmberExtendedTimingMetrics, EmberPerRequestTimingMetrics, EmberStats};

fn read(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// One versioned struct: its name, its data fields, the prefix of its presence bits, the Go file that converts
/// it and the doc that defines its fields.
struct Versioned {
    name: &'static str,
    fields: &'static [&'static str],
    bit_prefix: &'static str,
    go_file: &'static str,
    doc: &'static str,
}

const STRUCTS: [Versioned; 3] = [
    Versioned {
        name: "EmberPerRequestTimingMetrics",
        fields: EmberPerRequestTimingMetrics::FIELD_NAMES,
        bit_prefix: "EMBER_TIMING_",
        go_file: "bindings/go/metrics.go",
        doc: "docs/per_request_metrics.md",
    },
    Versioned {
        name: "EmberExtendedTimingMetrics",
        fields: EmberExtendedTimingMetrics::FIELD_NAMES,
        bit_prefix: "EMBER_EXTENDED_",
        go_file: "bindings/go/metrics.go",
        doc: "docs/per_request_metrics.md",
    },
    Versioned {
        name: "EmberStats",
        fields: EmberStats::FIELD_NAMES,
        bit_prefix: "EMBER_STATS_",
        go_file: "bindings/go/engine.go",
        doc: "docs/c_api.md",
    },
];

/// The field names of `typedef struct NAME { ... } NAME;` in the header, in order.
fn header_fields(header: &str, name: &str) -> Vec<String> {
    let start = header.find(&format!("typedef struct {name} {{")).unwrap_or_else(|| panic!("{name} not in header"));
    let body = &header[start..];
    let body = &body[..body.find(&format!("}} {name};")).expect("the struct ends")];
    body.lines()
        .map(str::trim)
        .filter(|l| l.ends_with(';') && !l.starts_with('*') && !l.starts_with("/*"))
        .map(|l| l.trim_end_matches(';').rsplit(' ').next().expect("a declaration").to_owned())
        .collect()
}

#[test]
fn the_header_declares_each_struct_as_listed_with_its_presence_bits() {
    let header = read("include/ember.h");
    for s in &STRUCTS {
        let mut expected = vec!["struct_size".to_owned(), "present".to_owned()];
        expected.extend(s.fields.iter().map(|f| f.to_string()));
        assert_eq!(header_fields(&header, s.name), expected, "{}", s.name);
        for (i, field) in s.fields.iter().enumerate() {
            let define = format!("#define {}{} (1 << {i})", s.bit_prefix, field.to_uppercase());
            assert!(header.contains(&define), "{}: missing `{define}`", s.name);
        }
    }
}

#[test]
fn the_go_binding_converts_every_field() {
    for s in &STRUCTS {
        let go = read(s.go_file);
        for field in s.fields {
            assert!(go.contains(&format!("out.{field})")), "{}: {} does not convert `{field}`", s.name, s.go_file);
        }
    }
}

#[test]
fn the_docs_define_every_field() {
    for s in &STRUCTS {
        let doc = read(s.doc);
        for field in s.fields {
            assert!(doc.contains(&format!("`{field}`")), "{}: {} does not mention `{field}`", s.name, s.doc);
        }
    }
}
