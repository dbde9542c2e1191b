//! The K-quant super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): on-disk layouts, their decoding into 32-element
//! groups of small integers, and their scalar dequantization.
//!
//! Layouts follow ggml (`ggml-common.h`: `block_q2_K` … `block_q6_K`); the decoding follows the dequantization of
//! the `gguf` Python package (`gguf/quants.py`), which the tests use as the independent reference. A super-block
//! covers 256 consecutive elements of a row: 8 groups of 32, each made of two halves of 16 elements. Every type
//! decodes to the same form ([`Group`]): element `k` of group `g` is
//!
//! `x = (d · scale[h]) · (u[k] − OFFSET) − (dmin · min[h])`, with `h = k / 16`,
//!
//! where `d` and `dmin` are the super-block's f16 scales and `scale`, `min`, `u` small integers. (Q3_K and Q6_K
//! have no minimum; Q4_K and Q5_K have one scale and minimum per group, repeated over both halves.) The quantized
//! matmul uses the integers directly; [`dequantize_k`] evaluates the formula in f32 in the order the reference
//! does, so its output equals the reference's bit for bit.

use bytemuck::{Pod, Zeroable};
use half::f16;

/// Elements per super-block.
pub const QK_K: usize = 256;
/// 32-element groups per super-block.
pub const GROUPS: usize = QK_K / 32;

/// One 32-element group of a super-block, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The stored values, unsigned, in element order: the weight is proportional to `u[k] − OFFSET`.
    pub u: [u8; 32],
    /// Integer scale of each half (elements 0..16, 16..32).
    pub scales: [i32; 2],
    /// Integer minimum of each half (0 for the types without one).
    pub mins: [i32; 2],
}

/// What the kernels and the dequantization need of a K-quant super-block.
pub trait SuperBlock: Pod {
    /// The type's name as GGUF spells it.
    const NAME: &'static str;
    /// Subtracted from every `u` (the values are stored unsigned).
    const OFFSET: i32;
    /// Whether the type subtracts `dmin · min`.
    const HAS_MIN: bool;
    /// The super-block scale `d`.
    fn d(&self) -> f32;
    /// The super-block minimum scale `dmin` (0 without minima).
    fn dmin(&self) -> f32;
    /// Group `g` (0..8) decoded.
    fn group(&self, g: usize) -> Group;
    /// The integer scale and minimum of every half of 16 elements, half `t = 2g + h` of group `g` (what
    /// [`SuperBlock::group`] gives as `scales[h]` and `mins[h]`), without the values.
    fn half_scales(&self) -> ([i32; 16], [i32; 16]);
}

/// 2-bit: `x = d·sc·q − dmin·m`, a 4-bit scale and minimum per 16 elements.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    /// Low nibble: scale, high nibble: minimum, of each 16 elements.
    pub scales: [u8; QK_K / 16],
    /// Element `128i + 32s + j` in bits `2s..2s + 2` of byte `32i + j`.
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

/// 3-bit: `x = d·(sc − 32)·(q − 4·(1 − h))`, a 6-bit scale per 16 elements, the third bit in `hmask`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    /// Element `32s + j`'s high bit in bit `s` of byte `j` (set means no offset).
    pub hmask: [u8; QK_K / 8],
    /// The low two bits, laid out as Q2_K's `qs`.
    pub qs: [u8; QK_K / 4],
    /// 16 six-bit scales: low nibbles in bytes 0..8 (scales 0..8 low, 8..16 high nibble), high bits in 8..12.
    pub scales: [u8; 12],
    pub d: f16,
}

/// 4-bit: `x = d·sc·q − dmin·m`, a 6-bit scale and minimum per 32 elements.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    /// 8 six-bit scales and 8 six-bit minima, packed (see [`k_scale_min`]).
    pub scales: [u8; 12],
    /// Element `64c + j` in the low nibble of byte `32c + j`, element `64c + 32 + j` in its high nibble.
    pub qs: [u8; QK_K / 2],
}

/// 5-bit: Q4_K plus a fifth bit per element in `qh`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    /// Element `32s + j`'s fifth bit in bit `s` of byte `j`.
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// 6-bit: `x = d·sc·(q − 32)`, a signed 8-bit scale per 16 elements.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    /// Element `128i + 64n + j`'s low four bits in nibble `n` of byte `64i + j`.
    pub ql: [u8; QK_K / 2],
    /// Element `128i + 32s + j`'s high two bits in bits `2s..2s + 2` of byte `32i + j`.
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

// The layouts must match ggml byte for byte: these sizes are what GgmlType::block_bytes promises.
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// The 2-bit field of element `32s + j` (`s` in 0..4) of a 128-element half stored in `qs[32i..32i + 32]`.
#[inline(always)]
fn crumb(qs: &[u8], i: usize, s: usize, j: usize) -> u8 {
    (qs[32 * i + j] >> (2 * s)) & 3
}

