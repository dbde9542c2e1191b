//! Compiling a constraint at submit time: the spec becomes an llguidance parser and its first mask, or an error
//! that names the problem and the limit it hit (`limits.rs`).
//!
//! The parser factory (the token environment and llguidance's per-vocabulary precomputation, some tens of
//! milliseconds for a 49,152-token vocabulary) is built on the first constrained request, so an engine that never
//! sees one never pays for it. Compiling runs while the submitting host's thread waits, never on the engine
//! thread: a large schema delays only its own request. Its stages:
//!
//! 1. the input's size and shape, on the host's thread (`schema_check.rs`, `lark_check.rs`);
//! 2. on a thread of the compiler's own with a known stack (llguidance's compilers recurse, and a host's thread
//!    may have a small stack): the spec to llguidance's grammar, the grammar compiled and checked
//!    (`grammar_check.rs`), the parser built (its lexer, its first Earley row), and its first mask, which proves
//!    the grammar can produce a first token. The host's thread waits for it, watching the compiling thread's
//!    CPU time (`src/cpu_clock.rs`), and cancels the mask when `max_compile_cpu_ms` runs out; the stages before the
//!    mask cannot be interrupted and are bounded by the limits instead, with the time checked between them.
//!
//! The first mask is kept: every choice's matcher starts with it, so the first step computes no mask.

use std::io::Write;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use llguidance::api::{GrammarInit, TopLevelGrammar};
use llguidance::toktrie::SimpleVob;
use llguidance::{panic_utils, CancellationHandle, Matcher, ParserFactory, TokenParser};

use super::errors::clean_error;
use super::grammar_check::check_grammar;
use super::lark_check::check_lark;
use super::limits::GrammarLimits;
use super::matcher::GuidedMatcher;
use super::schema_check::check_schema;
use super::spec::{GuidedRequest, GuidedSpec};
use super::vocab::token_env;
use crate::cpu_clock::ThreadClock;
use crate::model::tokenizer::Tokenizer;

/// The stack of the compiling thread. llguidance's schema compiler takes about 6 KB per level of subschemas and
/// its Lark compiler about 4 KB per rule in a chain, so the default limits (128 levels, 4,000 definitions) need
/// under 20 MiB; the rest is margin. Only the pages touched are memory.
const COMPILE_STACK: usize = 64 << 20;

/// A constraint compiled against the engine's vocabulary, ready to give each choice its own matcher.
#[derive(Clone)]
pub struct CompiledGrammar {
    parser: TokenParser,
    /// The tokens allowed first, computed at submit.
    first_mask: SimpleVob,
}

impl CompiledGrammar {
    /// A fresh matcher at the start of the grammar, its first mask computed. Matchers of one grammar share its
    /// lexer's caches (behind llguidance's lock) and nothing else.
    pub fn matcher(&self) -> GuidedMatcher {
        GuidedMatcher::new(self.parser.clone(), Some(self.first_mask.clone()))
    }
}

/// One engine's grammar compiler.
#[derive(Default)]
pub struct GuidedCompiler {
    factory: OnceLock<Result<ParserFactory, String>>,
    limits: GrammarLimits,
}

impl GuidedCompiler {
    /// A compiler with the default limits.
    pub fn new() -> Self {
        GuidedCompiler::default()
    }

    /// A compiler held to `limits` (the engine's `grammar_limits`).
    pub fn with_limits(limits: GrammarLimits) -> Self {
        GuidedCompiler { factory: OnceLock::new(), limits }
    }

    /// Compiles `request` for `tokenizer` (always the engine's: the factory is built from the first one seen).
    /// The error is the message for the request's field: what is wrong with the schema, regex or grammar, or
    /// which limit it exceeds.
    pub fn compile(&self, tokenizer: &Tokenizer, request: &GuidedRequest) -> Result<CompiledGrammar, String> {
        let factory =
            self.factory.get_or_init(|| build_factory(tokenizer, &self.limits)).as_ref().map_err(Clone::clone)?;
        let grammar = self.checked_grammar(&request.spec)?;
        let (parser, first_mask) = self.build(factory, grammar)?;
        Ok(CompiledGrammar { parser, first_mask })
    }

    /// Stage 1: the spec's llguidance grammar, once its input is within the limits.
    fn checked_grammar(&self, spec: &GuidedSpec) -> Result<TopLevelGrammar, String> {
        self.check_input(spec)?;
        spec.grammar()
    }

