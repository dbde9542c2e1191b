//! Single-threaded timings of the matmul kernels at SmolLM2-135M's shapes and types, of every quantized weight
//! type at one Gemma 3 270M shape (`types 1024->640`) and of the common types at Llama 3.2 1B's FFN shapes
//! (`1b_up 2048->8192`, `1b_down 8192->2048`), for every path this CPU runs, next to a large memcpy's bandwidth.
//! The quantized types run packed (`PackedMatrix`, as the backend runs them). Prints a table, then one JSON line
//! per case.
//!
//! `cargo bench --bench kernels [-- FILTER...]`: a case runs when every FILTER is a word of its label, e.g.
//! `avx512 ffn_down n_cols=1` or `avx2 Q4_K` (labels read "path name in->out TYPE n_cols=N"). For `n_cols` up to
//! 8 (a decode, or one verifying a speculative draft) two figures: "stream", rotating over enough copies of the
//! matrix to total `STREAM_BYTES` (the model streams ~96 MB per token, so its weights come from L3 or DRAM, not
//! L2), and "hot", one matrix that stays in L2. Larger `n_cols` (prefill, batched decode) reuse one matrix, as a
//! real prefill does. The scalar path, a reference rather than a contender, runs only `n_cols` up to 4.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ember::backend::cpu::kernels::{
    quantize_row_q8a_scalar, supported_kernels, BlockQ8A, Kernels, OutRows, PackedMatrix, WeightData, WeightMatrix,
};
use ember::model::gguf::blocks::QK;
use ember::model::gguf::GgmlType;
use half::f16;

#[path = "../tests/common/rng.rs"]
mod rng;
use rng::Rng;
#[path = "../tests/common/quant_blocks.rs"]
mod quant_blocks;
use quant_blocks::random_blocks;

/// Bytes of weights a streaming matvec rotates through (above L2, like the model's ~96 MB per token).
const STREAM_BYTES: usize = 128 << 20;
/// Each measurement batch runs at least this long; the reported time is the median of `BATCHES` batches.
const BATCH_TIME: Duration = Duration::from_millis(40);
const BATCHES: usize = 5;
const N_COLS: [usize; 10] = [1, 2, 3, 4, 5, 8, 9, 16, 64, 512];
/// Columns up to this many also run streamed: a decode step verifying a speculative draft (`engine/speculative/`)
/// computes a few columns against weights that come from memory, as a matvec does.
const STREAM_MAX_COLS: usize = 8;

/// One of the model's matrices: `n_rows` outputs of `row_len` inputs, of weight type `dtype`.
struct Shape {
    name: &'static str,
    row_len: usize,
    n_rows: usize,
    dtype: GgmlType,
}

/// SmolLM2-135M's matrices (Q4_1, the tied output Q8_0).
const SHAPES: [Shape; 5] = [
    Shape { name: "attn_qo 576->576", row_len: 576, n_rows: 576, dtype: GgmlType::Q4_1 },
    Shape { name: "attn_kv 576->192", row_len: 576, n_rows: 192, dtype: GgmlType::Q4_1 },
    Shape { name: "ffn_gate_up 576->1536", row_len: 576, n_rows: 1536, dtype: GgmlType::Q4_1 },
    Shape { name: "ffn_down 1536->576", row_len: 1536, n_rows: 576, dtype: GgmlType::Q4_1 },
    Shape { name: "output 576->49152", row_len: 576, n_rows: 49152, dtype: GgmlType::Q8_0 },
];

/// Every quantized type at Gemma 3 270M's `attn_output` shape (1024 -> 640, whole K-quant super-blocks).
const TYPE_SHAPES: [Shape; 11] = {
    const fn at(dtype: GgmlType) -> Shape {
        Shape { name: "types 1024->640", row_len: 1024, n_rows: 640, dtype }
    }
    [
        at(GgmlType::Q4_0),
        at(GgmlType::Q4_1),
        at(GgmlType::Q5_0),
        at(GgmlType::Q5_1),
        at(GgmlType::Q8_0),
        at(GgmlType::Q2K),
        at(GgmlType::Q3K),
        at(GgmlType::Q4K),
        at(GgmlType::Q5K),
        at(GgmlType::Q6K),
        at(GgmlType::Mxfp4),
    ]
};

