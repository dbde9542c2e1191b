//! Stop strings matched across token boundaries, holding back only the text that could still become one.
//!
//! Text arrives in pieces (one per token). A stop string may straddle pieces, so the matcher keeps back the
//! longest suffix of the text seen so far that is a prefix of some stop string — and nothing more, so a stream
//! is delayed only while a stop string is actually possible. When a stop string completes, the text before it is
//! released and the rest (the stop string included) is dropped, as OpenAI's API does; with vLLM's
//! `include_stop_str_in_output`, the stop string is released too, and only what follows it is dropped.

/// Matches a request's stop strings against its output text.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// A completed stop string is part of the released text.
    include_stop: bool,
    /// Text received but not yet released: a possible beginning of a stop string.
    held: String,
}

/// What a piece of text releases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// Text safe to emit now.
    pub text: String,
    /// A stop string completed: the sequence ends, `text` is the last of its output.
    pub stopped: bool,
    /// Which stop string completed (llama-server's `stopping_word` names it).
    pub matched: Option<String>,
}

impl Released {
    /// Text that ends nothing.
    pub fn text(text: String) -> Self {
        Released { text, stopped: false, matched: None }
    }
}

impl StopMatcher {
    /// Matches `stops`; `include_stop` keeps a completed stop string at the end of the output.
    pub fn new(stops: Vec<String>, include_stop: bool) -> Self {
        StopMatcher { stops, include_stop, held: String::new() }
    }

    /// Feeds the next piece of output.
    pub fn push(&mut self, piece: &str) -> Released {
        if self.stops.is_empty() {
            return Released::text(piece.to_owned());
        }
        self.held.push_str(piece);
        // The earliest completed stop string wins; of two starting at the same place, the shorter, which the text
        // completed first.
        let first = self.stops.iter().filter_map(|s| Some((self.held.find(s.as_str())?, s.len(), s))).min();
        if let Some((at, len, stop)) = first {
            let end = if self.include_stop { at + len } else { at };
            let text = self.held[..end].to_owned();
            self.held.clear();
            return Released { text, stopped: true, matched: Some(stop.clone()) };
        }
        let keep = self.longest_partial_suffix();
        let text = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        Released::text(text)
    }

    /// Releases what is held (the sequence ended for another reason).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length of the longest suffix of `held` that is a proper prefix of a stop string (on a char boundary).
    fn longest_partial_suffix(&self) -> usize {
        let max = self.stops.iter().map(|s| s.len() - 1).max().unwrap_or(0).min(self.held.len());
        (1..=max)
            .rev()
            .filter(|&n| self.held.is_char_boundary(self.held.len() - n))
            .find(|&n| {
                let suffix = &self.held[self.held.len() - n..];
                self.stops.iter().any(|s| s.starts_with(suffix))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool, String) {
        run_with(stops, pieces, false)
    }

    fn run_with(stops: &[&str], pieces: &[&str], include_stop: bool) -> (Vec<String>, bool, String) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect(), include_stop);
        let mut out = Vec::new();
        for p in pieces {
            let r = m.push(p);
            out.push(r.text);
            if r.stopped {
                return (out, true, String::new());
            }
        }
        (out, false, m.flush())
    }

    #[test]
    fn no_stops_passes_everything_through() {
        assert_eq!(run(&[], &["a", "b"]), (vec!["a".into(), "b".into()], false, String::new()));
    }

    #[test]
    fn a_stop_across_pieces_is_found_and_dropped() {
        let (out, stopped, _) = run(&["END"], &["hello E", "N", "D more"]);
        assert!(stopped);
        assert_eq!(out.concat(), "hello ");
        assert_eq!(out, ["hello ", "", ""], "only the possible prefix 'E' was held, then 'EN'");
    }

    #[test]
    fn holds_back_only_a_possible_prefix() {
        let (out, stopped, rest) = run(&["###"], &["a#", "b", "##"]);
        assert!(!stopped);
        assert_eq!(out, ["a", "#b", ""]);
        assert_eq!(rest, "##", "flushed at the end");
    }

    #[test]
    fn the_earliest_stop_wins_and_multibyte_text_is_safe() {
        let (out, stopped, _) = run(&["é!", "x"], &["ab", "cé", "!x"]);
        assert!(stopped);
        assert_eq!(out.concat(), "abc");
        let (out, stopped, rest) = run(&["ééé"], &["ééz"]);
        assert_eq!((out.concat(), stopped, rest), ("ééz".into(), false, String::new()));
    }

    #[test]
    fn the_matched_stop_is_named() {
        let mut m = StopMatcher::new(vec!["END".into(), "x".into()], false);
        assert_eq!(m.push("ab EN").matched, None);
        assert_eq!(m.push("D").matched.as_deref(), Some("END"));
    }

    #[test]
    fn include_stop_keeps_the_stop_string_and_drops_what_follows() {
        let (out, stopped, _) = run_with(&["END"], &["hello E", "N", "D more"], true);
        assert!(stopped);
        assert_eq!(out, ["hello ", "", "END"], "held back as before, then released with the stop");
        let (out, stopped, _) = run_with(&["é!", "x"], &["ab", "cé", "!x"], true);
        assert_eq!((out.concat(), stopped), ("abcé!".into(), true));
        // Two stops at the same place: the shorter completed first.
        let (out, _, _) = run_with(&["abc", "ab"], &["zabcd"], true);
        assert_eq!(out.concat(), "zab");
        // Without a stop, nothing changes.
        let (out, stopped, rest) = run_with(&["###"], &["a#", "b", "##"], true);
        assert_eq!((out, stopped, rest), (vec!["a".into(), "#b".into(), String::new()], false, "##".into()));
    }
}
