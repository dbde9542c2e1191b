//! Unit-test support: a request whose engine side the test plays by hand (no model), so that bodies and chunks
//! can be checked for exact event sequences, timestamps and failures.

use std::sync::{Arc, Weak};

use serde_json::Value;

use super::chat::{ChunkEncoder, ChunkPoll, ResponseHeader};
use crate::engine::output::{CancelWaker, RequestShared};
use crate::engine::stats::{EngineClock, RequestStateStats};
use crate::engine::{EventPoll, FinishReason, RequestHandle};

/// Stands in for the engine a cancellation would wake.
struct NoEngine;

impl CancelWaker for NoEngine {
    fn wake(&self) {}
}

/// A request with stats on, queued at 1.0 s and scheduled at 1.5 s (engine clock), nothing found in the prefix
/// cache.
pub(crate) struct FakeRequest {
    pub shared: Arc<RequestShared>,
    pub handle: RequestHandle,
}

impl FakeRequest {
    pub fn new(choices: usize, prompt_tokens: u32) -> Self {
        let clock = EngineClock::new();
        let no_engine: Weak<dyn CancelWaker> = Weak::<NoEngine>::new();
        let stats = RequestStateStats::arrived(&clock);
        let shared = RequestShared::new(1, choices, prompt_tokens, true, clock, Some(stats), no_engine);
        for choice in 0..choices {
            shared.with_stats(choice, |s| {
                s.num_prompt_tokens = prompt_tokens;
                s.queued_ts = Some(1.0);
                s.scheduled_ts = Some(1.5);
            });
        }
        FakeRequest { handle: RequestHandle::new(Arc::clone(&shared)), shared }
    }

    /// Choice `choice` generated one token, released as `text`, at `ts` seconds.
    pub fn token(&self, choice: usize, text: &str, ts: f64) {
        self.shared.with_stats(choice, |s| s.record_token(ts));
        self.shared.count_token(choice, 100);
        self.shared.push_delta(choice, text.to_owned(), 1, ts, Vec::new());
    }

    pub fn finish(&self, choice: usize, reason: FinishReason) {
        self.shared.finish_choice(choice, reason);
    }

    /// Every chunk `encoder` makes of the events queued so far (as `next_chunk_json` with a zero timeout would
    /// hand them out), parsed, and whether the stream reached `Done`.
    pub fn drain(&self, encoder: &mut ChunkEncoder, header: &ResponseHeader) -> (Vec<Value>, bool) {
        let mut chunks = Vec::new();
        loop {
            match encoder.next_ready() {
                Some(ChunkPoll::Chunk(json)) => chunks.push(serde_json::from_str(&json).expect("chunks are JSON")),
                Some(ChunkPoll::Done) => return (chunks, true),
                Some(ChunkPoll::TimedOut) => unreachable!("the encoder never times out"),
                None => match self.handle.poll(Some(std::time::Duration::ZERO)) {
                    EventPoll::Event(event) => encoder.push(header, event, &self.handle),
                    EventPoll::Done => encoder.push_done(header, &self.handle),
                    EventPoll::TimedOut => return (chunks, false),
                },
            }
        }
    }
}

/// A fixed header, so that bodies can be compared whole.
pub(crate) fn header() -> ResponseHeader {
    ResponseHeader { id: "chatcmpl-test".into(), created: 1_700_000_000, model: "m".into() }
}

/// A tiny byte-level vocabulary without control tokens but its end of generation: a model's tokenizer where a
/// unit test needs one and not its ids.
pub(crate) fn tokenizer() -> crate::model::tokenizer::Tokenizer {
    use crate::model::tokenizer::{TokenType, Tokenizer, TokenizerSpec};
    let tokens: Vec<String> = ["a", "b", "<|im_end|>"].map(String::from).to_vec();
    let types = [TokenType::Normal as i32, TokenType::Normal as i32, TokenType::Control as i32];
    let spec =
        TokenizerSpec { token_types: Some(&types), eos_id: Some(2), ..TokenizerSpec::new(&tokens, &[], "smollm") };
    Tokenizer::from_spec(&spec).unwrap()
}

