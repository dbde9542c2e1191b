//! Reasoning ("thinking"): models whose chat template teaches them to think first (Qwen 3, QwQ, DeepSeek-R1's
//! distills, SmolLM3...) write `<think>…</think>` before their answer; gpt-oss writes its analysis channel,
//! `<|channel|>analysis<|message|>…<|end|>`, then `<|start|>assistant<|channel|>final<|message|>` and its
//! answer. A chat response gives the reasoning in `message.reasoning_content` (`delta.reasoning_content` when
//! streamed) and the answer in `content`, as vLLM, llama.cpp's server and the DeepSeek API do;
//! `usage.completion_tokens_details.reasoning_tokens` counts it.
//!
//! - A template thinks when its text has `</think>` (every one of those families' templates writes it, to drop
//!   earlier turns' reasoning or to turn thinking off), or gpt-oss' `<|channel|>analysis`.
//! - The reasoning begins at a `<think>` the output opens with (whitespace aside), or at the output's start when
//!   the prompt itself ends with `<think>` (DeepSeek-R1's and QwQ's templates open it for the model).
//! - The reasoning is the exact text between the markers; the content is what follows `</think>`, leading
//!   whitespace left out (as those templates drop it when the turn comes back in a conversation), and gpt-oss'
//!   headers (`<|start|>assistant`, which the prompt ends with and the model may write again, and the final
//!   channel's, with or without reasoning before it). Output that never closes its reasoning (cut by
//!   `max_tokens`) is all reasoning.
//! - The request field `reasoning_format` (llama.cpp's name) chooses: `"auto"` (the default; `"deepseek"` is the
//!   same) splits as above, `"none"` leaves the reasoning inline in `content`.
//!
//! A forced tool call (`"required"`, a named function) is constrained to be the whole output, so it is not split;
//! but for gpt-oss, whose forced call follows its channels and may come after reasoning (`harmony.rs`).

use std::sync::Arc;

use super::error::ApiError;
use super::fields::{get, opt_str, Object};
use super::request::ApiKind;
use crate::engine::ChoiceOutput;
use crate::model::chat_template::ChatTemplate;
use crate::model::tokenizer::{StreamDecoder, Tokenizer};
use crate::model::TokenId;

/// How a family marks its reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReasoningSyntax {
    /// Opens the reasoning.
    pub open: &'static str,
    /// Closes it.
    pub close: &'static str,
    /// Opens each of the family's messages, where it writes one (gpt-oss' `<|start|>assistant`): left out before
    /// the reasoning and before what follows it, since the prompt already ends with it and the model may or may
    /// not write it again.
    pub header: &'static str,
    /// Opens the answer, when the family writes such a header (left out of the content), after the reasoning or
    /// without it.
    pub answer: &'static str,
    /// The markers' pieces that may be control tokens of the family's vocabulary.
    pub tokens: &'static [&'static str],
}

pub(crate) const THINK: ReasoningSyntax =
    ReasoningSyntax { open: "<think>", close: "</think>", header: "", answer: "", tokens: &["<think>", "</think>"] };
/// gpt-oss' harmony channels: the analysis channel is the reasoning, the final channel the answer.
pub(crate) const HARMONY: ReasoningSyntax = ReasoningSyntax {
    open: "<|channel|>analysis<|message|>",
    close: "<|end|>",
    header: "<|start|>assistant",
    answer: "<|channel|>final<|message|>",
    tokens: &["<|channel|>", "<|message|>", "<|end|>", "<|start|>"],
};

impl ReasoningSyntax {
    /// The content of `text` (what follows the reasoning when `after_reasoning`, else the whole output): the
    /// message header and the answer's header left out where they open it (whitespace before them too). After the
    /// reasoning, leading whitespace goes in any case; without reasoning, text that opens with neither header is
    /// all content, as the model wrote it.
    fn content<'t>(&self, text: &'t str, after_reasoning: bool) -> &'t str {
        let trimmed = text.trim_start();
        let rest = strip(strip(trimmed, self.header), self.answer);
        match after_reasoning || rest.len() < trimmed.len() {
            true => rest,
            false => text,
        }
    }

    /// Whether `trimmed` (text with its leading whitespace gone) may still grow into a header this syntax leaves
    /// out, or into the reasoning's opening (`reasoning`: only where it may still open), so that a stream must
    /// wait to say what it is.
    fn may_become_header(&self, trimmed: &str, reasoning: bool) -> bool {
        let [header, open, answer] = [self.header, self.open, self.answer];
        let candidates = [
            (reasoning, open.to_owned()),
            (reasoning, format!("{header}{open}")),
            (true, answer.to_owned()),
            (true, format!("{header}{answer}")),
        ];
        candidates.iter().any(|(possible, c)| *possible && c.len() > trimmed.len() && c.starts_with(trimmed))
    }
}