    /// Whether `spec`'s input is within the limits (its size, a schema's depth, branches and intersections, a
    /// grammar's definitions and literals): the checks made before compiling, in time linear in the input.
    pub fn check_input(&self, spec: &GuidedSpec) -> Result<(), String> {
        let limits = &self.limits;
        let size = match spec {
            GuidedSpec::JsonObject => 0,
            GuidedSpec::JsonSchema(schema) => json_size(schema, limits.max_bytes),
            GuidedSpec::Regex(rx) => rx.len(),
            GuidedSpec::Choice(choices) => choices.iter().map(|c| c.len() + 1).sum(),
            GuidedSpec::Lark(grammar) => grammar.len(),
        };
        if size > limits.max_bytes {
            return Err(match size {
                usize::MAX => format!("it is more than grammar_limits.max_bytes ({}) bytes", limits.max_bytes),
                _ => format!("it is {size} bytes, more than grammar_limits.max_bytes ({})", limits.max_bytes),
            });
        }
        match spec {
            GuidedSpec::JsonSchema(schema) => check_schema(schema, limits),
            GuidedSpec::Lark(grammar) => check_lark(grammar, limits),
            _ => Ok(()),
        }
    }

    /// Stage 2, on the compiling thread while this one waits (and cancels the first mask when the budget is
    /// spent).
    fn build(&self, factory: &ParserFactory, grammar: TopLevelGrammar) -> Result<(TokenParser, SimpleVob), String> {
        let budget = Duration::from_millis(self.limits.max_compile_cpu_ms);
        let watch = &Watch::new(budget);
        // The grammar goes to whichever thread compiles: the compiling one, or this one if none can be started.
        let slot = Mutex::new(Some(grammar));
        let slot = &slot;
        let take = move || slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (done, result) = mpsc::channel();
        std::thread::scope(|scope| {
            let compile = move || {
                if let Some(grammar) = take() {
                    watch.start_clock();
                    let _ = done.send(compile_stages(factory, grammar, &self.limits, watch));
                }
            };
            let spawned = std::thread::Builder::new()
                .name("ember-grammar".into())
                .stack_size(COMPILE_STACK)
                .spawn_scoped(scope, compile);
            if spawned.is_err() {
                // No thread to be had: compile here. The input checks bound the recursion, so a host's thread of
                // ordinary stack still holds it.
                let grammar = take().ok_or(INTERRUPTED)?;
                watch.start_clock();
                return compile_stages(factory, grammar, &self.limits, watch);
            }
            loop {
                match result.recv_timeout(WATCH_EVERY) {
                    Ok(r) => return r,
                    Err(RecvTimeoutError::Timeout) if watch.spent() > budget => watch.expire(),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return Err(INTERRUPTED.into()),
                }
            }
        })
    }
}

/// How often the waiting thread reads the compiling thread's CPU time: often enough that the first mask runs
/// little past the budget, seldom enough to cost nothing (a small file read).
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// The compiling thread ended without a result (it cannot: every stage returns, panics are caught).
const INTERRUPTED: &str = "the grammar compiler stopped without a result";

fn build_factory(tokenizer: &Tokenizer, limits: &GrammarLimits) -> Result<ParserFactory, String> {
    let env = token_env(tokenizer)?;
    let mut factory = ParserFactory::new_simple(&env).map_err(|e| format!("structured outputs: {e}"))?;
    // llguidance logs warnings to stderr by default; a library embedded in a host must not write there.
    factory.quiet();
    *factory.limits_mut() = limits.parser_limits();
    Ok(factory)
}

/// The compile's budget and the first mask's cancellation, shared by the compiling thread (which sets them up)
/// and the waiting one (which fires the cancellation when the budget is spent, whichever comes first).
struct Watch {
    budget: Duration,
    /// The compiling thread's CPU clock, once it has started (none where `/proc` does not tell it).
    clock: OnceLock<Option<ThreadClock>>,
    /// For the wall-clock fallback.
    started: Instant,
    state: Mutex<(Option<CancellationHandle>, bool)>,
}

impl Watch {
    fn new(budget: Duration) -> Self {
        Watch { budget, clock: OnceLock::new(), started: Instant::now(), state: Mutex::new((None, false)) }
    }

    /// Called by the compiling thread when it begins: its CPU time is the budget's measure.
    fn start_clock(&self) {
        let _ = self.clock.set(ThreadClock::current());
    }

    /// What the compile has spent: the compiling thread's CPU time, or where that is not known the wall-clock
    /// time since the compile began.
    fn spent(&self) -> Duration {
        match self.clock.get().and_then(Option::as_ref).and_then(ThreadClock::elapsed) {
            Some(cpu) => cpu,
            None => self.started.elapsed(),
        }
    }

    /// Whether the budget is spent (or was declared spent).
    fn over(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 || self.spent() > self.budget
    }

    /// The budget is spent: cancel the mask if it is running, and any that would start.
    fn expire(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 = true;
        if let Some(handle) = &state.0 {
            handle.cancel();
        }
    }

