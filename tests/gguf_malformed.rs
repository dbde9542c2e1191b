//! Malformed GGUF files: each failure class returns its specific error; no input panics or reads out of bounds.
//!
//! Files are crafted byte by byte (`Raw`) so that each test breaks exactly one thing. The load bombs of
//! `tests/attack/gguf_cases.rs` are loaded here too, as models.

#[path = "attack/gguf_cases.rs"]
mod gguf_cases;

use ember::model::gguf::value::encode_string;
use ember::model::gguf::writer::GgufWriter;
use ember::model::gguf::{
    Array, GgmlType, GgufError, GgufFile, Value, MAX_ARRAY_DEPTH, MAX_KEY_LEN, MAX_PARSED_BYTES, MAX_TENSORS,
};
use ember::model::Model;

/// A GGUF file under construction, field by field.
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, tensors: u64, kvs: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(tensors).u64(kvs);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        encode_string(s, &mut self.0);
        self
    }
    fn kv(&mut self, key: &str, v: &Value) -> &mut Self {
        self.str(key).u32(v.value_type() as u32);
        v.encode(&mut self.0);
        self
    }
    fn tensor(&mut self, name: &str, shape: &[u64], dtype: u32, offset: u64) -> &mut Self {
        self.str(name).u32(shape.len() as u32);
        for &d in shape {
            self.u64(d);
        }
        self.u32(dtype).u64(offset)
    }
    /// Pads to 32 and appends `n` zero bytes of tensor data.
    fn data(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len().next_multiple_of(32) + n, 0);
        self
    }
    fn open(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(&self.0)
    }
}

fn err(r: &Raw) -> GgufError {
    match r.open() {
        Ok(f) => panic!("malformed file opened: {f:?}"),
        Err(e) => e,
    }
}

/// The error of a file whose metadata entry `key` is malformed: it names the key, and wraps what is wrong.
fn value_err(r: &Raw, key: &str) -> GgufError {
    match err(r) {
        GgufError::InMetadata { key: k, source } => {
            assert_eq!(k, key);
            *source
        }
        other => panic!("expected an error naming {key:?}, got {other}"),
    }
}

fn valid_file() -> Vec<u8> {
    GgufWriter::new()
        .metadata("general.architecture", Value::String("llama".into()))
        .metadata("tokens", Value::Array(Array::String(vec!["a".into(), "bc".into()])))
        .metadata("nested", Value::Array(Array::Array(vec![Array::U16(vec![1, 2])])))
        .tensor_f32("norm", &[8], &[1.0; 8])
        .tensor("w", GgmlType::Q8_0, &[32, 3], vec![0; 34 * 3])
        .to_bytes()
}

#[test]
fn bad_magic() {
    let mut bytes = valid_file();
    bytes[0..4].copy_from_slice(b"GGML");
    assert!(matches!(GgufFile::from_bytes(&bytes), Err(GgufError::BadMagic { found }) if &found == b"GGML"));
}

#[test]
fn unsupported_versions() {
    for v in [0, 1, 4, 99] {
        assert!(matches!(err(&Raw::header(v, 0, 0)), GgufError::UnsupportedVersion { version } if version == v));
    }
    assert!(matches!(err(&Raw::header(3u32.swap_bytes(), 0, 0)), GgufError::BigEndian));
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let bytes = valid_file();
    assert!(GgufFile::from_bytes(&bytes).is_ok());
    for len in 0..bytes.len() {
        match GgufFile::from_bytes(&bytes[..len]) {
            Err(e) if matches!(e.kind(), GgufError::Truncated { .. } | GgufError::TensorOutOfBounds { .. }) => {}
            other => panic!("truncated to {len} bytes: {other:?}"),
        }
    }
}

#[test]
fn tensor_data_out_of_range() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w", &[32, 4], GgmlType::Q8_0.id(), 0).data(34 * 3); // 4 rows declared, 3 present
    match err(&r) {
        GgufError::TensorOutOfBounds { tensor, size, .. } => assert_eq!((tensor.as_str(), size), ("w", 136)),
        e => panic!("{e}"),
    }
    // An offset so large that offset + size would overflow: not where the data section starts, so refused first.
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w", &[32], GgmlType::Q8_0.id(), u64::MAX - 31).data(34);
    assert!(matches!(err(&r), GgufError::TensorOffset { offset, expected: 0, .. } if offset == u64::MAX - 31));
}

