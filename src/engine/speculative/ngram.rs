//! Prompt lookup: a draft is what followed the most recent earlier occurrence of the sequence's last tokens.

use crate::model::TokenId;

/// A proposed continuation of a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draft {
    pub tokens: Vec<TokenId>,
    /// How many of the sequence's last tokens the occurrence it came from matched: longer matches predict
    /// better, so acceptance is estimated per match length (`acceptance.rs`).
    pub match_len: usize,
}

/// The draft that follows `tokens`: the continuation, at most `limit` tokens, of the most recent earlier
/// occurrence of the longest suffix of `tokens` that occurs earlier, among the lengths `max_len` down to
/// `min_len`. `None` when no suffix of those lengths occurs earlier, or `limit` is 0.
///
/// One backward pass: every earlier position holding the last token ends a candidate occurrence, whose match is
/// extended backwards up to `max_len`; the pass stops at the first (most recent) one that reaches `max_len`.
pub fn propose(tokens: &[TokenId], min_len: usize, max_len: usize, limit: usize) -> Option<Draft> {
    let len = tokens.len();
    let &last = tokens.last()?;
    if limit == 0 || min_len == 0 || len <= min_len {
        return None;
    }
    // (match length, end of the occurrence): the longest so far, the most recent among equals.
    let mut best: Option<(usize, usize)> = None;
    for end in (0..len - 1).rev() {
        if tokens[end] != last {
            continue;
        }
        let reach = max_len.min(end + 1);
        let matched = (1..reach).take_while(|&i| tokens[end - i] == tokens[len - 1 - i]).count() + 1;
        if matched >= min_len && best.is_none_or(|(m, _)| matched > m) {
            best = Some((matched, end));
            if matched == max_len {
                break;
            }
        }
    }
    let (match_len, end) = best?;
    let from = end + 1;
    Some(Draft { tokens: tokens[from..(from + limit).min(len)].to_vec(), match_len })
}

/// The draft a prediction (`prediction`, the text the output is expected to repeat) offers after `tokens`: the
/// continuation, at most `limit` tokens, of the longest suffix of `tokens` (lengths `max_len` down to
/// `min_len`) found in `predicted`, at its first occurrence there (the output follows the prediction from its
/// start). `None` when no such suffix occurs with a token after it.
pub fn propose_from(
    predicted: &[TokenId],
    tokens: &[TokenId],
    min_len: usize,
    max_len: usize,
    limit: usize,
) -> Option<Draft> {
    if limit == 0 || min_len == 0 || tokens.len() < min_len {
        return None;
    }
    for n in (min_len..=max_len.min(tokens.len())).rev() {
        let suffix = &tokens[tokens.len() - n..];
        // An occurrence must leave at least one predicted token after it.
        let found = predicted.windows(n).take(predicted.len().saturating_sub(n)).position(|w| w == suffix);
        if let Some(at) = found {
            let from = at + n;
            return Some(Draft { tokens: predicted[from..(from + limit).min(predicted.len())].to_vec(), match_len: n });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(tokens: &[TokenId], min: usize, max: usize, limit: usize) -> Option<(Vec<TokenId>, usize)> {
        propose(tokens, min, max, limit).map(|d| (d.tokens, d.match_len))
    }

    #[test]
    fn the_longest_suffix_found_earlier_gives_its_most_recent_continuation() {
        // "1 2 3 9 ... 1 2 3 7 8 ... 2 3": the 3-gram "4 2 3" is not earlier, the 2-gram "2 3" is, last at 6..8.
        let tokens = [1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 4, 2, 3];
        assert_eq!(draft(&tokens, 1, 3, 3), Some((vec![7, 8, 4], 2)));
        assert_eq!(draft(&tokens, 1, 3, 2), Some((vec![7, 8], 2)), "limited by the caller");
        assert_eq!(draft(&[5, 6, 1, 2, 3, 1, 2, 3], 1, 3, 3), Some((vec![1, 2, 3], 3)), "the 3-gram match at 2..5");
        assert_eq!(draft(&[7, 7, 7], 1, 2, 4), Some((vec![7], 2)), "an overlapping match runs to the end");
        // A longer match wins over a more recent shorter one.
        assert_eq!(draft(&[1, 2, 3, 4, 9, 3, 4, 8, 1, 2, 3, 4], 2, 4, 1), Some((vec![9], 4)));
    }

    #[test]
    fn a_prediction_offers_what_follows_the_longest_suffix_found_in_it() {
        let predicted = [10, 11, 12, 13, 14, 11, 12, 15];
        let draft =
            |tokens: &[TokenId], limit| propose_from(&predicted, tokens, 1, 3, limit).map(|d| (d.tokens, d.match_len));
        assert_eq!(draft(&[1, 10, 11], 3), Some((vec![12, 13, 14], 2)));
        assert_eq!(draft(&[14, 11, 12], 4), Some((vec![15], 3)), "the longest match, not the first 2-gram");
        assert_eq!(draft(&[1, 2, 12], 2), Some((vec![13, 14], 1)), "the first occurrence");
        assert_eq!(draft(&[1, 2, 15], 2), None, "nothing follows the match");
        assert_eq!(draft(&[9], 2), None);
        assert_eq!(draft(&[10], 0), None);
    }

    #[test]
    fn nothing_matches_nothing_is_drafted() {
        assert_eq!(draft(&[1, 2, 3, 4, 5], 2, 3, 3), None);
        assert_eq!(draft(&[1], 2, 3, 3), None);
        assert_eq!(draft(&[], 1, 3, 3), None);
        assert_eq!(draft(&[1, 2, 1], 1, 1, 0), None, "no room for a draft");
        assert_eq!(draft(&[1, 2, 1], 1, 1, 16), Some((vec![2, 1], 1)));
        assert_eq!(draft(&[1, 2, 1], 2, 2, 16), None, "the 1-token match is below the minimum");
    }

    /// The single pass agrees with the definition: for n from the longest down, the most recent earlier
    /// occurrence of the last n tokens.
    #[test]
    fn agrees_with_the_definition_on_random_sequences() {
        let mut state = 0x2545_f491_u64;
        let mut next = |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m) as TokenId
        };
        for case in 0..2000u64 {
            let len = 1 + next(40) as usize;
            let alphabet = 2 + case % 5;
            let tokens: Vec<TokenId> = (0..len).map(|_| next(alphabet)).collect();
            let (min, max, limit) = (1 + next(3) as usize, 3 + next(4) as usize, 1 + next(6) as usize);
            let expected = (min..=max).rev().filter(|&n| n < len).find_map(|n| {
                let suffix = &tokens[len - n..];
                let at = (0..len - n).rev().find(|&i| &tokens[i..i + n] == suffix)?;
                Some((tokens[at + n..(at + n + limit).min(len)].to_vec(), n))
            });
            assert_eq!(draft(&tokens, min, max, limit), expected, "{tokens:?} {min}..={max} limit {limit}");
        }
    }
}