    /// The mask is about to run under `handle`; false if the budget is already spent.
    fn arm(&self, handle: CancellationHandle) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = Some(handle);
        !state.1
    }
}

/// The stages of compiling, each checked against the budget after it.
fn compile_stages(
    factory: &ParserFactory,
    grammar: TopLevelGrammar,
    limits: &GrammarLimits,
    watch: &Watch,
) -> Result<(TokenParser, SimpleVob), String> {
    let in_time = || match watch.over() {
        true => Err(format!(
            "compiling it took more than grammar_limits.max_compile_cpu_ms ({} ms of CPU)",
            limits.max_compile_cpu_ms
        )),
        false => Ok(()),
    };
    let parser_limits = factory.limits().clone();
    let env = factory.tok_env().clone();
    // The spec to a grammar (JSON schema or Lark compiler), then that grammar compiled as the parser will compile
    // it, to check it before the parser's first row is built. llguidance's catch_unwind keeps a panic's message
    // off stderr; the message is cleaned below.
    let (grammar, lexer_spec) = panic_utils::catch_unwind(std::panic::AssertUnwindSafe(|| {
        GrammarInit::Serialized(grammar).to_internal(Some(env), parser_limits.clone())
    }))
    .map_err(|e| clean_error(&e.to_string()))?;
    in_time()?;
    let compiled = panic_utils::catch_unwind(std::panic::AssertUnwindSafe(|| {
        grammar.optimize().compile(lexer_spec.clone(), &parser_limits)
    }))
    .map_err(|e| clean_error(&e.to_string()))?;
    check_grammar(&compiled, limits)?;
    drop(compiled);
    in_time()?;
    let parser = factory
        .create_parser_from_init_default(GrammarInit::Internal(grammar, lexer_spec))
        .map_err(|e| clean_error(&e.to_string()))?;
    in_time()?;
    // The first mask, on a clone (sharing the lexer's caches, which it warms), cancellable.
    let mut probe = parser.clone();
    let handle = probe.enable_cancellation();
    if !watch.arm(handle) {
        return in_time().map(|_| unreachable!("the deadline has passed"));
    }
    let mask = Matcher::new(Ok(probe)).compute_mask_or_eos();
    in_time()?;
    match mask {
        Ok(mask) => Ok((parser, mask)),
        Err(e) => Err(format!("the grammar allows no first token: {}", clean_error(&e.to_string()))),
    }
}

/// The compact JSON text's length of `value`, counted without building it; `usize::MAX` past `limit`.
fn json_size(value: &serde_json::Value, limit: usize) -> usize {
    struct Count(usize, usize);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            match self.0 > self.1 {
                true => Err(std::io::Error::other("over the limit")),
                false => Ok(buf.len()),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0, limit);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::guided::GuidedSpec;

    #[test]
    fn the_size_of_a_schema_is_its_compact_text() {
        let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(json_size(&schema, 1_000), schema.to_string().len());
        assert_eq!(json_size(&schema, 10), usize::MAX);
    }

    #[test]
    fn input_over_the_limits_is_refused_before_compiling() {
        let compiler = GuidedCompiler::with_limits(GrammarLimits { max_bytes: 10, ..Default::default() });
        let e = compiler.check_input(&GuidedSpec::Regex("a".repeat(11))).unwrap_err();
        assert_eq!(e, "it is 11 bytes, more than grammar_limits.max_bytes (10)");
        let choices = GuidedSpec::Choice(vec!["abcd".into(), "efgh".into()]);
        assert_eq!(compiler.check_input(&choices), Ok(()), "4 + 1 + 4 + 1 bytes");
        let e = compiler.check_input(&GuidedSpec::JsonSchema(serde_json::json!({"pattern": "abcdef"}))).unwrap_err();
        assert_eq!(e, "it is more than grammar_limits.max_bytes (10) bytes");
        assert_eq!(GuidedCompiler::new().check_input(&GuidedSpec::Lark("start: start".into())), Ok(()));
    }

    #[test]
    fn a_spent_budget_refuses_at_the_first_check() {
        let factory = ParserFactory::new_simple(&llguidance::toktrie::ApproximateTokEnv::single_byte_env()).unwrap();
        let limits = GrammarLimits::default();
        let grammar = || GuidedSpec::Regex("[a-z]+".into()).grammar().unwrap();
        let watch = Watch::new(Duration::from_millis(limits.max_compile_cpu_ms));
        watch.start_clock();
        assert!(compile_stages(&factory, grammar(), &limits, &watch).is_ok());
        watch.expire();
        let e = compile_stages(&factory, grammar(), &limits, &watch).err().unwrap();
        assert_eq!(e, "compiling it took more than grammar_limits.max_compile_cpu_ms (1000 ms of CPU)");
        assert!(!watch.arm(CancellationHandle::default()), "nor does a mask start");
    }
}
