//! Weights as the CUDA kernels receive them: one matrix of random valid blocks of every weight type, packed by the
//! backend's own `packing::pack`, beside the CPU's dequantization of the same blocks (bit-exact against the `gguf`
//! package, tests/dequantize_reference.rs). With `EMBER_PACKED_FIXTURES=FILE` the test writes them there for the
//! CPU emulation of the kernels (`scripts/gpu-check.sh emulate`, kernel_checks.cpp), which then checks what every
//! kernel computes from the real packer's output against that reference: a kernel that misreads a plane, a packer
//! that misplaces one, or the two disagreeing on the layout all fail it there.
//!
//! File format, little-endian u32 words: the count of matrices, then per matrix its type number (`PackedType`),
//! rows, cols, the lengths of quants and scales, the quants, the scales, and `rows · cols` f32 reference values.

#[path = "common/quant_blocks.rs"]
mod quant_blocks;
#[path = "common/rng.rs"]
mod rng;

use ember::backend::cpu::kernels::{WeightData, WeightMatrix};
use ember::backend::cuda::packing::{pack, PackedMatrix, PackedType};
use ember::model::gguf::GgmlType;
use half::f16;
use quant_blocks::{random_blocks, WEIGHT_TYPES};
use rng::Rng;

/// Rows and columns of every fixture matrix; the emulation takes its test matrices' rows from these (any rows, any
/// prefix of 32-element groups: every packed group is self-contained). 512 columns: two K-quant super-blocks.
const ROWS: usize = 128;
const COLS: usize = 512;

struct Fixture {
    packed: PackedMatrix,
    reference: Vec<f32>,
}

fn fixture(dtype: GgmlType, rng: &mut Rng) -> Fixture {
    let n_items = ROWS * COLS / dtype.block_len() as usize;
    // Weights of magnitude ~1, as the kernel checks' tolerances assume (K-quants multiply d by scales up to 63; the
    // ternary types' d is the weight itself, IQ1's is multiplied by at most 15 · 9/8).
    let range = match dtype {
        GgmlType::Tq1_0 | GgmlType::Tq2_0 => (0.125, 1.0),
        GgmlType::Iq1S | GgmlType::Iq1M => (0.008, 0.064),
        _ if dtype.block_len() == 256 => (0.0005, 0.004),
        _ => (0.01, 0.08),
    };
    let mut scale = |rng: &mut Rng| {
        let v = rng.uniform(range.0, range.1);
        f16::from_f32(if rng.byte() & 1 == 0 { v } else { -v })
    };
    let mut bytes = random_blocks(dtype, n_items, rng, true, &mut scale);
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    // In u32 words, so that every block type's alignment holds.
    let words: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let n_bytes = n_items * dtype.block_bytes() as usize;
    let data = WeightData::from_bytes(dtype, &bytemuck::cast_slice::<u32, u8>(&words)[..n_bytes]).unwrap();
    let matrix = WeightMatrix::new(data, ROWS, COLS).unwrap();
    let mut reference = vec![0f32; ROWS * COLS];
    for (r, row) in reference.chunks_exact_mut(COLS).enumerate() {
        matrix.dequantize_row(r, row);
    }
    Fixture { packed: pack(&matrix), reference }
}

#[test]
fn every_weight_type_packs_into_whole_groups() {
    let mut rng = Rng(20261201);
    let fixtures: Vec<Fixture> = WEIGHT_TYPES.iter().map(|&t| fixture(t, &mut rng)).collect();
    let mut seen = Vec::new();
    for f in &fixtures {
        let (p, groups) = (&f.packed, ROWS * COLS / 32);
        assert_eq!((p.rows, p.cols), (ROWS, COLS));
        assert_eq!(p.quants.len(), groups * p.dtype.quant_words(), "{:?} quants", p.dtype);
        assert_eq!(p.scales.len(), groups * p.dtype.scale_words(), "{:?} scales", p.dtype);
        assert!(f.reference.iter().all(|v| v.is_finite()));
        seen.push(p.dtype);
    }
    seen.sort_by_key(|t| *t as usize);
    assert_eq!(seen, PackedType::ALL, "one fixture per kernel type");

    if let Some(path) = std::env::var_os("EMBER_PACKED_FIXTURES") {
        let mut words: Vec<u32> = vec![fixtures.len() as u32];
        for f in &fixtures {
            let p = &f.packed;
            words.extend([p.dtype as u32, p.rows as u32, p.cols as u32, p.quants.len() as u32, p.scales.len() as u32]);
            words.extend(&p.quants);
            words.extend(&p.scales);
            words.extend(f.reference.iter().map(|v| v.to_bits()));
        }
        std::fs::write(&path, bytemuck::cast_slice::<u32, u8>(&words)).unwrap();
        eprintln!("wrote {} packed matrices to {}", fixtures.len(), path.to_string_lossy());
    }
}