/// A vocabulary of one token per printable ASCII character (byte-level: `Ġ` is the space, `Ċ` the newline), then
/// `controls` as control tokens, then `<|im_end|>`: a text is one token per character (a control marker one
/// token), so a grammar is walked character by character.
pub(crate) fn char_tokenizer(controls: &[&str]) -> crate::model::tokenizer::Tokenizer {
    use crate::model::tokenizer::{TokenType, Tokenizer, TokenizerSpec};
    let mut tokens: Vec<String> = ('!'..='~').map(String::from).collect();
    tokens.extend(["\u{120}", "\u{10a}"].map(String::from));
    tokens.extend(controls.iter().map(|c| c.to_string()));
    tokens.push("<|im_end|>".into());
    let mut types = vec![TokenType::Normal as i32; tokens.len()];
    for t in &mut types[96..] {
        *t = TokenType::Control as i32;
    }
    let spec = TokenizerSpec {
        token_types: Some(&types),
        eos_id: Some(tokens.len() as crate::model::TokenId - 1),
        ..TokenizerSpec::new(&tokens, &[], "smollm")
    };
    Tokenizer::from_spec(&spec).unwrap()
}

/// The reasoning split of a thinking template's request whose prompt does not open `<think>`.
pub(crate) fn thinking_reader() -> crate::protocol::reasoning::ReasoningReader {
    use crate::protocol::reasoning::{ReasoningFormat, ReasoningReader};
    let template = crate::model::chat_template::ChatTemplate::new(Some("{{ '</think>' }}"), "", "").unwrap();
    let tokenizer = Arc::new(char_tokenizer(&[]));
    ReasoningReader::for_request(&template, &tokenizer, &[], ReasoningFormat::Separate).unwrap()
}

/// The reasoning split of a request under gpt-oss' harmony template, whose vocabulary is `tokenizer`.
pub(crate) fn harmony_reader(
    tokenizer: crate::model::tokenizer::Tokenizer,
) -> crate::protocol::reasoning::ReasoningReader {
    use crate::protocol::reasoning::{ReasoningFormat, ReasoningReader};
    let template = crate::model::chat_template::ChatTemplate::new(Some("{{ '<|channel|>analysis' }}"), "", "").unwrap();
    ReasoningReader::for_request(&template, &Arc::new(tokenizer), &[], ReasoningFormat::Separate).unwrap()
}

/// `text` cut into pieces of at least `size` bytes, each ending at the first character boundary from there (the
/// last one the rest): how the streaming readers' tests feed a text as a model's tokens would come.
pub(crate) fn pieces(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out
}

/// `text` as `char_tokenizer(controls)`'s ids: each of `controls` as its token, other characters one each.
pub(crate) fn char_ids(
    tokenizer: &crate::model::tokenizer::Tokenizer,
    controls: &[&str],
    text: &str,
) -> Vec<crate::model::TokenId> {
    let mut out = Vec::new();
    let mut rest = text;
    'outer: while let Some(c) = rest.chars().next() {
        for m in controls {
            if let Some(after) = rest.strip_prefix(m) {
                out.push(tokenizer.token_to_id(m).expect("a control of the tokenizer"));
                rest = after;
                continue 'outer;
            }
        }
        out.push(match c {
            ' ' => 94,
            '\n' => 95,
            c => c as crate::model::TokenId - '!' as crate::model::TokenId,
        });
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Walks `text` (as `char_tokenizer(controls)` writes it) through the grammar of `request`: `Ok(may_end)`
/// (whether end-of-generation is allowed after it, or the grammar completed on its last token) or `Err(i)`, the
/// first token the grammar refuses.
pub(crate) fn walk_grammar(
    request: &crate::engine::guided::GuidedRequest,
    controls: &[&str],
    text: &str,
) -> Result<bool, usize> {
    use crate::engine::guided::{Accepted, GuidedCompiler};
    let tokenizer = char_tokenizer(controls);
    let mut m = GuidedCompiler::new().compile(&tokenizer, request).unwrap_or_else(|e| panic!("{e}")).matcher();
    let ids = char_ids(&tokenizer, controls, text);
    for (i, &id) in ids.iter().enumerate() {
        if !m.allows(id) {
            return Err(i);
        }
        if m.accept(id) == Accepted::Complete {
            return Ok(i + 1 == ids.len());
        }
    }
    Ok(m.allows(tokenizer.eos_id().expect("char_tokenizer has an end")))
}