/// The common types of 1B-8B files at Llama 3.2 1B's FFN shapes, MXFP4 (gpt-oss's experts), IQ4_XS (the
/// smallest 4-bit file people download), IQ4_NL, IQ3_S and IQ2_XS (issue 45's other types).
const LLAMA_SHAPES: [Shape; 20] = {
    const fn up(dtype: GgmlType) -> Shape {
        Shape { name: "1b_up 2048->8192", row_len: 2048, n_rows: 8192, dtype }
    }
    const fn down(dtype: GgmlType) -> Shape {
        Shape { name: "1b_down 8192->2048", row_len: 8192, n_rows: 2048, dtype }
    }
    [
        up(GgmlType::Q4_0),
        up(GgmlType::Q8_0),
        up(GgmlType::Q4K),
        up(GgmlType::Q5K),
        up(GgmlType::Q6K),
        up(GgmlType::Mxfp4),
        up(GgmlType::Iq4Xs),
        up(GgmlType::Iq4Nl),
        up(GgmlType::Iq3S),
        up(GgmlType::Iq2Xs),
        down(GgmlType::Q4_0),
        down(GgmlType::Q8_0),
        down(GgmlType::Q4K),
        down(GgmlType::Q5K),
        down(GgmlType::Q6K),
        down(GgmlType::Mxfp4),
        down(GgmlType::Iq4Xs),
        down(GgmlType::Iq4Nl),
        down(GgmlType::Iq3S),
        down(GgmlType::Iq2Xs),
    ]
};

impl Shape {
    /// Bytes of one matrix.
    fn bytes(&self) -> usize {
        self.n_rows * self.row_len / self.dtype.block_len() as usize * self.dtype.block_bytes() as usize
    }
}

/// Owned random weights: `copies` matrices of one shape, back to back, in 4-byte words (every block type's
/// alignment).
struct Weights(Vec<u32>);

impl Weights {
    fn random(shape: &Shape, copies: usize, rng: &mut Rng) -> Self {
        let n_items = copies * shape.n_rows * shape.row_len / shape.dtype.block_len() as usize;
        let range = if shape.dtype.block_len() == 256 { (0.0002, 0.002) } else { (0.001, 0.05) };
        let mut scale = |rng: &mut Rng| f16::from_f32(rng.uniform(range.0, range.1));
        let mut bytes = random_blocks(shape.dtype, n_items, rng, true, &mut scale);
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        Weights(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// Copy `i` as a matrix.
    fn matrix<'a>(&'a self, shape: &Shape, i: usize) -> WeightMatrix<'a> {
        let bytes = &bytemuck::cast_slice::<u32, u8>(&self.0)[i * shape.bytes()..(i + 1) * shape.bytes()];
        let data = WeightData::from_bytes(shape.dtype, bytes).expect("a quantized type, aligned");
        WeightMatrix::new(data, shape.n_rows, shape.row_len).expect("bench shapes are valid")
    }

    /// Every copy packed, as the backend packs its matrices.
    fn packed(&self, shape: &Shape, copies: usize) -> Vec<PackedMatrix> {
        (0..copies).map(|i| PackedMatrix::pack(&self.matrix(shape, i)).expect("a quantized type")).collect()
    }
}

/// Seconds per call of `f`: the median over batches of at least `BATCH_TIME`, after one warm-up call.
fn time_per_call(mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    f();
    let one = start.elapsed().max(Duration::from_nanos(1));
    let calls = (BATCH_TIME.as_secs_f64() / one.as_secs_f64()).ceil().max(1.0) as usize;
    let mut per_call: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            start.elapsed().as_secs_f64() / calls as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[BATCHES / 2]
}

/// Bandwidths of `STREAM_BYTES` moved by the standard library, best of 5: a memcpy (bytes copied per second; read
/// and write traffic is twice that) and a sequential read (summing u64 words), the ceiling of a streaming matvec.
fn memory_gb_s() -> (f64, f64) {
    let src = vec![1u8; STREAM_BYTES];
    let mut dst = vec![0u8; STREAM_BYTES];
    let best = |f: &mut dyn FnMut()| {
        (0..5)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let copy = best(&mut || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    });
    let words: Vec<u64> = src.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let read = best(&mut || {
        black_box(black_box(&words).iter().fold(0u64, |a, &w| a.wrapping_add(w)));
    });
    (STREAM_BYTES as f64 / copy / 1e9, STREAM_BYTES as f64 / read / 1e9)
}

