//! Grammar and schema bombs: chat completion requests whose structured-output constraint would cost a naive
//! compiler seconds to minutes of CPU or gigabytes of memory, or that compile but cannot generate anything.
//! Each must be refused at submit (`engine_submit`) with an `invalid_request_error` whose `param` starts with the
//! field named here, within 2 s of CPU and 256 MiB above the engine's baseline, and the engine must go on serving.
//!
//! Plain data for a harness: [`grammar_bombs`] gives `(name, field, body)` for every case to refuse, and
//! [`grammar_heavy_served`] the same for look-alikes that compile cheaply (llguidance builds their automata
//! lazily) and must be served: a request that is large or odd is not a bomb. The bodies are generated (some
//! repeat a piece thousands of times) and each stays under 2 MB. `field` is the start of the refusal's `param`
//! (`response_format.json_schema.schema` starts with `response_format`, `tools[3].function.parameters` with
//! `tools[3]`). No case depends on the model beyond its vocabulary being byte-level (every token is text).
#![allow(dead_code)]

/// A JSON string literal of `s`.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// A chat completion body with `extra` (`"key": value, ...`) after the message.
fn chat(extra: &str) -> String {
    format!(r#"{{"messages": [{{"role": "user", "content": "Answer."}}], "max_tokens": 8, {extra}}}"#)
}

/// `schema` as `response_format`'s JSON schema.
fn response_format(schema: &str) -> String {
    chat(&format!(
        r#""response_format": {{"type": "json_schema", "json_schema": {{"name": "bomb", "schema": {schema}}}}}"#
    ))
}

fn guided_json(schema: &str) -> String {
    chat(&format!(r#""guided_json": {schema}"#))
}

fn guided_grammar(lark: &str) -> String {
    chat(&format!(r#""guided_grammar": {}"#, quoted(lark)))
}

fn guided_regex(regex: &str) -> String {
    chat(&format!(r#""guided_regex": {}"#, quoted(regex)))
}

fn guided_choice(choices: &[String]) -> String {
    let list: Vec<String> = choices.iter().map(|c| quoted(c)).collect();
    chat(&format!(r#""guided_choice": [{}]"#, list.join(", ")))
}

/// Four tools whose last (`tools[3]`) has `parameters`; `tool_choice` forces a call of it (`forced`) or of any.
fn tools(parameters: &str, choice: &str) -> String {
    let ok = r#"{"type": "object", "properties": {"q": {"type": "string"}}}"#;
    let tool =
        |name: &str, p: &str| format!(r#"{{"type": "function", "function": {{"name": "{name}", "parameters": {p}}}}}"#);
    let list = [tool("a", ok), tool("b", ok), tool("c", ok), tool("d", parameters)].join(", ");
    chat(&format!(r#""tools": [{list}], "tool_choice": {choice}"#))
}

/// `n` copies of `f(i)` joined by `sep`.
fn repeat(n: usize, sep: &str, f: impl Fn(usize) -> String) -> String {
    (0..n).map(f).collect::<Vec<_>>().join(sep)
}

/// `allOf` of `n` patterns "contains letter i" (each a 2-state automaton; their intersection has 2^n states).
fn allof_contains(n: usize) -> String {
    let parts = repeat(n, ", ", |i| format!(r#"{{"pattern": ".*{}.*"}}"#, (b'a' + (i % 26) as u8) as char));
    format!(r#"{{"type": "string", "allOf": [{parts}]}}"#)
}

/// Every case to refuse: `(name, the request field the refusal names, the request body)`.
pub fn grammar_bombs() -> Vec<(&'static str, &'static str, String)> {
    let mut cases: Vec<(&'static str, &'static str, String)> = Vec::new();
    let mut add = |name, field, body: String| {
        assert!(body.len() < 2 << 20, "{name}: {} bytes", body.len());
        cases.push((name, field, body));
    };

    // ---- JSON schemas ----
    // The reported bomb: 26 "contains a letter" patterns in allOf (127 s, 5.4 GB, then an abort): derivre's
    // derivative of an intersection is the product of its parts' (2^26 here), built before any fuel is checked.
    add("allof_26_patterns", "response_format", response_format(&allof_contains(26)));
    // 20 of them through guided_json (reported: 36 s and 2.5 GB before a refusal).
    add("allof_20_patterns_guided_json", "guided_json", guided_json(&allof_contains(20)));
    // 200 patterns in allOf.
    add("allof_200_patterns", "guided_json", guided_json(&allof_contains(200)));
    // Nested allOf/anyOf: every branch of 12 levels of anyOf intersects its own patterns (2^12 branches, 352 KB).
    let mut nested = r#"{"type": "string", "pattern": "a.*"}"#.to_string();
    for i in 0..12 {
        let c = (b'a' + i as u8) as char;
        nested = format!(r#"{{"anyOf": [{{"allOf": [{nested}, {{"pattern": ".*{c}.*"}}]}}, {nested}]}}"#);
    }
    add("nested_anyof_allof_patterns", "response_format", response_format(&nested));
    // Formats intersected with patterns and lengths, 32 times over.
    let formats = ["date-time", "email", "uuid", "ipv6", "date", "time", "hostname", "uri"];
    let formatted = repeat(formats.len() * 4, ", ", |i| {
        format!(
            r#"{{"format": "{}", "pattern": ".*{}.*", "minLength": 5, "maxLength": 300}}"#,
            formats[i % formats.len()],
            i % 10
        )
    });
    add(
        "formats_with_patterns",
        "response_format",
        response_format(&format!(r#"{{"type": "string", "allOf": [{formatted}]}}"#)),
    );
    // allOf of 20 two-branch anyOfs: intersecting distributes over the branches, 2^20 object schemas (stopped by
    // llguidance's own count of compiled schemas, 50,000).
    let distributed = repeat(20, ", ", |i| {
        format!(
            r#"{{"anyOf": [{{"properties": {{"a{i}": {{"type": "integer"}}}}}}, {{"properties": {{"b{i}": {{"type": "string"}}}}}}]}}"#
        )
    });
    add(
        "allof_anyof_distribution",
        "response_format",
        response_format(&format!(r#"{{"type": "object", "allOf": [{distributed}]}}"#)),
    );
    // anyOf of 5,000 objects with one distinct key each: accepted before, failed at the second token (a row of
    // 5,000 items).
    let many = repeat(5_000, ", ", |i| {
        format!(r#"{{"type": "object", "properties": {{"k{i}": {{"type": "integer"}}}}, "required": ["k{i}"]}}"#)
    });
    add("anyof_5000_objects", "response_format", response_format(&format!(r#"{{"anyOf": [{many}]}}"#)));
    // oneOf of 20,000 string consts (649 KB): llguidance checks oneOf's branches pairwise.
    let consts = repeat(20_000, ", ", |i| format!(r#"{{"const": "value number {i}"}}"#));
    add("oneof_20000_consts", "guided_json", guided_json(&format!(r#"{{"oneOf": [{consts}]}}"#)));
    // The same, 1,500 branches, within the byte limit.
    let consts = repeat(1_500, ", ", |i| format!(r#"{{"const": "value number {i}"}}"#));
    add("oneof_1500_consts", "guided_json", guided_json(&format!(r#"{{"oneOf": [{consts}]}}"#)));
    // A cycle of $refs with nothing else: no finite value matches (accepted before, failed at the first token).
    add(
        "cyclic_ref",
        "response_format",
        response_format(
            r##"{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}"##,
        ),
    );
    // A self-recursive object that must contain itself: every value is infinite.
    add(
        "required_self_recursion",
        "guided_json",
        guided_json(
            r##"{"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"], "additionalProperties": false}}}"##,
        ),
    );
    // A chain of 20,000 $refs (738 KB): the schema compiler's recursion overflowed the stack and aborted.
    add("ref_chain_20000", "response_format", response_format(&ref_chain(20_000)));
    // The same, 5,000 long, within the byte limit.
    add("ref_chain_5000", "guided_json", guided_json(&ref_chain(5_000)));
    // 300 definitions, each with two properties of the next: the walk must share them (2^300 paths), and the
    // chain is 600 levels deep.
    let doubling = repeat(300, ", ", |i| {
        format!(
            r##""l{i}": {{"type": "object", "properties": {{"a": {{"$ref": "#/$defs/l{n}"}}, "b": {{"$ref": "#/$defs/l{n}"}}}}, "required": ["a", "b"]}}"##,
            n = i + 1
        )
    });
    add(
        "ref_doubling_300",
        "response_format",
        response_format(&format!(
            r##"{{"$ref": "#/$defs/l0", "$defs": {{{doubling}, "l300": {{"type": "boolean"}}}}}}"##
        )),
    );
    // An enum of 100,000 strings (889 KB).
    let values = repeat(100_000, ",", |i| format!(r#""e{i}""#));
    add("enum_100000", "response_format", response_format(&format!(r#"{{"enum": [{values}]}}"#)));
    // 40,000 properties (1.5 MB).
    let props = repeat(40_000, ", ", |i| format!(r#""property_{i}": {{"type": "integer"}}"#));
    add("properties_40000", "guided_json", guided_json(&format!(r#"{{"type": "object", "properties": {{{props}}}}}"#)));
    // 12,000 properties (456 KB), within the byte limit: llguidance hashes the rest of the list at every
    // property (3.6 s).
    let props = repeat(12_000, ", ", |i| format!(r#""property_{i}": {{"type": "integer"}}"#));
    add("properties_12000", "guided_json", guided_json(&format!(r#"{{"type": "object", "properties": {{{props}}}}}"#)));
    // prefixItems of 20,000 entries (289 KB), within the byte limit.
    let prefix = repeat(20_000, ", ", |i| format!(r#"{{"const": {i}}}"#));
    add(
        "prefix_items_20000",
        "response_format",
        response_format(&format!(r#"{{"type": "array", "prefixItems": [{prefix}]}}"#)),
    );
    // patternProperties with 30 overlapping patterns and additionalProperties.
    let pattern_props = repeat(30, ", ", |i| {
        format!(r#"".*{}.*{}.*": {{"type": "integer"}}"#, (b'a' + (i % 26) as u8) as char, i % 10)
    });
    add(
        "pattern_properties_additional",
        "response_format",
        response_format(&format!(
            r#"{{"type": "object", "patternProperties": {{{pattern_props}}}, "additionalProperties": {{"type": "string"}}, "minProperties": 3}}"#
        )),
    );
    // A pattern and length bounds a million apart: the emptiness check of their intersection runs out of fuel.
    add(
        "length_range_with_pattern",
        "guided_json",
        guided_json(r#"{"type": "string", "pattern": ".*x.*y.*", "minLength": 1000, "maxLength": 1000000}"#),
    );
    // An integer range of 300-digit bounds, and a number with a tiny multipleOf.
    add(
        "numeric_ranges",
        "response_format",
        response_format(&format!(
            r#"{{"type": "object", "properties": {{"i": {{"type": "integer", "minimum": -{n}, "maximum": {n}}}, "x": {{"type": "number", "minimum": 0.000000000000001, "maximum": 1e300, "multipleOf": 0.000000001}}}}, "required": ["i", "x"]}}"#,
            n = "9".repeat(300)
        )),
    );
    // prefixItems of 50,000 entries (889 KB).
    let prefix = repeat(50_000, ", ", |i| format!(r#"{{"const": {i}}}"#));
    add(
        "prefix_items_50000",
        "guided_json",
        guided_json(&format!(r#"{{"type": "array", "prefixItems": [{prefix}], "minItems": 50000}}"#)),
    );

    // ---- Lark grammars ----
    // A rule that is only itself: no string is in its language.
    add("lark_start_start", "guided_grammar", guided_grammar("start: start"));
    // Mutual recursion without a base case.
    add("lark_mutual_no_base", "guided_grammar", guided_grammar("start: a\na: b \"x\"\nb: a \"y\""));
    // 100,000 alternatives (1.3 MB): 22-30 s inside engine_submit before, then a panic's backtrace in the
    // refusal (each new terminal is compared with every earlier one; then a 16-bit symbol index overflows).
    add("lark_100000_alternatives", "guided_grammar", guided_grammar(&lark_alternatives(100_000)));
    // The same, 35,000 alternatives, within the byte limit.
    add("lark_35000_alternatives", "guided_grammar", guided_grammar(&lark_alternatives(35_000)));
    // A chain of 30,000 rules, each the next (548 KB): the Lark compiler's recursion overflowed the stack.
    add("lark_rule_chain_30000", "guided_grammar", guided_grammar(&lark_chain(30_000)));
    // The same, 20,000 long, within the byte limit.
    add("lark_rule_chain_20000", "guided_grammar", guided_grammar(&lark_chain(20_000)));
    // Nested parentheses 5,000 deep.
    add(
        "lark_nested_parens",
        "guided_grammar",
        guided_grammar(&format!("start: {}\"a\"{}", "(".repeat(5_000), ")".repeat(5_000))),
    );
    // Left recursion with 3,000 ambiguous alternatives: building the first Earley row alone took over 30 s (each
    // alternative predicts all of them, each looked up in the row).
    let ambiguous = repeat(3_000, " | ", |i| format!("start \"a{}\"", i % 7));
    add(
        "lark_left_recursion_ambiguous",
        "guided_grammar",
        guided_grammar(&format!("start: {ambiguous} | start start | \"a\"")),
    );
    // 1,900 left-recursive alternatives, under the row's item limit: R^3 lookups (~10 s).
    let left = repeat(1_900, " | ", |i| format!("start \"b{}\"", i % 5));
    add("lark_left_recursion_1900", "guided_grammar", guided_grammar(&format!("start: {left} | \"b\"")));
    // 120 rules of 120 alternatives, each starting with another rule: one row predicts 14,400 rules, each of
    // which predicts 120 more.
    let fanout =
        repeat(120, "\n", |i| format!("r{i}: {}", repeat(120, " | ", |j| format!("r{} \"{j}\"", (i + j + 1) % 120))));
    add("lark_prediction_fanout", "guided_grammar", guided_grammar(&format!("start: r0\n{fanout}\nr0: \"z\"")));
    // Intersections and negations of terminals: a product automaton of all of them.
    let products = repeat(20, " & ", |i| format!("/.*{}.*/", (b'a' + i as u8) as char));
    add("lark_lexer_intersections", "guided_grammar", guided_grammar(&format!("start: T\nT: {products} & ~/.*zz.*/")));
    // 60,000 distinct terminals (1.9 MB).
    let terminals = repeat(60_000, "\n", |i| format!("T{i}: /t{i}[0-9]+/"));
    let uses = repeat(60_000, " | ", |i| format!("T{i}"));
    add("lark_60000_terminals", "guided_grammar", guided_grammar(&format!("start: {uses}\n{terminals}")));
    // 12,000 inline regex terminals (no definitions), within the byte limit.
    let inline = repeat(12_000, " | ", |i| format!("/u{i}[0-9]{{1,9}}/"));
    add("lark_12000_inline_regexes", "guided_grammar", guided_grammar(&format!("start: {inline}")));
    // A %json schema bomb inside a Lark grammar.
    add(
        "lark_json_bomb",
        "guided_grammar",
        guided_grammar(&format!("start: \"x\" j\nj: %json {}", allof_contains(26))),
    );

    // ---- regular expressions ----
    // 100,000 alternatives (689 KB).
    let alternation = repeat(100_000, "|", |i| format!("x{i}"));
    add("regex_100000_alternatives", "guided_regex", guided_regex(&alternation));
    // Backreferences and lookarounds are not regular: refused, not misread.
    add("regex_backreference", "guided_regex", guided_regex(r"(a+)\1"));
    add("regex_lookahead", "guided_regex", guided_regex(r"(?=a)a+"));
    add("regex_lookbehind", "guided_regex", guided_regex(r"(?<=a)b"));
    // Nesting deeper than the regex parser allows.
    add("regex_nested_groups", "guided_regex", guided_regex(&format!("{}a{}", "(".repeat(2_000), ")".repeat(2_000))));

    // ---- guided_choice ----
    // 100,000 choices (1.2 MB).
    let choices: Vec<String> = (0..100_000).map(|i| format!("choice{i}")).collect();
    add("choice_100000", "guided_choice", guided_choice(&choices));
    // 400 choices of 4 KB sharing a prefix (1.6 MB).
    let long: Vec<String> = (0..400).map(|i| format!("{}{i}", "ab".repeat(2_000))).collect();
    add("choice_400_long", "guided_choice", guided_choice(&long));

    // ---- tools ----
    // The allOf bomb as the parameters of the fourth tool, its call forced by name.
    let bomb = format!(r#"{{"type": "object", "properties": {{"s": {}}}, "required": ["s"]}}"#, allof_contains(26));
    add("tools_3_allof_forced", "tools[3]", tools(&bomb, r#"{"type": "function", "function": {"name": "d"}}"#));
    // A cyclic schema in the fourth tool, its call forced by name: no call can be completed.
    add("tools_3_cyclic_named", "tools[3]", tools(CYCLIC, r#"{"type": "function", "function": {"name": "d"}}"#));
    // A 200-deep $ref chain in the fourth tool, tool_choice auto (the tools are in the prompt too: a larger
    // schema would overflow the model's context first).
    add("tools_3_ref_chain_auto", "tools[3]", tools(&ref_chain(200), r#""auto""#));
    cases
}

/// Look-alikes that compile cheaply (llguidance builds their automata as generation explores them, or their
/// size is within every limit): each must be served, within the same 2 s and 256 MiB.
///
/// Each is sized to compile in about a quarter of the default `max_compile_cpu_ms` (1 s of CPU) or less on the
/// slowest machine measured (a Zen 3 EPYC guest: 0.09-0.30 s of CPU over three runs), because CI's machines are
/// slower and shared: 1,000 `%json` schemas took 0.54 s there and more than 1 s in one CI run, which refused them.
pub fn grammar_heavy_served() -> Vec<(&'static str, &'static str, String)> {
    let mut cases: Vec<(&'static str, &'static str, String)> = Vec::new();
    let mut add = |name, field, body: String| cases.push((name, field, body));
    // Objects nested 40 deep (120 levels of JSON, near serde_json's limit of 128), each with an optional array.
    let mut deep = r#"{"type": "integer"}"#.to_string();
    for _ in 0..40 {
        deep = format!(
            r#"{{"type": "object", "properties": {{"p": {deep}, "q": {{"type": "array", "items": {{"type": "string"}}}}}}, "required": ["p"]}}"#
        );
    }
    add("deep_nesting_40", "guided_json", guided_json(&deep));
    // A pattern of nested counted repetitions: a million positions, built lazily.
    add(
        "pattern_counted_nested",
        "response_format",
        response_format(r#"{"type": "string", "pattern": "^(a{1000}){1000}$"}"#),
    );
    // A 110 KB pattern: an alternation of 15,000 words.
    let words = repeat(15_000, "|", |i| format!("w{i}x"));
    add(
        "pattern_110kb",
        "guided_json",
        guided_json(&format!(r#"{{"type": "string", "pattern": {}}}"#, quoted(&format!("^({words})$")))),
    );
    add("min_length_huge", "response_format", response_format(r#"{"type": "string", "minLength": 10000000}"#));
    add(
        "min_items_huge",
        "response_format",
        response_format(
            r#"{"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, "minItems": 1000000}"#,
        ),
    );
    add(
        "max_items_nested",
        "guided_json",
        guided_json(
            r#"{"type": "array", "maxItems": 100000, "items": {"type": "array", "maxItems": 100000, "items": {"type": "array", "maxItems": 100000, "items": {"type": "integer"}}}}"#,
        ),
    );
    // 1,000 optional properties, half of them required, with patterns.
    let optional = repeat(1_000, ", ", |i| format!(r#""o{i}": {{"type": "string", "pattern": ".*{}.*"}}"#, i % 10));
    let required = repeat(500, ", ", |i| format!(r#""o{}""#, 2 * i));
    add(
        "optional_properties_1000",
        "guided_json",
        guided_json(&format!(
            r#"{{"type": "object", "properties": {{{optional}}}, "required": [{required}], "additionalProperties": false}}"#
        )),
    );
    // An enum of 30,000 strings (259 KB).
    let values = repeat(30_000, ",", |i| format!(r#""e{i}""#));
    add("enum_30000", "response_format", response_format(&format!(r#"{{"enum": [{values}]}}"#)));
    // Lark: a ten-million repetition, nested repetitions, and a lexer whose automaton has 2^24 states.
    add("lark_huge_repetition", "guided_grammar", guided_grammar("start: \"ab\"{10000000}"));
    add("lark_nested_repetition", "guided_grammar", guided_grammar("start: x{1000}\nx: (\"a\" | \"b\"){1000}"));
    add("lark_lexer_dfa_explosion", "guided_grammar", guided_grammar("start: T\nT: /[ab]*a[ab]{24}/"));
    // 300 alternatives, each its own %json schema with a pattern (38 KB).
    let embedded = repeat(300, "\n", |i| {
        format!(
            r#"j{i}: %json {{"type": "object", "properties": {{"k{i}": {{"type": "string", "pattern": "[a-z]{{1,{}}}"}}}}, "required": ["k{i}"]}}"#,
            i % 50 + 1
        )
    });
    add(
        "lark_300_json_schemas",
        "guided_grammar",
        guided_grammar(&format!("start: {}\n{embedded}", repeat(300, " | ", |i| format!("j{i}")))),
    );
    // Left recursion with 600 alternatives, within the row work limit (and 0.2 of its cost at 1,000).
    let left = repeat(600, " | ", |i| format!("start \"c{}\"", i % 5));
    add("lark_left_recursion_600", "guided_grammar", guided_grammar(&format!("start: {left} | \"c\"")));
    // Regexes: nested and huge counted repetitions, nested quantifiers, a 2^30-state automaton, 30,000
    // alternatives.
    add("regex_nested_counted", "guided_regex", guided_regex("(a{1000}){1000}"));
    add("regex_triple_counted", "guided_regex", guided_regex("((a{100}){100}){100}"));
    add("regex_huge_counted", "guided_regex", guided_regex("[a-z]{1,1000000}"));
    add("regex_nested_quantifiers", "guided_regex", guided_regex("(((a*)*)*){1000}b{1000}"));
    add("regex_dfa_explosion", "guided_regex", guided_regex("[ab]*a[ab]{30}"));
    add("regex_30000_alternatives", "guided_regex", guided_regex(&repeat(30_000, "|", |i| format!("x{i}"))));
    // The cyclic tool among others, any call required: the others can still be called.
    add("tools_3_cyclic_required", "tools", tools(CYCLIC, r#""required""#));
    // 20,000 choices (229 KB).
    let choices: Vec<String> = (0..20_000).map(|i| format!("choice{i}")).collect();
    add("choice_20000", "guided_choice", guided_choice(&choices));
    cases
}

/// A schema that is only a `$ref` to itself: nothing matches it.
const CYCLIC: &str = r##"{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}"##;

/// A JSON schema that is a chain of `n` `$ref`s to an integer.
fn ref_chain(n: usize) -> String {
    let chain = repeat(n, ", ", |i| format!(r##""d{i}": {{"$ref": "#/$defs/d{}"}}"##, i + 1));
    format!(r##"{{"$ref": "#/$defs/d0", "$defs": {{{chain}, "d{n}": {{"type": "integer"}}}}}}"##)
}

/// A Lark grammar of `n` string alternatives.
fn lark_alternatives(n: usize) -> String {
    format!("start: {}", repeat(n, " | ", |i| format!("\"alt{i}\"")))
}

/// A Lark grammar whose rules form a chain `n` long.
fn lark_chain(n: usize) -> String {
    format!("start: r0\n{}\nr{n}: \"z\"", repeat(n, "\n", |i| format!("r{i}: r{} \"a\"", i + 1)))
}