/// Scale and minimum of group `g` of Q4_K / Q5_K: 12 bytes hold eight 6-bit pairs, groups 0..4 in the low six bits
/// of bytes 0..4 (scales) and 4..8 (minima), groups 4..8 split between the nibbles of bytes 8..12 and the top two
/// bits of bytes 0..8.
#[inline(always)]
pub fn k_scale_min(scales: &[u8; 12], g: usize) -> (u8, u8) {
    if g < 4 {
        (scales[g] & 0x3f, scales[g + 4] & 0x3f)
    } else {
        let sc = (scales[g + 4] & 0x0f) | ((scales[g - 4] >> 2) & 0x30);
        let m = (scales[g + 4] >> 4) | ((scales[g] >> 2) & 0x30);
        (sc, m)
    }
}

/// Signed scale `t` (0..16) of Q3_K.
#[inline(always)]
fn q3k_scale(scales: &[u8; 12], t: usize) -> i32 {
    let low = if t < 8 { scales[t] & 0x0f } else { scales[t - 8] >> 4 };
    let high = (scales[8 + t % 4] >> (2 * (t / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

impl SuperBlock for BlockQ2K {
    const NAME: &'static str = "Q2_K";
    const OFFSET: i32 = 0;
    const HAS_MIN: bool = true;
    fn d(&self) -> f32 {
        self.d.to_f32()
    }
    fn dmin(&self) -> f32 {
        self.dmin.to_f32()
    }
    #[inline(always)]
    fn group(&self, g: usize) -> Group {
        let (i, s) = (g / 4, g % 4);
        let u = std::array::from_fn(|j| crumb(&self.qs, i, s, j));
        let half = |h: usize| self.scales[2 * g + h];
        Group {
            u,
            scales: [i32::from(half(0) & 0x0f), i32::from(half(1) & 0x0f)],
            mins: [i32::from(half(0) >> 4), i32::from(half(1) >> 4)],
        }
    }
    fn half_scales(&self) -> ([i32; 16], [i32; 16]) {
        (self.scales.map(|s| i32::from(s & 0x0f)), self.scales.map(|s| i32::from(s >> 4)))
    }
}

impl SuperBlock for BlockQ3K {
    const NAME: &'static str = "Q3_K";
    const OFFSET: i32 = 4;
    const HAS_MIN: bool = false;
    fn d(&self) -> f32 {
        self.d.to_f32()
    }
    fn dmin(&self) -> f32 {
        0.0
    }
    #[inline(always)]
    fn group(&self, g: usize) -> Group {
        let (i, s) = (g / 4, g % 4);
        // q = low − 4 when the mask bit is clear, low when set: u = low + 4·bit, offset 4.
        let u = std::array::from_fn(|j| crumb(&self.qs, i, s, j) | (((self.hmask[j] >> g) & 1) << 2));
        Group { u, scales: [q3k_scale(&self.scales, 2 * g), q3k_scale(&self.scales, 2 * g + 1)], mins: [0, 0] }
    }
    fn half_scales(&self) -> ([i32; 16], [i32; 16]) {
        (std::array::from_fn(|t| q3k_scale(&self.scales, t)), [0; 16])
    }
}

/// Q4_K / Q5_K's scales and minima per half: each group's pair, twice.
fn k_half_scales(scales: &[u8; 12]) -> ([i32; 16], [i32; 16]) {
    let pairs: [(u8, u8); GROUPS] = std::array::from_fn(|g| k_scale_min(scales, g));
    (std::array::from_fn(|t| i32::from(pairs[t / 2].0)), std::array::from_fn(|t| i32::from(pairs[t / 2].1)))
}

/// Group `g`'s four low bits in Q4_K / Q5_K's `qs`.
#[inline(always)]
fn k_nibble(qs: &[u8; QK_K / 2], g: usize, j: usize) -> u8 {
    (qs[32 * (g / 2) + j] >> (4 * (g % 2))) & 0x0f
}

impl SuperBlock for BlockQ4K {
    const NAME: &'static str = "Q4_K";
    const OFFSET: i32 = 0;
    const HAS_MIN: bool = true;
    fn d(&self) -> f32 {
        self.d.to_f32()
    }
    fn dmin(&self) -> f32 {
        self.dmin.to_f32()
    }
    #[inline(always)]
    fn group(&self, g: usize) -> Group {
        let (sc, m) = k_scale_min(&self.scales, g);
        let (sc, m) = (i32::from(sc), i32::from(m));
        Group { u: std::array::from_fn(|j| k_nibble(&self.qs, g, j)), scales: [sc, sc], mins: [m, m] }
    }
    fn half_scales(&self) -> ([i32; 16], [i32; 16]) {
        k_half_scales(&self.scales)
    }
}

impl SuperBlock for BlockQ5K {
    const NAME: &'static str = "Q5_K";
    const OFFSET: i32 = 0;
    const HAS_MIN: bool = true;
    fn d(&self) -> f32 {
        self.d.to_f32()
    }
    fn dmin(&self) -> f32 {
        self.dmin.to_f32()
    }
    #[inline(always)]
    fn group(&self, g: usize) -> Group {
        let (sc, m) = k_scale_min(&self.scales, g);
        let (sc, m) = (i32::from(sc), i32::from(m));
        let u = std::array::from_fn(|j| k_nibble(&self.qs, g, j) | (((self.qh[j] >> g) & 1) << 4));
        Group { u, scales: [sc, sc], mins: [m, m] }
    }
    fn half_scales(&self) -> ([i32; 16], [i32; 16]) {
        k_half_scales(&self.scales)
    }
}

impl SuperBlock for BlockQ6K {
    const NAME: &'static str = "Q6_K";
    const OFFSET: i32 = 32;
    const HAS_MIN: bool = false;
    fn d(&self) -> f32 {
        self.d.to_f32()
    }
    fn dmin(&self) -> f32 {
        0.0
    }
    #[inline(always)]
    fn group(&self, g: usize) -> Group {
        // Group g covers elements 32g..32g + 32: half i = g / 4, then s = g % 4 picks the nibble (s / 2) and the
        // 32-byte run of `ql` (s % 2), and the bit pair of `qh`.
        let (i, s) = (g / 4, g % 4);
        let u = std::array::from_fn(|j| {
            let low = (self.ql[64 * i + 32 * (s % 2) + j] >> (4 * (s / 2))) & 0x0f;
            low | (crumb(&self.qh, i, s, j) << 4)
        });
        Group { u, scales: [i32::from(self.scales[2 * g]), i32::from(self.scales[2 * g + 1])], mins: [0, 0] }
    }
    fn half_scales(&self) -> ([i32; 16], [i32; 16]) {
        (self.scales.map(i32::from), [0; 16])
    }
}

/// Dequantizes K-quant super-blocks into `out` (`out.len() == blocks.len() * 256`), bit-identical to the `gguf`
/// package: `dl = d · scale`, `ml = dmin · min`, `x = dl · q − ml` (`x = dl · q` without minima), each step
/// rounded to f32.
pub fn dequantize_k<B: SuperBlock>(blocks: &[B], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK_K, "output length must be 256 per super-block");
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (b.d(), b.dmin());
        for (g, og) in o.chunks_exact_mut(32).enumerate() {
            let group = b.group(g);
            for (k, x) in og.iter_mut().enumerate() {
                let dl = d * group.scales[k / 16] as f32;
                let q = (i32::from(group.u[k]) - B::OFFSET) as f32;
                *x = if B::HAS_MIN { dl * q - dmin * group.mins[k / 16] as f32 } else { dl * q };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `half_scales` is `group`'s scales and minima, for every type, on arbitrary bytes.
    #[test]
    fn half_scales_agree_with_the_groups() {
        fn check<B: SuperBlock>(bytes: &[u8]) {
            let b: B = bytemuck::pod_read_unaligned(&bytes[..std::mem::size_of::<B>()]);
            let (scales, mins) = b.half_scales();
            for g in 0..GROUPS {
                let group = b.group(g);
                assert_eq!(group.scales, [scales[2 * g], scales[2 * g + 1]], "{} group {g}", B::NAME);
                assert_eq!(group.mins, [mins[2 * g], mins[2 * g + 1]], "{} group {g}", B::NAME);
            }
        }
        let bytes: Vec<u8> = (0..256u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        check::<BlockQ2K>(&bytes);
        check::<BlockQ3K>(&bytes);
        check::<BlockQ4K>(&bytes);
        check::<BlockQ5K>(&bytes);
        check::<BlockQ6K>(&bytes);
    }

    #[test]
    fn q4_k_scales_unpack_their_six_bit_fields() {
        let mut scales = [0u8; 12];
        scales[1] = 0b11_000101; // group 1 scale 5; top bits feed group 5's scale
        scales[5] = 0b01_000111; // group 1 min 7; top bits feed group 5's min
        scales[9] = 0xa3; // group 5: scale low nibble 3, min low nibble 10
        assert_eq!(k_scale_min(&scales, 1), (5, 7));
        assert_eq!(k_scale_min(&scales, 5), (0x33, 0x1a));
    }

    #[test]
    fn q6_k_groups_read_their_own_bits() {
        let mut b = BlockQ6K::zeroed();
        b.ql[64 + 32 + 3] = 0x50; // half 1, run 1, high nibble: group 7 (s = 3), element 3
        b.qh[32 + 3] = 0b10_00_00_00; // half 1, bit pair 3
        b.scales[15] = -2;
        let g = b.group(7);
        assert_eq!(g.u[3], 5 | (2 << 4));
        assert_eq!(g.scales, [0, -2]);
        assert_eq!(b.group(6).u[3], 0);
    }

    #[test]
    fn q3_k_mask_bit_removes_the_offset() {
        let mut b = BlockQ3K::zeroed();
        b.hmask[0] = 1 << 2; // group 2, element 0
        assert_eq!(b.group(2).u[0], 4);
        assert_eq!(b.group(2).u[1], 0);
        // Scale 0 field 0 gives −32.
        assert_eq!(b.group(0).scales, [-32, -32]);
    }
}