struct Case<'a> {
    kernels: &'a Kernels,
    shape: &'a Shape,
    n_cols: usize,
    /// "stream" or "hot".
    mode: &'static str,
    seconds: f64,
    weight_bytes: usize,
}

impl Case<'_> {
    fn gb_s(&self) -> f64 {
        self.weight_bytes as f64 / self.seconds / 1e9
    }

    fn gmac_s(&self) -> f64 {
        (self.shape.n_rows * self.shape.row_len * self.n_cols) as f64 / self.seconds / 1e9
    }

    fn json(&self) -> String {
        format!(
            "{{\"bench\":\"matmul_packed\",\"path\":\"{}\",\"shape\":\"{}\",\"weights\":\"{}\",\"row_len\":{},\"n_rows\":{},\
             \"n_cols\":{},\"mode\":\"{}\",\"us_per_call\":{:.3},\"weight_gb_s\":{:.3},\"gmac_s\":{:.3}}}",
            self.kernels.name,
            self.shape.name,
            self.shape.dtype.name(),
            self.shape.row_len,
            self.shape.n_rows,
            self.n_cols,
            self.mode,
            self.seconds * 1e6,
            self.gb_s(),
            self.gmac_s()
        )
    }
}

fn main() {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let selected = |label: &str| filters.iter().all(|f| label.split(' ').any(|word| word == f));
    let mut rng = Rng(42);
    let mut cases = Vec::new();
    for shape in SHAPES.iter().chain(&TYPE_SHAPES).chain(&LLAMA_SHAPES) {
        let labels = supported_kernels()
            .flat_map(|k| N_COLS.map(|n| format!("{} {} {} n_cols={n}", k.name, shape.name, shape.dtype)));
        if !labels.into_iter().any(|l| selected(&l)) {
            continue;
        }
        let one_matrix = shape.bytes();
        let copies = STREAM_BYTES.div_ceil(one_matrix);
        let weights = Weights::random(shape, copies, &mut rng);
        let packed = weights.packed(shape, copies);
        let x: Vec<f32> = (0..512 * shape.row_len).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let mut act = vec![BlockQ8A::ZERO; x.len() / QK];
        quantize_row_q8a_scalar(&x, &mut act);
        let mut out = vec![0f32; 512 * shape.n_rows];
        for kernels in supported_kernels() {
            for n_cols in N_COLS {
                if kernels.name == "scalar" && n_cols > 4 {
                    continue;
                }
                if !selected(&format!("{} {} {} n_cols={n_cols}", kernels.name, shape.name, shape.dtype)) {
                    continue;
                }
                let act = &act[..n_cols * shape.row_len / QK];
                let out = &mut out[..n_cols * shape.n_rows];
                let mut run = |i: usize| {
                    let out = &mut OutRows::new(out, n_cols, shape.n_rows);
                    kernels.matmul_packed(&packed[i], black_box(act), n_cols, out);
                };
                let mut modes = vec![("hot", 1)];
                if n_cols <= STREAM_MAX_COLS {
                    modes.insert(0, ("stream", copies));
                }
                for (mode, rotation) in modes {
                    let mut i = 0;
                    let seconds = time_per_call(|| {
                        run(i);
                        i = (i + 1) % rotation;
                    });
                    let case = Case { kernels, shape, n_cols, mode, seconds, weight_bytes: one_matrix };
                    println!(
                        "{:<7} {:<22} {:<5} n_cols {:>3} {:<6} {:>10.1} us  {:>7.2} GB/s  {:>7.2} GMAC/s",
                        kernels.name,
                        shape.name,
                        shape.dtype.name(),
                        n_cols,
                        mode,
                        seconds * 1e6,
                        case.gb_s(),
                        case.gmac_s()
                    );
                    cases.push(case);
                }
            }
        }
    }
    let (memcpy, read) = memory_gb_s();
    println!("memcpy of {} MiB: {memcpy:.2} GB/s copied; sequential read: {read:.2} GB/s", STREAM_BYTES >> 20);
    for case in &cases {
        println!("{}", case.json());
    }
    println!("{{\"bench\":\"memcpy\",\"bytes\":{STREAM_BYTES},\"gb_s\":{memcpy:.3}}}");
    println!("{{\"bench\":\"read\",\"bytes\":{STREAM_BYTES},\"gb_s\":{read:.3}}}");
}
