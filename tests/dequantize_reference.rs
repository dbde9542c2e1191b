//! Every weight type's dequantization against the `gguf` Python package's (`scripts/reference/dequantize.py`), bit
//! for bit, on random valid blocks: random quants and packed scales, any finite f16 scale (subnormals included),
//! several block counts. gguf-py's numpy code is written independently of ember's, from the same ggml layouts, so
//! a misread layout or formula shows up as a difference. `make test` installs gguf (scripts/install-test-tools.sh).

#[path = "common/quant_blocks.rs"]
mod quant_blocks;
#[path = "common/rng.rs"]
mod rng;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use ember::model::gguf::dequantize::{dequantize, DequantizeError};
use ember::model::gguf::GgmlType;
use quant_blocks::{any_finite_f16, random_blocks, WEIGHT_TYPES};
use rng::Rng;

/// Block counts per call: one block, and odd counts across the reference's vectorized reshapes.
const BLOCK_COUNTS: [usize; 3] = [1, 7, 37];

/// gguf-py's dequantization of `bytes`.
fn reference(dtype: GgmlType, bytes: &[u8]) -> Vec<f32> {
    // A file pair per call: two tests of one type run at once.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir();
    let tag = format!("ember-dequant-{}-{}-{call}", std::process::id(), dtype.name());
    let (src, dst) = (dir.join(format!("{tag}.in")), dir.join(format!("{tag}.out")));
    std::fs::write(&src, bytes).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/reference/dequantize.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(dtype.name())
        .arg(&src)
        .arg(&dst)
        .output()
        .expect("python3 runs (make test installs it)");
    assert!(
        out.status.success(),
        "{} failed (gguf 0.19.0 and numpy installed? scripts/install-test-tools.sh): {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let values = std::fs::read(&dst).unwrap();
    let _ = (std::fs::remove_file(&src), std::fs::remove_file(&dst));
    values.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn check(dtype: GgmlType) {
    let mut rng = Rng(0xde9_0000 ^ u64::from(dtype.id()));
    for n_blocks in BLOCK_COUNTS {
        let bytes = random_blocks(dtype, n_blocks, &mut rng, false, &mut any_finite_f16);
        let want = reference(dtype, &bytes);
        let mut got = vec![f32::NAN; n_blocks * dtype.block_len() as usize];
        dequantize(dtype, &bytes, &mut got).unwrap();
        assert_eq!(got.len(), want.len(), "{dtype}: element count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // NaN only where the reference has NaN too (none expected: every scale is finite).
            let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
            assert!(same, "{dtype}, {n_blocks} blocks, element {i}: ember {g:e}, gguf {w:e}");
        }
    }
}

macro_rules! one_test_per_type {
    ($($name:ident => $dtype:ident),+ $(,)?) => {
        $(#[test] fn $name() { check(GgmlType::$dtype); })+

        #[test]
        fn every_weight_type_has_its_test() {
            let tested = [$(GgmlType::$dtype),+];
            assert_eq!(tested.len(), WEIGHT_TYPES.len());
            assert!(WEIGHT_TYPES.iter().all(|t| tested.contains(t)));
        }
    };
}

one_test_per_type! {
    f32_matches_gguf => F32,
    f16_matches_gguf => F16,
    bf16_matches_gguf => Bf16,
    q4_0_matches_gguf => Q4_0,
    q4_1_matches_gguf => Q4_1,
    q5_0_matches_gguf => Q5_0,
    q5_1_matches_gguf => Q5_1,
    q8_0_matches_gguf => Q8_0,
    q2_k_matches_gguf => Q2K,
    q3_k_matches_gguf => Q3K,
    q4_k_matches_gguf => Q4K,
    q5_k_matches_gguf => Q5K,
    q6_k_matches_gguf => Q6K,
    mxfp4_matches_gguf => Mxfp4,
    iq4_nl_matches_gguf => Iq4Nl,
    iq4_xs_matches_gguf => Iq4Xs,
}

/// MXFP4 at every one of the 256 E8M0 exponent bytes, 0 and 255 included (gguf-py and ggml define them all, 0 and
/// 1 as subnormal scales, 255 as 2^127 rather than the OCP format's NaN; the largest overflow to infinity with the
/// larger codes), each block with random codes.
#[test]
fn mxfp4_matches_gguf_at_every_scale_byte() {
    let mut rng = Rng(0x39_e8e0);
    let mut bytes = random_blocks(GgmlType::Mxfp4, 256, &mut rng, false, &mut any_finite_f16);
    for (e, block) in bytes.chunks_exact_mut(17).enumerate() {
        block[0] = e as u8;
    }
    let want = reference(GgmlType::Mxfp4, &bytes);
    let mut got = vec![f32::NAN; 256 * 32];
    dequantize(GgmlType::Mxfp4, &bytes, &mut got).unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "MXFP4 e = {}, element {}: ember {g:e}, gguf {w:e}", i / 32, i % 32);
    }
    // The extremes are there: subnormal scales, and infinities from e near 255.
    assert!(got[..64].iter().any(|v| *v != 0.0 && v.is_subnormal()));
    assert!(got[253 * 32..].iter().any(|v| v.is_infinite()));
}

#[test]
fn other_types_are_refused_by_name() {
    for dtype in [GgmlType::Iq2Xxs, GgmlType::Iq3S, GgmlType::Iq1M, GgmlType::Tq1_0, GgmlType::Q8K] {
        let bytes = vec![0u8; dtype.block_bytes() as usize];
        let mut out = vec![0f32; dtype.block_len() as usize];
        assert_eq!(dequantize(dtype, &bytes, &mut out), Err(DequantizeError::Unsupported(dtype)));
    }
    let mut out = [0f32; 32];
    assert!(matches!(dequantize(GgmlType::Q4K, &[0; 10], &mut out), Err(DequantizeError::Length { .. })));
}
