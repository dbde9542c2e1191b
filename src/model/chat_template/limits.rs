//! What one chat template may cost: the engine option `chat_template_limits`. A template is code from a model file
//! or a host's option, and its render runs inside the host's process, so every way it can grow is bounded, and a
//! render that reaches a bound ends with an error that names it (`TemplateError::Limit`).
//!
//! The defaults leave every real template room (llama.cpp's 70, `tests/chat_templates_llamacpp.rs`, render a
//! 1,000-message conversation with tools within them; `docs/reliability.md` has the measurements) and keep a
//! hostile one within about a second of CPU and 256 MiB.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Bounds on compiling and rendering a chat template. `Default` gives the documented defaults.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TemplateLimits {
    /// minijinja's fuel for one render: one unit per instruction, per 64 bytes of strings, list slots or map
    /// entries created (and of text a filter reads), per two items a filter or operator visits. It bounds the
    /// render's work and, because everything it creates is paid for first, its memory: 2,000,000 units pay for
    /// 128 MiB of data.
    pub fuel: u64,
    /// The longest prompt a render may produce, in bytes.
    pub max_output_bytes: usize,
    /// How deep a value the template binds (with `set`, `with`, `for`, or as a call's argument) may nest lists
    /// and maps. Printing, comparing and freeing a value recurse once per level.
    pub max_depth: usize,
    /// How deep macro calls (and recursive loops) may nest: minijinja's recursion limit.
    pub max_call_depth: usize,
    /// The most nodes (operators, operands, filters and their arguments) in one expression: what a single
    /// expression can add to a value's depth.
    pub max_expression_nodes: usize,
    /// The longest template source, in bytes.
    pub max_source_bytes: usize,
    /// One render's time on a CPU, in milliseconds (wall-clock time where Linux does not tell a thread's CPU
    /// time), checked at every value the template binds, every call of ember's own functions and filters, and every
    /// write of output; the fuel bounds the work in between.
    pub time_ms: u64,
}

impl Default for TemplateLimits {
    fn default() -> Self {
        TemplateLimits {
            fuel: 2_000_000,
            max_output_bytes: 8 << 20,
            max_depth: 256,
            max_call_depth: 64,
            max_expression_nodes: 256,
            max_source_bytes: 1 << 20,
            time_ms: 1_000,
        }
    }
}

/// Which bound a render reached: each names its option, so that the error says what to raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Fuel,
    Output,
    Depth,
    CallDepth,
    ExpressionNodes,
    Source,
    Time,
}

impl Limit {
    /// The option's key under `chat_template_limits`.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Fuel => "fuel",
            Limit::Output => "max_output_bytes",
            Limit::Depth => "max_depth",
            Limit::CallDepth => "max_call_depth",
            Limit::ExpressionNodes => "max_expression_nodes",
            Limit::Source => "max_source_bytes",
            Limit::Time => "time_ms",
        }
    }

    /// The option's value in `limits`.
    pub fn value(self, limits: &TemplateLimits) -> u64 {
        let n = match self {
            Limit::Fuel => return limits.fuel,
            Limit::Time => return limits.time_ms,
            Limit::Output => limits.max_output_bytes,
            Limit::Depth => limits.max_depth,
            Limit::CallDepth => limits.max_call_depth,
            Limit::ExpressionNodes => limits.max_expression_nodes,
            Limit::Source => limits.max_source_bytes,
        };
        n as u64
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chat_template_limits.{}", self.key())
    }
}

impl TemplateLimits {
    /// Why these limits cannot work, or `None`. Zero would refuse every template; the upper ends keep a
    /// misconfiguration from removing the protection altogether (a render's thread stack is sized for
    /// `max_depth` and `max_expression_nodes` within them).
    pub fn problem(&self) -> Option<String> {
        let ranges: [(Limit, u64, u64); 7] = [
            (Limit::Fuel, 1_000, 1 << 32),
            (Limit::Output, 1_024, 1 << 30),
            (Limit::Depth, 8, 4_096),
            (Limit::CallDepth, 1, 500),
            (Limit::ExpressionNodes, 16, 4_096),
            (Limit::Source, 1_024, 64 << 20),
            (Limit::Time, 1, 600_000),
        ];
        ranges.iter().find_map(|&(limit, lo, hi)| {
            let v = limit.value(self);
            (!(lo..=hi).contains(&v)).then(|| format!("{limit} = {v} is not in {lo}..={hi}"))
        })
    }
}
