//! A read-only trie over byte strings, for finding every token that starts at a position of a text in one walk
//! (the Unigram lattice, `unigram.rs`) and the longest stretch of a text that begins some token (llama.cpp's
//! `naive_trie::get_longest_prefix`).
//!
//! Nodes are numbered breadth first, so the children of a node are consecutive and sorted by their edge's byte: a
//! node stores where its children start and how many there are, and a child is found by binary search. For
//! XLM-RoBERTa's 250,000 pieces that is 782,848 nodes in 10 MB, built in about 60 ms (a sort and one pass), where a
//! node with a map of children (llama.cpp's `std::map`) takes several times that.

use std::collections::VecDeque;

use super::TokenId;

/// A node's value when no key ends there.
const NO_VALUE: TokenId = TokenId::MAX;

#[derive(Clone, Copy)]
struct Node {
    /// Index of the first child in `nodes`.
    first_child: u32,
    /// Children, at most 256.
    child_count: u16,
    /// The id of the key that ends here, or [`NO_VALUE`].
    value: TokenId,
}

/// Keys (byte strings) with an id each. Where two keys are equal the later one's id is kept, as llama.cpp's trie
/// keeps the last insert.
pub(crate) struct ByteTrie {
    /// `nodes[0]` is the root (the empty key).
    nodes: Vec<Node>,
    /// `labels[i]`: the byte on the edge into node `i` (0 for the root).
    labels: Vec<u8>,
}

/// A position in the trie: the node reached by the bytes walked so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeId(u32);

impl ByteTrie {
    /// Builds the trie of `keys`, in order (`(key, id)`); empty keys are left out.
    pub(crate) fn new<'a>(keys: impl IntoIterator<Item = (&'a [u8], TokenId)>) -> Self {
        let mut keys: Vec<(&[u8], TokenId)> = keys.into_iter().filter(|(k, _)| !k.is_empty()).collect();
        // Stable: equal keys keep their order, and the last of them gives the value.
        keys.sort_by(|a, b| a.0.cmp(b.0));
        let mut nodes = vec![Node { first_child: 0, child_count: 0, value: NO_VALUE }];
        let mut labels = vec![0u8];
        // (node, the range of `keys` below it, the depth of the node): each range's keys share their first `depth`
        // bytes, the node's path.
        let mut queue = VecDeque::from([(0usize, 0usize, keys.len(), 0usize)]);
        while let Some((node, mut lo, hi, depth)) = queue.pop_front() {
            // Sorted: the keys that end at this node come first.
            while lo < hi && keys[lo].0.len() == depth {
                nodes[node].value = keys[lo].1;
                lo += 1;
            }
            nodes[node].first_child = nodes.len() as u32;
            let mut start = lo;
            while start < hi {
                let byte = keys[start].0[depth];
                let mut end = start + 1;
                while end < hi && keys[end].0[depth] == byte {
                    end += 1;
                }
                queue.push_back((nodes.len(), start, end, depth + 1));
                nodes.push(Node { first_child: 0, child_count: 0, value: NO_VALUE });
                labels.push(byte);
                nodes[node].child_count += 1;
                start = end;
            }
        }
        ByteTrie { nodes, labels }
    }

    pub(crate) fn root(&self) -> NodeId {
        NodeId(0)
    }

    /// The node one byte below `node`, if some key continues that way.
    #[inline]
    pub(crate) fn child(&self, node: NodeId, byte: u8) -> Option<NodeId> {
        let n = self.nodes[node.0 as usize];
        let first = n.first_child as usize;
        let labels = &self.labels[first..first + n.child_count as usize];
        labels.binary_search(&byte).ok().map(|i| NodeId((first + i) as u32))
    }

    /// The id of the key that ends at `node`.
    #[inline]
    pub(crate) fn value(&self, node: NodeId) -> Option<TokenId> {
        Some(self.nodes[node.0 as usize].value).filter(|&v| v != NO_VALUE)
    }

    /// How many leading bytes of `text` lie on some key's path, whether or not a key ends there: llama.cpp's
    /// `naive_trie::get_longest_prefix`, which the Unigram normalizer uses this way.
    pub(crate) fn longest_path(&self, text: &[u8]) -> usize {
        let mut node = self.root();
        for (i, &byte) in text.iter().enumerate() {
            match self.child(node, byte) {
                Some(next) => node = next,
                None => return i,
            }
        }
        text.len()
    }

    /// Whether the trie holds no key.
    pub(crate) fn is_empty(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[0].value == NO_VALUE
    }

    /// Nodes, the root included (for tests and size reports).
    #[cfg(test)]
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trie(keys: &[&str]) -> ByteTrie {
        ByteTrie::new(keys.iter().zip(0..).map(|(k, id)| (k.as_bytes(), id)))
    }

    /// Every key that starts `text`, shortest first, as the lattice walks them.
    fn prefixes(t: &ByteTrie, text: &str) -> Vec<(usize, TokenId)> {
        let mut node = t.root();
        let mut found = Vec::new();
        for (i, &b) in text.as_bytes().iter().enumerate() {
            let Some(next) = t.child(node, b) else { break };
            node = next;
            found.extend(t.value(node).map(|id| (i + 1, id)));
        }
        found
    }

    #[test]
    fn every_key_that_starts_a_text_is_found() {
        let t = trie(&["a", "ab", "abc", "b", "abd", "é"]);
        assert_eq!(prefixes(&t, "abcd"), [(1, 0), (2, 1), (3, 2)]);
        assert_eq!(prefixes(&t, "abd"), [(1, 0), (2, 1), (3, 4)]);
        assert_eq!(prefixes(&t, "b"), [(1, 3)]);
        assert_eq!(prefixes(&t, "éa"), [(2, 5)]);
        assert!(prefixes(&t, "c").is_empty());
        // root, a, b, 0xC3, ab, 0xA9, abc, abd
        assert_eq!(t.node_count(), 8);
    }

    #[test]
    fn the_later_of_equal_keys_wins_and_empty_keys_are_left_out() {
        let t = trie(&["x", "", "x"]);
        assert_eq!(prefixes(&t, "x"), [(1, 2)]);
        assert!(!t.is_empty());
        assert!(trie(&[""]).is_empty());
    }

    #[test]
    fn the_longest_path_need_not_end_at_a_key() {
        let t = trie(&["<extra>", "<b>"]);
        assert_eq!(t.longest_path(b"<ex"), 3);
        assert_eq!(t.longest_path(b"<exit"), 3);
        assert_eq!(t.longest_path(b"<b>c"), 3);
        assert_eq!(t.longest_path(b"x"), 0);
        assert_eq!(t.longest_path(b""), 0);
    }
}
