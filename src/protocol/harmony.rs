//! gpt-oss' harmony format with tools: the grammar of a whole output (`call_syntax::HARMONY` reads its calls).
//!
//! The prompt ends with `<|start|>assistant`; the model writes the rest of the message header, then its channel:
//! - `<|channel|>analysis<|message|>REASONING<|end|><|start|>assistant`, at most once, first (the reasoning
//!   split, `reasoning.rs`, reads one analysis message);
//! - then `<|channel|>final<|message|>ANSWER` (a message), or one call:
//!   `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS`, ARGS valid JSON of the tool's
//!   `parameters` schema. The grammar ends after ARGS, where the model would write `<|call|>` (a stop token in
//!   gpt-oss' vocabulary, so nothing could follow it anyway), and so does the choice.
//!
//! Unlike the other formats' lazy grammars, which leave text free until a call begins, this one holds the whole
//! output to the channels from its first token: harmony's control tokens (`<|channel|>`, `<|end|>`...) are part
//! of every gpt-oss message, and a constrained output may only write the special tokens its grammar names. A
//! re-opened `<|start|>assistant` before the channel is allowed. With a forced `tool_choice` the answer must be
//! the call (of the named function only, for a named one), after optional reasoning, as llama.cpp constrains
//! gpt-oss' `"required"`.
//!
//! Where a marker is a control token of the vocabulary it is that token in the grammar; elsewhere (a model whose
//! vocabulary lacks them, with gpt-oss' template) it is text, and the reasoning is a lazy lexeme ending at the
//! first `<|end|>`.

use serde_json::Value;

use super::reasoning::HARMONY as CHANNELS;
use super::tools::auto_call::AutoCalls;
use super::tools::call_syntax::HARMONY;
use super::tools::Tool;
use crate::engine::guided::{json_layout, GuidedRequest, GuidedSpec};

/// The grammar of an output of `calls` (whose syntax is [`HARMONY`]) over those of `tools` it names.
pub(crate) fn constraint(calls: &AutoCalls, tools: &[Tool]) -> GuidedRequest {
    let lit = |text: &str| calls.literal(text);
    let mut rules = String::new();
    let mut alternatives = Vec::new();
    for (i, tool) in tools.iter().filter(|t| calls.names.contains(&t.name)).enumerate() {
        let mut schema = tool.parameters.clone();
        if let Value::Object(o) = &mut schema {
            o.insert("x-guidance".into(), json_layout());
        }
        rules.push_str(&format!("args{i}: %json {schema}\n"));
        alternatives.push(format!("{} args{i}", lit(&format!("{}{}{}", HARMONY.open, tool.name, HARMONY.mid))));
    }
    let answer = match calls.required {
        true => "call",
        false => "final | call",
    };
    // The reasoning's text: up to the control token that closes it, or a lazy lexeme that ends at the first
    // occurrence of the closing text (llguidance's lexer, greedy otherwise, could not split it from the marker).
    let (reasoning, reasoning_rule) = match calls.is_control(CHANNELS.close) {
        true => (format!("REASONING? {}", lit(CHANNELS.close)), "REASONING: /[\\s\\S]+/".to_owned()),
        false => {
            ("reasoning".to_owned(), format!("reasoning[lazy]: /[\\s\\S]*{}/", regex_syntax::escape(CHANNELS.close)))
        }
    };
    let grammar = format!(
        "start: ({header})? analysis? answer\n\
         answer: {answer}\n\
         analysis: {open} {reasoning} {header}\n\
         {reasoning_rule}\n\
         final: {final_header} ANSWER?\n\
         ANSWER: /[\\s\\S]+/\n\
         call: {calls}\n\
         {rules}",
        header = lit(CHANNELS.header),
        open = lit(CHANNELS.open),
        final_header = lit(CHANNELS.answer),
        calls = alternatives.join(" | "),
    );
    GuidedRequest::new(GuidedSpec::Lark(grammar), "tools")
}

#[cfg(test)]
#[path = "harmony_tests.rs"]
mod tests;
