//! SentencePiece's precompiled normalizer (`tokenizer.ggml.precompiled_charsmap`): a map from byte strings to their
//! replacements (XLM-RoBERTa's and T5's `nmt_nfkc`: NFKC, with control characters dropped and odd spaces made
//! plain), read as llama.cpp's `llm_tokenizer_ugm` reads it (`src/llama-vocab.cpp`).
//!
//! Layout: a little-endian u32, the byte size of the trie; the trie, an XOR-compressed double array of u32 units
//! (darts-clone's format, Kanda 2018); then the replacements, NUL-terminated strings. From a node's index, the child
//! along byte `c` is at `index ^ c` and belongs to the node when its label is `c`; each unit packs its label (bits
//! 0-7, and bit 31 set on value units so that they match no byte), whether a key ends at its child (bit 8), and the
//! offset to XOR with its index to reach its own children (bits 10-30, shifted left by 8 when bit 9 is set). Where a
//! key ends, the unit at that children's offset holds the replacement's start (bits 0-30).
//!
//! The file is untrusted, so every index the walk can take is checked once, at load: the trie is walked from its root
//! along every byte, and a child's index outside the array, a replacement outside the strings or without its NUL, a
//! replacement longer than [`MAX_REPLACEMENT_BYTES`], a path longer than [`MAX_KEY_BYTES`] (or a cycle) refuse the
//! vocabulary. llama.cpp checks indices as it normalizes and throws, mid-tokenization, on a bad one. The real map
//! (237,539 bytes: 44,288 units, 18,808 nodes) is walked in about 10 ms; its keys are at most 10 bytes, its
//! replacements at most 33 (U+FDFA's eighteen characters), so a text grows at most 11-fold.

use rustc_hash::{FxHashMap, FxHashSet};

use super::TokenizerError;

/// The longest path from the root, in bytes. Real keys: at most 10 bytes (a character and its combining marks).
pub const MAX_KEY_BYTES: usize = 128;
/// The longest replacement. Real ones: at most 33 bytes. A replacement consumes at least one byte of text, so a
/// normalized text is at most this many times as long as the text.
pub const MAX_REPLACEMENT_BYTES: usize = 64;

/// Bit 31 marks value units; labels are 0-255 otherwise.
const VALUE_BIT: u32 = 1 << 31;

/// The normalizer's map, checked.
pub(crate) struct Charsmap {
    /// The double array's units.
    units: Vec<u32>,
    /// The replacement strings, NUL-terminated, addressed by byte offset.
    replacements: Vec<u8>,
}

/// Why a charsmap is refused.
fn malformed(reason: String) -> TokenizerError {
    TokenizerError::MalformedCharsmap { reason }
}

