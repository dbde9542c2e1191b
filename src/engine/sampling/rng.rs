//! The sampler's random generator: xoshiro256** seeded through SplitMix64, both from Blackman and Vigna,
//! "Scrambled linear pseudorandom number generators" (2021) and <https://prng.di.unimi.it/>. Small, fast, and with
//! a fixed output for a fixed seed on every platform, which is what reproducible sampling needs; it is not meant
//! for cryptography.

/// xoshiro256** state: four 64-bit words, never all zero (seeding through SplitMix64 guarantees that, as the
/// authors recommend).
#[derive(Clone, Debug)]
pub(crate) struct Xoshiro256StarStar {
    state: [u64; 4],
}

impl Xoshiro256StarStar {
    /// A generator whose state is the next four outputs of SplitMix64 started at `seed`.
    pub(crate) fn from_seed(seed: u64) -> Self {
        let mut splitmix = SplitMix64 { state: seed };
        Xoshiro256StarStar {
            state: [splitmix.next_u64(), splitmix.next_u64(), splitmix.next_u64(), splitmix.next_u64()],
        }
    }

    /// A generator with exactly this state (for the reference test vectors).
    #[cfg(test)]
    fn from_state(state: [u64; 4]) -> Self {
        Xoshiro256StarStar { state }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = &mut self.state;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = *s1 << 17;
        *s2 ^= *s0;
        *s3 ^= *s1;
        *s1 ^= *s2;
        *s0 ^= *s3;
        *s2 ^= t;
        *s3 = s3.rotate_left(45);
        result
    }

    /// A uniform draw from [0, 1): the top 53 bits as the mantissa (the upper bits of xoshiro256** are its
    /// strongest), so every multiple of 2^-53 is equally likely and 1.0 is never returned.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014): spreads a
/// 64-bit seed, however regular, over a full xoshiro state.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_reference_outputs_for_seed_zero() {
        // Outputs of the reference C code (splitmix64.c at prng.di.unimi.it) started at 0.
        let mut splitmix = SplitMix64 { state: 0 };
        assert_eq!(splitmix.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(splitmix.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn xoshiro256starstar_matches_reference_outputs() {
        // From state [1, 2, 3, 4], as the reference C code (xoshiro256starstar.c) computes them. The first two can
        // be checked by hand: rotl(2 * 5, 7) * 9 = 11520, and the second step leaves s[1] = 0.
        let mut rng = Xoshiro256StarStar::from_state([1, 2, 3, 4]);
        let expected = [11520, 0, 1509978240, 1215971899390074240, 1216172134540287360, 607988272756665600];
        for value in expected {
            assert_eq!(rng.next_u64(), value);
        }
    }

    #[test]
    fn unit_draws_stay_in_half_open_interval_with_mean_one_half() {
        let mut rng = Xoshiro256StarStar::from_seed(7);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let u = rng.next_f64();
            assert!((0.0..1.0).contains(&u));
            sum += u;
        }
        // The mean of n uniforms has standard error sqrt(1/12 / n) ≈ 0.0009; allow 5 of them.
        assert!((sum / n as f64 - 0.5).abs() < 5.0 * (1.0 / 12.0 / n as f64).sqrt());
    }

    #[test]
    fn different_seeds_give_different_streams() {
        let first: Vec<u64> = {
            let mut rng = Xoshiro256StarStar::from_seed(1);
            (0..4).map(|_| rng.next_u64()).collect()
        };
        let mut rng = Xoshiro256StarStar::from_seed(2);
        assert!((0..4).map(|_| rng.next_u64()).collect::<Vec<_>>() != first);
    }
}
