//! The memory read bandwidth a kernel can reach: the yardstick of `ember-bench`'s roofline (decode's weight bytes
//! per second against it). It reads as the matvec kernels do, 64-byte lines in order with the lines
//! `PREFETCH_AHEAD` bytes ahead requested into L2, so that the figure is what this machine delivers to a stream like
//! theirs, not what a plain loop gets.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// XOR-folds `bytes` (a whole number of 64-byte lines; a tail is ignored), reading every byte once. The result only
/// keeps the reads from being optimised away.
pub fn read_probe(bytes: &[u8]) -> u64 {
    let lines = bytes.as_chunks::<64>().0;
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return unsafe { read_avx2(lines) };
    }
    lines.iter().fold(0u64, |acc, line| acc ^ u64::from_le_bytes(line[..8].try_into().expect("8 bytes")))
}

/// How far ahead the probe requests lines, as the matvec kernels do.
#[cfg(target_arch = "x86_64")]
const AHEAD: usize = super::packed::PREFETCH_AHEAD / 64;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn read_avx2(lines: &[[u8; 64]]) -> u64 {
    let (mut a, mut b) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for (i, line) in lines.iter().enumerate() {
        _mm_prefetch::<_MM_HINT_T1>(lines.as_ptr().wrapping_add(i + AHEAD).cast());
        // SAFETY: `line` is 64 readable bytes; `loadu` has no alignment requirement.
        let (lo, hi) =
            unsafe { (_mm256_loadu_si256(line.as_ptr().cast()), _mm256_loadu_si256(line[32..].as_ptr().cast())) };
        a = _mm256_xor_si256(a, lo);
        b = _mm256_xor_si256(b, hi);
    }
    let x = _mm256_xor_si256(a, b);
    (_mm256_extract_epi64::<0>(x)
        ^ _mm256_extract_epi64::<1>(x)
        ^ _mm256_extract_epi64::<2>(x)
        ^ _mm256_extract_epi64::<3>(x)) as u64
}