impl Charsmap {
    /// Reads and checks a map. An empty trie is allowed (nothing is replaced), as llama.cpp allows it.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, TokenizerError> {
        let Some((size, rest)) = bytes.split_first_chunk::<4>() else {
            return Err(malformed(format!("{} bytes, too short for the 4-byte size of its trie", bytes.len())));
        };
        let trie_bytes = u32::from_le_bytes(*size) as usize;
        // llama.cpp requires at least one byte of replacements after the trie.
        if trie_bytes >= rest.len() {
            return Err(malformed(format!(
                "its trie is {trie_bytes} bytes, but only {} follow the size (and the replacements need some)",
                rest.len()
            )));
        }
        // A trailing part of a unit (llama.cpp reads `trie_bytes / 4` units) belongs to neither.
        let units = rest[..trie_bytes / 4 * 4].chunks_exact(4).map(|u| u32::from_le_bytes([u[0], u[1], u[2], u[3]]));
        let map = Charsmap { units: units.collect(), replacements: rest[trie_bytes..].to_vec() };
        map.check()?;
        Ok(map)
    }

    /// The replacement of the longest key that starts `text`, and that key's length; `None` when no key does.
    pub(crate) fn longest_match(&self, text: &[u8]) -> Option<(&[u8], usize)> {
        let mut node = self.base(*self.units.first()?, 0);
        let mut found = None;
        for (i, &c) in text.iter().enumerate().take(MAX_KEY_BYTES) {
            // llama.cpp stops at a NUL: a key never holds one.
            if c == 0 {
                break;
            }
            let Some(child) = self.child(node, c) else { break };
            node = child.next;
            if child.is_key_end {
                found = Some((child.next, i + 1));
            }
        }
        let (value_index, len) = found?;
        // Checked at load: the value unit and its string exist, and the string ends within MAX_REPLACEMENT_BYTES.
        let start = (self.units.get(value_index as usize)? & !VALUE_BIT) as usize;
        let tail = self.replacements.get(start..)?;
        let end = tail.iter().take(MAX_REPLACEMENT_BYTES + 1).position(|&b| b == 0)?;
        Some((&tail[..end], len))
    }

    /// The index a unit's children hang from: its index XOR its offset.
    fn base(&self, unit: u32, index: u32) -> u32 {
        let offset = (unit >> 10) << ((unit & (1 << 9)) >> 6);
        index ^ offset
    }

    /// The child of the node whose children hang from `node`, along byte `c` (1-255).
    #[inline]
    fn child(&self, node: u32, c: u8) -> Option<Child> {
        let index = node ^ u32::from(c);
        let unit = *self.units.get(index as usize)?;
        if unit & (VALUE_BIT | 0xff) != u32::from(c) {
            return None;
        }
        Some(Child { next: self.base(unit, index), is_key_end: unit & (1 << 8) != 0 })
    }

    /// Walks every path from the root, checking every probe, value and replacement the normalizer can reach, and
    /// the longest path. Depth-first, each node once (a node is the index its children hang from, and a node reached
    /// again keeps the height of the paths below it), so at most (units + 1) × 255 probes; a cycle or a path longer
    /// than the limit stops it.
    fn check(&self) -> Result<(), TokenizerError> {
        let Some(&root_unit) = self.units.first() else { return Ok(()) };
        let root = self.base(root_unit, 0);
        let too_long = || malformed(format!("its trie has a path of {MAX_KEY_BYTES} bytes or more"));
        // The nodes on the current path, and the height (longest path below, in bytes) of those done.
        let mut on_path: FxHashSet<u32> = FxHashSet::default();
        let mut heights: FxHashMap<u32, usize> = FxHashMap::default();
        // The current path: (node, next byte to try, height found below it so far); its length - 1 is the depth.
        let mut stack: Vec<(u32, u16, usize)> = vec![(root, 1, 0)];
        on_path.insert(root);
        while let Some(top) = stack.last_mut() {
            let (node, c) = (top.0, top.1);
            if c > 255 {
                let height = top.2;
                stack.pop();
                on_path.remove(&node);
                heights.insert(node, height);
                if let Some(parent) = stack.last_mut() {
                    parent.2 = parent.2.max(height + 1);
                }
                continue;
            }
            top.1 += 1;
            let c = c as u8;
            let index = node ^ u32::from(c);
            if index as usize >= self.units.len() {
                return Err(malformed(format!(
                    "a node's child along byte {c:#04x} would be unit {index}, beyond its {} units",
                    self.units.len()
                )));
            }
            let Some(child) = self.child(node, c) else { continue };
            if child.is_key_end {
                self.check_value(child.next)?;
            }
            if on_path.contains(&child.next) {
                return Err(malformed(format!("its trie has a cycle through unit {index}")));
            }
            // The child's depth is the stack's length.
            let depth = stack.len();
            if let Some(&height) = heights.get(&child.next) {
                if depth + height >= MAX_KEY_BYTES {
                    return Err(too_long());
                }
                let top = stack.last_mut().expect("the loop holds a frame");
                top.2 = top.2.max(height + 1);
                continue;
            }
            if depth >= MAX_KEY_BYTES {
                return Err(too_long());
            }
            on_path.insert(child.next);
            stack.push((child.next, 1, 0));
        }
        Ok(())
    }

    /// Checks the replacement a key ending at `value_index` maps to.
    fn check_value(&self, value_index: u32) -> Result<(), TokenizerError> {
        let Some(&unit) = self.units.get(value_index as usize) else {
            return Err(malformed(format!(
                "a key's value unit {value_index} is beyond its {} units",
                self.units.len()
            )));
        };
        let start = (unit & !VALUE_BIT) as usize;
        let Some(tail) = self.replacements.get(start..).filter(|t| !t.is_empty()) else {
            return Err(malformed(format!(
                "a replacement starts at byte {start}, beyond its {} bytes of replacements",
                self.replacements.len()
            )));
        };
        match tail.iter().position(|&b| b == 0) {
            Some(len) if len <= MAX_REPLACEMENT_BYTES => Ok(()),
            Some(len) => Err(malformed(format!(
                "the replacement at byte {start} is {len} bytes, more than the {MAX_REPLACEMENT_BYTES} ember accepts"
            ))),
            None => Err(malformed(format!("the replacement at byte {start} has no terminating NUL"))),
        }
    }
}