/// `text` without `prefix` where it begins with it.
fn strip<'t>(text: &'t str, prefix: &str) -> &'t str {
    text.strip_prefix(prefix).unwrap_or(text)
}

/// The reasoning syntax `template` teaches, if any.
fn syntax_of(template: &ChatTemplate) -> Option<ReasoningSyntax> {
    let source = template.source();
    if source.contains(THINK.close) {
        return Some(THINK);
    }
    source.contains("<|channel|>analysis").then_some(HARMONY)
}

/// Whether `template` teaches the model to reason before it answers, in a syntax ember splits off.
pub(crate) fn thinks(template: &ChatTemplate) -> bool {
    syntax_of(template).is_some()
}

/// Whether `template` writes gpt-oss' harmony channels.
pub(crate) fn is_harmony(template: &ChatTemplate) -> bool {
    syntax_of(template) == Some(HARMONY)
}

/// `reasoning_format`: where a thinking model's reasoning goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum ReasoningFormat {
    /// In `reasoning_content`, apart from the content.
    #[default]
    Separate,
    /// Left in `content`, markers and all.
    Inline,
}

/// The request's `reasoning_format`: `"auto"` and `"deepseek"` (llama.cpp's names for the same split here) or
/// `"none"`; chat only.
pub(crate) fn parse_reasoning_format(o: &Object, kind: ApiKind) -> Result<ReasoningFormat, ApiError> {
    const FIELD: &str = "reasoning_format";
    if kind == ApiKind::Completion && get(o, FIELD).is_some() {
        return Err(ApiError::invalid(FIELD, "reasoning_format is a chat field: a completion's text is not split"));
    }
    match opt_str(o, FIELD)? {
        None | Some("auto" | "deepseek") => Ok(ReasoningFormat::Separate),
        Some("none") => Ok(ReasoningFormat::Inline),
        Some(other) => Err(ApiError::invalid(
            FIELD,
            format!("reasoning_format {other:?} is not one of \"auto\", \"deepseek\", \"none\""),
        )),
    }
}

/// How one request's chat outputs are split into reasoning and content.
#[derive(Clone)]
pub(crate) struct ReasoningReader {
    syntax: ReasoningSyntax,
    /// The prompt ends with the opening marker: outputs begin inside their reasoning.
    pub starts_inside: bool,
    tokenizer: Arc<Tokenizer>,
    /// Whether the request's text keeps control tokens' text (to replay its tokens' text exactly).
    include_special: bool,
}

impl std::fmt::Debug for ReasoningReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReasoningReader").field("starts_inside", &self.starts_inside).finish()
    }
}

/// One output, split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split<'t> {
    /// `None` when the output has no reasoning (or an empty one).
    pub reasoning: Option<&'t str>,
    pub content: &'t str,
    /// The byte offset in the output where the reasoning and its closing marker end (0 without reasoning).
    pub reasoning_end: usize,
}

impl ReasoningReader {
    /// The reader for a chat request whose template is `template` and whose prompt is `prompt`; `None` when the
    /// template does not think or the request keeps reasoning inline.
    pub fn for_request(
        template: &ChatTemplate,
        tokenizer: &Arc<Tokenizer>,
        prompt: &[TokenId],
        format: ReasoningFormat,
    ) -> Option<Self> {
        let syntax = syntax_of(template).filter(|_| format == ReasoningFormat::Separate)?;
        // A few tokens are enough to hold the opening marker and the whitespace after it, whatever the vocabulary.
        let tail = tokenizer.decode(&prompt[prompt.len().saturating_sub(16)..], true).unwrap_or_default();
        let starts_inside = tail.trim_end().ends_with(syntax.open);
        Some(ReasoningReader { syntax, starts_inside, tokenizer: Arc::clone(tokenizer), include_special: false })
    }