/// Tensors follow each other in the data section, each where the one before ends (padded to the alignment), as
/// ggml requires: two tensors sharing bytes would let a file declare more weights than it holds.
#[test]
fn tensors_must_not_overlap_or_leave_gaps() {
    // Two F32 tensors of 8 elements (32 bytes each): the second belongs at 32.
    for (second, refused) in [(32, false), (0, true), (64, true), (16, true)] {
        let mut r = Raw::header(3, 2, 0);
        r.tensor("a", &[8], GgmlType::F32.id(), 0).tensor("b", &[8], GgmlType::F32.id(), second).data(96);
        match r.open() {
            Ok(f) => assert!(!refused, "offset {second} opened: {f:?}"),
            Err(GgufError::TensorOffset { tensor, offset, expected: 32 }) if refused && offset == second => {
                assert_eq!(tensor, "b")
            }
            Err(GgufError::MisalignedTensor { offset: 16, .. }) if second == 16 => {}
            Err(e) => panic!("offset {second}: {e}"),
        }
    }
    // Padding counts: a 4-byte tensor is followed by the next at 32, not at 4.
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[1], GgmlType::F32.id(), 0).tensor("b", &[1], GgmlType::F32.id(), 32).data(64);
    assert!(r.open().is_ok());
    let e = {
        let mut r = Raw::header(3, 2, 0);
        r.tensor("a", &[64], GgmlType::F32.id(), 0).tensor("b", &[1], GgmlType::F32.id(), 0).data(512);
        err(&r)
    };
    let message = e.to_string();
    assert!(message.contains("\"b\"") && message.contains("offset 0") && message.contains("expected 256"), "{message}");
}

/// What a parsed header takes in memory is bounded, whatever the file holds: 12M empty strings are 96 MB of file
/// and would be 288 MB of `String`s.
#[test]
fn parsed_metadata_memory_is_bounded_and_named() {
    let n = 12u64 << 20;
    let mut r = Raw::header(3, 0, 1);
    r.str("x.strings").u32(9).u32(8).u64(n);
    r.0.resize(r.0.len() + 8 * n as usize, 0);
    let e = err(&r);
    let message = e.to_string();
    match e.kind() {
        GgufError::ParsedTooLarge { bytes, max, .. } => {
            assert_eq!((*bytes, *max), (n * 24, MAX_PARSED_BYTES));
        }
        other => panic!("{other}"),
    }
    assert!(message.contains("\"x.strings\"") && message.contains(&(n * 24).to_string()), "{message}");
    // The same strings in two arrays of half the count each: the second is refused by what the first took.
    let mut r = Raw::header(3, 0, 2);
    for key in ["a", "b"] {
        r.str(key).u32(9).u32(8).u64(n / 2);
        r.0.resize(r.0.len() + 4 * n as usize, 0);
    }
    assert!(matches!(value_err(&r, "b"), GgufError::ParsedTooLarge { used, .. } if used > n / 2 * 24));
}

#[test]
fn metadata_keys_are_bounded() {
    let mut r = Raw::header(3, 0, 1);
    r.str(&"k".repeat(MAX_KEY_LEN as usize + 1)).u32(0).0.push(1);
    assert!(matches!(err(&r), GgufError::StringTooLong { len, max: MAX_KEY_LEN, .. } if len == MAX_KEY_LEN + 1));
    let mut r = Raw::header(3, 0, 1);
    r.kv(&"k".repeat(MAX_KEY_LEN as usize), &Value::U8(1));
    assert!(r.open().is_ok());
}

/// Every error inside a metadata value names its key.
#[test]
fn value_errors_name_their_key() {
    let mut r = Raw::header(3, 0, 2);
    r.kv("fine", &Value::U32(1)).str("tokenizer.ggml.merges").u32(9).u32(8).u64(1 << 40);
    let message = err(&r).to_string();
    assert!(message.starts_with("GGUF metadata key \"tokenizer.ggml.merges\": "), "{message}");
    assert!(message.contains(&(1u64 << 40).to_string()), "{message}");
}