/// A step down the trie.
struct Child {
    /// The index the child's own children hang from (the value unit's index when a key ends here).
    next: u32,
    /// Whether a key ends at the child.
    is_key_end: bool,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A unit whose children hang `offset` away (XOR) from its index (darts-clone's unshifted form).
    fn with_offset(offset: u32) -> u32 {
        assert!(offset < 1 << 21);
        offset << 10
    }

    /// The unit at `index` of a built map.
    fn set_unit(bytes: &mut [u8], index: u32, unit: u32) {
        let at = 4 + 4 * index as usize;
        bytes[at..at + 4].copy_from_slice(&unit.to_le_bytes());
    }

    /// The root's children hang from unit 256; a key's byte `c` at depth `d` sits in the block of its parent, and
    /// its own children (and its value, at label 0) in a fresh block of 256 units.
    const ROOT_CHILDREN: u32 = 256;

    /// A charsmap of `(key, replacement)` rules laid out as darts-clone lays them out, one block of 256 units per
    /// node, for keys whose first bytes differ: enough to exercise the walk without a double-array builder.
    pub(crate) fn build(rules: &[(&[u8], &str)]) -> Vec<u8> {
        let blocks = 2 + rules.iter().map(|(k, _)| k.len()).sum::<usize>();
        let mut units = vec![0u32; 256 * blocks];
        let mut strings = Vec::new();
        units[0] = with_offset(ROOT_CHILDREN);
        let mut next_block = 2u32;
        for (key, replacement) in rules {
            let mut node = ROOT_CHILDREN;
            for (depth, &c) in key.iter().enumerate() {
                let index = node ^ u32::from(c);
                let children = 256 * next_block;
                next_block += 1;
                let is_end = depth + 1 == key.len();
                units[index as usize] = with_offset(index ^ children) | u32::from(c) | (u32::from(is_end) << 8);
                if is_end {
                    units[children as usize] = VALUE_BIT | strings.len() as u32;
                    strings.extend_from_slice(replacement.as_bytes());
                    strings.push(0);
                }
                node = children;
            }
        }
        let mut bytes = ((units.len() * 4) as u32).to_le_bytes().to_vec();
        bytes.extend(units.iter().flat_map(|u| u.to_le_bytes()));
        bytes.extend(strings);
        bytes
    }

    #[test]
    fn the_longest_key_is_replaced() {
        let map = Charsmap::parse(&build(&[(b"A", "a"), ("\u{fb01}".as_bytes(), "fi"), (b"xy", "")])).unwrap();
        assert_eq!(map.longest_match(b"Ab"), Some((&b"a"[..], 1)));
        assert_eq!(map.longest_match("\u{fb01}x".as_bytes()), Some((&b"fi"[..], 3)));
        assert_eq!(map.longest_match(b"xyz"), Some((&b""[..], 2)));
        assert_eq!(map.longest_match(b"x"), None);
        assert_eq!(map.longest_match(b"b"), None);
        assert_eq!(map.longest_match(b""), None);
        assert_eq!(map.longest_match(b"\0A"), None);
    }

    #[test]
    fn an_empty_trie_replaces_nothing() {
        let map = Charsmap::parse(&[0, 0, 0, 0, 0]).unwrap();
        assert_eq!(map.longest_match(b"A"), None);
    }

    fn refused(bytes: &[u8]) -> String {
        match Charsmap::parse(bytes) {
            Err(TokenizerError::MalformedCharsmap { reason }) => reason,
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn truncated_maps_are_refused() {
        assert!(refused(&[]).contains("too short"));
        assert!(refused(&[8, 0, 0]).contains("too short"));
        let good = build(&[(b"A", "a")]);
        // The trie's size says more than follows, or leaves no replacements.
        assert!(refused(&good[..good.len() / 2]).contains("only"));
        let trie = u32::from_le_bytes(good[..4].try_into().unwrap()) as usize;
        assert!(refused(&good[..4 + trie]).contains("only"));
        // The replacements cut before their NUL.
        assert!(refused(&good[..good.len() - 1]).contains("no terminating NUL"));
    }

    #[test]
    fn out_of_range_indices_and_offsets_are_refused() {
        let good = build(&[(b"A", "a")]);
        let key_index = ROOT_CHILDREN ^ u32::from(b'A');
        // The root's children hang beyond the array.
        let mut bad = good.clone();
        set_unit(&mut bad, 0, with_offset(1 << 20));
        assert!(refused(&bad).contains("beyond its 768 units"), "{}", refused(&bad));
        // The key's value points past the replacements.
        let mut bad = good.clone();
        set_unit(&mut bad, 512, VALUE_BIT | 1000);
        assert!(refused(&bad).contains("beyond its 2 bytes"), "{}", refused(&bad));
        // The key's children (and its value) hang outside the array.
        let mut bad = good.clone();
        set_unit(&mut bad, key_index, with_offset(1 << 20) | u32::from(b'A') | (1 << 8));
        assert!(refused(&bad).contains("value unit"), "{}", refused(&bad));
    }

    #[test]
    fn long_replacements_long_paths_and_cycles_are_refused() {
        let long = "x".repeat(MAX_REPLACEMENT_BYTES + 1);
        assert!(refused(&build(&[(b"A", &long)])).contains("more than"));
        assert!(Charsmap::parse(&build(&[(b"A", &long[1..])])).is_ok());
        let key = vec![b'k'; MAX_KEY_BYTES];
        assert!(refused(&build(&[(&key, "k")])).contains("path"));
        assert!(Charsmap::parse(&build(&[(&key[1..], "k")])).is_ok());
        // The child along 'A' hangs its children back where the root's hang: "AAAA..." would walk forever.
        let mut bad = build(&[(b"A", "a")]);
        let key_index = ROOT_CHILDREN ^ u32::from(b'A');
        set_unit(&mut bad, key_index, with_offset(key_index ^ ROOT_CHILDREN) | u32::from(b'A'));
        assert!(refused(&bad).contains("cycle"), "{}", refused(&bad));
    }
}