    /// Whether the markers are control tokens of the vocabulary, whose text the request must then keep.
    pub fn needs_special_text(&self) -> bool {
        self.syntax.tokens.iter().any(|m| self.tokenizer.token_to_id(m).is_some_and(|id| self.tokenizer.is_control(id)))
    }

    /// Says whether the request's text keeps control tokens' text (what its tokens are replayed with).
    pub fn with_special_text(self, include_special: bool) -> Self {
        ReasoningReader { include_special, ..self }
    }

    /// A whole output, split.
    pub fn split<'t>(&self, text: &'t str) -> Split<'t> {
        let (open, close) = (self.syntax.open, self.syntax.close);
        let start = if self.starts_inside {
            0
        } else {
            match strip(text.trim_start(), self.syntax.header).strip_prefix(open) {
                Some(rest) => text.len() - rest.len(),
                None => return Split { reasoning: None, content: self.syntax.content(text, false), reasoning_end: 0 },
            }
        };
        let (reasoning, content, reasoning_end) = match text[start..].find(close) {
            Some(at) => {
                let end = start + at + close.len();
                (&text[start..start + at], self.syntax.content(&text[end..], true), end)
            }
            None => (&text[start..], "", text.len()),
        };
        // Empty reasoning (`<think></think>`) is none: a stream could not tell it from none either.
        Split { reasoning: Some(reasoning).filter(|r| !r.is_empty()), content, reasoning_end }
    }

    /// The streaming split of one choice.
    pub fn stream(&self) -> ReasoningStream {
        let stage = if self.starts_inside { Stage::Inside } else { Stage::Before };
        ReasoningStream { syntax: self.syntax, stage, held: String::new() }
    }

    /// How many of `output`'s tokens wrote its reasoning (its markers included): its tokens' text replayed until
    /// it covers the reasoning. All of them when the reasoning never closed; none without reasoning.
    pub fn reasoning_tokens(&self, output: &ChoiceOutput) -> u32 {
        let end = self.split(&output.text).reasoning_end;
        if end == 0 {
            return 0;
        }
        let mut decoder = StreamDecoder::new(self.include_special);
        let mut written = 0;
        for (i, &id) in output.token_ids.iter().enumerate() {
            written += decoder.push(&self.tokenizer, id).map_or(0, str::len);
            if written >= end {
                return i as u32 + 1;
            }
        }
        output.completion_tokens
    }
}

/// What a piece of streamed output releases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReasoningDelta {
    Reasoning(String),
    Content(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Nothing but whitespace and a beginning of `<think>` yet.
    Before,
    Inside,
    /// After `</think>`: `true` once the content's first non-whitespace has come.
    After(bool),
    /// The output has no reasoning: everything is content.
    Plain,
}

/// One choice's output as it streams, split as [`ReasoningReader::split`] splits it whole: text that may still turn
/// out to be a marker is held back until it is known.
#[derive(Clone, Debug)]
pub(crate) struct ReasoningStream {
    syntax: ReasoningSyntax,
    stage: Stage,
    held: String,
}

