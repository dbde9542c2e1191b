//! The encoder's forward pass alone (`CpuEncoder`, no queue, no HTTP): tokens per second on a synthetic file of
//! bge-base's shapes (12 layers, 768 wide, F16) or nomic-embed's, for batches of 32 inputs of 16–256 tokens, and the
//! time of one 128-token input. Prints one JSON object per configuration.
//!
//!   cargo bench --bench encoder [-- --family bge-base|nomic-embed] [--layers 12] [--inputs 128] [--precision f32|q8]
//!
//! Needs llama.cpp's BERT vocabulary (`scripts/llamacpp/fetch-vocabs.sh`).

use std::time::Instant;

use ember::backend::cpu::{default_threads, CpuEncoder, Precision};
use ember::model::encoder::{EncoderConfig, SyntheticEncoder};
use ember::model::gguf::GgufFile;
use ember::model::TokenId;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let family = value("--family").unwrap_or_else(|| "bge-base".into());
    let layers: usize = value("--layers").map_or(12, |v| v.parse().unwrap());
    let n_inputs: usize = value("--inputs").map_or(128, |v| v.parse().unwrap());
    let precision = match value("--precision").as_deref() {
        Some("q8") => Precision::Quantized8,
        _ => Precision::Float32,
    };
    let vocab_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/vocab/ggml-vocab-bert-bge.gguf");
    let vocab = GgufFile::open(&vocab_path).expect("run scripts/llamacpp/fetch-vocabs.sh");
    let bytes = SyntheticEncoder::family(&family, 1, layers).expect("a family").writer(&vocab).to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = EncoderConfig::from_gguf(&file).unwrap();
    let d = config.n_embd;
    let mut encoder = CpuEncoder::new(&file, config.clone(), default_threads(), 32 * 256, precision).unwrap();
    // Deterministic inputs of 16..=256 tokens (ids of ordinary words).
    let inputs: Vec<Vec<TokenId>> = (0..n_inputs)
        .map(|i| {
            let len = 16 + (i * 7919) % 241;
            let mut ids = vec![101];
            ids.extend((0..len - 2).map(|k| 2000 + ((i * 31 + k * 17) % 5000) as TokenId));
            ids.push(102);
            ids
        })
        .collect();
    let tokens: usize = inputs.iter().map(Vec::len).sum();
    let mut out = vec![0f32; 32 * d];
    let started = Instant::now();
    for batch in inputs.chunks(32) {
        let slices: Vec<&[TokenId]> = batch.iter().map(Vec::as_slice).collect();
        encoder.embed(&slices, config.pooling, &mut out[..slices.len() * d]).unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let single: Vec<TokenId> = inputs.iter().find(|i| i.len() >= 128).unwrap()[..128].to_vec();
    let mut times = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        encoder.embed(&[&single], config.pooling, &mut out[..d]).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{{\"family\": {family:?}, \"layers\": {layers}, \"precision\": \"{precision:?}\", \"kernels\": {:?}, \
         \"threads\": {}, \"inputs\": {n_inputs}, \"tokens\": {tokens}, \"tokens_per_s\": {:.1}, \"single_128_ms\": {:.2}}}",
        encoder.kernel_path(),
        default_threads(),
        tokens as f64 / elapsed,
        times[times.len() / 2]
    );
}
