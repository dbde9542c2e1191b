//! The chat template's limits (`chat_template_limits`, issue 43): every real template renders within the
//! defaults, each limit ends a render with an error that names it and the template's origin, and the options
//! change them. The hostile templates themselves, each in a process of its own, are the attack suite's
//! (`tests/attack/template_cases.rs`).

mod common;

use std::time::Instant;

use ember::model::chat_template::{ChatMessage, ChatTemplate, Limit, TemplateError, TemplateLimits, TemplateOrigin};
use serde_json::json;

fn compile(source: &str, limits: &TemplateLimits) -> Result<ChatTemplate, TemplateError> {
    ChatTemplate::compile(Some(source), "<s>", "</s>", TemplateOrigin::ModelFile, limits)
}

fn limit_of(result: Result<String, TemplateError>) -> Limit {
    match result {
        Err(TemplateError::Limit { limit, .. }) => limit,
        other => panic!("expected a limit, got {other:?}"),
    }
}

/// A conversation of `turns` user/assistant pairs after a system message, the last assistant turn calling a tool
/// and its result: what a long agent session sends.
fn conversation(turns: usize) -> Vec<ChatMessage> {
    let mut messages = vec![ChatMessage::new("system", "You are a helpful assistant.")];
    for i in 0..turns {
        messages.push(ChatMessage::new("user", format!("Question {i}: what is {i} times {i}? ").repeat(4)));
        messages.push(ChatMessage::new("assistant", format!("{i} times {i} is {}. ", i * i).repeat(4)));
    }
    let call = json!([{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]);
    messages.push(ChatMessage { tool_calls: Some(call), ..ChatMessage::new("assistant", "") });
    messages.push(ChatMessage { tool_call_id: Some("call_1".into()), ..ChatMessage::new("tool", "22 C") });
    messages
}

fn tools() -> serde_json::Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

/// The 70 real templates llama.cpp tests its engine with render the probe conversation (as every engine start
/// does) and a conversation of 100 turns with a tool call without reaching a default limit. Prints, for the record,
/// the longest conversation (in turns, up to 2,000) each renders within them.
#[test]
fn real_templates_render_within_the_defaults() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/llamacpp/templates");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (make templates fetches them)", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
        .collect();
    names.sort();
    assert!(names.len() >= 70, "{} templates", names.len());
    let defaults = TemplateLimits::default();
    let long = conversation(100);
    for path in &names {
        let name = path.file_name().unwrap().to_string_lossy();
        let template =
            compile(&std::fs::read_to_string(path).unwrap(), &defaults).unwrap_or_else(|e| panic!("{name}: {e}"));
        // A template may refuse the probe for a reason of its own (firefunction v2's needs a `functions`
        // variable): the engine logs that; only a limit refuses the load.
        if let Err(TemplateError::Limit { limit, detail, .. }) = template.probe() {
            panic!("{name}: the probe reached {limit}: {detail}");
        }
        let started = Instant::now();
        // Some templates refuse a tool turn they cannot show (raise_exception): that is theirs, not a limit.
        if let Err(TemplateError::Limit { limit, detail, .. }) = template.render_with_tools(&long, Some(&tools()), true)
        {
            panic!("{name}: 100 turns reached {limit}: {detail}");
        }
        let took = started.elapsed();
        if std::env::var_os("EMBER_TEMPLATE_CAPACITY").is_some() {
            let fits =
                |turns: usize| !matches!(template.render(&conversation(turns), true), Err(TemplateError::Limit { .. }));
            let (mut lo, mut hi) = (100, 2_000);
            if fits(hi) {
                lo = hi;
            }
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if fits(mid) {
                    lo = mid
                } else {
                    hi = mid - 1
                }
            }
            eprintln!("{name:50} 100 turns in {:>7.2} ms; renders up to {lo} turns", took.as_secs_f64() * 1e3);
        }
    }
}