impl ReasoningStream {
    /// The deltas `piece` releases.
    pub fn push(&mut self, piece: &str) -> Vec<ReasoningDelta> {
        self.held.push_str(piece);
        let ReasoningSyntax { open, close, header, .. } = self.syntax;
        let mut out = Vec::new();
        loop {
            match self.stage {
                Stage::Before => {
                    let trimmed = self.held.trim_start();
                    if let Some(rest) = strip(trimmed, header).strip_prefix(open) {
                        self.held = rest.to_owned();
                        self.stage = Stage::Inside;
                        continue;
                    }
                    // Nothing was sent yet: the content is decided on all the text so far, as `split` decides it.
                    if !self.syntax.may_become_header(trimmed, true) {
                        self.held = self.syntax.content(&self.held, false).to_owned();
                        self.stage = Stage::Plain;
                        continue;
                    }
                }
                Stage::Inside => {
                    if let Some(at) = self.held.find(close) {
                        let rest = self.held.split_off(at + close.len());
                        self.held.truncate(at);
                        push_nonempty(&mut out, ReasoningDelta::Reasoning, std::mem::replace(&mut self.held, rest));
                        self.stage = Stage::After(false);
                        continue;
                    }
                    // Keep back the longest end that could begin the closing marker (ASCII: a character boundary).
                    let keep = (1..close.len()).rev().find(|&k| self.held.ends_with(&close[..k])).unwrap_or(0);
                    let rest = self.held.split_off(self.held.len() - keep);
                    push_nonempty(&mut out, ReasoningDelta::Reasoning, std::mem::replace(&mut self.held, rest));
                }
                Stage::After(started) => {
                    if !started {
                        let trimmed = self.held.trim_start();
                        // Whitespace, or a beginning of the headers: wait for more.
                        if trimmed.is_empty() || self.syntax.may_become_header(trimmed, false) {
                            return out;
                        }
                        self.held = self.syntax.content(&self.held, true).to_owned();
                        self.stage = Stage::After(true);
                    }
                    push_nonempty(&mut out, ReasoningDelta::Content, std::mem::take(&mut self.held));
                }
                Stage::Plain => push_nonempty(&mut out, ReasoningDelta::Content, std::mem::take(&mut self.held)),
            }
            return out;
        }
    }

    /// What is held back at the end of the output.
    pub fn finish(&mut self) -> Vec<ReasoningDelta> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        match self.stage {
            Stage::Inside => push_nonempty(&mut out, ReasoningDelta::Reasoning, held),
            Stage::Plain | Stage::After(true) => push_nonempty(&mut out, ReasoningDelta::Content, held),
            // Headers cut short, or whole ones with nothing after them: what the whole split keeps of them.
            Stage::Before => push_nonempty(&mut out, ReasoningDelta::Content, self.syntax.content(&held, false).into()),
            Stage::After(false) => {
                push_nonempty(&mut out, ReasoningDelta::Content, self.syntax.content(&held, true).into())
            }
        }
        out
    }
}

