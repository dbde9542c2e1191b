//! The versioned C structs' fields appear in several places: the Rust struct (whose `versioned_fields!` list is
//! the one list, checked against the struct's layout at compile time), the generated header's struct and its
//! presence bits, the Go binding that converts each field, the Python binding that declares each with its C type,
//! and the docs that define them. This test holds every
//! other place to the list, so a field added in Rust and forgotten elsewhere fails here.

use std::path::PathBuf;

use ember::ffi::{EmberExtendedTimingMetrics, EmberPerRequestTimingMetrics, EmberStats};

fn read(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// One versioned struct: its name, its data fields, the prefix of its presence bits, the Go file that converts
/// it, the Python dataclass that declares it (in `PYTHON_STRUCTS`) and the doc that defines its fields.
struct Versioned {
    name: &'static str,
    fields: &'static [&'static str],
    bit_prefix: &'static str,
    go_file: &'static str,
    python_class: &'static str,
    doc: &'static str,
}

const PYTHON_STRUCTS: &str = "bindings/python/src/ember/_structs.py";

const STRUCTS: [Versioned; 3] = [
    Versioned {
        name: "EmberPerRequestTimingMetrics",
        fields: EmberPerRequestTimingMetrics::FIELD_NAMES,
        bit_prefix: "EMBER_TIMING_",
        go_file: "bindings/go/metrics.go",
        python_class: "TimingMetrics",
        doc: "docs/per_request_metrics.md",
    },
    Versioned {
        name: "EmberExtendedTimingMetrics",
        fields: EmberExtendedTimingMetrics::FIELD_NAMES,
        bit_prefix: "EMBER_EXTENDED_",
        go_file: "bindings/go/metrics.go",
        python_class: "ExtendedMetrics",
        doc: "docs/per_request_metrics.md",
    },
    Versioned {
        name: "EmberStats",
        fields: EmberStats::FIELD_NAMES,
        bit_prefix: "EMBER_STATS_",
        go_file: "bindings/go/engine.go",
        python_class: "Stats",
        doc: "docs/c_api.md",
    },
];

/// The (C type, field name) pairs of `typedef struct NAME { ... } NAME;` in the header, in order.
fn header_declarations(header: &str, name: &str) -> Vec<(String, String)> {
    let start = header.find(&format!("typedef struct {name} {{")).unwrap_or_else(|| panic!("{name} not in header"));
    let body = &header[start..];
    let body = &body[..body.find(&format!("}} {name};")).expect("the struct ends")];
    body.lines()
        .map(str::trim)
        .filter(|l| l.ends_with(';') && !l.starts_with('*') && !l.starts_with("/*"))
        .map(|l| {
            let (ty, field) = l.trim_end_matches(';').rsplit_once(' ').expect("a declaration");
            (ty.to_owned(), field.to_owned())
        })
        .collect()
}

/// The field names of a header struct, in order.
fn header_fields(header: &str, name: &str) -> Vec<String> {
    header_declarations(header, name).into_iter().map(|(_, field)| field).collect()
}

/// The (C type, field name) pairs a Python dataclass of `_structs.py` declares, in order: its lines
/// `    name: Optional[...] = _u32()` (`_u32`, `_u64` or `_f64`; `_u32(CpuKernels)` for a field read as an enum).
fn python_declarations(python: &str, class: &str) -> Vec<(String, String)> {
    let start = python.find(&format!("\nclass {class}:")).unwrap_or_else(|| panic!("no class {class}"));
    let body = &python[start + 1..];
    let end = body[1..].find("\nclass ").or_else(|| body[1..].find("\ndef ")).map_or(body.len(), |i| i + 1);
    body[..end]
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("    ")?.split_once(": Optional[")?;
            let maker = rest.rsplit_once("= ")?.1;
            let ty = match maker.split_once('(').map_or(maker, |(name, _)| name) {
                "_u32" => "uint32_t",
                "_u64" => "uint64_t",
                "_f64" => "double",
                other => panic!("{class}.{name}: unknown field maker {other}"),
            };
            Some((ty.to_owned(), name.to_owned()))
        })
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
fn the_python_binding_declares_every_field_in_order_with_its_c_type() {
    let (header, python) = (read("include/ember.h"), read(PYTHON_STRUCTS));
    for s in &STRUCTS {
        // The Python class builds struct_size and present itself, then its fields: bit i is field i.
        let expected = header_declarations(&header, s.name).split_off(2);
        assert_eq!(python_declarations(&python, s.python_class), expected, "{} in {PYTHON_STRUCTS}", s.name);
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