#[test]
fn each_limit_is_named_with_the_templates_origin() {
    let defaults = TemplateLimits::default();
    let hi = [ChatMessage::new("user", "hi")];
    // The depth of a bound value, from any binding.
    let nested =
        "{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}";
    let err = compile(nested, &defaults).unwrap().render(&hi, true).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TemplateError::Limit { limit: Limit::Depth, value: 256, .. }), "{text}");
    assert!(text.contains("the model file's chat template") && text.contains("chat_template_limits.max_depth = 256"));
    let option = ChatTemplate::new(Some(nested), "", "").unwrap().render(&hi, true).unwrap_err().to_string();
    assert!(option.contains("chat_template option"), "{option}");
    // Output, calls, fuel.
    let output = compile("{% for i in range(100) %}{{ 'x' * 100000 }}{% endfor %}", &defaults).unwrap();
    assert_eq!(limit_of(output.render(&hi, true)), Limit::Output);
    let calls = compile("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", &defaults).unwrap();
    assert_eq!(limit_of(calls.render(&hi, true)), Limit::CallDepth);
    let fuel = compile("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", &defaults);
    assert_eq!(limit_of(fuel.unwrap().render(&hi, true)), Limit::Fuel);
    // Compile-time limits: the source's size and an expression's.
    let source = compile(&"x".repeat(defaults.max_source_bytes + 1), &defaults).unwrap_err();
    assert!(matches!(source, TemplateError::Limit { limit: Limit::Source, .. }), "{source}");
    let chain = format!("{{{{ 1{} }}}}", " ~ 'x'".repeat(300));
    let nodes = compile(&chain, &defaults).unwrap_err();
    assert!(matches!(nodes, TemplateError::Limit { limit: Limit::ExpressionNodes, .. }), "{nodes}");
}

#[test]
fn the_options_move_each_limit() {
    let hi = [ChatMessage::new("user", "hi")];
    // Work the defaults allow, refused by a smaller fuel.
    let loops = "{% for i in range(1000) %}{% for j in range(100) %}{% endfor %}{% endfor %}ok";
    assert_eq!(compile(loops, &TemplateLimits::default()).unwrap().render(&hi, true).unwrap(), "ok");
    let small = TemplateLimits { fuel: 10_000, ..Default::default() };
    assert_eq!(limit_of(compile(loops, &small).unwrap().render(&hi, true)), Limit::Fuel);
    // The clock: a render of ten million instructions cannot finish in one millisecond (it is checked at every
    // bound value, here the inner loop's range, a thousand times).
    let slow = TemplateLimits { time_ms: 1, fuel: 1 << 32, ..Default::default() };
    let many = "{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}";
    assert_eq!(limit_of(compile(many, &slow).unwrap().render(&hi, true)), Limit::Time);
    // Depth and output.
    let deep = "{% set x = [[[[[[[[[[1]]]]]]]]]] %}{{ x }}";
    let shallow = TemplateLimits { max_depth: 8, ..Default::default() };
    assert_eq!(limit_of(compile(deep, &shallow).unwrap().render(&hi, true)), Limit::Depth);
    let short = TemplateLimits { max_output_bytes: 1024, ..Default::default() };
    assert_eq!(limit_of(compile("{{ 'x' * 2000 }}", &short).unwrap().render(&hi, true)), Limit::Output);
    // Nonsense values are refused by name.
    let zero = TemplateLimits { max_depth: 0, ..Default::default() };
    assert!(zero.problem().unwrap().contains("chat_template_limits.max_depth = 0"));
}

/// What a namespace attribute may hold: data, and no namespace (the cycles a printer would follow forever).
#[test]
fn namespaces_hold_data_not_namespaces() {
    let hi = [ChatMessage::new("user", "hi")];
    let ok = "{% set ns = namespace(a=[], n=0) %}{% for i in range(3) %}{% set ns.a = ns.a + [i] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.a }} {{ ns.n }}";
    assert_eq!(compile(ok, &TemplateLimits::default()).unwrap().render(&hi, true).unwrap(), "[0, 1, 2] 3");
    let itself = "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}";
    let err = compile(itself, &TemplateLimits::default()).unwrap().render(&hi, true).unwrap_err().to_string();
    assert!(err.contains("a namespace attribute cannot hold a namespace"), "{err}");
    // A namespace may still be passed around (to a macro, in a list that is not kept in one).
    let passed = "{% macro show(n) %}{{ n.x }}{% endmacro %}{% set ns = namespace(x=1) %}{{ show(ns) }}{{ [ns][0].x }}";
    assert_eq!(compile(passed, &TemplateLimits::default()).unwrap().render(&hi, true).unwrap(), "11");
}

/// Lazy values bound to names come back as plain lists, whatever the laziness: the output is the same.
#[test]
fn bound_values_render_as_before() {
    let hi = [ChatMessage::new("user", "hi")];
    let src = "{% set r = [3, 1, 2]|reverse %}{% set m = [1, 2]|map('string') %}{% set c = [1]|chain([2]) %}\
               {% set t = (1, 2) %}{% set d = {'b': 1, 'a': [2]} %}{{ r|list }} {{ m|list }} {{ c|list }} {{ t }} {{ d }} \
               {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ r|list|length }}";
    assert_eq!(
        compile(src, &TemplateLimits::default()).unwrap().render(&hi, true).unwrap(),
        "[2, 1, 3] ['1', '2'] [1, 2] (1, 2) {'b': 1, 'a': [2]} b=1;a=[2];3"
    );
}