fn push_nonempty(out: &mut Vec<ReasoningDelta>, make: fn(String) -> ReasoningDelta, text: String) {
    if !text.is_empty() {
        out.push(make(text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_support::{char_tokenizer, pieces};

    fn reader(starts_inside: bool) -> ReasoningReader {
        ReasoningReader {
            syntax: THINK,
            starts_inside,
            tokenizer: Arc::new(char_tokenizer(&[])),
            include_special: false,
        }
    }

    /// The stream of `text` cut into pieces of `size` bytes (at character boundaries), joined per kind.
    fn streamed(r: &ReasoningReader, text: &str, size: usize) -> (Option<String>, String) {
        let mut s = r.stream();
        let mut deltas = Vec::new();
        for piece in pieces(text, size) {
            deltas.extend(s.push(piece));
        }
        deltas.extend(s.finish());
        let (mut reasoning, mut content) = (None::<String>, String::new());
        for d in deltas {
            match d {
                ReasoningDelta::Reasoning(t) => reasoning.get_or_insert_default().push_str(&t),
                ReasoningDelta::Content(t) => content.push_str(&t),
            }
        }
        (reasoning, content)
    }

    #[test]
    fn outputs_split_whole_and_streamed_alike() {
        let cases: [(bool, &str, Option<&str>, &str); 9] = [
            (false, "<think>\nHm, 2+2.\n</think>\n\nIt is 4.", Some("\nHm, 2+2.\n"), "It is 4."),
            (false, "  <think>a</think>b", Some("a"), "b"),
            (false, "Just an answer.", None, "Just an answer."),
            (false, " <thin", None, " <thin"),
            (false, "<think>never closed </thi", Some("never closed </thi"), ""),
            (false, "<think></think>", None, ""),
            (true, "\nFirst, é.\n</think>\n\nAnswer </think> again", Some("\nFirst, é.\n"), "Answer </think> again"),
            (true, "cut short", Some("cut short"), ""),
            (false, "Text <think>not at the start</think>", None, "Text <think>not at the start</think>"),
        ];
        for (inside, text, reasoning, content) in cases {
            assert_splits(&reader(inside), text, reasoning, content);
        }
    }

    /// `text` splits into `reasoning` and `content` whole and streamed in pieces of any size.
    fn assert_splits(r: &ReasoningReader, text: &str, reasoning: Option<&str>, content: &str) {
        let split = r.split(text);
        assert_eq!((split.reasoning, split.content), (reasoning, content), "{text:?}");
        for size in [1, 2, 3, 5, 100] {
            let (r2, c2) = streamed(r, text, size);
            assert_eq!((r2.as_deref(), c2.as_str()), (reasoning, content), "{text:?} in pieces of {size}");
        }
    }

    /// gpt-oss' channels: the analysis is the reasoning, the final channel's header is left out of the content.
    #[test]
    fn harmony_channels_split_whole_and_streamed_alike() {
        let r = ReasoningReader { syntax: HARMONY, ..reader(false) };
        let cases: [(&str, Option<&str>, &str); 11] = [
            (
                "<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
                Some("User greets."),
                "Hi!",
            ),
            ("<|channel|>analysis<|message|>Cut <|en", Some("Cut <|en"), ""),
            ("<|channel|>analysis<|message|>A.<|end|><|start|>assist", Some("A."), "<|start|>assist"),
            ("Plain answer.", None, "Plain answer."),
            // The message header again, and the final channel without reasoning: headers, left out.
            ("<|start|>assistant<|channel|>analysis<|message|>A.<|end|>B", Some("A."), "B"),
            ("<|channel|>final<|message|>Hi!", None, "Hi!"),
            (" <|start|>assistant<|channel|>final<|message|>Hi!", None, "Hi!"),
            ("<|start|>assistant", None, ""),
            ("<|channel|>fin", None, "<|channel|>fin"),
            // What is not the final channel stays, for the calls to be read in (`harmony.rs`).
            (
                "<|channel|>analysis<|message|>A.<|end|><|start|>assistant<|channel|>commentary to=x",
                Some("A."),
                "<|channel|>commentary to=x",
            ),
            ("<|start|>assistant<|channel|>commentary to=x", None, "<|channel|>commentary to=x"),
        ];
        for (text, reasoning, content) in cases {
            assert_splits(&r, text, reasoning, content);
        }
    }

    #[test]
    fn the_reasoning_ends_after_its_closing_marker() {
        let r = reader(false);
        assert_eq!(r.split("<think>ab</think> c").reasoning_end, "<think>ab</think>".len());
        assert_eq!(r.split("abc").reasoning_end, 0);
        assert_eq!(r.split("<think>abc").reasoning_end, "<think>abc".len());
    }

    #[test]
    fn reasoning_tokens_count_the_tokens_up_to_the_closing_marker() {
        let r = reader(false);
        let t = &r.tokenizer;
        let output = |text: &str| {
            let token_ids = t.encode(text, false);
            ChoiceOutput {
                text: t.decode(&token_ids, false).unwrap(),
                completion_tokens: token_ids.len() as u32,
                token_ids,
                ..ChoiceOutput::default()
            }
        };
        // One token per character here.
        let thought = "<think>Some thought.</think>";
        let whole = output(&format!("{thought} The answer."));
        assert_eq!(r.reasoning_tokens(&whole), thought.len() as u32);
        assert_eq!(r.reasoning_tokens(&output("No thought.")), 0);
        let open = output("<think>still thinking");
        assert_eq!(r.reasoning_tokens(&open), open.completion_tokens);
    }

    #[test]
    fn the_format_field() {
        let parse = |body: serde_json::Value, kind| parse_reasoning_format(body.as_object().unwrap(), kind);
        assert_eq!(parse(serde_json::json!({}), ApiKind::Chat).unwrap(), ReasoningFormat::Separate);
        assert_eq!(
            parse(serde_json::json!({"reasoning_format": "deepseek"}), ApiKind::Chat).unwrap(),
            ReasoningFormat::Separate
        );
        assert_eq!(
            parse(serde_json::json!({"reasoning_format": "none"}), ApiKind::Chat).unwrap(),
            ReasoningFormat::Inline
        );
        for (body, kind) in [
            (serde_json::json!({"reasoning_format": "hidden"}), ApiKind::Chat),
            (serde_json::json!({"reasoning_format": 1}), ApiKind::Chat),
            (serde_json::json!({"reasoning_format": "none"}), ApiKind::Completion),
        ] {
            assert_eq!(parse(body, kind).unwrap_err().param.as_deref(), Some("reasoning_format"));
        }
    }
}
