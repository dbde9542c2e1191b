//! The memory the parsed header of one file may take: its metadata values and tensor infos, as `Vec`s and
//! `String`s, counted before each is allocated.
//!
//! The counts of a file are already held to the bytes it has (`parse.rs`), but that is not enough: an empty string
//! takes 8 bytes in a file and a 24-byte `String` in memory, so 16M empty tokens (a 128 MB array) would cost
//! 384 MB parsed, and everything built from them after (a vocabulary's tables) more again. The budget bounds what
//! the parse itself allocates, whatever the file's size; the tokenizer bounds what it derives (`tokenizer/limits.rs`).

use super::error::GgufError;

/// Bytes of memory the parsed metadata and tensor infos of one file may take. Real files take far less: Gemma 3's
/// 262,144 tokens with their scores and types about 11 MB, Gemma 4's vocabulary with its 514,906 merges about 30 MB;
/// a vocabulary at the tokenizer's limits (`tokenizer/limits.rs`) about 140 MB. So this leaves room beyond both,
/// while keeping a crafted header from taking gigabytes.
pub const MAX_PARSED_BYTES: u64 = 256 << 20;

/// What is left of [`MAX_PARSED_BYTES`] while a file is parsed.
pub struct Budget {
    used: u64,
}

impl Budget {
    pub fn new() -> Self {
        Budget { used: 0 }
    }

    /// Takes `bytes` for `what` (at file offset `offset`), before they are allocated: an error naming the numbers
    /// when they do not fit what is left.
    pub fn take(&mut self, bytes: u64, what: &'static str, offset: u64) -> Result<(), GgufError> {
        match self.used.checked_add(bytes) {
            Some(used) if used <= MAX_PARSED_BYTES => {
                self.used = used;
                Ok(())
            }
            _ => Err(GgufError::ParsedTooLarge { what, bytes, used: self.used, max: MAX_PARSED_BYTES, offset }),
        }
    }

    /// Takes `count` items of `size` bytes each (overflow is a refusal, not a wrap).
    pub fn take_items(&mut self, count: u64, size: usize, what: &'static str, offset: u64) -> Result<(), GgufError> {
        self.take(count.saturating_mul(size as u64), what, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_until_the_limit_then_refuses_without_wrapping() {
        let mut b = Budget::new();
        b.take(MAX_PARSED_BYTES - 10, "a", 0).unwrap();
        b.take(10, "b", 0).unwrap();
        assert!(matches!(b.take(1, "c", 7), Err(GgufError::ParsedTooLarge { what: "c", bytes: 1, offset: 7, .. })));
        let mut b = Budget::new();
        assert!(b.take_items(u64::MAX, 24, "strings", 0).is_err());
        assert!(b.take(u64::MAX, "x", 0).is_err());
    }
}
