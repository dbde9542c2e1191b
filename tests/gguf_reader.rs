//! The GGUF reader on well-formed files: every metadata type round-trips through our writer, typed accessors,
//! tensor views, versions 2 and 3, alignment; and on the real model.

use ember::model::gguf::writer::GgufWriter;
use ember::model::gguf::{Array, GgmlType, GgufError, GgufFile, Value};

fn every_value_type() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f32", Value::F32(1.5e-5)),
        ("t.f64", Value::F64(-2.25)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo ✓".into())),
        ("t.empty_string", Value::String(String::new())),
        ("t.array_u8", Value::Array(Array::U8(vec![1, 2, 3]))),
        ("t.array_i32", Value::Array(Array::I32(vec![-1, 0, 1]))),
        ("t.array_f32", Value::Array(Array::F32(vec![0.5, -0.25]))),
        ("t.array_bool", Value::Array(Array::Bool(vec![true, false]))),
        ("t.array_string", Value::Array(Array::String(vec!["a".into(), "".into(), "ć".into()]))),
        ("t.array_empty", Value::Array(Array::U64(vec![]))),
        (
            "t.array_nested",
            Value::Array(Array::Array(vec![
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::I64(vec![7, -7])]),
            ])),
        ),
    ]
}

fn file_with_every_type(version: u32) -> Vec<u8> {
    let mut w = GgufWriter::new().version(version).alignment(64);
    for (k, v) in every_value_type() {
        w = w.metadata(k, v);
    }
    let q = vec![0u8; 20 * 2];
    w.tensor_f32("norm", &[4], &[1.0, 2.0, 3.0, 4.0]).tensor("w", GgmlType::Q4_1, &[32, 2], q).to_bytes()
}

#[test]
fn every_metadata_type_round_trips_in_v2_and_v3() {
    for version in [2, 3] {
        let f = GgufFile::from_bytes(&file_with_every_type(version)).unwrap();
        assert_eq!(f.version(), version);
        assert_eq!(f.alignment(), 64);
        for (k, v) in every_value_type() {
            assert_eq!(f.get(k), Some(&v), "{k}");
        }
        let keys: Vec<_> = f.metadata().map(|(k, _)| k).collect();
        assert_eq!(keys[0], "general.alignment", "file order is kept");
    }
}

#[test]
fn typed_accessors_convert_integers_that_fit_and_name_the_key_otherwise() {
    let f = GgufFile::from_bytes(&file_with_every_type(3)).unwrap();
    assert_eq!(f.u32("t.u8").unwrap(), 200);
    assert_eq!(f.u32("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.i32("t.i16").unwrap(), -30_000);
    assert_eq!(f.u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(f.f32("t.f64").unwrap(), -2.25);
    assert!(f.bool("t.bool").unwrap());
    assert_eq!(f.str("t.string").unwrap(), "héllo ✓");
    assert_eq!(f.string_array("t.array_string").unwrap(), ["a", "", "ć"]);
    assert_eq!(f.i32_array("t.array_i32").unwrap(), [-1, 0, 1]);
    assert_eq!(f.f32_array("t.array_f32").unwrap(), [0.5, -0.25]);

    let wrong = |e: GgufError, key: &str| match e {
        GgufError::WrongType { key: k, .. } => assert_eq!(k, key),
        other => panic!("expected WrongType for {key}, got {other}"),
    };
    wrong(f.u32("t.i8").unwrap_err(), "t.i8"); // negative
    wrong(f.u32("t.u64").unwrap_err(), "t.u64"); // too large
    wrong(f.u32("t.string").unwrap_err(), "t.string");
    wrong(f.str("t.u32").unwrap_err(), "t.u32");
    wrong(f.string_array("t.array_i32").unwrap_err(), "t.array_i32");
    assert!(matches!(f.u32("t.absent"), Err(GgufError::MissingKey { key }) if key == "t.absent"));
    assert_eq!(f.optional("t.absent", GgufFile::u32).unwrap(), None);
    assert_eq!(f.optional("t.u16", GgufFile::u32).unwrap(), Some(60_000));
    assert!(f.optional("t.string", GgufFile::u32).is_err(), "a present key of the wrong type is an error");
}

#[test]
fn tensor_views_have_type_shape_and_aligned_data() {
    let f = GgufFile::from_bytes(&file_with_every_type(3)).unwrap();
    let norm = f.tensor("norm").unwrap();
    assert_eq!(norm.dtype(), GgmlType::F32);
    assert_eq!(norm.shape(), [4]);
    assert_eq!(norm.as_f32().unwrap(), [1.0, 2.0, 3.0, 4.0]);
    let w = f.tensor("w").unwrap();
    assert_eq!((w.dtype(), w.shape(), w.n_elements()), (GgmlType::Q4_1, &[32u64, 2][..], 64));
    assert_eq!(w.as_q4_1().unwrap().len(), 2);
    assert_eq!(w.info.offset % 64, 0);
    assert!(matches!(w.as_q8_0(), Err(GgufError::TensorTypeMismatch { .. })));
    assert!(matches!(f.tensor("nope"), Err(GgufError::MissingTensor { name }) if name == "nope"));
    assert_eq!(f.tensors().map(|t| t.name().to_owned()).collect::<Vec<_>>(), ["norm", "w"]);
}

#[test]
fn unsupported_tensor_types_open_but_fail_when_computed_with() {
    // Q8_K: llama.cpp's activation type, never a model's weights.
    let bytes = GgufWriter::new().tensor("k", GgmlType::Q8K, &[256], vec![0u8; 292]).to_bytes();
    let f = GgufFile::from_bytes(&bytes).unwrap();
    let t = f.tensor("k").unwrap();
    let err = t.to_f32_vec().unwrap_err();
    assert!(matches!(err, GgufError::UnsupportedTensorType { dtype: GgmlType::Q8K, .. }));
    assert!(err.to_string().contains("Q8_K"), "{err}");
}

#[test]
fn the_real_model_opens_with_llama_metadata() {
    let path = ember::model::path::resolve_model_path(None).unwrap_or_else(|e| panic!("{e}"));
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.tensor_infos().len(), 272);
    assert_eq!(f.str("general.architecture").unwrap(), "llama");
    assert_eq!(f.string_array("tokenizer.ggml.tokens").unwrap().len(), 49152);
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!((embd.dtype(), embd.shape()), (GgmlType::Q8_0, &[576u64, 49152][..]));
    let cfg = ember::model::llama::LlamaConfig::from_gguf(&f).unwrap();
    assert_eq!((cfg.n_layer, cfg.n_embd, cfg.n_ff, cfg.n_head, cfg.n_head_kv), (30, 576, 1536, 9, 3));
    assert_eq!((cfg.head_dim, cfg.rope_dim, cfg.vocab_size, cfg.context_length), (64, 64, 49152, 8192));
    assert_eq!(cfg.rope_base, 100_000.0);
    assert!(cfg.tied_output);
}

#[test]
fn the_type_summary_counts_each_types_tensors_and_bytes_most_bytes_first() {
    let bytes = GgufWriter::new()
        .tensor_f32("a", &[4], &[0.0; 4])
        .tensor("b", GgmlType::Iq4Xs, &[256, 2], vec![0u8; 272])
        .tensor_f32("c", &[8], &[0.0; 8])
        .tensor("d", GgmlType::Q8_0, &[32], vec![0u8; 34])
        .to_bytes();
    let f = GgufFile::from_bytes(&bytes).unwrap();
    assert_eq!(f.type_summary(), [(GgmlType::Iq4Xs, 1, 272), (GgmlType::F32, 2, 48), (GgmlType::Q8_0, 1, 34)]);
}