#[test]
fn absurd_counts_fail_before_allocating() {
    assert!(matches!(err(&Raw::header(3, MAX_TENSORS + 1, 0)), GgufError::TooMany { what: "tensor", .. }));
    assert!(matches!(err(&Raw::header(3, 0, u64::MAX)), GgufError::TooMany { what: "metadata entry", .. }));
    // A count within the limits but beyond what the file holds: truncated, not a huge allocation.
    assert!(matches!(err(&Raw::header(3, 60_000, 0)), GgufError::Truncated { .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(4).u64(u64::MAX); // array of u32, count 2^64 - 1
    assert!(matches!(value_err(&r, "arr"), GgufError::TooMany { what: "array element", .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(8).u64(50_000_000); // 50M strings in a file of a few bytes
    assert!(matches!(value_err(&r, "arr"), GgufError::Truncated { what: "array element", .. }));
}

#[test]
fn absurd_string_lengths() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX);
    assert!(matches!(err(&r), GgufError::StringTooLong { len: u64::MAX, .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(8).u64(1 << 20); // a 1 MiB string value in a 40-byte file
    assert!(matches!(value_err(&r, "k"), GgufError::Truncated { what: "string value", .. }));
    let mut r = Raw::header(3, 1, 0);
    r.u64(1 << 40); // a tensor name of a terabyte
    assert!(matches!(err(&r), GgufError::StringTooLong { .. }));
}

#[test]
fn overflowing_shapes() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("big", &[1 << 32, 1 << 32, 1 << 32], GgmlType::F32.id(), 0);
    assert!(matches!(err(&r), GgufError::ShapeOverflow { tensor } if tensor == "big"));
    let mut r = Raw::header(3, 1, 0);
    r.tensor("neg", &[u64::MAX], GgmlType::F32.id(), 0); // -1 as ggml's int64_t
    assert!(matches!(err(&r), GgufError::ShapeOverflow { .. }));
    let mut r = Raw::header(3, 1, 0);
    r.tensor("five", &[1, 1, 1, 1, 1], GgmlType::F32.id(), 0);
    assert!(matches!(err(&r), GgufError::TooManyDimensions { n_dims: 5, .. }));
}

#[test]
fn misaligned_offsets() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w", &[4], GgmlType::F32.id(), 4).data(64);
    assert!(matches!(err(&r), GgufError::MisalignedTensor { offset: 4, alignment: 32, .. }));
    for bad in [Value::U32(0), Value::U32(48), Value::U64(32), Value::String("32".into())] {
        let mut r = Raw::header(3, 0, 1);
        r.kv("general.alignment", &bad);
        assert!(matches!(err(&r), GgufError::BadAlignment { .. }), "{bad:?}");
    }
}

#[test]
fn bad_tensor_types_and_row_lengths() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w", &[32], 4, 0).data(32); // id 4 was removed from ggml
    assert!(matches!(err(&r), GgufError::UnknownTensorType { id: 4, .. }));
    let mut r = Raw::header(3, 1, 0);
    r.tensor("w", &[33, 2], GgmlType::Q4_1.id(), 0).data(64);
    assert!(matches!(err(&r), GgufError::RowNotBlockAligned { row_len: 33, dtype: GgmlType::Q4_1, .. }));
}

#[test]
fn bad_metadata_values() {
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    assert!(matches!(value_err(&r, "k"), GgufError::UnknownValueType { id: 13, .. }));
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(7).0.push(2);
    assert!(matches!(value_err(&r, "k"), GgufError::InvalidBool { byte: 2, .. }));
    let mut r = Raw::header(3, 0, 1);
    r.u64(2).0.extend_from_slice(&[0xff, 0xfe]);
    assert!(matches!(err(&r), GgufError::InvalidUtf8 { what: "metadata key", .. }));
    let mut r = Raw::header(3, 0, 2);
    r.kv("k", &Value::U8(1)).kv("k", &Value::U8(2));
    assert!(matches!(err(&r), GgufError::DuplicateKey { key } if key == "k"));
    let mut r = Raw::header(3, 2, 0);
    r.tensor("t", &[1], 0, 0).tensor("t", &[1], 0, 32).data(64);
    assert!(matches!(err(&r), GgufError::DuplicateTensor { name } if name == "t"));
}

#[test]
fn arrays_nested_too_deep() {
    let mut r = Raw::header(3, 0, 1);
    r.str("deep").u32(9);
    for _ in 0..=MAX_ARRAY_DEPTH {
        r.u32(9).u64(1); // an array holding one array ...
    }
    r.u32(0).u64(0);
    assert!(matches!(value_err(&r, "deep"), GgufError::NestingTooDeep { .. }));
}

#[test]
fn random_corruption_never_panics() {
    // Deterministic xorshift: flip bytes of a valid file and check that opening returns (never panics) and that
    // whatever opens can have every tensor viewed and dequantized.
    let base = valid_file();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let mut bytes = base.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % bytes.len() as u64) as usize;
            bytes[i] = next() as u8;
        }
        if let Ok(f) = GgufFile::from_bytes(&bytes) {
            for t in f.tensors() {
                let _ = t.to_f32_vec();
            }
        }
    }
}

#[test]
fn io_errors_name_the_path() {
    let e = GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
}

/// Each hostile file of the attack suite is refused when loaded as a model, with an error naming its cause. With
/// `EMBER_GGUF_BOMBS` set to a directory, the files are written there and kept (to measure a load by hand:
/// `/usr/bin/time -v ember-cli info --model DIR/empty_tokens_16m.gguf`).
#[test]
fn every_load_bomb_is_refused_naming_its_cause() {
    let kept = std::env::var_os("EMBER_GGUF_BOMBS").map(std::path::PathBuf::from);
    let dir = kept.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("ember-bombs-{}", std::process::id())));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = gguf_cases::gguf_bombs(&dir);
    for (name, path, expected) in &cases {
        let error = match Model::load(Some(path)) {
            Ok(_) => panic!("{name}: the model loaded"),
            Err(e) => e.to_string(),
        };
        println!("{name}: {error}");
        assert!(error.contains(expected), "{name}: {error:?} does not contain {expected:?}");
    }
    let (path, expected) = gguf_cases::gguf_bomb(&dir, "tensor_beyond_file").unwrap();
    assert!(Model::load(Some(&path)).is_err_and(|e| e.to_string().contains(expected)));
    assert!(gguf_cases::gguf_bomb(&dir, "no such case").is_none());
    if kept.is_none() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
